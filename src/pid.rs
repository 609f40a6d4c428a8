//! The current process id, cached for the hot path.
//!
//! Every `wait` and `consumed` checks that the waiter is used in the process that joined (a
//! copy inherited across `fork` must refuse, see `Error::ForkedWaiter`), and `getpid` is a
//! system call. So the id is read once and kept; a `pthread_atfork` child handler forgets it in
//! every child made by `fork`, as glibc's own cache did before 2.25. A child made by a raw
//! `clone` system call, which runs no fork handlers, is not supported by that check. Places
//! where a stale id would be harmful (liveness) ask the kernel instead.

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

/// The cached id; 0 when not known (never read yet, or forgotten in a forked child).
static CACHED: AtomicU32 = AtomicU32::new(0);

/// The id of the calling process.
pub(crate) fn current() -> u32 {
    let pid = CACHED.load(SeqCst);
    if pid != 0 {
        return pid;
    }
    // The handler is installed before the first id is cached, so no child can inherit a
    // cached id without the handler clearing it.
    install_fork_handler();
    let pid = std::process::id();
    CACHED.store(pid, SeqCst);
    pid
}

#[cfg(unix)]
fn install_fork_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn forget_in_child() {
        CACHED.store(0, SeqCst);
    }
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic, which is
        // async-signal-safe as a fork child handler must be.
        unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) };
    });
}

#[cfg(not(unix))]
fn install_fork_handler() {}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_the_kernel() {
        assert_eq!(super::current(), std::process::id());
        assert_eq!(super::current(), std::process::id());
    }
}
