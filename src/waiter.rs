//! The Waiter: one member's handle, with its own kernel poll instance, and its Notifier.
//!
//! Every public call checks what is the same for every backend (the interest, an empty
//! `Events` buffer, a blocking shared descriptor, a waiter carried across `fork`) and then hands
//! over to the backend the group was built with: `sys::native` for the native one, `emulated` for
//! token passing. After `wait` has handed out an event of an exclusive descriptor, call
//! [`Waiter::consumed`] as soon as the read or accept is done; the next `wait` does it for you
//! otherwise (and counts it, `MemberStats::unconsumed`). That is the moment the waiter goes to
//! the back of the line and the group watches the descriptor again.
//!
//! A waiter in another event loop ([`Waiter::nest`]) lends its backend half to a thread of its
//! own (`crate::nest`), which does the kernel wait; the calls below then go through that nest.

use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::time::Duration;

use crate::contract::Backend;
use crate::emulated::{EmulatedNotifier, EmulatedWaiter};
use crate::error::{Error, Result};
use crate::inner::GroupInner;
use crate::interest::{Events, Interest};
use crate::members::Membership;
#[cfg(all(unix, not(loom)))]
use crate::nest::{self, Nest};
use crate::source::{check_nonblocking, raw_of, AsSource};
use crate::stats::MemberStats;
use crate::sys::native::{NativeNotifier, NativeWaiter};

/// The backend-specific half of a waiter.
// The native waiter inline, on purpose: its every wait and `consumed` reach it without a
// pointer to follow (a waiter is made once per member, so its size costs nothing that
// matters). Outside Linux the native waiter is uninhabited.
#[allow(clippy::large_enum_variant)]
enum Engine {
    Native(NativeWaiter),
    /// Boxed: the emulated half carries its registrations, queues and buffers.
    Emulated(Box<EmulatedWaiter>),
}

/// The backend half with what its calls need: what a nested waiter's thread waits with.
struct Core {
    group: Arc<GroupInner>,
    /// This member's occupancy of its slot, which its state changes are made against.
    membership: Membership,
    engine: Engine,
}

/// Where a waiter's backend half is, and who waits with it.
// The half inline, as in `Engine`: every wait reaches it without a pointer to follow.
#[allow(clippy::large_enum_variant)]
enum Seat {
    /// With the waiter: the caller's thread waits in it.
    Here(Core),
    /// Lent to a thread of its own, which waits for another event loop (`crate::nest`); the
    /// half's notifier kept beside it, to be had without the half.
    #[cfg(all(unix, not(loom)))]
    Nested {
        nest: Nest<Core>,
        notifier: NotifierInner,
    },
    /// Only inside [`Waiter::nest`], between the two (never, where `nest` is unsupported).
    #[cfg_attr(not(all(unix, not(loom))), allow(dead_code))]
    Moving,
}

/// One member of a [`Group`](crate::Group): registers descriptors and waits for their events.
///
/// The loop every member runs: [`wait`](Self::wait), read or accept once per event, then
/// [`consumed`](Self::consumed) at once, then the work. Shared descriptors must be
/// non-blocking: a wake-up can find nothing. Threads and forked workers, with a clean stop:
/// `examples/forked_workers.rs`.
///
/// ```
/// # #[cfg(unix)] {
/// use herdless::{Backend, Events, Group, Interest};
/// use std::io::Write;
/// use std::os::unix::net::UnixStream;
/// use std::time::Duration;
///
/// let group = Group::builder().backend(Backend::Emulated).build()?;
/// let mut waiter = group.join()?;
/// let (mut tx, rx) = UnixStream::pair()?;
/// rx.set_nonblocking(true)?; // shared: a wake-up may find nothing
/// waiter.add(&rx, 7, Interest::SHARED)?;
/// tx.write_all(b"x")?;
/// let mut events = Events::with_capacity(8);
/// waiter.wait(&mut events, Some(Duration::from_secs(5)))?;
/// assert_eq!(events.iter().next().map(|e| e.key), Some(7));
/// waiter.consumed(7)?; // after the read, before the work
/// waiter.delete(&rx)?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Waiter {
    group: Arc<GroupInner>,
    member: u32,
    pid: u32,
    /// This member's occupancy of its slot, which its state changes are made against.
    membership: Membership,
    /// Dropped by hand: a copy inherited across `fork` must not run the destructors, which
    /// would change kernel objects the parent still uses (a shared epoll instance).
    seat: ManuallyDrop<Seat>,
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter")
            .field("member", &self.member)
            .field("pid", &self.pid)
            .field("backend", &self.group.backend)
            .finish()
    }
}

