//! `poll(2)`'s shape over herdless: [`PollWaiter`], a waiter with poll's manners, and
//! [`poll`], the same call on the calling thread's member of each object's line (`crate::line`),
//! with no group to make.
//!
//! A `PollWaiter` takes a `struct pollfd` array on every call ([`PollFd`] has its layout) and
//! makes the waiter's registrations follow it: a descriptor that appears is added (under its
//! own number as key), one whose `events` changed is modified, one that left the array is
//! deleted. [`POLLEXCL`] in `events` makes a registration exclusive, [`POLLONE`] one event per
//! wait in turn. As `poll(2)` it looks every number up on each call (`identity`: a closed
//! number gets `POLLNVAL`, a reused one is registered anew), fills `revents` from a
//! zero-timeout `poll(2)` of the descriptors herdless handed out (which sleeps in no wait queue,
//! so it wakes nobody), answers at once what `poll(2)` answers at once (a closed number, a
//! regular file asked for without `POLLEXCL`), and ends a blocking wait with
//! [`Error::Interrupted`] when a signal handler is due, as `poll(2)` ends with `EINTR`
//! (`signals`, Linux). The C layer's `herdless_poll` and `herdless_poll_shared` are this
//! module with `errno`.
//!
//! [`poll`] needs no waiter: each descriptor asked for with `POLLEXCL` is on its object's line
//! (`crate::line`: the implicit group of the object's permission class), the calling thread
//! joins it at its first call and leaves when it exits; an array with neither bit is plain
//! `poll(2)`. The consumed point is the thread's next call, or [`poll_consumed`].

#[cfg(any(target_os = "linux", target_os = "android"))]
mod signals;

pub(crate) mod identity;

use std::collections::HashMap;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::interest::{Event, Events, Interest};
use crate::waiter::Waiter;

use identity::{Check, Identity, Tracker};

/// `events` bit: an event on this descriptor wakes exactly one of the waiters that poll the
/// same object with the bit (the POLLEXCL proposal). 0x0800 is used by no `POLL*` bit of
/// Linux's `<poll.h>`; C's `HERDLESS_POLLEXCL`.
pub const POLLEXCL: i16 = 0x0800;
/// `events` bit: a call returns at most one ready descriptor, and ready descriptors are served
/// in turn over successive calls (the POLLONE proposal). 0x4000 is used by no `POLL*` bit of
/// Linux's `<poll.h>` (the kernel's POLLFREE is internal and never in a pollfd); C's
/// `HERDLESS_POLLONE`.
pub const POLLONE: i16 = 0x4000;

// Both bits are positive values of a C short.
const _: () = assert!(POLLEXCL > 0 && POLLONE > 0);

/// The system bits herdless can watch, and those poll() always reports.
const READ_BITS: i16 = libc::POLLIN | libc::POLLRDNORM;
const WRITE_BITS: i16 = libc::POLLOUT | libc::POLLWRNORM;
const ALWAYS: i16 = libc::POLLHUP | libc::POLLERR | libc::POLLNVAL;

/// One entry of a poll array: a `struct pollfd` (this type has its layout exactly), borrowing
/// its descriptor for as long as the entry lives.
///
/// `events` are `poll(2)`'s bits (`libc::POLLIN`, `libc::POLLOUT`, ...) with [`POLLEXCL`] and
/// [`POLLONE`]; [`revents`](Self::revents) is what the last call found.
///
/// ```
/// use herdless::{PollFd, POLLEXCL, POLLONE};
/// let (a, _b) = std::os::unix::net::UnixStream::pair()?;
/// let entry = PollFd::new(&a, libc::POLLIN | POLLEXCL | POLLONE);
/// assert_eq!(entry.revents(), 0);
/// # Ok::<(), std::io::Error>(())
/// ```
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct PollFd<'fd> {
    raw: libc::pollfd,
    fd: PhantomData<BorrowedFd<'fd>>,
}

impl std::fmt::Debug for PollFd<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PollFd")
            .field("fd", &self.raw.fd)
            .field("events", &format_args!("{:#x}", self.raw.events))
            .field("revents", &format_args!("{:#x}", self.raw.revents))
            .finish()
    }
}

