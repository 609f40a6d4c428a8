//! `herdless_poll`: the `poll()`-shaped entry point, for C code that wants to change one call.
//!
//! The caller keeps its `struct pollfd` array and adds [`HERDLESS_POLLEXCL`] and
//! [`HERDLESS_POLLONE`] to `events`. Each call compares the array with what the waiter has
//! registered (the data of each registration is the descriptor itself) and adds, modifies or
//! deletes registrations to match, then waits once and fills `revents` as `poll()` would for
//! the descriptors herdless handed out. The real `revents` (POLLIN, POLLOUT, POLLHUP, POLLERR…)
//! come from a zero-timeout `poll()` of those descriptors only: it sleeps in no wait queue, so
//! it wakes nobody and herds nothing.
//!
//! As `poll()` it looks every number up on each call (`crate::identity`: a closed number gets
//! POLLNVAL, a reused one is registered anew), ends with −1/EINTR when a signal handler ran
//! (`crate::signals`), and fails with −1 and `errno` (`crate::errors`, `ffi_poll`).

use std::ffi::c_int;
use std::os::fd::RawFd;

use herdless::Interest;

use crate::errors::{ffi_poll, Failure, HERDLESS_EINVAL, HERDLESS_ENULL};
use crate::identity::Check;
use crate::registry::{self, Polled, WaiterState};
use crate::{herdless_waiter, timeout_of};

/// `events` bit for herdless_poll: an event on this descriptor wakes exactly one of the
/// group's waiters (the POLLEXCL proposal). 0x0800 is used by no POLL* bit of Linux's
/// <poll.h>.
pub const HERDLESS_POLLEXCL: i16 = 0x0800;
/// `events` bit for herdless_poll: a call returns at most one ready descriptor, and ready
/// descriptors are served in turn over successive calls (the POLLONE proposal). 0x4000 is used
/// by no POLL* bit of Linux's <poll.h> (the kernel's POLLFREE is internal and never in a
/// pollfd).
pub const HERDLESS_POLLONE: i16 = 0x4000;

// Both bits are positive values of a C short.
const _: () = assert!(HERDLESS_POLLEXCL > 0 && HERDLESS_POLLONE > 0);

/// The system bits herdless can watch, and those poll() always reports.
const READ_BITS: i16 = libc::POLLIN | libc::POLLRDNORM;
const WRITE_BITS: i16 = libc::POLLOUT | libc::POLLWRNORM;
const ALWAYS: i16 = libc::POLLHUP | libc::POLLERR | libc::POLLNVAL;

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
    if events & HERDLESS_POLLEXCL != 0 {
        interest = interest.exclusive();
    }
    if events & HERDLESS_POLLONE != 0 {
        interest = interest.one_event_round_robin();
    }
    Some(interest)
}

/// Waits like `poll(fds, nfds, timeout_ms)` through the waiter, honouring HERDLESS_POLLEXCL
/// and HERDLESS_POLLONE in each entry's `events`.
///
/// - Registration follows the array: a descriptor that appears is added, one whose `events`
///   changed is modified, one that is gone (or whose `fd` is negative) is deleted. A
///   descriptor may appear more than once; its interests are merged. An entry asking for none
///   of POLLIN, POLLRDNORM, POLLOUT, POLLWRNORM, POLLPRI is not watched.
/// - Every call checks which open file each number names, as poll() looks each number up: a
///   number closed and reused (a new pipe, mq_close then mq_open, a dup2 over it) is watched
///   anew; a closed one gets POLLNVAL at once (and is forgotten); after herdless_delete the
///   next call registers the descriptor again.
/// - `revents` is filled as poll() fills it, for the descriptors herdless handed out: what was
///   asked for among POLLIN, POLLRDNORM, POLLOUT, POLLWRNORM, POLLPRI, plus POLLHUP, POLLERR.
///   A regular file or another descriptor the kernel cannot watch, asked for without
///   HERDLESS_POLLEXCL, gets at once what poll() says of it (always ready).
/// - With HERDLESS_POLLEXCL, one event wakes one waiter of the group; with HERDLESS_POLLONE,
///   one call returns at most one ready descriptor, served in turn: with fds 1, 2, 3 all
///   readable, four calls return fd1, fd2, fd3, fd1.
/// - Consumed: the next herdless_poll call says that the events of this one were consumed;
///   call herdless_consumed(waiter, fd) right after the read to say it earlier (recommended:
///   the next message can then go to another waiter while this one works).
/// - Signals: a handler that runs while the call waits ends it with -1 and errno EINTR, as
///   poll() (on Linux; see docs/c.md for how and what it costs). herdless_notify ends it
///   with 0.
///
/// Returns the number of entries with non-zero `revents` (0 on timeout or notification), or
/// -1 with errno set, as poll() does: EFAULT if `fds` is NULL with `nfds` > 0; EINVAL if `nfds`
/// exceeds RLIMIT_NOFILE; EINTR (above). Besides poll()'s: EPERM if a descriptor asked for
/// with HERDLESS_POLLEXCL cannot be watched exclusively (a regular file, an epoll descriptor;
/// never answered as always ready, which would make the caller spin); EINVAL if an interest is
/// refused (POLLPRI with HERDLESS_POLLEXCL) or a descriptor asked for with HERDLESS_POLLEXCL
/// is in blocking mode (HERDLESS_EBLOCKING: set O_NONBLOCK with fcntl first); EEXIST if a
/// descriptor was also added with herdless_add; EBADF for a bad waiter handle (also when
/// another thread's herdless_leave ended the wait); EBUSY; EIDRM when the waiter's named group
/// was removed by force (HERDLESS_EREMOVED: leave, and open the name again); EIO.
/// herdless_last_error() gives the HERDLESS_E* code of the failure and herdless_strerror() its
/// message.
///
/// # Safety
///
/// `fds` must point to `nfds` writable `struct pollfd` (or be NULL when `nfds` is 0).
#[no_mangle]
pub unsafe extern "C" fn herdless_poll(
    waiter: herdless_waiter,
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout_ms: c_int,
) -> c_int {
    ffi_poll(|| {
        if fds.is_null() && nfds > 0 {
            return Err(Failure::new(HERDLESS_ENULL, "fds is NULL with nfds > 0"));
        }
        let n = usize::try_from(nfds)
            .ok()
            .filter(|&n| n <= c_int::MAX as usize && within_rlimit(n))
            .ok_or_else(|| {
                Failure::new(
                    HERDLESS_EINVAL,
                    format!("nfds {nfds} exceeds RLIMIT_NOFILE, as poll() refuses it"),
                )
            })?;
        let fds: &mut [libc::pollfd] = if n == 0 {
            &mut []
        } else {
            // SAFETY: the caller gives `nfds` writable pollfd at `fds` (non-NULL, checked).
            unsafe { std::slice::from_raw_parts_mut(fds, n) }
        };
        let entry = registry::waiter(waiter.id)?;
        let mut state = registry::lock(&entry)?;
        let got = poll_locked(&mut state, fds, timeout_ms)?;
        state.ended_by_leave(got as usize)?;
        Ok(got)
    })
}

