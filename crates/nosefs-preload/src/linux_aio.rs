//! Linux AIO contexts (`io_setup`, `io_submit`, `io_getevents`) emulated for a process the shim
//! serves. The kernel's contexts would hand requests on noseFS descriptors to the kernel, which
//! holds only placeholders for them; so every context of such a process is one of these: a
//! request is served at submission through the shim's own calls (`ffi::aio`), and its completion
//! event waits here until `io_getevents` collects it. This module keeps the contexts and their
//! events; `ffi::aio` reads and writes the C structures.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nosefs_core::Errno;
use parking_lot::{Condvar, Mutex};

/// A completion event (the kernel's `struct io_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Event {
    /// The request's `aio_data`.
    pub data: u64,
    /// The request's address.
    pub obj: u64,
    /// Bytes transferred, or a negative errno.
    pub res: i64,
    /// Always 0.
    pub res2: i64,
}

#[derive(Debug, Default)]
struct Queue {
    events: VecDeque<Event>,
    destroyed: bool,
}

/// An emulated context: its events and their waiters.
#[derive(Debug)]
pub struct Context {
    queue: Mutex<Queue>,
    ready: Condvar,
    /// Events it may hold uncollected (the kernel's ring size): a submission beyond is EAGAIN.
    capacity: usize,
    /// The process that made it: a forked child does not inherit contexts (the kernel's are
    /// the parent's memory map's), and gets EINVAL for its parent's.
    owner: u32,
}

/// The contexts by id (the address of their state, so that no two live ones share an id, and
/// an id is never a kernel context's).
static CONTEXTS: Mutex<Option<HashMap<u64, Arc<Context>>>> = Mutex::new(None);

/// Context `id`, if it was made here by this process (else it is the kernel's, or nothing):
/// looked up once per call, then used through its methods.
pub fn lookup(id: u64) -> Option<Arc<Context>> {
    let context = CONTEXTS.lock().as_ref()?.get(&id).cloned()?;
    (context.owner == std::process::id()).then_some(context)
}

/// A new context for up to `max_events` requests in flight; its id.
pub fn setup(max_events: i64) -> Result<u64, Errno> {
    if max_events <= 0 || max_events > 1 << 20 {
        return Err(Errno::EINVAL);
    }
    // As the kernel sizes its ring: room for twice the requests asked, and some.
    let capacity = max_events as usize * 2 + 64;
    let context = Arc::new(Context {
        queue: Mutex::new(Queue::default()),
        ready: Condvar::new(),
        capacity,
        owner: std::process::id(),
    });
    let id = Arc::as_ptr(&context) as u64;
    CONTEXTS
        .lock()
        .get_or_insert_with(HashMap::new)
        .insert(id, context);
    Ok(id)
}

/// Ends context `id`: a thread waiting in `get_events` returns what it has, and the id is
/// unknown from now on (EINVAL, as a destroyed kernel context).
pub fn destroy(id: u64) -> Result<(), Errno> {
    let context = CONTEXTS
        .lock()
        .as_mut()
        .and_then(|c| c.remove(&id))
        .ok_or(Errno::EINVAL)?;
    context.queue.lock().destroyed = true;
    context.ready.notify_all();
    Ok(())
}

impl Context {
    /// How many more events it can hold.
    pub fn room(&self) -> usize {
        let queued = self.queue.lock().events.len();
        self.capacity.saturating_sub(queued)
    }

    /// Queues the completion of a request served at submission.
    pub fn complete(&self, event: Event) {
        self.queue.lock().events.push_back(event);
        self.ready.notify_all();
    }

    /// Waits until at least `min` events are queued (or `timeout` passes, or the context is
    /// destroyed), then takes up to `max` of them, oldest first.
    pub fn get_events(
        &self,
        min: usize,
        max: usize,
        timeout: Option<Duration>,
    ) -> Result<Vec<Event>, Errno> {
        if min > max {
            return Err(Errno::EINVAL);
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut queue = self.queue.lock();
        while queue.events.len() < min && !queue.destroyed {
            match deadline {
                Some(deadline) => {
                    if self.ready.wait_until(&mut queue, deadline).timed_out() {
                        break;
                    }
                }
                None => self.ready.wait(&mut queue),
            }
        }
        let take = queue.events.len().min(max);
        Ok(queue.events.drain(..take).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(data: u64) -> Event {
        Event {
            data,
            obj: 0,
            res: 4096,
            res2: 0,
        }
    }

    #[test]
    fn events_come_back_in_order_up_to_the_number_asked() {
        let id = setup(4).unwrap();
        let context = lookup(id).expect("made here");
        for d in 1..=3 {
            context.complete(event(d));
        }
        let got = context.get_events(1, 2, None).unwrap();
        assert_eq!(got.iter().map(|e| e.data).collect::<Vec<_>>(), [1, 2]);
        let got = context.get_events(0, 8, Some(Duration::ZERO)).unwrap();
        assert_eq!(got.iter().map(|e| e.data).collect::<Vec<_>>(), [3]);
        assert_eq!(context.get_events(2, 1, None), Err(Errno::EINVAL));
        destroy(id).unwrap();
        assert!(lookup(id).is_none());
        assert_eq!(destroy(id), Err(Errno::EINVAL));
    }

    #[test]
    fn a_wait_ends_at_its_timeout_at_a_completion_or_at_destroy() {
        let id = setup(1).unwrap();
        let context = lookup(id).unwrap();
        let started = Instant::now();
        let got = context
            .get_events(1, 1, Some(Duration::from_millis(20)))
            .unwrap();
        assert!(got.is_empty() && started.elapsed() >= Duration::from_millis(20));
        let waiting = Arc::clone(&context);
        let waiter = std::thread::spawn(move || waiting.get_events(1, 1, None).unwrap());
        std::thread::sleep(Duration::from_millis(10));
        context.complete(event(9));
        assert_eq!(waiter.join().unwrap(), [event(9)]);
        let waiting = Arc::clone(&context);
        let waiter = std::thread::spawn(move || waiting.get_events(1, 1, None).unwrap());
        std::thread::sleep(Duration::from_millis(10));
        destroy(id).unwrap();
        assert!(waiter.join().unwrap().is_empty(), "destroy ends the wait");
    }

    #[test]
    fn a_full_context_has_no_room_and_bad_sizes_are_refused() {
        assert_eq!(setup(0), Err(Errno::EINVAL));
        let id = setup(1).unwrap();
        let context = lookup(id).unwrap();
        for d in 0..context.room() as u64 {
            context.complete(event(d));
        }
        assert_eq!(context.room(), 0);
        destroy(id).unwrap();
    }
}