impl<'fd> PollFd<'fd> {
    /// An entry for `fd` asking for `events`. Example: see [`PollFd`].
    pub fn new<F: AsFd + ?Sized>(fd: &'fd F, events: i16) -> PollFd<'fd> {
        PollFd {
            raw: libc::pollfd {
                fd: fd.as_fd().as_raw_fd(),
                events,
                revents: 0,
            },
            fd: PhantomData,
        }
    }

    /// The descriptor's number.
    pub fn fd(&self) -> RawFd {
        self.raw.fd
    }

    /// The bits asked for.
    pub fn events(&self) -> i16 {
        self.raw.events
    }

    /// Changes the bits asked for (the next call follows them).
    pub fn set_events(&mut self, events: i16) {
        self.raw.events = events;
    }

    /// What the last call found: `poll(2)`'s `revents` (`POLLIN`, `POLLOUT`, `POLLHUP`,
    /// `POLLERR`, `POLLNVAL`, ...), never [`POLLEXCL`] or [`POLLONE`].
    pub fn revents(&self) -> i16 {
        self.raw.revents
    }

    /// A `struct pollfd` array (a C caller's) as entries: the same memory, for [`poll`] and
    /// [`PollWaiter::poll`]. Negative numbers are left alone, as `poll(2)` leaves them.
    ///
    /// ```
    /// use herdless::PollFd;
    /// let mut raw = [libc::pollfd { fd: -1, events: libc::POLLIN, revents: 0 }];
    /// // SAFETY: no descriptor in the array (a negative one is ignored).
    /// let fds = unsafe { PollFd::from_raw_slice(&mut raw) };
    /// assert_eq!(herdless::poll(fds, Some(std::time::Duration::ZERO))?, 0);
    /// # Ok::<(), herdless::Error>(())
    /// ```
    ///
    /// # Safety
    ///
    /// Every non-negative `fd` of the array must be a number the caller may poll for `'fd`: if
    /// it closes one meanwhile, that entry gets `POLLNVAL`, as from `poll(2)`, but a number
    /// reused for a descriptor the caller does not own would be watched.
    pub unsafe fn from_raw_slice(fds: &mut [libc::pollfd]) -> &mut [PollFd<'fd>] {
        // SAFETY: PollFd is repr(transparent) over libc::pollfd (its other field is a
        // zero-sized marker), so the slices have one layout; the borrow is the caller's.
        unsafe { &mut *(fds as *mut [libc::pollfd] as *mut [PollFd<'fd>]) }
    }
}

/// The interest a pollfd's `events` asks for; None if it asks for nothing herdless watches.
fn interest_of(events: i16) -> Option<Interest> {
    let mut interest = None::<Interest>;
    for (bits, base) in [
        (READ_BITS, Interest::READABLE),
        (WRITE_BITS, Interest::WRITABLE),
        (libc::POLLPRI, Interest::PRIORITY),
    ] {
        if events & bits != 0 {
            interest = Some(interest.map_or(base, |i| i.add(base)));
        }
    }
    let mut interest = interest?;
    if events & POLLEXCL != 0 {
        interest = interest.exclusive();
    }
    if events & POLLONE != 0 {
        interest = interest.one_event_round_robin();
    }
    Some(interest)
}

/// A descriptor a [`PollWaiter`] registered: the `events` bits it was registered for, and
/// which open file the number named then.
#[derive(Debug, Clone, Copy)]
struct Polled {
    bits: i16,
    identity: Identity,
}

/// A [`Waiter`] with `poll(2)`'s manners: [`poll`](Self::poll) takes a `struct pollfd` array
/// and makes the registrations follow it, and every wait ends as `poll(2)`'s does (signals
/// included). Each registration it makes has the descriptor's number as its key, so
/// [`consumed`](Self::consumed) takes the number.
///
/// ```
/// use herdless::{Group, PollFd, PollWaiter, POLLEXCL, POLLONE};
/// use std::io::Write;
/// let group = Group::new()?;
/// let mut waiter = PollWaiter::new(group.join()?);
/// let (mut tx, rx) = std::os::unix::net::UnixStream::pair()?;
/// rx.set_nonblocking(true)?; // shared: a wake-up may find nothing
/// tx.write_all(b"job")?;
/// let mut fds = [PollFd::new(&rx, libc::POLLIN | POLLEXCL | POLLONE)];
/// assert_eq!(waiter.poll(&mut fds, Some(std::time::Duration::from_secs(5)))?, 1);
/// assert_eq!(fds[0].revents(), libc::POLLIN);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PollWaiter {
    waiter: Waiter,
    /// The buffer every wait receives into (sized for the call).
    events: Events,
    /// Descriptors `poll` registered.
    polled: HashMap<RawFd, Polled>,
    /// Which open file each polled number names (checked on every call).
    tracker: Tracker,
    /// Scratch map of one call (kept to avoid allocating per call).
    wanted: HashMap<RawFd, i16>,
    /// The wanted descriptors in the order they first appear in the array: registrations are
    /// made in that order, so ready descriptors are served in array order.
    order: Vec<RawFd>,
    /// The signalfd that ends a blocking wait when a handler is due (made on the first
    /// blocking wait, registered under its own number, as every registration).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    signals: Option<signals::SignalWatch>,
}

impl std::fmt::Debug for PollWaiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PollWaiter")
            .field("member", &self.waiter.member())
            .field("polled", &self.polled.len())
            .finish()
    }
}

impl PollWaiter {
    /// `waiter` with poll's manners. Example: see [`PollWaiter`].
    pub fn new(waiter: Waiter) -> PollWaiter {
        PollWaiter {
            waiter,
            events: Events::with_capacity(1),
            polled: HashMap::new(),
            tracker: Tracker::default(),
            wanted: HashMap::new(),
            order: Vec::new(),
            #[cfg(any(target_os = "linux", target_os = "android"))]
            signals: None,
        }
    }