/// poll()'s own limit on `nfds`: RLIMIT_NOFILE (asked only for arrays longer than 256, which
/// no limit is below in practice).
fn within_rlimit(n: usize) -> bool {
    if n <= 256 {
        return true;
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: fills a live struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return true;
    }
    limit.rlim_cur == libc::RLIM_INFINITY || (n as libc::rlim_t) <= limit.rlim_cur
}

fn poll_locked(
    state: &mut WaiterState,
    fds: &mut [libc::pollfd],
    timeout_ms: c_int,
) -> Result<c_int, Failure> {
    for pfd in fds.iter_mut() {
        pfd.revents = 0;
    }
    // What the array asks for, per descriptor (interests of repeated descriptors merged).
    let mut wanted = std::mem::take(&mut state.wanted);
    let mut order = std::mem::take(&mut state.order);
    wanted.clear();
    order.clear();
    for pfd in fds.iter() {
        if pfd.fd >= 0 && interest_of(pfd.events).is_some() {
            let bits = wanted.entry(pfd.fd).or_insert_with(|| {
                order.push(pfd.fd);
                0
            });
            *bits |= pfd.events & !ALWAYS;
        }
    }
    let result = update_and_wait(state, &wanted, &order, fds, timeout_ms);
    state.wanted = wanted;
    state.order = order;
    result
}

/// Deletes `fd`'s registration and forgets it. Errors about a descriptor that is gone or was
/// never there are no errors here: the registration is what goes.
fn unregister(state: &mut WaiterState, fd: RawFd) -> Result<(), Failure> {
    state.forget_polled(fd);
    state.forget_data(fd);
    match crate::with_source(fd, |s| state.waiter.delete(s)) {
        Ok(()) => Ok(()),
        Err(f) if f.code == crate::HERDLESS_ENOENT || f.code == crate::HERDLESS_EBADF => Ok(()),
        Err(f) => Err(f),
    }
}

