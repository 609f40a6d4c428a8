//! What a waiter asks for (`Interest`) and what it gets back (`Event`, `Events`).
//!
//! `Interest` carries the two cures as flags on one registration: `exclusive` (the POLLEXCL
//! proposal: an event on a shared descriptor wakes exactly one waiter of the group) and
//! `one_event_round_robin` (the POLLONE proposal: a wait returns at most one event and ready
//! descriptors are served in turn). `Events` is a reusable buffer, as in `polling` and `mio`.

use crate::error::{Error, Result};

/// Keys from this value up are reserved for herdless's own wake-ups.
pub(crate) const FIRST_RESERVED_KEY: usize = usize::MAX - 1;

/// What a registration waits for, and how its events are shared within the group.
///
/// ```
/// use herdless::Interest;
/// // A listener or queue shared by the group: one waiter per event, in turn.
/// let shared = Interest::READABLE.exclusive().one_event_round_robin();
/// assert!(shared.is_readable() && shared.is_exclusive() && shared.is_one_event_round_robin());
/// // A connection only this waiter holds: no flag needed.
/// let own = Interest::READABLE.add(Interest::WRITABLE);
/// assert!(own.is_writable() && !own.is_exclusive() && !own.is_priority());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Interest {
    readable: bool,
    writable: bool,
    priority: bool,
    exclusive: bool,
    one_event_round_robin: bool,
}

impl Interest {
    /// Wait until the descriptor is readable (or an accept is pending).
    pub const READABLE: Interest = Interest {
        readable: true,
        writable: false,
        priority: false,
        exclusive: false,
        one_event_round_robin: false,
    };
    /// Wait until the descriptor is writable.
    pub const WRITABLE: Interest = Interest {
        readable: false,
        writable: true,
        priority: false,
        exclusive: false,
        one_event_round_robin: false,
    };
    /// Wait for urgent (out-of-band) data: `EPOLLPRI`/`POLLPRI`, reported as readable. Not
    /// available with `exclusive` (the kernel refuses `EPOLLPRI` with `EPOLLEXCLUSIVE`), and
    /// ignored by kqueue, which has no such event.
    pub const PRIORITY: Interest = Interest {
        readable: false,
        writable: false,
        priority: true,
        exclusive: false,
        one_event_round_robin: false,
    };

    /// Also wait for writability (or readability): `READABLE.add(WRITABLE)`. Example: see
    /// [`Interest`].
    #[must_use]
    pub const fn add(self, other: Interest) -> Interest {
        Interest {
            readable: self.readable || other.readable,
            writable: self.writable || other.writable,
            priority: self.priority || other.priority,
            exclusive: self.exclusive || other.exclusive,
            one_event_round_robin: self.one_event_round_robin || other.one_event_round_robin,
        }
    }

    /// An event on this descriptor wakes exactly one waiter of the group (POLLEXCL). After
    /// such an event, call [`Waiter::consumed`](crate::Waiter::consumed). Example: see
    /// [`Interest`].
    ///
    /// What is shared out is readiness *changes*. A descriptor that stays ready (a pipe's
    /// write end with room) is ready at once for every waiter that adds or re-adds it: on the
    /// native backend, whose rotation re-adds it, several waiters may be let in together and
    /// the late ones find the room gone (`EAGAIN`); the emulation hands it to one waiter at a
    /// time.
    #[must_use]
    pub const fn exclusive(mut self) -> Interest {
        self.exclusive = true;
        self
    }

    /// A wait that watches this descriptor returns at most one event, and ready descriptors are
    /// served in turn (POLLONE). Example: see [`Interest`].
    #[must_use]
    pub const fn one_event_round_robin(mut self) -> Interest {
        self.one_event_round_robin = true;
        self
    }

    /// Does this interest include readability? Example: see [`Interest`].
    pub const fn is_readable(self) -> bool {
        self.readable
    }
    /// Does this interest include writability? Example: see [`Interest`].
    pub const fn is_writable(self) -> bool {
        self.writable
    }
    /// Does this interest include urgent data? Example: see [`Interest`].
    pub const fn is_priority(self) -> bool {
        self.priority
    }
    /// Is this registration exclusive within the group? Example: see [`Interest`].
    pub const fn is_exclusive(self) -> bool {
        self.exclusive
    }
    /// Does this registration limit each wait to one event, served in turn? Example: see
    /// [`Interest`].
    pub const fn is_one_event_round_robin(self) -> bool {
        self.one_event_round_robin
    }