impl Waiter {
    pub(crate) fn join(group: Arc<GroupInner>) -> Result<Waiter> {
        let pid = std::process::id();
        group.shared.check(group.name.as_deref())?;
        // JOINING: the slot is ours, with our liveness lock and pid in place, but it does not
        // count as joined (nor can it be reaped) until it is published. A full group may hold
        // slots of members that died unnoticed (no member was watching their process): those
        // are cleared out, and the join tried once more.
        let claim = match group.members().claim(pid) {
            Err(Error::GroupFull { .. }) => {
                group.reap_dead(None);
                group.members().claim(pid)?
            }
            claim => claim?,
        };
        let membership = claim.membership();
        let member = membership.member;
        let engine = match group.backend {
            Backend::Emulated => EmulatedWaiter::new(&group.protocol(), membership)
                .map(|e| Engine::Emulated(Box::new(e))),
            _ => NativeWaiter::new(
                group.shared.clone(),
                group.rotation,
                group
                    .native_bells
                    .clone()
                    .expect("a native waiter belongs to a native group"),
                member,
                membership.generation(),
            )
            .map(Engine::Native),
        };
        let engine = match engine {
            Ok(engine) => engine,
            Err(e) => {
                group.members().abandon(claim);
                return Err(e);
            }
        };
        group.members().publish(claim)?;
        let core = Core {
            group: group.clone(),
            membership,
            engine,
        };
        Ok(Waiter {
            group,
            member,
            pid,
            membership,
            seat: ManuallyDrop::new(Seat::Here(core)),
        })
    }

    /// This member's slot in the group, as in [`MemberStats::member`](crate::MemberStats).
    /// Example: see [`Group::stats`](crate::Group::stats).
    pub fn member(&self) -> usize {
        self.member as usize
    }

    /// Registers `source` (borrowed: it stays the caller's, and open) under `key`, for
    /// `interest` ([`Interest::SHARED`] for a descriptor the group shares).
    ///
    /// **The key** is the caller's own data, as epoll's `data` and polling's key: any value,
    /// none reserved, and several registrations may share one. Each [`Event`](crate::Event)
    /// carries its registration's key; [`consumed`](Self::consumed) with a key consumes every
    /// outstanding event that carries it.
    ///
    /// **The descriptor** stays registered until [`delete`](Self::delete). Closing a
    /// registered descriptor, or reusing its number for another file (an `open`, a `dup2` over
    /// it), is tolerated, also while the file stays open in other processes (a forked member's
    /// copy): the registration is of the file, so the waiter forgets it at the next `wait` or
    /// `delete`, never reports an event of it again, and stops taking the group's wake-ups for
    /// it; an `add` of the reused number registers the new file. One open file is registered
    /// once per waiter when either registration is exclusive: a duplicate (`dup`) of a
    /// registered descriptor is refused, naming the number it duplicates, on both backends;
    /// two descriptors of one open file registered without `exclusive` are two registrations,
    /// each with its events, as epoll has them.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInterest`], [`Error::AlreadyRegistered`] (the number, or another
    /// descriptor of the same open file, is registered already), [`Error::BadDescriptor`]
    /// (closed or never opened), [`Error::UnwatchableDescriptor`] (a regular file or
    /// directory), [`Error::BlockingDescriptor`] (an `exclusive` registration of a descriptor
    /// without `O_NONBLOCK`: set it non-blocking first), [`Error::TooManySources`],
    /// [`Error::ForkedWaiter`], [`Error::GroupRemoved`] (a named group removed by force: drop
    /// the waiter and open the group again). Nothing changes on error.
    ///
    /// **Blocking descriptors.** A shared descriptor must be non-blocking: a wake-up can find
    /// nothing (another member read the message first), and a blocking read would then hang.
    /// An `exclusive` registration, the one that says the descriptor is shared, checks it
    /// (one `fcntl(F_GETFL)`; pipes, sockets and message queues alike) and refuses a blocking
    /// one. A registration without `exclusive` (`one_event_round_robin` alone included) is not
    /// checked: it may be the member's own descriptor, which a wake-up never finds empty; one
    /// shared without `exclusive` wakes every member, so it must be non-blocking all the same.
    /// On Windows a socket's blocking mode cannot be read back, so it is not checked: call
    /// `set_nonblocking(true)` yourself.
    ///
    /// Example: see [`Waiter`]; on a pipe, the crate's front page.
    pub fn add<S: AsSource + ?Sized>(
        &mut self,
        source: &S,
        key: usize,
        interest: Interest,
    ) -> Result<()> {
        self.check_process()?;
        interest.validate()?;
        let raw = raw_of(source);
        check_nonblocking(raw, interest)?;
        self.on_core(|core| core.add(raw, key, interest))
    }

