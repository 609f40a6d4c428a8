//! What both backends keep the same way for one waiter's registrations: the table of registered
//! descriptors with the count of those that asked for one event per wait, modify as delete plus
//! add with the old registration put back when the new one is refused, and the mapping of the
//! kernel's refusals to typed errors. Each backend keeps only what differs (its record's extra
//! fields, how it watches a descriptor, when a turn ends).
//!
//! Below the handles, beside the backends: it imports only the contract (errors, interests).

use std::collections::HashMap;
use std::ops::Deref;

use rustc_hash::FxBuildHasher;

use crate::error::{Error, RawSource, Result};
use crate::interest::Interest;

/// A backend's record of one registration.
pub(crate) trait Registered {
    /// The interest it was registered with (never changed in place: a change is a new insert).
    fn interest(&self) -> Interest;
}

/// One waiter's registrations by descriptor. Reads go through `Deref` to the map; changes
/// through `insert` and `remove`, which keep the one-event count right.
///
/// Hashed with Fx (a multiply and a rotate), not the standard SipHash: the emulation looks a
/// descriptor up several times per event, and SipHash's resistance to chosen keys buys nothing
/// here, the keys being descriptor numbers the kernel hands out.
pub(crate) struct Registry<R> {
    entries: HashMap<RawSource, R, FxBuildHasher>,
    /// How many registrations asked for one event per wait.
    one_event: usize,
}

impl<R: Registered> Registry<R> {
    pub(crate) fn new() -> Registry<R> {
        Registry {
            entries: HashMap::with_hasher(FxBuildHasher),
            one_event: 0,
        }
    }

    /// Records `fd`, returning the record it replaces, if any.
    pub(crate) fn insert(&mut self, fd: RawSource, record: R) -> Option<R> {
        self.one_event += usize::from(record.interest().is_one_event_round_robin());
        let old = self.entries.insert(fd, record);
        if let Some(old) = &old {
            self.one_event -= usize::from(old.interest().is_one_event_round_robin());
        }
        old
    }

    /// Forgets `fd`, returning its record.
    pub(crate) fn remove(&mut self, fd: RawSource) -> Option<R> {
        let old = self.entries.remove(&fd)?;
        self.one_event -= usize::from(old.interest().is_one_event_round_robin());
        Some(old)
    }

    /// The record of `fd`, to change its bookkeeping (not its interest).
    pub(crate) fn get_mut(&mut self, fd: &RawSource) -> Option<&mut R> {
        self.entries.get_mut(fd)
    }

    /// Every record, to change their bookkeeping (not their interests).
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&RawSource, &mut R)> {
        self.entries.iter_mut()
    }

    /// The record of `fd`, or `NotRegistered`.
    pub(crate) fn registered(&self, fd: RawSource) -> Result<&R> {
        self.entries.get(&fd).ok_or(Error::NotRegistered { fd })
    }

    /// How many events one wait may hand out, given `room` in the caller's buffer: one if any
    /// registration asked for one event per wait.
    pub(crate) fn events_per_wait(&self, room: usize) -> usize {
        if self.one_event > 0 {
            1
        } else {
            room
        }
    }
}

impl<R> Deref for Registry<R> {
    type Target = HashMap<RawSource, R, FxBuildHasher>;
    fn deref(&self) -> &Self::Target {
        &self.entries
    }
}

/// Modify as delete plus add (what an exclusive registration needs on both backends): deletes,
/// adds `new` (key, interest), and if that is refused adds `old` back and returns the refusal.
pub(crate) fn replace<W: ?Sized>(
    waiter: &mut W,
    old: (usize, Interest),
    new: (usize, Interest),
    delete: impl FnOnce(&mut W) -> Result<()>,
    mut add: impl FnMut(&mut W, usize, Interest) -> Result<()>,
) -> Result<()> {
    delete(waiter)?;
    if let Err(e) = add(waiter, new.0, new.1) {
        add(waiter, old.0, old.1)?;
        return Err(e);
    }
    Ok(())
}

/// poll(2)'s events for an interest.
#[cfg(unix)]
pub(crate) fn poll_events(interest: Interest) -> libc::c_short {
    let mut events = 0;
    if interest.is_readable() {
        events |= libc::POLLIN;
    }
    if interest.is_writable() {
        events |= libc::POLLOUT;
    }
    if interest.is_priority() {
        events |= libc::POLLPRI;
    }
    events
}

/// Is `fd` still ready for `interest` right now (a zero-timeout `poll`)? What both backends ask
/// once an event is consumed, to tell a backlog from a single event (`Rotation::Adaptive`).
#[cfg(unix)]
pub(crate) fn still_ready(fd: RawSource, interest: Interest) -> bool {
    let events = poll_events(interest);
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one live pollfd, zero timeout.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    // Hang-ups and errors are not a backlog: the turn ends (and the others see them too).
    n == 1 && pfd.revents & events != 0
}

/// Names the kernel's refusal of a descriptor (`epoll_ctl`, or `polling`'s poller underneath):
/// closed, of a kind that cannot be polled, already registered; else the error itself, with
/// what was being done.
pub(crate) fn refusal(fd: RawSource, err: std::io::Error, context: &'static str) -> Error {
    match err.raw_os_error() {
        #[cfg(unix)]
        Some(libc::EBADF) => Error::BadDescriptor { fd },
        #[cfg(unix)]
        Some(libc::EPERM) => Error::UnwatchableDescriptor {
            fd,
            reason: crate::error::eperm_reason(fd),
        },
        #[cfg(unix)]
        Some(libc::EEXIST) => Error::AlreadyRegistered { fd },
        _ => {
            let _ = fd; // only Unix names the refusals
            Error::io(context, err)
        }
    }
}
