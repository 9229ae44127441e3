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

    /// Runs `work(job)` on an idle thread, or on a new one when none is idle.
    pub fn run(&self, job: T) -> std::io::Result<()> {
        {
            let mut state = self.inner.state.lock();
            if state.idle > state.handoff.len() {
                state.handoff.push_back(job);
                self.inner.wake.notify_one();
                return Ok(());
            }
        }
        let inner = Arc::clone(&self.inner);
        let thread = std::thread::Builder::new()
            .name(self.inner.name.into())
            .spawn(move || inner.serve(job))?;
        let mut threads = self.threads.lock();
        threads.retain(|t| !t.is_finished());
        threads.push(thread);
        Ok(())
    }

    /// Threads alive, busy or idle.
    pub fn threads(&self) -> usize {
        let mut threads = self.threads.lock();
        threads.retain(|t| !t.is_finished());
        threads.len()
    }

    /// Ends the idle threads and joins every thread: busy ones once their job returns.
    pub fn stop(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        {
            let _state = self.inner.state.lock();
            self.inner.wake.notify_all();
        }
        for thread in self.threads.lock().drain(..) {
            let _ = thread.join();
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
            let timed_out = self.wake.wait_until(&mut state, deadline).timed_out();
            if (timed_out || self.stop.load(Ordering::SeqCst)) && state.handoff.is_empty() {
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
    fn jobs_at_once_get_threads_of_their_own_and_stop_joins_them() {
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let held = Arc::clone(&gate);
        let workers = Workers::new(
            "test-worker",
            Duration::from_secs(60),
            move |done: Arc<Done>| {
                let (open, wake) = &*held;
                let mut open = open.lock();
                while !*open {
                    wake.wait(&mut open);
                }
                done.set();
            },
        );
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