    /// Changes the key or interest of a registered `source` (borrowed, as by
    /// [`add`](Self::add)). An exclusive registration is changed by delete and re-add, so the
    /// kernel's refusal of `EPOLL_CTL_MOD` never reaches the caller.
    ///
    /// # Errors
    ///
    /// As [`add`](Self::add) (a change to `exclusive` of a blocking descriptor is refused with
    /// [`Error::BlockingDescriptor`], the registration left as it was), with
    /// [`Error::NotRegistered`] for an fd never added.
    ///
    /// ```
    /// # #[cfg(unix)] {
    /// use herdless::{Group, Interest};
    /// let group = Group::new()?;
    /// let mut waiter = group.join()?;
    /// let (a, _b) = std::os::unix::net::UnixStream::pair()?;
    /// a.set_nonblocking(true)?; // exclusive below: a wake-up may find nothing
    /// waiter.add(&a, 1, Interest::READABLE)?;
    /// waiter.modify(&a, 2, Interest::READABLE.exclusive())?; // new key, now exclusive
    /// waiter.delete(&a)?;
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn modify<S: AsSource + ?Sized>(
        &mut self,
        source: &S,
        key: usize,
        interest: Interest,
    ) -> Result<()> {
        self.check_process()?;
        interest.validate()?;
        let raw = raw_of(source);
        check_nonblocking(raw, interest)?;
        self.on_core(|core| core.modify(raw, key, interest))
    }

    /// Stops watching `source` (borrowed). A registered number closed (or reused) since it was
    /// added is forgotten all the same: `delete` after `close` succeeds.
    ///
    /// # Errors
    ///
    /// [`Error::NotRegistered`] for an fd never added (or forgotten already),
    /// [`Error::ForkedWaiter`].
    ///
    /// Example: see [`modify`](Self::modify).
    pub fn delete<S: AsSource + ?Sized>(&mut self, source: &S) -> Result<()> {
        self.check_process()?;
        let raw = raw_of(source);
        self.on_core(|core| core.delete(raw))
    }