    /// The waiter, for calls of its own (its registrations under other keys, `stats`). A
    /// registration changed by hand should be [`forget`](Self::forget)-ten too.
    pub fn waiter_mut(&mut self) -> &mut Waiter {
        &mut self.waiter
    }

    /// The waiter.
    pub fn waiter(&self) -> &Waiter {
        &self.waiter
    }

    /// Forgets what [`poll`](Self::poll) knew of `fd` (deleted, added or modified by hand
    /// through [`waiter_mut`](Self::waiter_mut)): the next `poll` that lists it registers it
    /// anew.
    pub fn forget(&mut self, fd: RawFd) {
        if let Some(old) = self.polled.remove(&fd) {
            self.tracker.forget(fd, old.identity);
        }
    }

    /// The events of the last wait (the signal watch's left out): their keys are descriptor
    /// numbers for the registrations `poll` made.
    pub fn events(&self) -> impl Iterator<Item = Event> + '_ {
        let signals = self.signal_key();
        self.events.iter().filter(move |e| Some(e.key) != signals)
    }

    /// Says that the event of `fd` handed out by the last call was consumed (the message read):
    /// the group may hand the descriptor's next event to another member while this one works,
    /// and this member goes to the back of the line. The next call does it anyway.
    ///
    /// # Errors
    ///
    /// As [`Waiter::consumed`].
    pub fn consumed(&mut self, fd: RawFd) -> Result<()> {
        self.waiter.consumed(fd as usize)
    }

    /// Consumes every event of the last wait (the caller polls elsewhere now).
    pub(crate) fn consume_all(&mut self) -> Result<()> {
        let keys: Vec<usize> = self.events().map(|e| e.key).collect();
        self.events.clear();
        keys.into_iter().try_for_each(|k| self.waiter.consumed(k))
    }

