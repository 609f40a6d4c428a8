//! Kernel counters of wake-ups, for the lab and for tests.
//!
//! The kernel hides most of the herd: an epoll waiter woken for readiness that another waiter
//! took goes back to sleep *inside* `epoll_wait`, and user space never sees it. Every such sleep
//! is a voluntary context switch, so the number of voluntary switches of a waiting thread (or a
//! single-threaded process) counts its kernel-level wake-ups, seen or not.

/// Voluntary context switches of the calling thread so far: `getrusage(RUSAGE_THREAD)` on
/// Linux, FreeBSD and OpenBSD. Elsewhere, those of the whole process (`RUSAGE_SELF`), which
/// equals the thread's figure in a single-threaded worker process: macOS has no per-thread
/// count (its `thread_info` reports times, state and priorities, no context switches), nor has
/// NetBSD. `None` where the system has no such counter (Windows).
pub fn thread_voluntary_switches() -> Option<u64> {
    #[cfg(any(
        target_os = "linux",
        target_os = "android",
        target_os = "freebsd",
        target_os = "openbsd"
    ))]
    let who = libc::RUSAGE_THREAD;
    #[cfg(all(
        unix,
        not(any(
            target_os = "linux",
            target_os = "android",
            target_os = "freebsd",
            target_os = "openbsd"
        ))
    ))]
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

/// Is thread `tid` of process `pid` asleep in a poll or epoll system call right now?
///
/// Reads `/proc/<pid>/task/<tid>/stat` (state `S`) and `/proc/<pid>/task/<tid>/syscall` (the
/// call it sleeps in; readable for one's own processes). The lab and the tests use it to start
/// their clocks, or write their one message, only once every waiter really sleeps in the
/// kernel: a check of the real condition instead of a timed sleep.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn asleep_in_wait(pid: u32, tid: i32) -> bool {
    let base = format!("/proc/{pid}/task/{tid}");
    let stat = std::fs::read_to_string(format!("{base}/stat")).unwrap_or_default();
    // The state follows the command name, which is in parentheses and may contain spaces.
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|s| s.split_whitespace().next());
    if state != Some("S") {
        return false;
    }
    let syscall = std::fs::read_to_string(format!("{base}/syscall")).unwrap_or_default();
    syscall
        .split_whitespace()
        .next()
        .and_then(|n| n.parse::<i64>().ok())
        .is_some_and(is_wait_syscall)
}

/// The system calls a waiter sleeps in.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn is_wait_syscall(nr: i64) -> bool {
    #[cfg(target_arch = "x86_64")]
    const WAITS: &[i64] = &[7, 232, 271, 281, 441]; // poll, epoll_wait, ppoll, epoll_pwait, epoll_pwait2
    #[cfg(target_arch = "aarch64")]
    const WAITS: &[i64] = &[22, 73, 441]; // epoll_pwait, ppoll, epoll_pwait2
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    const WAITS: &[i64] = &[libc::SYS_epoll_pwait as i64, libc::SYS_ppoll as i64];
    WAITS.contains(&nr)
}
