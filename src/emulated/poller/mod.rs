//! The poller a member waits in: `polling`'s everywhere but on Windows, where it is herdless's
//! own copy of `polling`'s IOCP backend (`iocp`), with the fix of its deadlock on a socket closed
//! while registered.
//!
//! Why a copy: polling 3.11's IOCP backend deadlocks when an AFD poll completes with
//! `LOCAL_CLOSE` (a registered socket was closed without `delete`): `feed_event` calls
//! `begin_delete()` while holding the socket's state lock, which `begin_delete()` takes again, so
//! the waiting thread blocks on its own lock for ever. A member sleeping in its kernel wait cannot
//! be kept out of that branch by any check of herdless's (another thread may close the socket at
//! any moment while it sleeps), and a `[patch]` of polling reaches only herdless's own builds, not
//! the crates that depend on it. So on Windows herdless compiles the fixed code itself:
//! `iocp/{mod,afd,port}.rs` are polling 3.11.0's `src/iocp/` (MIT OR Apache-2.0, see their
//! headers), changed only as `iocp/mod.rs`'s header lists; this file holds the few lines of
//! polling's `lib.rs` they need (the event, the poll mode, the event buffer and the waiting
//! wrapper), cut down to what the emulation calls. The upstream-ready fix is in
//! `patches/polling-iocp-local-close-deadlock.patch` (`patches/polling/HERDLESS-PATCH.md`); once a
//! polling release has it, this module can go back to re-exporting `polling`'s types.

#[cfg(not(windows))]
#[allow(unused_imports)] // `Events` is the kernel wait's only where it is polling's
pub(crate) use polling::{Event, Events, PollMode, Poller};

#[cfg(windows)]
mod iocp;

#[cfg(windows)]
pub(crate) use windows_poller::{Event, Events, PollMode, Poller};

/// polling's public types over the copied IOCP backend (from polling 3.11.0's `src/lib.rs`,
/// MIT OR Apache-2.0): only what the emulation uses.
#[cfg(windows)]
mod windows_poller {
    use std::io;
    use std::num::NonZeroUsize;
    use std::os::windows::io::{AsSocket, RawSocket};
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

        /// Adds a socket.
        ///
        /// # Safety
        ///
        /// The socket must stay open until it is deleted (closing it first is survived: the
        /// backend forgets it, see `iocp::PacketUnwrapped::feed_event`).
        pub(crate) unsafe fn add_with_mode(
            &self,
            socket: RawSocket,
            interest: Event,
            mode: PollMode,
        ) -> io::Result<()> {
            if interest.key == NOTIFY_KEY {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the key is not allowed to be `usize::MAX`",
                ));
            }
            // SAFETY: the caller's promise, passed on.
            unsafe { self.poller.add(socket, interest, mode) }
        }

        pub(crate) fn delete(&self, socket: impl AsSocket) -> io::Result<()> {
            self.poller.delete(socket.as_socket())
        }

        /// Waits up to `timeout` (`None`: until an event or a notification); another thread
        /// already waiting makes it return at once with nothing, as in `polling`.
        pub(crate) fn wait(
            &self,
            events: &mut Events,
            timeout: Option<Duration>,
        ) -> io::Result<usize> {
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
            Events::with_capacity(NonZeroUsize::new(1024).expect("not zero"))
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
            NonZeroUsize::new(self.events.capacity()).expect("made with a capacity of one or more")
        }
    }
}