    /// Waits for events, at most `events.capacity()` of them (one if any registration asked for
    /// `one_event_round_robin`), or until `timeout` passes, or until a [`Notifier`] wakes it.
    /// Returns how many events were put into `events` (0 on timeout or notification).
    ///
    /// **Signals.** A signal whose handler runs while the waiter sleeps ends the wait early,
    /// with 0 events and [`Events::interrupted`] true (not an error), as `poll(2)` does with
    /// `EINTR` whether or not the handler has `SA_RESTART`: a server's SIGTERM or SIGCHLD
    /// handler sets a flag, and the loop sees it at once rather than a timeout later. The
    /// timeout is a deadline: a loop that waits again after an interruption should pass the
    /// time left, and the group's own timers (the emulation's liveness and hold checks) are
    /// deadlines too, so a stream of signals delays none of them. (Where the emulation waits
    /// through `polling`, outside Linux, a signal does not end the wait early; the timeout
    /// still holds.)
    ///
    /// **Busy polling.** `wait(Some(Duration::ZERO))` looks once and returns. Under the
    /// emulation such a look takes no token and disturbs no holder: it takes an exclusive
    /// descriptor's event only if no member is waiting for it.
    ///
    /// Coming back to `wait` also tells the group that the events handed out by the previous
    /// `wait` have been consumed (see [`consumed`](Self::consumed)).
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCapacity`], [`Error::ForkedWaiter`], [`Error::GroupRemoved`] (a named
    /// group removed by force, [`Group::remove_forced`](crate::Group::remove_forced): drop the
    /// waiter and the group and open the group again; checked when `wait` is called, so a
    /// member asleep in `wait` at the removal hears of it at its next call), or [`Error::Io`]
    /// if the kernel wait fails.
    ///
    /// Example: see [`Waiter`].
    pub fn wait(&mut self, events: &mut Events, timeout: Option<Duration>) -> Result<usize> {
        self.check_process()?;
        if events.capacity() == 0 {
            return Err(Error::ZeroCapacity);
        }
        events.clear();
        match &mut *self.seat {
            Seat::Here(core) => core.wait(events, timeout),
            #[cfg(all(unix, not(loom)))]
            Seat::Nested { nest, .. } => {
                let n = nest.wait(events, timeout);
                self.told(n)
            }
            Seat::Moving => unreachable!("{MOVING}"),
        }
    }

    /// Says that the readiness of the event with `key` has been consumed (the message read, the
    /// connection accepted). Every outstanding event with that key is consumed (keys need not
    /// be unique: one shared by several registrations consumes them all); a key with no event
    /// outstanding is ignored.
    ///
    /// **When.** Once per event of an exclusive descriptor that [`wait`](Self::wait) handed
    /// out: right after the read or accept, whether it got something or found nothing
    /// (`WouldBlock`, an empty wake-up), and before handling the request. Then this waiter
    /// goes to the back of the line (native: delete and re-add) and the group watches the
    /// descriptor again (emulated: the next token holder re-arms it). Not earlier: a descriptor
    /// watched again before the message was read would wake a second member for it.
    ///
    /// **If you leave it out**, the next `wait` does it for you, so nothing is lost; but until
    /// then, on the native backend this waiter stays first in line (turns are skewed towards
    /// it), and under the emulation no other member is handed that descriptor's events (the
    /// group waits for this member's long work). Each event the next `wait` had to consume is
    /// counted in [`MemberStats::unconsumed`]: a count that grows says a `consumed` is
    /// missing.
    ///
    /// ```
    /// # #[cfg(unix)] {
    /// use herdless::{Events, Group, Interest};
    /// use std::io::{ErrorKind, Read, Write};
    /// use std::os::unix::net::UnixStream;
    /// use std::time::Duration;
    ///
    /// let group = Group::new()?;
    /// let mut waiter = group.join()?;
    /// let (mut tx, mut rx) = UnixStream::pair()?;
    /// rx.set_nonblocking(true)?; // a wake-up may find nothing
    /// waiter.add(&rx, 0, Interest::SHARED)?;
    /// tx.write_all(b"job")?;
    /// let mut events = Events::default();
    /// waiter.wait(&mut events, Some(Duration::from_secs(5)))?;
    /// for event in events.iter() {
    ///     let mut buf = [0; 64];
    ///     let read = rx.read(&mut buf);
    ///     waiter.consumed(event.key)?; // before the work, also after WouldBlock
    ///     match read {
    ///         Ok(n) => assert_eq!(&buf[..n], b"job"), // the work
    ///         Err(e) if e.kind() == ErrorKind::WouldBlock => {}
    ///         Err(e) => return Err(e.into()),
    ///     }
    /// }
    /// waiter.wait(&mut events, Some(Duration::ZERO))?;
    /// assert_eq!(waiter.stats().unconsumed, 0); // every event was consumed in time
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::ForkedWaiter`], or [`Error::Io`] if re-registering fails.
    pub fn consumed(&mut self, key: usize) -> Result<()> {
        self.check_process()?;
        let done = match &mut *self.seat {
            Seat::Here(core) => core.consumed(key),
            #[cfg(all(unix, not(loom)))]
            Seat::Nested { nest, .. } => nest.consumed(key, |core| core.consumed(key)),
            Seat::Moving => unreachable!("{MOVING}"),
        };
        self.told(done)
    }

    /// Says that the event with `key` that [`wait`](Self::wait) handed out found nothing: the
    /// read or accept said `WouldBlock` (`EAGAIN`), another member having taken the message
    /// first. It counts one empty wake-up for this member ([`MemberStats::empty_wakeups`],
    /// `herdless_stats` in C), so the group's figures show the wake-ups the application paid
    /// for and got nothing from, and then does all that [`consumed`](Self::consumed) does: call
    /// it *instead of* `consumed` for that event, not as well. Once per event that found
    /// nothing: it counts one, and consumes every outstanding event with `key`; a key with no
    /// event outstanding is counted and otherwise ignored.
    ///
    /// ```
    /// # #[cfg(unix)] {
    /// use herdless::{Events, Group, Interest};
    /// use std::io::{ErrorKind, Read, Write};
    /// use std::os::unix::net::UnixStream;
    /// use std::time::Duration;
    ///
    /// let group = Group::new()?;
    /// let mut waiter = group.join()?;
    /// let (mut tx, mut rx) = UnixStream::pair()?;
    /// rx.set_nonblocking(true)?;
    /// waiter.add(&rx, 0, Interest::READABLE.exclusive())?;
    /// tx.write_all(b"job")?;
    /// let mut events = Events::default();
    /// waiter.wait(&mut events, Some(Duration::from_secs(5)))?;
    /// let mut buf = [0; 64];
    /// let (mut read, mut empty) = (0, 0);
    /// for event in events.iter() {
    ///     match rx.read(&mut buf) {
    ///         Ok(n) => {
    ///             waiter.consumed(event.key)?;
    ///             read += n; // then the work
    ///         }
    ///         Err(e) if e.kind() == ErrorKind::WouldBlock => {
    ///             waiter.found_nothing(event.key)?; // instead of consumed
    ///             empty += 1;
    ///         }
    ///         Err(e) => return Err(e.into()),
    ///     }
    /// }
    /// assert_eq!((read, empty), (3, 0)); // alone in its group, a waiter never finds nothing
    /// assert_eq!(waiter.stats().empty_wakeups, empty);
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`consumed`](Self::consumed).
    pub fn found_nothing(&mut self, key: usize) -> Result<()> {
        self.check_process()?;
        self.group.shared.member(self.member).empty_wakeups.add(1);
        self.consumed(key)
    }

    /// This member's own counters, as [`Group::stats`](crate::Group::stats) reports them: what
    /// a member reads about itself without walking the group's slots.
    /// Example: see [`found_nothing`](Self::found_nothing).
    pub fn stats(&self) -> MemberStats {
        crate::stats::member_stats(&self.group, self.member, self.pid)
    }

    /// A handle that wakes this waiter's `wait` from another thread: the wait returns 0
    /// events. Works on both backends within the waiter's process. To stop workers in other
    /// processes (forked), whose notifiers their parent cannot get, register the read end of a
    /// pipe in every worker (without `exclusive`) and close the write end: the hang-up wakes
    /// them all, on both backends (`examples/forked_workers.rs`). A signal handler that runs
    /// while the waiter sleeps ends its `wait` too (see [`wait`](Self::wait)).
    ///
    /// ```
    /// use herdless::{Events, Group};
    /// use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    ///
    /// let group = Group::new()?;
    /// let mut waiter = group.join()?;
    /// let notifier = waiter.notifier();
    /// let stop = AtomicBool::new(false);
    /// std::thread::scope(|s| {
    ///     let worker = s.spawn(|| {
    ///         let mut events = Events::default();
    ///         while !stop.load(SeqCst) {
    ///             waiter.wait(&mut events, None)?; // returns 0 events when notified
    ///         }
    ///         Ok::<(), herdless::Error>(())
    ///     });
    ///     stop.store(true, SeqCst); // set the flag first, then wake
    ///     notifier.notify()?;
    ///     worker.join().unwrap()
    /// })?;
    /// # Ok::<(), herdless::Error>(())
    /// ```
    pub fn notifier(&self) -> Notifier {
        let inner = match &*self.seat {
            Seat::Here(core) => core.notifier(),
            #[cfg(all(unix, not(loom)))]
            Seat::Nested { notifier, .. } => notifier.clone(),
            Seat::Moving => unreachable!("{MOVING}"),
        };
        self.notifier_with(inner)
    }

    fn notifier_with(&self, inner: NotifierInner) -> Notifier {
        Notifier {
            group: self.group.clone(),
            member: self.membership.member,
            generation: self.membership.generation(),
            inner,
        }
    }

    /// Puts this waiter in another event loop (libevent, libuv, a middleware's own epoll or
    /// `poll` loop, Tokio): from now on a thread of its own does its kernel wait, and its
    /// descriptor ([`AsFd`](std::os::fd::AsFd)) is readable while the waiter has an event to
    /// take. Register the descriptor in the loop for reading (level- or edge-triggered); when
    /// it fires, call [`wait`](Self::wait) with a zero timeout until it returns 0, with the
    /// usual read and [`consumed`](Self::consumed) after each event. The group's promises
    /// hold as for a waiter that calls `wait` itself: an exclusive event wakes one member's
    /// loop (the loop's own epoll must not watch the shared descriptor, nor the waiter's
    /// epoll: nested there, an `EPOLLEXCLUSIVE` wake-up wakes every member; `docs/c.md`), and
    /// the member is in line only while its thread waits, that is from the moment every event
    /// handed out was consumed (or a `wait` found nothing left) until its next event. An event
    /// that comes before the thread is back in its wait goes to another member; natively this
    /// member may then also wake for it once and find nothing (an empty wake-up: call
    /// [`found_nothing`](Self::found_nothing)), as a member busy outside `wait` may.
    ///
    /// **The descriptor** is the read end of a pipe, close-on-exec, the waiter's own: watch it
    /// for reading, never read, write or close it (dropping the waiter closes it, after its
    /// thread ended). A loop that closed it all the same closed only its copy: the waiter goes
    /// on, `nest` again gives a new descriptor, and the number closed is never closed or
    /// written to again by herdless, whatever file it names by then. In a forked child the
    /// waiter is the parent's ([`Error::ForkedWaiter`] from every call, as for any waiter),
    /// and so is its descriptor: the child joins the group itself.
    ///
    /// **What changes.** `wait` takes what the thread's wait returned: with a zero timeout it
    /// never sleeps, with another timeout it sleeps until the descriptor is readable (a signal
    /// handler ends it early, as `poll(2)`). [`add`](Self::add), [`modify`](Self::modify) and
    /// [`delete`](Self::delete) stop the thread's wait while they change the registrations,
    /// after which the descriptor is readable once with nothing to take (a notification sent
    /// meanwhile is never lost). A [`Notifier`] makes the descriptor readable, and the next
    /// `wait` returns 0. Calling `nest` again changes nothing (but for a descriptor that was
    /// closed). Cost: one thread, three descriptors, and, per event, the thread's two sleeps
    /// beside the loop's wake-up (`docs/lab.md`, nested loops).
    ///
    /// ```
    /// # #[cfg(target_os = "linux")] {
    /// use herdless::{Events, Group, Interest};
    /// use std::io::{Read, Write};
    /// use std::os::fd::AsRawFd;
    /// use std::os::unix::net::UnixStream;
    /// use std::time::Duration;
    ///
    /// let group = Group::new()?;
    /// let mut waiter = group.join()?;
    /// let (mut tx, mut rx) = UnixStream::pair()?;
    /// rx.set_nonblocking(true)?;
    /// waiter.add(&rx, 7, Interest::SHARED)?;
    /// waiter.nest()?;
    /// // The loop: here poll(2) on the waiter's descriptor, as any event loop would watch it.
    /// tx.write_all(b"job")?;
    /// let mut pfd = libc::pollfd { fd: waiter.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    /// // SAFETY: one live pollfd.
    /// assert_eq!(unsafe { libc::poll(&mut pfd, 1, 5000) }, 1); // it fired
    /// let mut events = Events::with_capacity(1);
    /// while waiter.wait(&mut events, Some(Duration::ZERO))? > 0 {
    ///     for event in events.iter() {
    ///         let mut buf = [0; 8];
    ///         assert_eq!(rx.read(&mut buf)?, 3);
    ///         waiter.consumed(event.key)?; // the thread waits again
    ///     }
    /// }
    /// // SAFETY: as above.
    /// assert_eq!(unsafe { libc::poll(&mut pfd, 1, 0) }, 0); // nothing more to take
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the descriptor cannot be made (no descriptor left) or the thread
    /// cannot be started (the waiter is then as it was), [`Error::ForkedWaiter`],
    /// [`Error::GroupRemoved`], and outside Unix [`Error::Unsupported`] (no descriptor to
    /// give: on Windows, run the waiter in a thread of its own and hand its events over, as
    /// `herdless::tokio::Acceptor` does).
    #[cfg(all(unix, not(loom)))]
    pub fn nest(&mut self) -> Result<()> {
        self.check_process()?;
        if let Seat::Nested { nest, .. } = &mut *self.seat {
            return nest.refresh();
        }
        let Seat::Here(core) = std::mem::replace(&mut *self.seat, Seat::Moving) else {
            unreachable!("{MOVING}");
        };
        let notifier = core.notifier();
        let waker = self.notifier_with(notifier.clone());
        let wake: nest::Wake = Box::new(move || waker.notify());
        match Nest::start(core, wake, Events::DEFAULT_CAPACITY) {
            Ok(nest) => {
                *self.seat = Seat::Nested { nest, notifier };
                Ok(())
            }
            Err((core, e)) => {
                *self.seat = Seat::Here(core);
                Err(e)
            }
        }
    }

    /// Puts this waiter in another event loop: not on this system (see the Unix version).
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`], always.
    #[cfg(not(all(unix, not(loom))))]
    pub fn nest(&mut self) -> Result<()> {
        self.check_process()?;
        Err(Error::Unsupported {
            what: "a waiter's descriptor for another event loop (Waiter::nest)",
            reason: "a waiter gives a descriptor on Unix only; here run the waiter in a thread \
                     of its own and hand its events to the loop (as herdless::tokio::Acceptor \
                     does)",
        })
    }

    /// Is this waiter in another event loop ([`nest`](Self::nest))?
    ///
    /// ```
    /// let group = herdless::Group::new()?;
    /// let waiter = group.join()?;
    /// assert!(!waiter.is_nested());
    /// # Ok::<(), herdless::Error>(())
    /// ```
    pub fn is_nested(&self) -> bool {
        !matches!(*self.seat, Seat::Here(_))
    }

    /// Runs `f` on the backend half, wherever it is (a nested waiter's thread is stopped for
    /// it), and tells its outcome.
    fn on_core<R>(&mut self, f: impl FnOnce(&mut Core) -> Result<R>) -> Result<R> {
        let done = match &mut *self.seat {
            Seat::Here(core) => f(core),
            #[cfg(all(unix, not(loom)))]
            Seat::Nested { nest, .. } => nest.lend(f),
            Seat::Moving => unreachable!("{MOVING}"),
        };
        self.told(done)
    }

    /// A call's outcome as the caller is told it (see [`told`]).
    fn told<T>(&self, outcome: Result<T>) -> Result<T> {
        told(&self.group, outcome)
    }

    /// What every call checks first: the waiter is used in the process that joined, and the
    /// group's shared memory is still a group's (a named group's can be overwritten by another
    /// process: then `CorruptGroup`, never a panic).
    fn check_process(&self) -> Result<()> {
        let current_pid = crate::pid::current();
        if current_pid != self.pid {
            return Err(Error::ForkedWaiter {
                joined_pid: self.pid,
                current_pid,
            });
        }
        self.group.shared.check(self.group.name.as_deref())
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            // A copy inherited across fork: the member is the parent's; leave it alone, and
            // leak the engine rather than let it touch the parent's kernel objects (a nested
            // waiter's thread is the parent's: there is none here).
            return;
        }
        // Taken once, here; what is left in its place holds nothing.
        let seat = std::mem::replace(&mut *self.seat, Seat::Moving);
        // A nested waiter's thread ends first: the member is out of its wait when it leaves.
        let mut core = match seat {
            Seat::Here(core) => core,
            #[cfg(all(unix, not(loom)))]
            Seat::Nested { nest, .. } => nest.stop(),
            Seat::Moving => return,
        };
        // LEAVING: no reaper touches the slot while this member hands on what it holds.
        let members = self.group.members();
        let ours = members.begin_leave(&self.membership);
        if let Engine::Emulated(e) = &mut core.engine {
            e.leave(&self.group.protocol());
        }
        drop(core);
        // LEFT, and only then is the liveness lock dropped: from here on another member may
        // join into this slot.
        if ours {
            members.finish_leave(&self.membership);
        }
    }
}

