//! What a waiter asks for (`Interest`) and what it gets back (`Event`, `Events`).
//!
//! `Interest` carries the two cures as flags on one registration: `exclusive` (the POLLEXCL
//! proposal: an event on a shared descriptor wakes exactly one waiter of the group) and
//! `one_event_round_robin` (the POLLONE proposal: a wait returns at most one event and ready
//! descriptors are served in turn); [`Interest::SHARED`] is both, on readability. `Event` says
//! what a descriptor is ready for, as mio's does (readable, writable, priority data, read or
//! write side closed, an error), under the key its registration was given. `Events` is a
//! reusable buffer, as in `polling` and `mio`.

use std::ops::{BitOr, BitOrAssign};

use crate::error::{Error, Result};

/// What a registration waits for, and how its events are shared within the group.
///
/// Interests combine with `|` (or [`add`](Self::add)); `exclusive` and
/// `one_event_round_robin` are flags on top, and [`Interest::SHARED`] is the common case, a
/// descriptor the group shares, read in turn.
///
/// ```
/// use herdless::Interest;
/// // A listener or queue shared by the group: one waiter per event, in turn.
/// let shared = Interest::SHARED;
/// assert!(shared.is_readable() && shared.is_exclusive() && shared.is_one_event_round_robin());
/// assert_eq!(shared, Interest::READABLE.exclusive().one_event_round_robin());
/// // A connection only this waiter holds: no flag needed.
/// let own = Interest::READABLE | Interest::WRITABLE;
/// assert!(own.is_writable() && !own.is_exclusive() && !own.is_priority());
/// assert_eq!(own, Interest::READABLE.add(Interest::WRITABLE));
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
    /// Wait for urgent (out-of-band) data: `EPOLLPRI`/`POLLPRI`, reported as readable and as
    /// [`Event::is_priority`]. Not available with `exclusive` (the kernel refuses `EPOLLPRI`
    /// with `EPOLLEXCLUSIVE`), and ignored by kqueue, which has no such event. Where the
    /// emulation waits in `polling`'s poll(2) backend, `POLLPRI` is asked only with
    /// readability: register `Interest::READABLE | Interest::PRIORITY` there.
    pub const PRIORITY: Interest = Interest {
        readable: false,
        writable: false,
        priority: true,
        exclusive: false,
        one_event_round_robin: false,
    };
    /// The common case, a descriptor the group shares (a listener, a queue, a pipe's read
    /// end): readable, [`exclusive`](Self::exclusive) (one event wakes one waiter) and
    /// [`one_event_round_robin`](Self::one_event_round_robin) (one event per wait, ready
    /// descriptors in turn). After each of its events, call
    /// [`Waiter::consumed`](crate::Waiter::consumed). A shared write end is
    /// `Interest::WRITABLE.exclusive().one_event_round_robin()`. Example: see [`Interest`].
    pub const SHARED: Interest = Interest::READABLE.exclusive().one_event_round_robin();

    /// Also wait for what `other` waits for, with its flags: `READABLE.add(WRITABLE)` is
    /// `READABLE | WRITABLE`. Example: see [`Interest`].
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
    pub(crate) fn validate(self) -> Result<()> {
        if !self.readable && !self.writable && !self.priority {
            return Err(Error::InvalidInterest {
                reason: "neither readable, writable nor priority: there is nothing to wait for; \
                         ask for readability, writability or priority data",
            });
        }
        if self.priority && self.exclusive {
            return Err(Error::InvalidInterest {
                reason: "priority with exclusive: the kernel refuses EPOLLPRI with \
                         EPOLLEXCLUSIVE, and herdless refuses it on every backend; register \
                         priority data without exclusive",
            });
        }
        Ok(())
    }
}

/// `Interest::READABLE | Interest::WRITABLE`: the same as [`Interest::add`].
impl BitOr for Interest {
    type Output = Interest;
    fn bitor(self, other: Interest) -> Interest {
        self.add(other)
    }
}

/// `interest |= Interest::WRITABLE`: the same as [`Interest::add`].
impl BitOrAssign for Interest {
    fn bitor_assign(&mut self, other: Interest) {
        *self = self.add(other);
    }
}

/// What a descriptor was found ready for, in the kernel's terms (poll's bits, which epoll's
/// share), before it becomes an [`Event`]'s answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Readiness {
    /// Data to read, or a connection to accept (`POLLIN`).
    pub(crate) input: bool,
    /// Room to write (`POLLOUT`).
    pub(crate) output: bool,
    /// Urgent data (`POLLPRI`).
    pub(crate) priority: bool,
    /// Hung up: the other end closed (`POLLHUP`).
    pub(crate) hangup: bool,
    /// An error is pending (`POLLERR`).
    pub(crate) error: bool,
}

impl Readiness {
    /// From poll(2)'s `revents` (and, on Linux, epoll's event flags, which have the same bits
    /// for these five).
    #[cfg(unix)]
    pub(crate) fn from_poll(revents: libc::c_int) -> Readiness {
        let has = |bit: libc::c_short| revents & libc::c_int::from(bit) != 0;
        Readiness {
            input: has(libc::POLLIN),
            output: has(libc::POLLOUT),
            priority: has(libc::POLLPRI),
            hangup: has(libc::POLLHUP),
            error: has(libc::POLLERR),
        }
    }
}

