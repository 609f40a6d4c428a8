//! The member's poller on Linux: herdless's own, over one epoll instance (`crate::sys::epoll`),
//! with the names the emulation calls `polling`'s by elsewhere (`Poller`, `Event`,
//! `Events`). Level-triggered only (an edge could be lost between the delete and the add that
//! move an exclusive descriptor from member to member); every `usize` is a key (no key is kept
//! for itself); no timer and no notifier (a member's bell is a descriptor in its poller), so a
//! wait costs one `epoll_wait`, and a signal ends it with `EINTR`, handed to the caller.
//!
//! An event's flags are those of `polling`'s epoll backend, so both pollers report alike:
//! readable is `EPOLLIN`, `EPOLLPRI`, a hang-up or an error; writable is `EPOLLOUT`, a hang-up
//! or an error; `is_interrupt` is a hang-up and `is_err` an error, as polling names them.

use std::io;
use std::num::NonZeroUsize;
use std::os::fd::AsFd;
use std::time::Duration;

use crate::error::RawSource;
use crate::sys::epoll::{self, Epoll, Flags};

/// What an entry reports as readable, and asks for when readable is wanted.
const READ: Flags = Flags::IN
    .union(Flags::PRI)
    .union(Flags::HUP)
    .union(Flags::ERR);
/// What an entry reports as writable, and asks for when writable is wanted.
const WRITE: Flags = Flags::OUT.union(Flags::HUP).union(Flags::ERR);

/// A descriptor's readiness, or the interest registered for it, under its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event {
    pub(crate) key: usize,
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    priority: bool,
    hangup: bool,
    error: bool,
}

impl Event {
    pub(crate) const fn new(key: usize, readable: bool, writable: bool) -> Event {
        Event {
            key,
            readable,
            writable,
            priority: false,
            hangup: false,
            error: false,
        }
    }

    pub(crate) fn set_priority(&mut self, active: bool) {
        self.priority = active;
    }

    pub(crate) fn is_priority(&self) -> bool {
        self.priority
    }

    /// Hung up (`EPOLLHUP`), as polling's `is_interrupt`.
    pub(crate) fn is_interrupt(&self) -> bool {
        self.hangup
    }

    /// In error (`EPOLLERR`), as polling's `is_err` (always known here).
    pub(crate) fn is_err(&self) -> Option<bool> {
        Some(self.error)
    }

    fn flags(&self) -> Flags {
        let mut flags = Flags::empty();
        if self.readable {
            flags |= READ;
        }
        if self.writable {
            flags |= WRITE;
        }
        if self.priority {
            flags |= Flags::PRI;
        }
        flags
    }
}

/// One member's poller: one epoll instance.
#[derive(Debug)]
pub(crate) struct Poller {
    epoll: Epoll,
}

impl Poller {
    pub(crate) fn new() -> io::Result<Poller> {
        Ok(Poller {
            epoll: Epoll::new()?,
        })
    }

    /// Adds descriptor `fd` (known by number: see `crate::sys::unix::by_number`),
    /// level-triggered, reported under `interest.key`. The kernel's entry goes with the open
    /// file: a descriptor closed while registered only leaves an entry that `delete` may no
    /// longer reach, see `crate::registry`.
    pub(crate) fn add(&self, fd: RawSource, interest: Event) -> io::Result<()> {
        let fd = crate::sys::unix::by_number(fd)?;
        self.epoll.add(fd, interest.flags(), interest.key as u64)
    }

    /// Is `fd`'s entry, added with `interest`, still the entry of the open file the number
    /// names? (`crate::sys::epoll::entry_is_live`: one `EPOLL_CTL_MOD` that leaves it as it was.)
    pub(crate) fn entry_is_live(&self, fd: RawSource, interest: Event) -> Option<bool> {
        self.epoll
            .entry_is_live(fd, interest.flags(), interest.key as u64)
    }

    pub(crate) fn delete(&self, source: impl AsFd) -> io::Result<()> {
        self.epoll.delete(source.as_fd())
    }

    /// Waits up to `timeout` (`None`: until an event) and puts what it found in `events`, in
    /// place of what they held; `Interrupted` if a signal handler ran meanwhile.
    pub(crate) fn wait(&self, events: &mut Events, timeout: Option<Duration>) -> io::Result<usize> {
        self.epoll.wait(&mut events.events, timeout)
    }
}

/// The events one wait found; its capacity is the most one wait returns.
#[derive(Debug)]
pub(crate) struct Events {
    events: epoll::Events,
}

impl Events {
    /// A buffer of one event: the kernel wait grows it to the registrations before it waits
    /// (`kernel_wait::RawEvents::reserve`).
    pub(crate) fn new() -> Events {
        Events::with_capacity(NonZeroUsize::MIN)
    }

    pub(crate) fn with_capacity(capacity: NonZeroUsize) -> Events {
        Events {
            events: epoll::Events::with_capacity(capacity),
        }
    }

    pub(crate) fn capacity(&self) -> NonZeroUsize {
        self.events.capacity()
    }

    pub(crate) fn clear(&mut self) {
        self.events.clear();
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Event> + '_ {
        self.events.iter().map(|(data, flags)| Event {
            key: data as usize,
            readable: flags.intersects(READ),
            writable: flags.intersects(WRITE),
            priority: flags.contains(Flags::PRI),
            hangup: flags.contains(Flags::HUP),
            error: flags.contains(Flags::ERR),
        })
    }
}