/// What a seat's match says when it finds the seat between its two homes.
const MOVING: &str = "a waiter's backend half is moving only inside Waiter::nest";

/// A call's outcome as the caller is told it: an error met while the group's shared memory was
/// being damaged under the call is that damage (`CorruptGroup`), whatever the step that failed
/// on it.
fn told<T>(group: &GroupInner, outcome: Result<T>) -> Result<T> {
    match outcome {
        Err(e) => Err(group.shared.check(group.name.as_deref()).err().unwrap_or(e)),
        ok => ok,
    }
}

impl Core {
    fn add(&mut self, raw: crate::error::RawSource, key: usize, interest: Interest) -> Result<()> {
        match &mut self.engine {
            Engine::Native(n) => n.add(raw, key, interest),
            Engine::Emulated(e) => e.add(&self.group.protocol(), raw, key, interest),
        }
    }

    fn modify(
        &mut self,
        raw: crate::error::RawSource,
        key: usize,
        interest: Interest,
    ) -> Result<()> {
        match &mut self.engine {
            Engine::Native(n) => n.modify(raw, key, interest),
            Engine::Emulated(e) => e.modify(&self.group.protocol(), raw, key, interest),
        }
    }

    fn delete(&mut self, raw: crate::error::RawSource) -> Result<()> {
        match &mut self.engine {
            Engine::Native(n) => n.delete(raw),
            Engine::Emulated(e) => e.delete(&self.group.protocol(), raw),
        }
    }