    /// Checks what every backend refuses, before anything reaches the kernel.
    pub(crate) fn validate(self, key: usize) -> Result<()> {
        if key >= FIRST_RESERVED_KEY {
            return Err(Error::ReservedKey { key });
        }
        if !self.readable && !self.writable && !self.priority {
            return Err(Error::InvalidInterest {
                reason: "neither readable, writable nor priority: there is nothing to wait for",
            });
        }
        if self.priority && self.exclusive {
            return Err(Error::InvalidInterest {
                reason:
                    "priority with exclusive: the kernel refuses EPOLLPRI with EPOLLEXCLUSIVE, \
                         and herdless refuses it on every backend",
            });
        }
        Ok(())
    }
}

/// One readiness event handed to one waiter.
///
/// Made by herdless only (`#[non_exhaustive]`): read its fields; a later version may add one
/// (a hang-up flag, say) without breaking code that reads these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Event {
    /// The key given when the descriptor was registered.
    pub key: usize,
    /// The descriptor is readable (or has a pending connection, or hung up).
    pub readable: bool,
    /// The descriptor is writable.
    pub writable: bool,
}

/// A reusable buffer of events filled by [`Waiter::wait`](crate::Waiter::wait).
///
/// Make one per waiter and reuse it for every wait. [`Events::default()`] holds up to
/// [`Events::DEFAULT_CAPACITY`] (1024) events, as `polling`'s does; with
/// `one_event_round_robin` a wait returns one event whatever the capacity.
///
/// ```
/// let mut events = herdless::Events::with_capacity(16);
/// assert_eq!(events.capacity(), 16);
/// assert!(events.is_empty() && events.len() == 0);
/// for event in events.iter() {
///     println!("key {} readable {}", event.key, event.readable);
/// }
/// events.clear();
/// assert_eq!(herdless::Events::default().capacity(), 1024);
/// ```
///
/// A full loop that fills and reads it: see [`Waiter`](crate::Waiter).
#[derive(Debug, Clone)]
pub struct Events {
    list: Vec<Event>,
    capacity: usize,
    /// The last wait was ended early by a signal handler (see `interrupted`).
    interrupted: bool,
}

impl Events {
    /// The capacity of [`Events::default()`].
    pub const DEFAULT_CAPACITY: usize = 1024;

    /// A buffer that receives at most `capacity` events per wait. A capacity of 0 is allowed
    /// here and refused by `wait` with [`Error::ZeroCapacity`]. Any capacity is accepted and
    /// never panics: memory for at most [`Events::PREALLOCATED`] events is set aside here, and
    /// the buffer grows past that only as far as waits actually fill it.
    ///
    /// ```
    /// let huge = herdless::Events::with_capacity(usize::MAX / 8);
    /// assert_eq!(huge.capacity(), usize::MAX / 8);
    /// ```
    pub fn with_capacity(capacity: usize) -> Events {
        Events {
            list: Vec::with_capacity(capacity.min(Self::PREALLOCATED)),
            capacity,
            interrupted: false,
        }
    }

    /// The most events [`with_capacity`](Self::with_capacity) sets memory aside for at once.
    pub const PREALLOCATED: usize = 1024;

    /// The events of the last wait. Example: see [`Events`].
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Event> + '_ {
        self.list.iter().copied()
    }

    /// How many events the last wait returned. Example: see [`Events`].
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Did the last wait return no event? Example: see [`Events`].
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The most events one wait may return into this buffer. Example: see [`Events`].
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets the events of the last wait (`wait` does it too). Example: see [`Events`].
    pub fn clear(&mut self) {
        self.list.clear();
        self.interrupted = false;
    }

    /// Was the last wait ended early, with no events, because a signal handler ran while it
    /// slept (what `poll(2)` reports as `EINTR`)? A handler's flag can be looked at at once.
    /// See [`Waiter::wait`](crate::Waiter::wait).
    ///
    /// ```
    /// assert!(!herdless::Events::default().interrupted());
    /// ```
    pub fn interrupted(&self) -> bool {
        self.interrupted
    }

    pub(crate) fn set_interrupted(&mut self) {
        self.interrupted = true;
    }

    /// Room left in this wait.
    pub(crate) fn room(&self) -> usize {
        self.capacity - self.list.len()
    }

    pub(crate) fn push(&mut self, event: Event) {
        debug_assert!(self.list.len() < self.capacity);
        self.list.push(event);
    }
}

/// A buffer of [`Events::DEFAULT_CAPACITY`] (1024) events, ready for
/// [`Waiter::wait`](crate::Waiter::wait).
impl Default for Events {
    fn default() -> Events {
        Events::with_capacity(Events::DEFAULT_CAPACITY)
    }
}
