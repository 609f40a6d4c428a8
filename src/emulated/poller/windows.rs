//! The member's poller on Windows: polling's public types (`Poller`, `Event`, `PollMode`,
//! `Events`) over herdless's copy of polling 3.11.0's IOCP backend (`super::iocp`), cut down to
//! what the emulation calls. From polling 3.11.0's `src/lib.rs` (MIT OR Apache-2.0): the event,
//! the poll mode, the event buffer, and the wrapper that lets one thread wait at a time and
//! coalesces notifications. Its `notify` is the member's door bell on Windows
//! (`crate::doorbell`).

use std::io;
use std::num::NonZeroUsize;
use std::os::windows::io::RawSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::iocp;

/// The key the backend's own notification carries (never a registration's).
const NOTIFY_KEY: usize = usize::MAX;

/// A socket's readiness, or the interest registered for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event {
    pub(crate) key: usize,
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    pub(super) extra: iocp::EventExtra,
}

impl Event {
    pub(crate) const fn new(key: usize, readable: bool, writable: bool) -> Event {
        Event {
            key,
            readable,
            writable,
            extra: iocp::EventExtra::empty(),
        }
    }

    pub(crate) const fn none(key: usize) -> Event {
        Event::new(key, false, false)
    }

    pub(crate) fn set_priority(&mut self, active: bool) {
        self.extra.set_pri(active);
    }

    pub(crate) fn is_priority(&self) -> bool {
        self.extra.is_pri()
    }

    /// The socket was hung up or reset (AFD's `ABORT`), as polling's `is_interrupt`.
    pub(crate) fn is_interrupt(&self) -> bool {
        self.extra.is_hup()
    }

    /// A connection attempt failed (AFD's `CONNECT_FAIL`), as polling's `is_err`.
    pub(crate) fn is_err(&self) -> Option<bool> {
        self.extra.is_err()
    }
}

/// How a registration reports (the emulation uses `Level` only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)] // the backend's code handles every mode polling has
pub(crate) enum PollMode {
    Oneshot,
    Level,
    Edge,
    EdgeOneshot,
}

/// One member's IOCP poller: one thread waits in it at a time.
#[derive(Debug)]
pub(crate) struct Poller {
    poller: iocp::Poller,
    lock: Mutex<()>,
    notified: AtomicBool,
}

impl Poller {
    pub(crate) fn new() -> io::Result<Poller> {
        Ok(Poller {
            poller: iocp::Poller::new()?,
            lock: Mutex::new(()),
            notified: AtomicBool::new(false),
        })
    }

    /// Adds socket `socket`, known by number, level-triggered.
    pub(crate) fn add(&self, socket: RawSocket, interest: Event) -> io::Result<()> {
        if interest.key == NOTIFY_KEY {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the key is not allowed to be `usize::MAX`",
            ));
        }
        // SAFETY: `iocp` asks that a socket be deleted before it is closed; herdless deletes
        // every socket it added when the member stops watching it or leaves, but a caller may
        // close a registered socket first (the public API allows it). This copy survives that:
        // the AFD poll completes with LOCAL_CLOSE and the backend forgets the socket
        // (`iocp::PacketUnwrapped::feed_event`, the fix herdless carries), touching no memory
        // of it.
        unsafe { self.poller.add(socket, interest, PollMode::Level) }
    }

    /// Deletes socket `socket`, known by number: the error of a socket closed since it was
    /// added.
    pub(crate) fn delete_raw(&self, socket: RawSocket) -> io::Result<()> {
        // SAFETY: the borrow lives for this call only, and `iocp`'s delete only looks the
        // number up in its own table of sockets (a closed one is an error, not a use).
        self.poller
            .delete(unsafe { std::os::windows::io::BorrowedSocket::borrow_raw(socket) })
    }

    /// Waits up to `timeout` (`None`: until an event or a notification); another thread
    /// already waiting makes it return at once with nothing, as in `polling`.
    pub(crate) fn wait(&self, events: &mut Events, timeout: Option<Duration>) -> io::Result<usize> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let Ok(_lock) = self.lock.try_lock() else {
            return Ok(0);
        };
        loop {
            if let Err(e) = self.poller.wait_deadline(&mut events.events, deadline) {
                if e.kind() == io::ErrorKind::Interrupted {
                    events.clear();
                    continue;
                }
                return Err(e);
            }
            self.notified.swap(false, Ordering::SeqCst);
            return Ok(events.len());
        }
    }

    /// Wakes the thread waiting in this poller (or the next one to wait).
    pub(crate) fn notify(&self) -> io::Result<()> {
        if self
            .notified
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            self.poller.notify()?;
        }
        Ok(())
    }
}

/// The events one wait found.
pub(crate) struct Events {
    events: iocp::Events,
}

impl Events {
    pub(crate) fn new() -> Events {
        Events::with_capacity(NonZeroUsize::new(1024).unwrap_or(NonZeroUsize::MIN))
    }

    pub(crate) fn with_capacity(capacity: NonZeroUsize) -> Events {
        Events {
            events: iocp::Events::with_capacity(capacity.get()),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Event> + '_ {
        self.events.iter().filter(|ev| ev.key != NOTIFY_KEY)
    }

    pub(crate) fn clear(&mut self) {
        self.events.clear();
    }

    pub(crate) fn len(&self) -> usize {
        self.iter().count()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn capacity(&self) -> NonZeroUsize {
        NonZeroUsize::new(self.events.capacity()).unwrap_or(NonZeroUsize::MIN)
    }
}
