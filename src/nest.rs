//! A waiter in another event loop (libevent, libuv, a middleware's own epoll or poll loop,
//! Tokio): a descriptor that is readable while the waiter has an event to take, and a thread of
//! the waiter's own that does its kernel wait.
//!
//! Why a thread, and not the waiter's epoll nested in the loop's: in Linux's `fs/eventpoll.c`
//! an `EPOLLEXCLUSIVE` wake-up walks the shared descriptor's wait queue and stops at the first
//! exclusive entry whose epoll has a thread asleep in `epoll_wait` *on that very epoll*
//! (`ep_poll_callback` returns `ewake` only under `wq_has_sleeper(&ep->wq)`). A nested epoll
//! has nobody there (the loop sleeps in its own epoll, reached through `ep->poll_wait`), so the
//! walk goes on and every nested member's loop is woken: the herd, with the flag set. The
//! emulation's exclusivity is in user space, but its wait is a protocol (taking the token,
//! claiming, passing it on, timers for holds and liveness) that runs only while a member waits.
//! So the wait stays where each backend keeps its promise: a thread of the waiter's own sleeps
//! in the waiter's own `wait` (native: `epoll_wait` on its epoll; emulated: the token protocol),
//! as the member's sleeper. When that wait returns, the thread hands its events over (`Held`),
//! makes the loop's descriptor readable and parks; the loop takes them with a wait of zero
//! timeout, reads, and says `consumed`; once every event handed over is consumed (or at the
//! loop's next wait, which finds nothing left) the thread waits again (`Armed`). The member is
//! in line only while its thread waits, as a member that calls `wait` itself: the kernel (or the
//! token) skips it while its loop handles an event. The cost: the thread's two sleeps per event
//! (in the wait, then parked until the loop consumed) on top of the loop's own wake-up
//! (`docs/lab.md`, nested loops).
//!
//! A call that needs the backend half while the thread waits (add, modify, delete) stops that
//! wait with the waiter's notifier, takes the half (`Paused`) and lets the thread wait again
//! after it; a notification of the caller's that came meanwhile may have been merged into the
//! one that stopped the wait, so the descriptor is made readable once then (a wake-up with
//! nothing to take, never a lost notification).
//!
//! The descriptor is the read end of a pipe, close-on-exec and non-blocking, readable while it
//! holds one byte. The loop gets a copy of its own (`given`); herdless keeps another copy of the
//! read end (to drain it) and the write end, so a loop that closes its number by mistake closes
//! nothing herdless uses, and herdless never reads, writes or closes a number that no longer
//! names its pipe (checked by the pipe's device and inode).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::interest::{Event, Events};
use crate::registry::{self, FileId};

/// What the thread waits with: the backend half of a waiter, with what its wait needs.
pub(crate) trait Sleeper: Send + 'static {
    /// The backend's own wait, with no timeout: returns when it has events, or 0 when a
    /// notification ended it.
    fn sleep(&mut self, events: &mut Events) -> Result<usize>;
}

/// What wakes the thread's wait from another thread (the waiter's notifier).
pub(crate) type Wake = Box<dyn Fn() -> Result<()> + Send + Sync>;

/// Where the handshake between the loop and the thread stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The thread is in the backend's wait, or on its way there: the backend half is its.
    Armed,
    /// The thread's wait returned; its events (`State::batch`) are the loop's, the descriptor
    /// is readable, and the thread is parked until the loop has consumed them.
    Held,
    /// A call of the loop's stopped the thread's wait to use the backend half; the thread is
    /// parked until the call is done.
    Paused,
}

/// The handshake's state, under `Shared::state`.
struct State {
    phase: Phase,
    /// A call of the loop's wants the backend half while the thread waits.
    pause: bool,
    /// The waiter is being dropped: the thread ends.
    stop: bool,
    /// `Held`: the events of the thread's wait not yet handed to the loop.
    batch: VecDeque<Event>,
    /// `Held`: no wait of the loop's has looked at this batch yet (an empty fresh batch is a
    /// notification: the loop's next wait returns 0 for it).
    fresh: bool,
    /// `Held`: the thread's wait failed; the loop's next wait returns the error.
    error: Option<Error>,
    /// The keys of the events handed to the loop and not consumed yet.
    unconsumed: Vec<usize>,
    /// The capacity of the thread's next wait: the loop's last.
    capacity: usize,
    /// Is the byte in the pipe (the descriptor readable)?
    readable: bool,
}

/// What the loop's handle and the thread share.
struct Shared<S> {
    /// The backend half: the thread's while `Armed`, the loop's otherwise (lock order: `core`
    /// before `state`, never the other way round).
    core: Mutex<S>,
    state: Mutex<State>,
    /// Signalled at every change of `state` either side waits for.
    changed: Condvar,
    wake: Wake,
    /// herdless's own ends of the pipe: the write end (one byte: readable) and a copy of the
    /// read end (drained when the loop has taken what there was).
    write: File,
    read: File,
}

