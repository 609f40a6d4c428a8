//! Signals end a poll-shaped wait as they end `poll(2)`: `Error::Interrupted` from
//! `PollWaiter::wait` and `PollWaiter::poll` (C: −1 with `EINTR` from `herdless_poll`,
//! `HERDLESS_EINTR` from `herdless_wait`), when a handler ran and nothing was ready.
//!
//! The Rust waiter ends its wait when a handler runs inside its kernel wait
//! (`Events::interrupted`), but a handler that runs just before that wait would be missed (the
//! race `ppoll` exists for). So, for the length of a blocking wait, the
//! calling thread blocks the signals it had not blocked itself (`pthread_sigmask`, the way
//! `ppoll` swaps masks atomically), and the waiter watches a `signalfd` of exactly those
//! signals, registered once as an ordinary (non-exclusive) descriptor under its own number (a
//! poll waiter's keys are descriptor numbers, each its own). A signal sent
//! meanwhile stays pending, the signalfd turns readable, the wait returns; the old mask is put back before the call returns, so the handler runs then, in
//! this thread, before the caller sees −1 / `EINTR`. A signal that would run no handler
//! (ignored, or a default action of ignore) is let through and the wait goes on with the time
//! left; one whose default action stops or ends the process does so. Events found together
//! with a signal are returned (the handler then runs on the way out), as `poll(2)` returns its
//! count when descriptors and a signal are both there.
//!
//! What it costs: two `rt_sigprocmask` calls per blocking wait (none for a zero timeout), one
//! signalfd per waiter. Every signal sent to the process while members wait is seen by every
//! waiting member of that process (the signalfd's wait queue is the process's), which then
//! goes back to waiting unless the signal was its own: a signal wakes each waiting thread once.
//! Synchronous signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS) are never blocked,
//! nor the C library's own (glibc's SIGCANCEL and SIGSETXID, outside `sigfillset`): their
//! handlers run inside the kernel wait, which the Rust waiter reports as `Events::interrupted`,
//! and `PollWaiter` answers that with `Error::Interrupted` too (`unless_interrupted`).

use std::ffi::c_int;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A waiter's signalfd and the signal set it watches now.
pub(crate) struct SignalWatch {
    fd: OwnedFd,
    watched: libc::sigset_t,
}

/// Sets start zeroed: glibc's sigemptyset and sigfillset write only the words the kernel uses,
/// and the sets are compared word by word.
fn empty_set() -> libc::sigset_t {
    let mut set = MaybeUninit::<libc::sigset_t>::zeroed();
    // SAFETY: sigemptyset initialises the set it is given.
    unsafe { libc::sigemptyset(set.as_mut_ptr()) };
    // SAFETY: initialised just above.
    unsafe { set.assume_init() }
}

/// Every signal a wait may block: all but SIGKILL and SIGSTOP (which cannot be blocked) and the
/// synchronous ones (a fault in this thread must be delivered at once). glibc's sigfillset
/// already leaves out its own internal signals.
fn catchable() -> libc::sigset_t {
    let mut set = MaybeUninit::<libc::sigset_t>::zeroed();
    // SAFETY: sigfillset initialises the set it is given.
    unsafe { libc::sigfillset(set.as_mut_ptr()) };
    // SAFETY: initialised just above.
    let mut set = unsafe { set.assume_init() };
    for sig in [
        libc::SIGKILL,
        libc::SIGSTOP,
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGTRAP,
        libc::SIGSYS,
    ] {
        // SAFETY: a live set and a valid signal number.
        unsafe { libc::sigdelset(&mut set, sig) };
    }
    set
}

/// The signals of `a` that are not in `b` (sigset_t is a bit array on Linux: word by word).
fn minus(a: &libc::sigset_t, b: &libc::sigset_t) -> libc::sigset_t {
    let mut out = empty_set();
    let (a, b) = (words(a), words(b));
    for (o, (x, y)) in words_mut(&mut out).iter_mut().zip(a.iter().zip(b)) {
        *o = x & !y;
    }
    out
}

fn same(a: &libc::sigset_t, b: &libc::sigset_t) -> bool {
    words(a) == words(b)
}

const WORDS: usize = std::mem::size_of::<libc::sigset_t>() / std::mem::size_of::<u64>();
// sigset_t is a whole number of u64 words, aligned as one.
const _: () = assert!(
    std::mem::size_of::<libc::sigset_t>() % 8 == 0
        && std::mem::align_of::<libc::sigset_t>() >= std::mem::align_of::<u64>()
);

fn words(set: &libc::sigset_t) -> &[u64; WORDS] {
    // SAFETY: sigset_t is plain data, a whole number of u64 words and aligned for them
    // (asserted above); any bit pattern is a valid [u64; WORDS].
    unsafe { &*(set as *const libc::sigset_t).cast::<[u64; WORDS]>() }
}

fn words_mut(set: &mut libc::sigset_t) -> &mut [u64; WORDS] {
    // SAFETY: as in `words`; the borrow is unique.
    unsafe { &mut *(set as *mut libc::sigset_t).cast::<[u64; WORDS]>() }
}

/// The catchable signals the calling thread does not block now.
fn unblocked_now() -> std::io::Result<libc::sigset_t> {
    let mut current = empty_set();
    // SAFETY: a NULL set reads the mask without changing it.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut current) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(minus(&catchable(), &current))
}

fn max_signal() -> c_int {
    libc::SIGRTMAX()
}

