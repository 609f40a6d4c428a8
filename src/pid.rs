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
    let pid = std::process::id();
    // Cached only once the handler that forgets it in forked children is in place.
    if fork_handler_installed() {
        CACHED.store(pid, SeqCst);
    }
    pid
}

/// Installs the fork child handler (once per process); is it in place? A caller that finds
/// another thread installing it does not wait (a `Once` would: a child forked in that instant
/// inherits it half-run and would wait for ever): it goes without the cache this time.
#[cfg(unix)]
fn fork_handler_installed() -> bool {
    use std::sync::atomic::AtomicU8;
    const NONE: u8 = 0;
    const INSTALLING: u8 = 1;
    const INSTALLED: u8 = 2;
    static STATE: AtomicU8 = AtomicU8::new(NONE);
    extern "C" fn forget_in_child() {
        CACHED.store(0, SeqCst);
    }
    match STATE.compare_exchange(NONE, INSTALLING, SeqCst, SeqCst) {
        Ok(_) => {
            // SAFETY: registers a handler that only stores to an atomic, which is
            // async-signal-safe as a fork child handler must be.
            unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) };
            STATE.store(INSTALLED, SeqCst);
            true
        }
        Err(state) => state == INSTALLED,
    }
}

#[cfg(not(unix))]
fn fork_handler_installed() -> bool {
    true
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_the_kernel() {
        assert_eq!(super::current(), std::process::id());
        assert_eq!(super::current(), std::process::id());
    }
}
