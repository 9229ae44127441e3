//! Server threads kept between clients: a process's start (make's jobs, git's helpers) would
//! otherwise wait for a thread to be spawned for it, and its end for that thread to be
//! joined. A thread whose client ends waits here for the next one; one idle for
//! [`Workers::new`]'s `idle_for` exits, so a quiet daemon keeps none.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// A pool of threads running `work` on the jobs handed to it, one job per thread at a time.
pub struct Workers<T: Send + 'static> {
    inner: Arc<Inner<T>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl<T: Send + 'static> std::fmt::Debug for Workers<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("name", &self.inner.name)
            .field("threads", &self.threads.lock().len())
            .finish_non_exhaustive()
    }
}

struct Inner<T> {
    state: Mutex<State<T>>,
    wake: Condvar,
    stop: AtomicBool,
    idle_for: Duration,
    name: &'static str,
    work: Box<dyn Fn(T) + Send + Sync>,
}

struct State<T> {
    /// Threads waiting for a job.
    idle: usize,
    /// Jobs handed over and not yet taken: never more than `idle`.
    handoff: VecDeque<T>,
}

impl<T: Send + 'static> Workers<T> {
    /// Threads named `name` run `work`; an idle one exits after `idle_for`.
    pub fn new(
        name: &'static str,
        idle_for: Duration,
        work: impl Fn(T) + Send + Sync + 'static,
    ) -> Self {
        Workers {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    idle: 0,
                    handoff: VecDeque::new(),
                }),
                wake: Condvar::new(),
                stop: AtomicBool::new(false),
                idle_for,
                name,
                work: Box::new(work),
            }),
            threads: Mutex::new(Vec::new()),
        }
    }

    /// Runs `work(job)` on an idle thread, or on a new one when none is idle. `Err` gives the
    /// job back with why no thread took it: the pool is stopping, or the system has no thread
    /// to give.
    pub fn run(&self, job: T) -> Result<(), (T, std::io::Error)> {
        if self.inner.stop.load(Ordering::SeqCst) {
            return Err((job, std::io::Error::other("the pool is stopping")));
        }
        {
            let mut state = self.inner.state.lock();
            if state.idle > state.handoff.len() {
                state.handoff.push_back(job);
                self.inner.wake.notify_one();
                return Ok(());
            }
        }
        // Under the list's lock, which `stop` sets its flag under: a thread started here is
        // one `stop` joins.
        let mut threads = self.threads.lock();
        if self.inner.stop.load(Ordering::SeqCst) {
            return Err((job, std::io::Error::other("the pool is stopping")));
        }
        let carried = Arc::new(Mutex::new(Some(job)));
        let theirs = Arc::clone(&carried);
        let inner = Arc::clone(&self.inner);
        let spawned = std::thread::Builder::new()
            .name(self.inner.name.into())
            .spawn(move || {
                let job = theirs.lock().take();
                if let Some(job) = job {
                    inner.serve(job);
                }
            });
        match spawned {
            Ok(thread) => {
                threads.retain(|t| !t.is_finished());
                threads.push(thread);
                Ok(())
            }
            Err(e) => Err((carried.lock().take().expect("no thread took it"), e)),
        }
    }

    /// Threads alive, busy or idle.
    pub fn threads(&self) -> usize {
        let mut threads = self.threads.lock();
        threads.retain(|t| !t.is_finished());
        threads.len()
    }

    /// Ends the idle threads and joins every thread: busy ones once their job returns, and
    /// those a job started meanwhile (after this, [`Workers::run`] starts none).
    pub fn stop(&self) {
        {
            let _threads = self.threads.lock();
            self.inner.stop.store(true, Ordering::SeqCst);
        }
        {
            let _state = self.inner.state.lock();
            self.inner.wake.notify_all();
        }
        loop {
            let started: Vec<_> = self.threads.lock().drain(..).collect();
            if started.is_empty() {
                break;
            }
            for thread in started {
                let _ = thread.join();
            }
        }
    }
}

impl<T> Inner<T> {
    fn serve(&self, first: T) {
        let mut job = Some(first);
        while let Some(next) = job.take() {
            (self.work)(next);
            job = self.next_job();
        }
    }

    /// The next job handed over, or `None` after `idle_for` without one (or at stop).
    fn next_job(&self) -> Option<T> {
        let mut state = self.state.lock();
        state.idle += 1;
        let deadline = std::time::Instant::now() + self.idle_for;
        loop {
            if let Some(job) = state.handoff.pop_front() {
                state.idle -= 1;
                return Some(job);
            }
            // Checked before each wait too: a thread whose job returned after `stop` woke the
            // idle ones would otherwise wait out `idle_for` before `stop` could join it.
            if self.stop.load(Ordering::SeqCst) {
                state.idle -= 1;
                return None;
            }
            let timed_out = self.wake.wait_until(&mut state, deadline).timed_out();
            if timed_out && state.handoff.is_empty() {
                state.idle -= 1;
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A job's end, which whoever handed it over can wait for.
    #[derive(Debug, Default)]
    pub struct Done {
        done: Mutex<bool>,
        wake: Condvar,
    }

    impl Done {
        /// Marks the job ended.
        pub fn set(&self) {
            *self.done.lock() = true;
            self.wake.notify_all();
        }

        /// A guard that marks the job ended when dropped, by a return or by a panic's unwinding:
        /// a waiter never waits on a job that died.
        pub fn when_dropped(&self) -> impl Drop + '_ {
            struct SetOnDrop<'a>(&'a Done);
            impl Drop for SetOnDrop<'_> {
                fn drop(&mut self) {
                    self.0.set();
                }
            }
            SetOnDrop(self)
        }

        /// Waits until the job ended.
        pub fn wait(&self) {
            let mut done = self.done.lock();
            while !*done {
                self.wake.wait(&mut done);
            }
        }
    }