// epoll's bits are poll's for the five the events read (`Readiness::from_poll` reads both).
#[cfg(any(target_os = "linux", target_os = "android"))]
const _: () = assert!(
    libc::EPOLLIN == libc::POLLIN as libc::c_int
        && libc::EPOLLOUT == libc::POLLOUT as libc::c_int
        && libc::EPOLLPRI == libc::POLLPRI as libc::c_int
        && libc::EPOLLHUP == libc::POLLHUP as libc::c_int
        && libc::EPOLLERR == libc::POLLERR as libc::c_int
);

/// One readiness event handed to one waiter: the key its registration was given, and what the
/// descriptor is ready for, asked with mio's names.
///
/// Readiness is level-triggered: an event the caller neither reads nor acts on comes back at
/// the next `wait`. So [`is_readable`](Self::is_readable) is also true when the other end hung
/// up or an error is pending (a read then returns 0 or the error, as `polling`'s `readable`
/// says), and [`is_writable`](Self::is_writable) likewise for writing; the closed and error
/// flags tell those cases apart, so that a loop can stop watching a descriptor whose writer
/// left instead of reading its end of file again and again. Each answer is the same on both
/// backends.
///
/// ```
/// # #[cfg(unix)] {
/// use herdless::{Events, Group, Interest};
/// use std::os::unix::net::UnixStream;
/// use std::time::Duration;
///
/// let group = Group::new()?;
/// let mut waiter = group.join()?;
/// let (rx, tx) = UnixStream::pair()?;
/// waiter.add(&rx, 7, Interest::READABLE)?;
/// drop(tx); // the writer leaves
/// let mut events = Events::default();
/// waiter.wait(&mut events, Some(Duration::from_secs(5)))?;
/// let event = events.iter().next().expect("the hang-up is an event");
/// assert_eq!(event.key, 7);
/// assert!(event.is_read_closed() && event.is_readable()); // a read returns 0: stop watching
/// assert!(!event.is_error() && !event.is_writable());
/// waiter.delete(&rx)?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The key given when the descriptor was registered: the caller's own data, any value,
    /// shared by several registrations if the caller wants (see
    /// [`Waiter::add`](crate::Waiter::add)).
    pub key: usize,
    readable: bool,
    writable: bool,
    priority: bool,
    read_closed: bool,
    write_closed: bool,
    error: bool,
}

impl Event {
    /// The event of a registration with `interest` found ready as `ready`. Readable and
    /// writable are answered only for what the registration asked (a hang-up is reported
    /// writable only to one that waits for writing); closed and error always, as the kernel
    /// always reports them. The read side is closed on a hang-up, the write side on a hang-up
    /// or an error. No answer depends on `input` or `output` alone when a hang-up or an error
    /// is there, so a poller that folds those into its readable and writable flags (as
    /// `polling`'s do) gives the same events as the kernel's own bits.
    pub(crate) fn new(key: usize, interest: Interest, ready: Readiness) -> Event {
        let ended = ready.hangup || ready.error;
        let wants_read = interest.readable || interest.priority;
        Event {
            key,
            readable: wants_read && (ready.input || ready.priority || ended),
            writable: interest.writable && (ready.output || ended),
            priority: interest.priority && ready.priority,
            read_closed: ready.hangup,
            write_closed: ended,
            error: ready.error,
        }
    }

    /// Is there something to read, a connection to accept, or urgent data, or is the read
    /// going to return at once (the other end hung up, or an error is pending)? Only for a
    /// registration that asked for [`Interest::READABLE`] or [`Interest::PRIORITY`].
    /// Example: see [`Event`].
    pub fn is_readable(&self) -> bool {
        self.readable
    }

    /// Is there room to write, or is the write going to fail at once (the other end hung up,
    /// or an error is pending)? Only for a registration that asked for
    /// [`Interest::WRITABLE`]. Example: see [`Event`].
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Is there urgent (out-of-band) data (`EPOLLPRI`/`POLLPRI`)? Only for a registration
    /// that asked for [`Interest::PRIORITY`]. Example: see [`Event`].
    pub fn is_priority(&self) -> bool {
        self.priority
    }

    /// Has the other end hung up, so that reads return end of file once the data left is
    /// read (a pipe or FIFO whose writers all closed, a socket closed in both directions)?
    /// Level-triggered, it stays true: delete the registration, or close the descriptor.
    /// (A socket whose peer only shut down its writing half is not reported here: the kernel
    /// refuses `EPOLLRDHUP` beside `EPOLLEXCLUSIVE`, and herdless answers the same for every
    /// registration; its read returns 0.) Example: see [`Event`].
    pub fn is_read_closed(&self) -> bool {
        self.read_closed
    }

    /// Can nothing more be written: has the other end hung up, or is an error pending (a pipe
    /// whose readers all closed, a socket reset or hung up, a connect that failed)? Example:
    /// see [`Event`].
    pub fn is_write_closed(&self) -> bool {
        self.write_closed
    }

    /// Is an error pending on the descriptor (`EPOLLERR`/`POLLERR`: a failed connect, a reset
    /// connection, a pipe with no reader left)? The next read or write, or `SO_ERROR`, says
    /// which. Example: see [`Event`].
    pub fn is_error(&self) -> bool {
        self.error
    }
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
///     println!("key {} readable {}", event.key, event.is_readable());
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