    fn consumed(&mut self, key: usize) -> Result<()> {
        match &mut self.engine {
            Engine::Native(n) => n.consumed(key),
            Engine::Emulated(e) => e.consumed(&self.group.protocol(), key),
        }
    }

    /// The backend's wait, into a cleared `events`; the events handed out are counted in the
    /// member's slot.
    fn wait(&mut self, events: &mut Events, timeout: Option<Duration>) -> Result<usize> {
        let group = &self.group;
        let slot = group.shared.member(self.membership.member);
        let n = match &mut self.engine {
            Engine::Native(n) => {
                // IDLE while inside `wait`: whom a member handing readiness on may ring.
                let members = group.members();
                if !members.go_idle(&self.membership) {
                    return told(group, Err(crate::members::lost_slot(&group.shared)));
                }
                let n = n.wait(slot, events, timeout, &|pid| group.reap_dead(pid));
                if !members.go_busy(&self.membership) {
                    return told(group, Err(crate::members::lost_slot(&group.shared)));
                }
                n
            }
            Engine::Emulated(e) => e.wait(&group.protocol(), events, timeout),
        };
        let n = told(group, n)?;
        slot.events.add(n as u64);
        Ok(n)
    }

    // Where there is no native backend its arm cannot run; the compiler says so.
    #[cfg_attr(
        any(not(any(target_os = "linux", target_os = "android")), loom),
        allow(unreachable_code)
    )]
    fn notifier(&self) -> NotifierInner {
        let membership = self.membership;
        match &self.engine {
            Engine::Native(n) => NotifierInner::Native(n.notifier()),
            Engine::Emulated(_) => NotifierInner::Emulated(EmulatedNotifier::new(
                membership.member,
                membership.generation(),
            )),
        }
    }
}