impl<S> Shared<S> {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn core(&self) -> MutexGuard<'_, S> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The descriptor becomes readable (one byte in the pipe, if there is none yet).
    fn set_readable(&self, st: &mut State) {
        if st.readable {
            return;
        }
        // The pipe holds at most this one byte, so the non-blocking write cannot find it full.
        st.readable = matches!((&self.write).write(&[1]), Ok(1));
    }

    /// The descriptor stops being readable (the pipe drained).
    fn clear_readable(&self, st: &mut State) {
        let mut buf = [0u8; 64];
        // Non-blocking: WouldBlock once the pipe is empty.
        while matches!((&self.read).read(&mut buf), Ok(n) if n > 0) {}
        st.readable = false;
    }

    /// The loop has taken what there was: the thread waits again, for `capacity` events. The
    /// descriptor stops being readable, unless `readable` (one wake-up with nothing to take).
    /// The state is unlocked before the thread is woken, so that it does not wake only to
    /// sleep again on the lock.
    fn rearm(&self, mut st: MutexGuard<'_, State>, capacity: usize, readable: bool) {
        st.phase = Phase::Armed;
        st.batch.clear();
        st.unconsumed.clear();
        st.error = None;
        st.capacity = capacity;
        self.clear_readable(&mut st);
        if readable {
            self.set_readable(&mut st);
        }
        drop(st);
        self.changed.notify_all();
    }

    /// The end of a registration change made while the thread was parked (`Held`): the
    /// events not handed out yet may name a descriptor no longer registered, so they are
    /// dropped (registrations are level-triggered: what is still ready, the next wait finds
    /// again), and, once nothing handed out is left unconsumed, the thread waits again. The
    /// descriptor stays readable once, as after a paused wait (see `resume`).
    fn forget_batch(&self) {
        let mut st = self.state();
        if st.phase != Phase::Held {
            return;
        }
        st.batch.clear();
        if st.unconsumed.is_empty() && st.error.is_none() {
            let capacity = st.capacity;
            self.rearm(st, capacity, true);
        }
    }

    /// The end of a call that paused the thread's wait: the thread waits again.
    fn resume(&self) {
        let mut st = self.state();
        st.pause = false;
        if st.phase == Phase::Paused {
            st.phase = Phase::Armed;
            // The wait this call stopped may have swallowed a notification of the caller's.
            self.set_readable(&mut st);
        }
        self.changed.notify_all();
    }
}

/// A nested waiter's loop side: the descriptor handed out, and the thread.
pub(crate) struct Nest<S: Sleeper> {
    shared: Arc<Shared<S>>,
    thread: Option<JoinHandle<()>>,
    /// The loop's copy of the read end (`AsFd`), and the pipe it must name to be herdless's.
    given: OwnedFd,
    file: FileId,
}

impl<S: Sleeper> Nest<S> {
    /// Starts the thread with `core`, its first wait for `capacity` events. On failure the
    /// core comes back with the error, unchanged.
    pub(crate) fn start(
        core: S,
        wake: Wake,
        capacity: usize,
    ) -> std::result::Result<Nest<S>, (S, Error)> {
        let made = pipe().and_then(|(read, write)| {
            // A close-on-exec copy (F_DUPFD_CLOEXEC).
            let given = read.try_clone()?;
            let file = registry::file_id(given.as_raw_fd())
                .ok_or_else(|| io::Error::other("the pipe's read end has no file"))?;
            Ok((read, write, given, file))
        });
        let (read, write, given, file) = match made {
            Ok(made) => made,
            Err(e) => return Err((core, Error::io("making the waiter's loop descriptor", e))),
        };
        let shared = Arc::new(Shared {
            core: Mutex::new(core),
            state: Mutex::new(State {
                phase: Phase::Armed,
                pause: false,
                stop: false,
                batch: VecDeque::new(),
                fresh: false,
                error: None,
                unconsumed: Vec::new(),
                capacity: capacity.max(1),
                readable: false,
            }),
            changed: Condvar::new(),
            wake,
            write: File::from(write),
            read: File::from(read),
        });
        let theirs = shared.clone();
        let spawned = with_signals_blocked(|| {
            std::thread::Builder::new()
                .name("herdless-nest".into())
                .spawn(move || run(&theirs))
        });
        match spawned {
            Ok(thread) => Ok(Nest {
                shared,
                thread: Some(thread),
                given,
                file,
            }),
            Err(e) => {
                // The failed spawn dropped the thread's reference with its closure.
                let core = Arc::into_inner(shared)
                    .map(|s| s.core.into_inner().unwrap_or_else(|e| e.into_inner()))
                    .expect("a thread that never started holds no reference");
                Err((core, Error::io("starting the waiter's loop thread", e)))
            }
        }
    }