impl SignalWatch {
    /// A new signalfd (non-blocking, closed on exec) watching the signals the calling thread
    /// does not block now: what the first `block` will watch, so that no update is needed
    /// then. (An update of a signalfd's set wakes every waiter of the process whose epoll
    /// watches a signalfd: with 500 threads joining, one update per member at its first wait
    /// cost 70 000 to 90 000 kernel wake-ups per herd run; docs/c.md.)
    pub(crate) fn new() -> std::io::Result<SignalWatch> {
        let watched = unblocked_now()?;
        // SAFETY: -1 asks for a new descriptor; the set is live.
        let fd = unsafe { libc::signalfd(-1, &watched, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(SignalWatch {
            // SAFETY: a descriptor signalfd just opened, owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            watched,
        })
    }

    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// Blocks, in the calling thread, every catchable signal it had not blocked, and points the
    /// signalfd at them; the guard puts the thread's mask back when dropped.
    pub(crate) fn block(&mut self) -> std::io::Result<Blocked> {
        let all = catchable();
        let mut old = empty_set();
        // SAFETY: live sets; changes only the calling thread's mask.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old) };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        let watch = minus(&all, &old);
        // A thread that blocks every signal already (a worker of a server whose signals go to
        // a thread of their own) changed nothing: no second system call to put it back.
        let guard = Blocked {
            old,
            changed: !same(&watch, &empty_set()),
        };
        if !same(&watch, &self.watched) {
            // SAFETY: our live signalfd and a live set.
            if unsafe { libc::signalfd(self.fd.as_raw_fd(), &watch, 0) } < 0 {
                return Err(std::io::Error::last_os_error());
            }
            self.watched = watch;
        }
        Ok(guard)
    }

    /// Points the signalfd at the signals the thread does not block now (outside a blocking
    /// wait): a zero-timeout wait that found the signalfd ready asks this, in case the thread
    /// has since blocked a signal that is pending.
    pub(crate) fn refresh(&mut self) -> std::io::Result<()> {
        let watch = unblocked_now()?;
        if !same(&watch, &self.watched) {
            // SAFETY: our live signalfd and a live set.
            if unsafe { libc::signalfd(self.fd.as_raw_fd(), &watch, 0) } < 0 {
                return Err(std::io::Error::last_os_error());
            }
            self.watched = watch;
        }
        Ok(())
    }

    /// Is a watched signal pending whose action is a handler (not SIG_DFL, not SIG_IGN)?
    /// Asked while the signals are blocked: then putting the mask back runs that handler.
    pub(crate) fn handler_pending(&self) -> bool {
        let mut pending = empty_set();
        // SAFETY: fills a live set.
        if unsafe { libc::sigpending(&mut pending) } != 0 {
            return false;
        }
        (1..=max_signal()).any(|sig| {
            // SAFETY: live sets, signal numbers in range.
            let watched = unsafe {
                libc::sigismember(&pending, sig) == 1 && libc::sigismember(&self.watched, sig) == 1
            };
            if !watched {
                return false;
            }
            let mut action = MaybeUninit::<libc::sigaction>::zeroed();
            // SAFETY: a NULL new action only reads the current one into a live struct.
            if unsafe { libc::sigaction(sig, std::ptr::null(), action.as_mut_ptr()) } != 0 {
                return false;
            }
            // SAFETY: sigaction filled it (and it was zeroed before).
            let handler = unsafe { action.assume_init() }.sa_sigaction;
            handler != libc::SIG_DFL && handler != libc::SIG_IGN
        })
    }
}

/// The calling thread's signal mask as it was before a blocking wait; put back on drop (which
/// runs the handlers of the signals that came meanwhile).
pub(crate) struct Blocked {
    old: libc::sigset_t,
    /// Did `block` block anything the thread had not blocked?
    changed: bool,
}

impl Drop for Blocked {
    fn drop(&mut self) {
        if self.changed {
            // SAFETY: restores the calling thread's own mask from a live set.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_never_blocks_kill_stop_or_faults() {
        let all = catchable();
        for sig in [libc::SIGKILL, libc::SIGSTOP, libc::SIGSEGV, libc::SIGBUS] {
            // SAFETY: a live set.
            assert_eq!(unsafe { libc::sigismember(&all, sig) }, 0, "{sig}");
        }
        for sig in [libc::SIGTERM, libc::SIGALRM, libc::SIGCHLD, libc::SIGUSR1] {
            // SAFETY: a live set.
            assert_eq!(unsafe { libc::sigismember(&all, sig) }, 1, "{sig}");
        }
    }

    #[test]
    fn the_mask_is_put_back_and_the_signalfd_watches_what_was_not_blocked() {
        let mut watch = SignalWatch::new().unwrap();
        let mut before = empty_set();
        // SAFETY: reads the mask.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut before) };
        {
            let _blocked = watch.block().unwrap();
            // SAFETY: live set.
            let member = unsafe { libc::sigismember(&watch.watched, libc::SIGTERM) };
            assert_eq!(member, 1);
        }
        let mut after = empty_set();
        // SAFETY: reads the mask.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut after) };
        assert!(
            same(&before, &after),
            "{:x?} {:x?}",
            words(&before),
            words(&after)
        );
        assert!(same(&minus(&catchable(), &empty_set()), &catchable()));
        assert!(same(&minus(&catchable(), &catchable()), &empty_set()));
    }
}
