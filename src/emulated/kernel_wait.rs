//! The member's kernel wait, and the events it found, in a buffer kept from wait to wait and
//! grown with the member's registrations. The wait is its poller's (`super::poller`): on Linux
//! one `epoll_wait`, with the timeout rounded up to the millisecond.
//!
//! A signal: on Linux the wait returns `EINTR` to the caller, which ends the member's `wait`
//! with no events (`Waiter::wait`); `polling`'s wait, and the IOCP poller's on Windows, retry
//! by themselves, with the time left to their deadline recomputed, so there a signal ends
//! nothing early but every timeout holds.

use std::io;
use std::num::NonZeroUsize;
use std::time::Duration;

use super::poller::{Events, Poller};
use crate::interest::Readiness;

/// One event found by a kernel wait.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seen {
    /// The registration's key in the poller.
    pub(crate) key: usize,
    /// What the poller said the descriptor is ready for (its readable and writable flags
    /// include a hang-up and an error, as `polling`'s do).
    pub(crate) ready: Readiness,
    /// Did the poller say whether it hung up or is in error? kqueue, through `polling`, does
    /// not (its `is_err` is `None`): then a poll(2) of the descriptor tells before the event
    /// is handed out (`EmulatedWaiter::look_again`).
    pub(crate) exact: bool,
}

/// The events one kernel wait found, in a buffer kept from wait to wait.
pub(crate) struct RawEvents {
    events: Events,
}

impl RawEvents {
    pub(crate) fn new() -> RawEvents {
        RawEvents {
            events: Events::new(),
        }
    }

    /// Makes room for at least `wanted` events per wait.
    pub(crate) fn reserve(&mut self, wanted: usize) {
        if self.events.capacity().get() < wanted {
            let capacity =
                NonZeroUsize::new(wanted.next_power_of_two()).unwrap_or(NonZeroUsize::MIN);
            self.events = Events::with_capacity(capacity);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.events.clear();
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Seen> + '_ {
        self.events.iter().map(|ev| Seen {
            key: ev.key,
            ready: Readiness {
                input: ev.readable,
                output: ev.writable,
                priority: ev.is_priority(),
                hangup: ev.is_interrupt(),
                error: ev.is_err().unwrap_or(false),
            },
            exact: ev.is_err().is_some(),
        })
    }

    /// Waits in `poller` up to `timeout` (`None`: until an event) and keeps what it found.
    /// `Interrupted` (Linux) is the caller's to handle: it ends the member's `wait`, whose
    /// timers are deadlines, not this wait's timeout.
    pub(crate) fn wait(&mut self, poller: &Poller, timeout: Option<Duration>) -> io::Result<()> {
        self.events.clear();
        poller.wait(&mut self.events, timeout).map(|_| ())
    }
}