/// What a nested waiter's thread does: the backend's wait, with no timeout.
#[cfg(all(unix, not(loom)))]
impl nest::Sleeper for Core {
    fn sleep(&mut self, events: &mut Events) -> Result<usize> {
        events.clear();
        self.wait(events, None)
    }
}

/// The descriptor of a nested waiter ([`Waiter::nest`]): readable while it has an event to
/// take. Example: see [`Waiter::nest`].
///
/// # Panics
///
/// If the waiter is not nested: call [`Waiter::nest`] first (which can fail, and says why).
#[cfg(all(unix, not(loom)))]
impl std::os::fd::AsFd for Waiter {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match &*self.seat {
            Seat::Nested { nest, .. } => nest.fd(),
            _ => panic!(
                "Waiter::as_fd on a waiter that is not nested: call Waiter::nest() first (it \
                 makes the descriptor and starts the thread that does the waiter's kernel wait)"
            ),
        }
    }
}

/// As [`AsFd`](std::os::fd::AsFd) (what `tokio::io::unix::AsyncFd` takes).
///
/// # Panics
///
/// As `AsFd`: if the waiter is not nested.
#[cfg(all(unix, not(loom)))]
impl std::os::fd::AsRawFd for Waiter {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd;
        self.as_fd().as_raw_fd()
    }
}