    /// The descriptor the loop watches.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.given.as_fd()
    }

    /// Gives the loop a new copy of the read end if the number it was given no longer names
    /// herdless's pipe (the loop closed it); the old number is left alone.
    pub(crate) fn refresh(&mut self) -> Result<()> {
        if registry::still_names(self.given.as_raw_fd(), self.file) {
            return Ok(());
        }
        let fresh = self
            .shared
            .read
            .try_clone()
            .map(OwnedFd::from)
            .map_err(|e| Error::io("making the waiter's loop descriptor", e))?;
        // Not closed: the number is no longer herdless's (closed, or another file's now).
        let _ = std::mem::replace(&mut self.given, fresh).into_raw_fd();
        Ok(())
    }

    /// Runs `f` on the backend half: at once when the thread is parked, or after stopping the
    /// thread's wait (see the module docs), which waits again after `f`.
    pub(crate) fn lend<R>(&self, f: impl FnOnce(&mut S) -> Result<R>) -> Result<R> {
        let paused = {
            let mut st = self.shared.state();
            let armed = st.phase == Phase::Armed;
            st.pause |= armed;
            armed
        };
        if paused {
            if let Err(e) = (self.shared.wake)() {
                self.shared.resume();
                return Err(e);
            }
            // The thread's wait returns, for the notification (0 events: `Paused`) or with
            // events that came with it (`Held`); either way the notification is spent.
            let mut st = self.shared.state();
            while st.phase == Phase::Armed {
                st = self
                    .shared
                    .changed
                    .wait(st)
                    .unwrap_or_else(|e| e.into_inner());
            }
        }
        let done = f(&mut self.shared.core());
        if paused {
            self.shared.resume();
        }
        self.shared.forget_batch();
        done
    }

    /// The loop's wait: hands out what the thread's wait returned, at most `events`' room; or,
    /// once everything was handed out, lets the thread wait again and returns 0 (timeout zero),
    /// or sleeps until the descriptor is readable, up to `timeout`.
    pub(crate) fn wait(&self, events: &mut Events, timeout: Option<Duration>) -> Result<usize> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            {
                let mut st = self.shared.state();
                match st.phase {
                    Phase::Held => {
                        let fresh = std::mem::take(&mut st.fresh);
                        if let Some(e) = st.error.take() {
                            return Err(e);
                        }
                        if !st.batch.is_empty() {
                            while events.room() > 0 {
                                let Some(event) = st.batch.pop_front() else {
                                    break;
                                };
                                st.unconsumed.push(event.key);
                                events.push(event);
                            }
                            return Ok(events.len());
                        }
                        // Everything handed out counts as consumed: the thread waits again.
                        self.shared.rearm(st, events.capacity(), false);
                        if fresh {
                            return Ok(0); // a notification
                        }
                    }
                    Phase::Armed | Phase::Paused if st.readable => {
                        self.shared.clear_readable(&mut st);
                        return Ok(0); // a wake-up with nothing to take (see `resume`)
                    }
                    Phase::Armed | Phase::Paused => {}
                }
            }
            if timeout == Some(Duration::ZERO) {
                return Ok(0);
            }
            match wait_readable(&self.shared.read, deadline) {
                Ok(true) => {}
                Ok(false) => return Ok(0), // the deadline passed
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    events.set_interrupted();
                    return Ok(0);
                }
                Err(e) => return Err(Error::io("waiting for the waiter's loop descriptor", e)),
            }
        }
    }

    /// The loop consumed the events with `key` (`f` tells the backend half): once every event
    /// handed out is consumed, the thread waits again. While the thread waits already, its
    /// wait consumed them: nothing to do.
    pub(crate) fn consumed(&self, key: usize, f: impl FnOnce(&mut S) -> Result<()>) -> Result<()> {
        if self.shared.state().phase != Phase::Held {
            return Ok(());
        }
        // `Held`: the thread is parked, the backend half is free.
        let done = f(&mut self.shared.core());
        let mut st = self.shared.state();
        st.unconsumed.retain(|&k| k != key);
        let all = st.unconsumed.is_empty() && st.batch.is_empty() && !st.fresh;
        if st.phase == Phase::Held && all && st.error.is_none() {
            let capacity = st.capacity;
            self.shared.rearm(st, capacity, false);
        }
        done
    }

    /// Ends the thread (a wait it is in is woken) and gives the backend half back; the
    /// descriptor handed out is closed if it still names herdless's pipe.
    pub(crate) fn stop(mut self) -> S {
        {
            let mut st = self.shared.state();
            st.stop = true;
            self.shared.changed.notify_all();
        }
        // The thread's wait returns (a notification that comes after it wakes its next wait,
        // which never comes).
        let _ = (self.shared.wake)();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let Nest {
            shared,
            given,
            file,
            ..
        } = self;
        if !registry::still_names(given.as_raw_fd(), file) {
            let _ = given.into_raw_fd(); // the loop closed it; the number is not herdless's
        }
        Arc::into_inner(shared)
            .map(|s| s.core.into_inner().unwrap_or_else(|e| e.into_inner()))
            .expect("the thread was joined: nobody else holds the nest")
    }
}

