//! Settings checked before anything runs, so that the lab never reports on a run that did not
//! happen: a member count against the group limit (`herdless::MAX_MEMBERS_LIMIT`), and the
//! descriptors the run will open against the process's open-file limit (`ulimit -n`). Each
//! refusal is one line naming the flag, its value and the limit.

/// Checks one member count given by `flag` (`--waiters`, `--workers`): 1 to
/// `herdless::MAX_MEMBERS_LIMIT`.
pub fn members(flag: &str, n: usize) -> Result<(), String> {
    let limit = herdless::MAX_MEMBERS_LIMIT;
    if n == 0 || n > limit {
        return Err(format!(
            "{flag} {n} is out of range: a group has 1 to {limit} members \
             (herdless::MAX_MEMBERS_LIMIT)"
        ));
    }
    Ok(())
}

/// Both checks for `flag` set to `n`: the member count, then the descriptors `needed(n)`.
pub fn members_and_files(flag: &str, n: usize, needed: fn(usize) -> u64) -> Result<(), String> {
    members(flag, n)?;
    open_files(flag, n, needed(n))
}

/// Checks that one process may hold `needed` descriptors, which `flag` set to `n` asks for.
/// Raises the soft open-file limit up to the hard one if that is enough (a change to this
/// process only); refuses otherwise.
pub fn open_files(flag: &str, n: usize, needed: u64) -> Result<(), String> {
    // SAFETY: rlimit is plain data; getrlimit fills it or fails.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a valid resource and a pointer to a live rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Ok(()); // no limit to check against: let the run say what fails
    }
    let (soft, hard) = (limit.rlim_cur as u64, limit.rlim_max as u64);
    if needed <= soft {
        return Ok(());
    }
    if needed <= hard {
        let raised = libc::rlimit {
            rlim_cur: needed as libc::rlim_t,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: as above; only the soft limit moves, below the hard one.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Ok(());
        }
    }
    Err(format!(
        "{flag} {n} needs about {needed} open descriptors in one process, above the open-file \
         limit of {soft} (ulimit -n; hard limit {hard}): raise it or lower {flag}"
    ))
}

/// Descriptors a run of `members` waiting threads of one process may hold at once: per member
/// its own poll instance with its wake-up descriptors (up to 3 for a `polling::Poller`: epoll,
/// eventfd, timerfd) plus, for the emulation, one door-bell pipe per member slot (2), with room
/// to spare, and a margin for the run's own.
pub fn descriptors_for_threads(members: usize) -> u64 {
    6 * members as u64 + 64
}

/// Descriptors each process of a run of `members` forked waiters holds: the group's door bells
/// (2 per member slot, inherited by every child) plus its own and a margin.
pub fn descriptors_for_processes(members: usize) -> u64 {
    2 * members as u64 + 64
}