    /// Waits like `poll(fds, nfds, timeout)`, with [`POLLEXCL`] and [`POLLONE`] honoured in
    /// each entry's `events`; returns the number of entries with non-zero `revents` (0 on
    /// timeout or notification).
    ///
    /// - Registration follows the array: a descriptor that appears is added, one whose
    ///   `events` changed is modified, one that is gone (or whose `fd` is negative) is deleted.
    ///   A descriptor may appear more than once; its interests are merged. An entry asking for
    ///   none of POLLIN, POLLRDNORM, POLLOUT, POLLWRNORM, POLLPRI is not watched.
    /// - Every call checks which open file each number names, as `poll(2)` looks each number
    ///   up: a number closed and reused (a new pipe, `mq_close` then `mq_open`, a `dup2` over
    ///   it) is watched anew; a closed one gets POLLNVAL at once (and is forgotten).
    /// - `revents` is filled as `poll(2)` fills it, for the descriptors herdless handed out. A
    ///   regular file or another descriptor the kernel cannot watch, asked for without
    ///   `POLLEXCL`, gets at once what `poll(2)` says of it (always ready).
    /// - With `POLLONE`, one call returns at most one ready descriptor, served in turn: with
    ///   fds 1, 2, 3 all readable, four calls return fd1, fd2, fd3, fd1.
    /// - The next call says that the events of this one were consumed;
    ///   [`consumed`](Self::consumed) says it sooner.
    ///
    /// Example: see [`PollWaiter`].
    ///
    /// # Errors
    ///
    /// [`Error::Interrupted`] when a signal handler ran while it waited and nothing was ready
    /// (Linux; `poll(2)`'s `EINTR`); [`Error::UnwatchableDescriptor`] for a descriptor asked
    /// for with `POLLEXCL` that cannot be watched exclusively (answering "ready" would make the
    /// caller spin); [`Error::InvalidInterest`] (POLLPRI with `POLLEXCL`);
    /// [`Error::BlockingDescriptor`] (`POLLEXCL` on a descriptor without `O_NONBLOCK`);
    /// [`Error::AlreadyRegistered`] (a descriptor also added by hand); and as
    /// [`Waiter::wait`].
    pub fn poll(&mut self, fds: &mut [PollFd<'_>], timeout: Option<Duration>) -> Result<usize> {
        for pfd in fds.iter_mut() {
            pfd.raw.revents = 0;
        }
        // What the array asks for, per descriptor (interests of repeated descriptors merged).
        let mut wanted = std::mem::take(&mut self.wanted);
        let mut order = std::mem::take(&mut self.order);
        wanted.clear();
        order.clear();
        for pfd in fds.iter() {
            let (fd, events) = (pfd.raw.fd, pfd.raw.events);
            if fd >= 0 && interest_of(events).is_some() {
                let bits = wanted.entry(fd).or_insert_with(|| {
                    order.push(fd);
                    0
                });
                *bits |= events & !ALWAYS;
            }
        }
        let result = self.update_and_wait(&wanted, &order, fds, timeout);
        self.wanted = wanted;
        self.order = order;
        result
    }

    /// Deletes `fd`'s registration and forgets it. A descriptor that is gone or was never
    /// registered is no error here: the registration is what goes.
    fn unregister(&mut self, fd: RawFd) -> Result<()> {
        self.forget(fd);
        // Used only as a number for this delete; a closed one is answered by the waiter
        // (BadDescriptor or NotRegistered), ignored here. (fd >= 0: from the array's watched
        // entries.)
        let Ok(source) = crate::sys::unix::by_number(fd) else {
            return Ok(());
        };
        match self.waiter.delete(&source) {
            Ok(()) | Err(Error::NotRegistered { .. } | Error::BadDescriptor { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn update_and_wait(
        &mut self,
        wanted: &HashMap<RawFd, i16>,
        order: &[RawFd],
        fds: &mut [PollFd<'_>],
        timeout: Option<Duration>,
    ) -> Result<usize> {
        // Gone from the array: delete.
        let gone: Vec<RawFd> = self
            .polled
            .keys()
            .filter(|fd| !wanted.contains_key(fd))
            .copied()
            .collect();
        for fd in gone {
            self.unregister(fd)?;
        }
        // New, changed, reused or closed: add, modify, re-add or answer, in array order.
        // Answers poll() gives at once (POLLNVAL, an always-ready file) are collected.
        let mut at_once = false;
        for &fd in order {
            let bits = wanted[&fd];
            let Some(interest) = interest_of(bits) else {
                continue; // not reached: only entries with an interest are wanted
            };
            let known = match self.polled.get(&fd).copied() {
                None => None,
                Some(old) => match self.tracker.check(fd, old.identity) {
                    Check::Same => Some(old),
                    Check::Changed => {
                        // Another open file under the old number: the old registration goes.
                        self.unregister(fd)?;
                        None
                    }
                    Check::Closed => {
                        self.unregister(fd)?;
                        at_once |= answer(fds, fd, libc::POLLNVAL);
                        continue;
                    }
                },
            };
            // Used as a number for this call's registration calls only; a closed one is
            // answered EBADF.
            let Ok(source) = crate::sys::unix::by_number(fd) else {
                continue; // not reached: only entries with fd >= 0 are wanted
            };
            let done = match known {
                Some(old) if old.bits == bits => continue,
                Some(old) => self
                    .waiter
                    .modify(&source, fd as usize, interest)
                    .map(|()| old.identity),
                None => match self.tracker.identify(fd) {
                    Err(libc::EBADF) => Err(Error::BadDescriptor { fd }),
                    Err(errno) => Err(Error::io(
                        "inspecting a polled descriptor",
                        std::io::Error::from_raw_os_error(errno),
                    )),
                    Ok(identity) => self
                        .waiter
                        .add(&source, fd as usize, interest)
                        .map(|()| identity)
                        .inspect_err(|_| self.tracker.forget(fd, identity)),
                },
            };
            match done {
                Ok(identity) => {
                    self.polled.insert(fd, Polled { bits, identity });
                }
                // poll() answers POLLNVAL for a closed descriptor.
                Err(Error::BadDescriptor { .. }) => {
                    self.forget(fd);
                    at_once |= answer(fds, fd, libc::POLLNVAL);
                }
                // Not watchable: without POLLEXCL, poll()'s own answer (a regular file is always
                // ready); with it, the error: answering "ready" would make the caller spin.
                Err(Error::UnwatchableDescriptor { .. }) if !interest.is_exclusive() => {
                    self.forget(fd);
                    at_once |= answer(fds, fd, probe(fd, bits));
                }
                Err(e) => return Err(e),
            }
        }
        // Entries answered at once end the call, as in poll(): what else is ready is still
        // collected, without waiting.
        let timeout = match at_once {
            true => Some(Duration::ZERO),
            false => timeout,
        };
        let got = self.wait(wanted.len().max(1), timeout)?;
        if got == 0 {
            return Ok(count(fds));
        }
        let ready: Vec<Event> = self.events().collect();
        for event in ready {
            let fd = event.key as RawFd;
            let asked = wanted.get(&fd).copied().unwrap_or(0);
            let revents = match probe(fd, asked) {
                // Taken meanwhile (by a signal handler, say): report what herdless saw.
                0 => [
                    (event.is_readable(), READ_BITS),
                    (event.is_writable(), WRITE_BITS),
                    (event.is_priority(), libc::POLLPRI),
                    (event.is_read_closed(), libc::POLLHUP),
                    (event.is_error(), libc::POLLERR),
                ]
                .iter()
                .filter(|(set, _)| *set)
                .fold(0, |bits, (_, bit)| bits | bit),
                ready => ready,
            };
            answer(fds, fd, revents);
        }
        Ok(count(fds))
    }

    /// The key of the signal watch's registration, once it is made.
    fn signal_key(&self) -> Option<usize> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            self.signals.as_ref().map(|w| w.fd().as_raw_fd() as usize)
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        None
    }

    /// Waits into the receive buffer, sized for `capacity` events; returns the caller's event
    /// count (read them with [`events`](Self::events)). Coming back says the events of the last
    /// wait were consumed, as [`Waiter::wait`].
    ///
    /// A blocking wait (any timeout but zero) ends with [`Error::Interrupted`] when a signal
    /// handler is due and nothing was ready, as `poll(2)` ends with `EINTR`: for the length of
    /// the wait the calling thread blocks the catchable signals it had not blocked, and the
    /// waiter watches a signalfd of exactly those (Linux; elsewhere a signal does not end the
    /// wait early). The mask is put back before the call returns, so the handler runs then, in
    /// this thread.
    ///
    /// # Errors
    ///
    /// [`Error::Interrupted`]; as [`Waiter::wait`]; [`Error::Io`] if the signal mask or the
    /// signalfd cannot be set.
    pub fn wait(&mut self, capacity: usize, timeout: Option<Duration>) -> Result<usize> {
        if self.events.capacity() != capacity.max(1) {
            self.events = Events::with_capacity(capacity.max(1));
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if timeout != Some(Duration::ZERO) {
            return self.wait_for_signals(timeout);
        }
        self.wait_once(timeout)
    }

    /// One wait of the waiter; the signalfd's event (a signal seen while the thread does not
    /// block it: a zero timeout) is not the caller's: the watch is refreshed and the wait
    /// made once more.
    fn wait_once(&mut self, timeout: Option<Duration>) -> Result<usize> {
        let n = self.waiter.wait(&mut self.events, timeout)?;
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if n != self.events().count() {
            if let Some(watch) = self.signals.as_mut() {
                watch
                    .refresh()
                    .map_err(|e| Error::io("reading the signal mask", e))?;
            }
            self.waiter.wait(&mut self.events, timeout)?;
        }
        let _ = n;
        self.unless_interrupted()
    }

    /// The caller's event count, or [`Error::Interrupted`] if the waiter reports that a signal
    /// handler ended its wait ([`Events::interrupted`], with no events): a handler the
    /// signalfd did not catch, because the wait does not block its signal (a synchronous one
    /// such as SIGTRAP sent by another thread, or one of the C library's own, such as glibc's
    /// SIGSETXID that another thread's `setuid` sends to every thread). `poll(2)` answers these
    /// with EINTR.
    fn unless_interrupted(&self) -> Result<usize> {
        let user = self.events().count();
        if user == 0 && self.events.interrupted() {
            return Err(Error::Interrupted);
        }
        Ok(user)
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn wait_for_signals(&mut self, timeout: Option<Duration>) -> Result<usize> {
        use std::time::Instant;
        if self.signals.is_none() {
            let watch =
                signals::SignalWatch::new().map_err(|e| Error::io("making a signalfd", e))?;
            let key = watch.fd().as_raw_fd() as usize;
            self.waiter.add(&watch.fd(), key, Interest::READABLE)?;
            self.signals = Some(watch);
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let Some(watch) = self.signals.as_mut() else {
                return Ok(0); // not reached: made above
            };
            let blocked = watch
                .block()
                .map_err(|e| Error::io("blocking signals for the wait", e))?;
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let n = self.waiter.wait(&mut self.events, left)?;
            let user = self.events().count();
            if user > 0 || n == 0 {
                // Events, a timeout, a notification, or a handler that ran in the kernel wait
                // (a signal the wait does not block: `unless_interrupted`): the handlers of any
                // signal that came meanwhile run as the mask is put back (on drop), as after
                // poll(2).
                drop(blocked);
                return self.unless_interrupted();
            }
            // Only the signalfd: is a handler due?
            let handler = self.signals.as_ref().is_some_and(|w| w.handler_pending());
            drop(blocked); // the handler runs here (or the signal is discarded, or acts)
            if handler {
                return Err(Error::Interrupted);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(0);
            }
        }
    }
}

/// What a zero-timeout poll() says of `fd` for the `events` asked: it sleeps in no wait
/// queue, so it wakes nobody and herds nothing.
fn probe(fd: RawFd, events: i16) -> i16 {
    crate::sys::unix::poll_one_now(fd, events & (READ_BITS | WRITE_BITS | libc::POLLPRI))
}

/// Sets the `revents` of every entry of `fd` to what it asked for among `revents` (plus what
/// poll() always reports); true if any entry got something.
fn answer(fds: &mut [PollFd<'_>], fd: RawFd, revents: i16) -> bool {
    let mut any = false;
    for pfd in fds.iter_mut().filter(|p| p.raw.fd == fd) {
        pfd.raw.revents = revents & ((pfd.raw.events & !(POLLEXCL | POLLONE)) | ALWAYS);
        any |= pfd.raw.revents != 0;
    }
    any
}

fn count(fds: &[PollFd<'_>]) -> usize {
    fds.iter().filter(|p| p.raw.revents != 0).count()
}

/// `poll(2)` with [`POLLEXCL`] and [`POLLONE`], and no group: each descriptor asked for with
/// `POLLEXCL` is shared with every thread or process that polls the same object (the same
/// queue, pipe, socket or FIFO, however each opened it) with the bit, on the object's *line*;
/// `POLLONE` gives one event per call, ready descriptors in turn. The calling thread joins the
/// line at its first call and leaves when it exits (or its process dies); processes started
/// with no common parent take part. An array with neither bit is plain `poll(2)`.
///
/// - **The line** of an object is its permission class's implicit named group (owner, group
///   and mode: `/dev/shm/herdless.implicit.<backend>.<uid>.<gid>.<mode>`, made with the
///   object's access, so whoever may open the object may share its line): objects polled by
///   overlapping sets of processes keep exclusivity and turns per object. Anonymous objects
///   (sockets, pipes) are on their caller's user's line. The backend is `HERDLESS_BACKEND`'s
///   (`auto`, `native`, `emulated`; default `auto`): every process of a line must use the
///   same. docs/c.md, "POLLEXCL with no setup", has the rule and what it costs.
/// - **One class per call**: the `POLLEXCL` descriptors of one call must be on one line's
///   class ([`Error::LinesDiffer`] otherwise). Descriptors without the bit may be anything.
/// - **Consumed** at the thread's next call, or sooner with [`poll_consumed`].
/// - Everything [`PollWaiter::poll`] says (reused numbers, POLLNVAL, signals) holds.
///
/// ```
/// use herdless::{PollFd, POLLEXCL, POLLONE};
/// use std::io::Write;
/// let (mut tx, rx) = std::os::unix::net::UnixStream::pair()?;
/// rx.set_nonblocking(true)?; // shared: a wake-up may find nothing
/// tx.write_all(b"job")?;
/// let mut fds = [PollFd::new(&rx, libc::POLLIN | POLLEXCL | POLLONE)];
/// assert_eq!(herdless::poll(&mut fds, Some(std::time::Duration::from_secs(5)))?, 1);
/// assert_eq!(fds[0].revents(), libc::POLLIN);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`Error::LinesDiffer`] (two classes in one call); [`Error::LineRefused`] (the line's group
/// object shuts this process out, or was made by someone the rule does not let in);
/// [`Error::InvalidSetting`] (`HERDLESS_BACKEND` is not `auto`, `native` or `emulated`);
/// [`Error::BackendUnavailable`] (`native` where the kernel has none); [`Error::GroupFull`];
/// and as [`PollWaiter::poll`].
pub fn poll(fds: &mut [PollFd<'_>], timeout: Option<Duration>) -> Result<usize> {
    let asked = fds
        .iter()
        .filter(|p| p.raw.fd >= 0)
        .fold(0, |bits, p| bits | p.raw.events);
    if asked & (POLLEXCL | POLLONE) == 0 {
        return plain_poll(fds, timeout);
    }
    // A closed number: poll(2) answers at once (POLLNVAL, and what else is ready now). It is
    // answered so, without the line: joining one could give the closed number to one of
    // herdless's own descriptors before the array is looked at.
    let closed = |fd| matches!(crate::poll::identity::fstat(fd), Err(libc::EBADF));
    if fds.iter().any(|p| p.raw.fd >= 0 && closed(p.raw.fd)) {
        return plain_poll(fds, Some(Duration::ZERO));
    }
    let class = crate::line::class_of_array(fds.iter().map(|p| (p.raw.fd, p.raw.events)))?;
    // What the thread's members of other classes were handed is consumed: it polls here now.
    crate::line::each_other_member(&class, PollWaiter::consume_all)?;
    crate::line::with_member(&class, PollWaiter::new, |member| member.poll(fds, timeout))?
}

/// Says that the event of `fd` handed out by the calling thread's last [`poll`] was consumed
/// (the message read, the connection accepted): the line may hand the descriptor's next event
/// to another member while this thread works, and this thread goes to the back of the line.
/// The thread's next `poll` does it anyway; the sooner, the sooner the next event goes out
/// (under the emulation a held event is waited for, up to 40 ms, before another member takes
/// the descriptor's next one).
///
/// ```
/// use herdless::{PollFd, POLLEXCL, POLLONE};
/// use std::io::{Read, Write};
/// let (mut tx, mut rx) = std::os::unix::net::UnixStream::pair()?;
/// rx.set_nonblocking(true)?;
/// tx.write_all(b"job")?;
/// let mut fds = [PollFd::new(&rx, libc::POLLIN | POLLEXCL | POLLONE)];
/// herdless::poll(&mut fds, Some(std::time::Duration::from_secs(5)))?;
/// rx.read(&mut [0; 16])?;
/// herdless::poll_consumed(&rx)?; // read: the next message may go to another thread
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// As [`Waiter::consumed`]. A descriptor this thread's last call did not hand out is no
/// error (nothing to consume).
pub fn poll_consumed<F: AsFd + ?Sized>(fd: &F) -> Result<()> {
    let fd = fd.as_fd().as_raw_fd();
    crate::line::each_member(|member: &mut PollWaiter| {
        let handed_out = member.events().any(|e| e.key == fd as usize);
        match handed_out {
            true => member.consumed(fd),
            false => Ok(()),
        }
    })
}

/// `poll(2)` itself, for an array with neither bit; EINTR is [`Error::Interrupted`].
fn plain_poll(fds: &mut [PollFd<'_>], timeout: Option<Duration>) -> Result<usize> {
    let ms = match timeout {
        None => -1,
        Some(t) => t
            .as_millis()
            .saturating_add(u128::from(t.subsec_nanos() % 1_000_000 != 0))
            .min(i32::MAX as u128) as libc::c_int,
    };
    // A copy of the entries for the call (the array is the caller's entries, not a slice of
    // `pollfd`s), their `revents` copied back.
    let mut raw: Vec<libc::pollfd> = fds.iter().map(|p| p.raw).collect();
    let n = crate::sys::unix::poll(&mut raw, ms).map_err(|e| match e.raw_os_error() {
        Some(libc::EINTR) => Error::Interrupted,
        _ => Error::io("poll", e),
    })?;
    for (pfd, r) in fds.iter_mut().zip(&raw) {
        pfd.raw.revents = r.revents;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_clash_with_no_system_poll_bit() {
        let system = [
            libc::POLLIN,
            libc::POLLPRI,
            libc::POLLOUT,
            libc::POLLERR,
            libc::POLLHUP,
            libc::POLLNVAL,
            libc::POLLRDNORM,
            libc::POLLRDBAND,
            libc::POLLWRNORM,
            libc::POLLWRBAND,
            #[cfg(any(target_os = "linux", target_os = "android"))]
            libc::POLLRDHUP,
        ];
        for bit in system {
            assert_eq!(bit & (POLLEXCL | POLLONE), 0, "{bit:#x}");
        }
        assert_eq!(POLLEXCL & POLLONE, 0);
    }

    #[test]
    fn events_map_to_interests() {
        assert_eq!(interest_of(0), None);
        assert_eq!(interest_of(POLLEXCL), None);
        let i = interest_of(libc::POLLIN | POLLEXCL | POLLONE).unwrap();
        assert!(i.is_readable() && i.is_exclusive() && i.is_one_event_round_robin());
        assert!(!i.is_writable());
        let o = interest_of(libc::POLLWRNORM).unwrap();
        assert!(o.is_writable() && !o.is_exclusive());
    }

    #[test]
    fn a_poll_fd_is_a_pollfd() {
        assert_eq!(
            std::mem::size_of::<PollFd<'_>>(),
            std::mem::size_of::<libc::pollfd>()
        );
        assert_eq!(
            std::mem::align_of::<PollFd<'_>>(),
            std::mem::align_of::<libc::pollfd>()
        );
    }
}