impl<S: Sleeper> std::fmt::Debug for Nest<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nest")
            .field("fd", &self.given.as_raw_fd())
            .finish()
    }
}

/// The thread: waits whenever the loop lets it (`Armed`), hands each wait's outcome over.
fn run<S: Sleeper>(shared: &Shared<S>) {
    let mut events = Events::with_capacity(1);
    loop {
        let capacity = {
            let mut st = shared.state();
            loop {
                if st.stop {
                    return;
                }
                // Also with a pause asked for: the wait then returns for its notification.
                if st.phase == Phase::Armed {
                    break st.capacity;
                }
                st = shared.changed.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        };
        if events.capacity() != capacity {
            events = Events::with_capacity(capacity);
        }
        let got = shared.core().sleep(&mut events);
        // The half is free before the loop hears of the events, so that its `consumed` never
        // sleeps on the lock. A call that looks meanwhile still sees `Armed` and stops a wait
        // that has ended: its notification ends the next wait at once, with nothing to take.
        let mut st = shared.state();
        match got {
            // The wait a pause or the stop ended: parked until the call is done.
            Ok(0) if st.pause || st.stop => st.phase = Phase::Paused,
            // Events, or a notification (0 events): the loop's, as its next wait's outcome.
            Ok(_) => {
                st.batch.extend(events.iter());
                st.fresh = true;
                st.phase = Phase::Held;
                shared.set_readable(&mut st);
            }
            Err(e) => {
                st.error = Some(e);
                st.fresh = true;
                st.phase = Phase::Held;
                shared.set_readable(&mut st);
            }
        }
        drop(st);
        shared.changed.notify_all();
    }
}

/// Sleeps until `read` is readable or `deadline` passes (false); `Interrupted` when a signal
/// handler ran, as `poll(2)` says.
fn wait_readable(read: &File, deadline: Option<Instant>) -> io::Result<bool> {
    let ms = match deadline {
        None => -1,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            left.as_nanos()
                .div_ceil(1_000_000)
                .min(libc::c_int::MAX as u128) as libc::c_int
        }
    };
    use rustix::event::{PollFd, PollFlags, Timespec};
    let timeout = (ms >= 0).then(|| Timespec {
        tv_sec: (ms / 1000).into(),
        tv_nsec: ((ms % 1000) * 1_000_000).into(),
    });
    let mut pfd = [PollFd::new(read, PollFlags::IN)];
    match rustix::event::poll(&mut pfd, timeout.as_ref())? {
        0 => Ok(false),
        _ => Ok(true),
    }
}

/// A pipe, both ends close-on-exec and non-blocking: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    #[cfg(not(any(target_os = "macos", target_os = "ios")))]
    let (read, write) = rustix::pipe::pipe_with(
        rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
    )?;
    // No pipe2 here: the flags follow, as polling does on macOS.
    #[cfg(any(target_os = "macos", target_os = "ios"))]
    let (read, write) = rustix::pipe::pipe()?;
    #[cfg(any(target_os = "macos", target_os = "ios"))]
    for fd in [&read, &write] {
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)?;
        rustix::fs::fcntl_setfl(fd, rustix::fs::OFlags::NONBLOCK)?;
    }
    Ok((read, write))
}

/// Runs `f` (which starts a thread) with every signal blocked, so that the new thread starts
/// with them blocked (a thread inherits its creator's mask): the loop's threads, not this one,
/// run the program's signal handlers, and a handler never cuts the thread's wait short.
fn with_signals_blocked<R>(f: impl FnOnce() -> R) -> R {
    use nix::sys::signal::{pthread_sigmask, SigmaskHow};
    // The sets start zeroed on Linux (glibc's sigemptyset and sigfillset write only the words
    // the kernel uses, leaving nix's others uninitialised: `sys::signals` makes them).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let (all, mut old) = (
        crate::sys::signals::full().to_set(),
        crate::sys::signals::Bits::EMPTY.to_set(),
    );
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let (all, mut old) = (
        nix::sys::signal::SigSet::all(),
        nix::sys::signal::SigSet::empty(),
    );
    // Changes only the calling thread's mask; the old one is put back below.
    let blocked = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&all), Some(&mut old));
    let out = f();
    if blocked.is_ok() {
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    }
    out
}