    /// A gate jobs wait at until it opens: (open, its condition variable).
    type Gate = Arc<(Mutex<bool>, Condvar)>;

    /// A job that waits for `gate` to open, then marks itself ended.
    fn gated(gate: &Gate) -> impl Fn(Arc<Done>) + Send + Sync + 'static {
        let held = Arc::clone(gate);
        move |done: Arc<Done>| {
            let (open, wake) = &*held;
            let mut open = open.lock();
            while !*open {
                wake.wait(&mut open);
            }
            done.set();
        }
    }

    /// Waits (up to 10 s) until `check` holds: the pool's threads move on their own time.
    fn eventually(what: &str, check: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !check() {
            assert!(std::time::Instant::now() < deadline, "never: {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn an_idle_thread_takes_the_next_job_and_idle_threads_exit() {
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&ran);
        let workers = Workers::new(
            "test-worker",
            Duration::from_secs(1),
            move |done: Arc<Done>| {
                counter.fetch_add(1, Ordering::SeqCst);
                done.set();
            },
        );
        for _ in 0..20 {
            let done = Arc::new(Done::default());
            workers.run(Arc::clone(&done)).unwrap();
            done.wait();
            eventually("the thread waits for the next job", || {
                workers.inner.state.lock().idle == 1
            });
        }
        assert_eq!(ran.load(Ordering::SeqCst), 20);
        assert_eq!(workers.threads(), 1, "one thread served them all in turn");
        eventually("an idle thread exits", || workers.threads() == 0);
        workers.stop();
    }

    #[test]
    fn a_job_that_panics_is_still_marked_ended() {
        let workers = Workers::new("test-worker", Duration::from_secs(60), |done: Arc<Done>| {
            let _ended = done.when_dropped();
            panic!("a broken invariant while serving");
        });
        let done = Arc::new(Done::default());
        workers.run(Arc::clone(&done)).unwrap();
        done.wait();
        workers.stop();
    }

    #[test]
    fn stop_does_not_wait_out_the_idle_time_of_a_job_that_ends_after_it_began() {
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let workers = Arc::new(Workers::new(
            "test-worker",
            Duration::from_secs(60),
            gated(&gate),
        ));
        let done = Arc::new(Done::default());
        workers.run(Arc::clone(&done)).unwrap();
        let stopping = Arc::clone(&workers);
        let started = std::time::Instant::now();
        let stopper = std::thread::spawn(move || stopping.stop());
        // The job returns after `stop` woke the idle threads (there were none).
        std::thread::sleep(Duration::from_millis(50));
        *gate.0.lock() = true;
        gate.1.notify_all();
        stopper.join().unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "stop waited {:?} for a thread to give up its idle wait",
            started.elapsed()
        );
        assert_eq!(workers.threads(), 0);
    }

    /// A job that hands the next job on to the pool (as the door hands its role on).
    #[derive(Debug)]
    struct Baton {
        workers: Arc<Workers<Baton>>,
    }

    #[test]
    fn stop_joins_the_threads_jobs_start_and_then_the_pool_refuses_more() {
        let ran = Arc::new(AtomicUsize::new(0));
        let refused = Arc::new(AtomicUsize::new(0));
        let (runs, refusals) = (Arc::clone(&ran), Arc::clone(&refused));
        let workers = Arc::new(Workers::new(
            "test-relay",
            Duration::from_secs(60),
            move |baton: Baton| {
                runs.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_micros(200));
                let workers = Arc::clone(&baton.workers);
                if let Err((baton, _)) = workers.run(baton) {
                    // What the door does when no thread takes its role: it keeps it.
                    refusals.fetch_add(1, Ordering::SeqCst);
                    drop(baton);
                }
            },
        ));
        workers
            .run(Baton {
                workers: Arc::clone(&workers),
            })
            .unwrap();
        eventually("the baton goes round", || ran.load(Ordering::SeqCst) > 20);
        workers.stop();
        assert_eq!(workers.threads(), 0, "every thread joined");
        assert_eq!(
            refused.load(Ordering::SeqCst),
            1,
            "the last hand-over refused"
        );
        let after_stop = ran.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            ran.load(Ordering::SeqCst),
            after_stop,
            "nothing runs after stop"
        );
    }

    #[test]
    fn jobs_at_once_get_threads_of_their_own_and_stop_joins_them() {
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let workers = Workers::new("test-worker", Duration::from_secs(60), gated(&gate));
        let dones: Vec<Arc<Done>> = (0..3).map(|_| Arc::new(Done::default())).collect();
        for done in &dones {
            workers.run(Arc::clone(done)).unwrap();
        }
        assert_eq!(workers.threads(), 3);
        *gate.0.lock() = true;
        gate.1.notify_all();
        for done in &dones {
            done.wait();
        }
        workers.stop();
        assert_eq!(workers.threads(), 0);
    }
}
