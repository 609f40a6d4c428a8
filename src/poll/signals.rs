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

use crate::sys::signals::{change_mask, full, handler_pending_among, io_error, Bits};
use nix::sys::signal::SigmaskHow;
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// A waiter's signalfd and the signal set it watches now.
pub(crate) struct SignalWatch {
    fd: SignalFd,
    watched: Bits,
}

/// Every signal a wait may block: all but SIGKILL and SIGSTOP (which cannot be blocked) and the
/// synchronous ones (a fault in this thread must be delivered at once), and the C library's
/// own (as `full`).
fn catchable() -> Bits {
    let mut set = full();
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
        set.remove(sig);
    }
    set
}

/// The catchable signals the calling thread does not block now.
fn unblocked_now() -> std::io::Result<Bits> {
    let current = change_mask(SigmaskHow::SIG_BLOCK, None)?;
    Ok(catchable().minus(&current))
}

impl SignalWatch {
    /// A new signalfd (non-blocking, closed on exec) watching the signals the calling thread
    /// does not block now: what the first `block` will watch, so that no update is needed
    /// then. (An update of a signalfd's set wakes every waiter of the process whose epoll
    /// watches a signalfd: with 500 threads joining, one update per member at its first wait
    /// cost 70 000 to 90 000 kernel wake-ups per herd run; docs/c.md.)
    pub(crate) fn new() -> std::io::Result<SignalWatch> {
        let watched = unblocked_now()?;
        let fd = SignalFd::with_flags(
            &watched.to_set(),
            SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC,
        )
        .map_err(io_error)?;
        Ok(SignalWatch { fd, watched })
    }

    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// Points the signalfd at `watch` if it watches another set now.
    fn watch(&mut self, watch: Bits) -> std::io::Result<()> {
        if watch != self.watched {
            self.fd.set_mask(&watch.to_set()).map_err(io_error)?;
            self.watched = watch;
        }
        Ok(())
    }

    /// Blocks, in the calling thread, every catchable signal it had not blocked, and points the
    /// signalfd at them; the guard puts the thread's mask back when dropped.
    pub(crate) fn block(&mut self) -> std::io::Result<Blocked> {
        let all = catchable();
        let old = change_mask(SigmaskHow::SIG_BLOCK, Some(&all))?;
        let watch = all.minus(&old);
        // A thread that blocks every signal already (a worker of a server whose signals go to
        // a thread of their own) changed nothing: no second system call to put it back.
        let guard = Blocked {
            old,
            changed: watch != Bits::EMPTY,
        };
        self.watch(watch)?;
        Ok(guard)
    }

    /// Points the signalfd at the signals the thread does not block now (outside a blocking
    /// wait): a zero-timeout wait that found the signalfd ready asks this, in case the thread
    /// has since blocked a signal that is pending.
    pub(crate) fn refresh(&mut self) -> std::io::Result<()> {
        let watch = unblocked_now()?;
        self.watch(watch)
    }

    /// Is a watched signal pending whose action is a handler (not SIG_DFL, not SIG_IGN)?
    /// Asked while the signals are blocked: then putting the mask back runs that handler.
    pub(crate) fn handler_pending(&self) -> bool {
        handler_pending_among(&self.watched)
    }
}

/// The calling thread's signal mask as it was before a blocking wait; put back on drop (which
/// runs the handlers of the signals that came meanwhile).
pub(crate) struct Blocked {
    old: Bits,
    /// Did `block` block anything the thread had not blocked?
    changed: bool,
}

impl Drop for Blocked {
    fn drop(&mut self) {
        if self.changed {
            let _ = change_mask(SigmaskHow::SIG_SETMASK, Some(&self.old));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::signals::max_signal;
    use nix::sys::signal::Signal;
    use std::ffi::c_int;

    #[test]
    fn the_wait_never_blocks_kill_stop_or_faults() {
        let all = catchable();
        for sig in [libc::SIGKILL, libc::SIGSTOP, libc::SIGSEGV, libc::SIGBUS] {
            assert!(!all.has(sig), "{sig}");
        }
        for sig in [libc::SIGTERM, libc::SIGALRM, libc::SIGCHLD, libc::SIGUSR1] {
            assert!(all.has(sig), "{sig}");
        }
        assert!(all.has(libc::SIGRTMIN()) && all.has(max_signal()));
        // The bits are the C library's: its sigismember (nix's `contains`) agrees; and `full`
        // has every standard signal, as sigfillset.
        for sig in Signal::iterator() {
            assert_eq!(all.has(sig as c_int), all.to_set().contains(sig), "{sig}");
            assert!(full().has(sig as c_int), "{sig}");
        }
    }

    #[test]
    fn the_mask_is_put_back_and_the_signalfd_watches_what_was_not_blocked() {
        let mut watch = SignalWatch::new().unwrap();
        let before = change_mask(SigmaskHow::SIG_BLOCK, None).unwrap();
        {
            let _blocked = watch.block().unwrap();
            assert!(watch.watched.has(libc::SIGTERM));
            let during = change_mask(SigmaskHow::SIG_BLOCK, None).unwrap();
            assert!(during.has(libc::SIGTERM) && during.has(max_signal()));
        }
        let after = change_mask(SigmaskHow::SIG_BLOCK, None).unwrap();
        assert_eq!(before, after);
        let all = catchable();
        assert_eq!(all.minus(&Bits::EMPTY), all);
        assert_eq!(all.minus(&all), Bits::EMPTY);
        assert_eq!(Bits::of(&all.to_set()), all);
    }
}