fn update_and_wait(
    state: &mut WaiterState,
    wanted: &std::collections::HashMap<RawFd, i16>,
    order: &[RawFd],
    fds: &mut [libc::pollfd],
    timeout_ms: c_int,
) -> Result<c_int, Failure> {
    // Gone from the array: delete.
    let gone: Vec<RawFd> = state
        .polled
        .keys()
        .filter(|fd| !wanted.contains_key(fd))
        .copied()
        .collect();
    for fd in gone {
        unregister(state, fd)?;
    }
    // New, changed, reused or closed: add, modify, re-add or answer, in array order. Answers
    // poll() gives at once (POLLNVAL, an always-ready file) are collected.
    let mut at_once = false;
    for &fd in order {
        let bits = wanted[&fd];
        let Some(interest) = interest_of(bits) else {
            continue; // not reached: only entries with an interest are wanted
        };
        let known = match state.polled.get(&fd).copied() {
            None => None,
            Some(old) => match state.tracker.check(fd, old.identity) {
                Check::Same => Some(old),
                Check::Changed => {
                    // Another open file under the old number: the old registration goes.
                    unregister(state, fd)?;
                    None
                }
                Check::Closed => {
                    unregister(state, fd)?;
                    at_once |= answer(fds, fd, libc::POLLNVAL);
                    continue;
                }
            },
        };
        let done = match known {
            Some(old) if old.bits == bits => continue,
            Some(old) => crate::with_source(fd, |s| {
                state.waiter.modify(s, registry::key_of(fd), interest)
            })
            .map(|()| old.identity),
            None => match state.tracker.identify(fd) {
                Err(libc::EBADF) => Err(herdless::Error::BadDescriptor { fd }.into()),
                Err(errno) => Err(Failure {
                    code: crate::HERDLESS_EIO,
                    message: format!(
                        "inspecting descriptor {fd}: {}",
                        std::io::Error::from_raw_os_error(errno)
                    ),
                    os_errno: Some(errno),
                }),
                Ok(identity) => {
                    crate::with_source(fd, |s| state.waiter.add(s, registry::key_of(fd), interest))
                        .map(|()| identity)
                        .inspect_err(|_| state.tracker.forget(fd, identity))
                }
            },
        };
        match done {
            Ok(identity) => {
                state.polled.insert(fd, Polled { bits, identity });
                state.set_data(fd, fd as u64); // herdless_consumed(waiter, fd)
            }
            // poll() answers POLLNVAL for a closed descriptor.
            Err(f) if f.code == crate::HERDLESS_EBADF => {
                state.forget_polled(fd);
                at_once |= answer(fds, fd, libc::POLLNVAL);
            }
            // Not watchable: without POLLEXCL, poll()'s own answer (a regular file is always
            // ready); with it, the error: answering "ready" would make the caller spin.
            Err(f) if f.code == crate::HERDLESS_EUNWATCHABLE && !interest.is_exclusive() => {
                state.forget_polled(fd);
                at_once |= answer(fds, fd, probe(fd, bits));
            }
            Err(f) => return Err(f),
        }
    }
    // Entries answered at once end the call, as in poll(): what else is ready is still
    // collected, without waiting.
    let timeout = match at_once {
        true => Some(std::time::Duration::ZERO),
        false => timeout_of(timeout_ms),
    };
    let capacity = wanted.len().max(1);
    let got = state.wait(capacity, timeout)?;
    if got == 0 {
        return Ok(count(fds));
    }
    for event in state.user_events() {
        let fd = event.key as RawFd;
        let asked = wanted.get(&fd).copied().unwrap_or(0);
        let revents = match probe(fd, asked) {
            0 => {
                // Taken meanwhile (by a signal handler, say): report what herdless saw.
                [
                    (event.is_readable(), READ_BITS),
                    (event.is_writable(), WRITE_BITS),
                    (event.is_priority(), libc::POLLPRI),
                    (event.is_read_closed(), libc::POLLHUP),
                    (event.is_error(), libc::POLLERR),
                ]
                .iter()
                .filter(|(set, _)| *set)
                .fold(0, |bits, (_, bit)| bits | bit)
            }
            ready => ready,
        };
        answer(fds, fd, revents);
    }
    Ok(count(fds))
}

/// What a zero-timeout poll() says of `fd` for the `events` asked: it sleeps in no wait
/// queue, so it wakes nobody and herds nothing.
fn probe(fd: RawFd, events: i16) -> i16 {
    let mut pfd = libc::pollfd {
        fd,
        events: events & (READ_BITS | WRITE_BITS | libc::POLLPRI),
        revents: 0,
    };
    // SAFETY: one live pollfd, zero timeout.
    match unsafe { libc::poll(&mut pfd, 1, 0) } {
        1 => pfd.revents,
        _ => 0,
    }
}

/// Sets the `revents` of every entry of `fd` to what it asked for among `revents` (plus what
/// poll() always reports); true if any entry got something.
fn answer(fds: &mut [libc::pollfd], fd: RawFd, revents: i16) -> bool {
    let mut any = false;
    for pfd in fds.iter_mut().filter(|p| p.fd == fd) {
        pfd.revents = revents & ((pfd.events & !(HERDLESS_POLLEXCL | HERDLESS_POLLONE)) | ALWAYS);
        any |= pfd.revents != 0;
    }
    any
}

fn count(fds: &[libc::pollfd]) -> c_int {
    fds.iter().filter(|p| p.revents != 0).count() as c_int
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
            assert_eq!(bit & (HERDLESS_POLLEXCL | HERDLESS_POLLONE), 0, "{bit:#x}");
        }
        assert_eq!(HERDLESS_POLLEXCL & HERDLESS_POLLONE, 0);
    }

    #[test]
    fn events_map_to_interests() {
        assert_eq!(interest_of(0), None);
        assert_eq!(interest_of(HERDLESS_POLLEXCL), None);
        let i = interest_of(libc::POLLIN | HERDLESS_POLLEXCL | HERDLESS_POLLONE).unwrap();
        assert!(i.is_readable() && i.is_exclusive() && i.is_one_event_round_robin());
        assert!(!i.is_writable());
        let o = interest_of(libc::POLLWRNORM).unwrap();
        assert!(o.is_writable() && !o.is_exclusive());
    }
}