#[derive(Clone)]
enum NotifierInner {
    /// The waiter's own eventfd: nobody else's.
    Native(NativeNotifier),
    /// The slot's mark and door bell, for the occupant the notifier was made for.
    Emulated(EmulatedNotifier),
}

/// Wakes one waiter's `wait`, which then returns 0 events. Cheap to clone; `Send + Sync`.
/// A notification sent while the waiter is not waiting wakes its next `wait`.
///
/// A notifier wakes the member it was made for, and only that one: once that member has left
/// the group, `notify` wakes nobody (not the next member that joins into the same slot) and
/// returns `Ok`, so a shutdown that notifies every worker goes on past one that ended already.
#[derive(Clone)]
pub struct Notifier {
    /// The group is kept alive by the notifier: it may outlive the waiter.
    group: Arc<GroupInner>,
    member: u32,
    /// The generation of the member it was made for, in its slot.
    generation: u32,
    inner: NotifierInner,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("member", &self.member)
            .finish()
    }
}

impl Notifier {
    /// Wakes the waiter. Example: see [`Waiter::notifier`].
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the wake-up cannot be written. A waiter that has left the group (it
    /// was dropped) is not an error: there is nobody to wake, and nobody is woken.
    pub fn notify(&self) -> Result<()> {
        match &self.inner {
            NotifierInner::Native(n) => {
                // The eventfd is the waiter's own, so a late write would wake nobody else; a
                // member that left is simply not written to.
                if !self
                    .group
                    .shared
                    .member(self.member)
                    .is_joined_as(self.generation)
                {
                    return Ok(());
                }
                n.notify()
            }
            NotifierInner::Emulated(e) => e.notify(&self.group.protocol()),
        }
    }
}

#[cfg(all(test, unix, not(loom)))]
mod tests {
    use super::*;
    use crate::{Backend, Group};
    use std::sync::atomic::Ordering::SeqCst;
    use std::time::Instant;

    /// The interleaving a notifier of a member that leaves can still take, forced: it saw its
    /// member joined, the member left and another joined into the slot, and only then did the
    /// notifier store its mark and ring. The mark names the old occupant and the ring goes to
    /// the old occupant's bell, so the new member sleeps to its deadline, never woken. (A mark
    /// of 1 and a ring by the slot's current generation would wake it: a race of a few
    /// nanoseconds that a test of threads does not hit, hence this test.)
    #[test]
    fn a_late_mark_and_ring_for_a_left_member_wake_nobody() {
        let group = Group::builder()
            .backend(Backend::Emulated)
            .max_members(1)
            .build()
            .unwrap();
        let old = group.join().unwrap();
        let (member, generation) = (old.member, old.membership.generation());
        let notifier = old.notifier();
        drop(old);
        let mut new = group.join().unwrap();
        assert_eq!(new.member, member, "the slot is reused");
        assert_ne!(new.membership.generation(), generation);
        let slot = group.inner.shared.member(member);
        slot.notified
            .store(crate::members::notified_tag(generation), SeqCst);
        group.inner.protocol().bells.ring(member, generation);
        let mut events = Events::with_capacity(1);
        let timeout = Duration::from_millis(20);
        let start = Instant::now();
        assert_eq!(new.wait(&mut events, Some(timeout)).unwrap(), 0);
        assert!(start.elapsed() >= timeout, "woken before its deadline");
        assert_eq!(slot.wakeups.get(), 0, "the ring reached the new member");
        // And the notifier itself, now: nobody to wake, nobody marked.
        notifier.notify().unwrap();
        assert!(!slot.is_notified(new.membership.generation()));
    }
}
