//! Kernel counters of wake-ups, for the lab and for tests.
//!
//! The kernel hides most of the herd: an epoll waiter woken for readiness that another waiter
//! took goes back to sleep *inside* `epoll_wait`, and user space never sees it. Every such sleep
//! is a voluntary context switch, so the number of voluntary switches of a waiting thread (or a
//! single-threaded process) counts its kernel-level wake-ups, seen or not.

/// Voluntary context switches of the calling thread so far (Linux: `RUSAGE_THREAD`).
/// Elsewhere, those of the whole process (`RUSAGE_SELF`), which equals the thread's figure in a
/// single-threaded worker process. `None` where the system has no such counter.
pub fn thread_voluntary_switches() -> Option<u64> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let who = libc::RUSAGE_THREAD;
    #[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
    let who = libc::RUSAGE_SELF;
    #[cfg(unix)]
    {
        // SAFETY: rusage is plain data; getrusage fills it or fails.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid `who` and a pointer to a live rusage.
        if unsafe { libc::getrusage(who, &mut usage) } == 0 {
            return Some(usage.ru_nvcsw as u64);
        }
        None
    }
    #[cfg(not(unix))]
    None
}

/// Voluntary context switches of the calling process and of its waited-for children together
/// (`RUSAGE_SELF` plus `RUSAGE_CHILDREN`): what forked workers cost, read by their parent after
/// it reaped them.
pub fn process_and_children_voluntary_switches() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut total = 0;
        for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
            // SAFETY: as above.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            if unsafe { libc::getrusage(who, &mut usage) } != 0 {
                return None;
            }
            total += usage.ru_nvcsw as u64;
        }
        Some(total)
    }
    #[cfg(not(unix))]
    None
}
