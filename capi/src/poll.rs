//! The `poll()`-shaped entry points, for C code that wants to change one call:
//! `herdless_poll_shared`, `poll()`'s own signature with no waiter (each descriptor asked for
//! with [`HERDLESS_POLLEXCL`] is on its object's line, which the calling thread joins at its
//! first call), and `herdless_poll`, the same through an explicit waiter.
//!
//! Both are herdless's `PollWaiter::poll` (registrations that follow the array, numbers looked
//! up on every call, `revents` as `poll()` fills them, −1/EINTR when a signal handler ran) with
//! `poll(2)`'s argument checks and `errno` (`crate::errors::ffi_poll`); the shared one on the
//! calling thread's member of the line (`herdless::poll`), which the Rust call uses too.

use std::ffi::c_int;

use herdless::PollFd;

use crate::errors::{ffi, ffi_poll, Failure, HERDLESS_EINVAL, HERDLESS_ENULL, HERDLESS_OK};
use crate::registry;
use crate::{herdless_fd, herdless_waiter, timeout_of};

/// `events` bit for herdless_poll_shared and herdless_poll: an event on this descriptor wakes
/// exactly one of the waiters that poll the same object with the bit (the POLLEXCL proposal).
/// 0x0800 is used by no POLL* bit of Linux's <poll.h>.
pub const HERDLESS_POLLEXCL: i16 = 0x0800;
/// `events` bit for herdless_poll_shared and herdless_poll: a call returns at most one ready
/// descriptor, and ready descriptors are served in turn over successive calls (the POLLONE
/// proposal). 0x4000 is used by no POLL* bit of Linux's <poll.h> (the kernel's POLLFREE is
/// internal and never in a pollfd).
pub const HERDLESS_POLLONE: i16 = 0x4000;

// The C bits are the Rust ones.
const _: () =
    assert!(HERDLESS_POLLEXCL == herdless::POLLEXCL && HERDLESS_POLLONE == herdless::POLLONE);

/// `poll()` with two more bits, and no setup: rename `poll` to `herdless_poll_shared` and add
/// HERDLESS_POLLEXCL (and HERDLESS_POLLONE) to the `events` of the shared descriptors.
///
/// - **HERDLESS_POLLEXCL**: the descriptor is shared with every thread or process that polls
///   the same object (the same queue, pipe, socket or FIFO, however each opened it) with the
///   bit: one event wakes one of them, and they take events in turn. The calling thread joins
///   the object's *line* at its first call and leaves when it exits (or its process dies);
///   processes with no common parent (started by a shell, a supervisor, systemd) take part.
///   The descriptor must be non-blocking (O_NONBLOCK): a wake-up can find nothing.
/// - **HERDLESS_POLLONE**: one call returns at most one ready descriptor, served in turn: with
///   fds 1, 2, 3 all readable, four calls return fd1, fd2, fd3, fd1.
/// - **Who shares a line**: the line of an object is the implicit group of its permission
///   class (owner, group, mode; `/dev/shm/herdless.implicit.<backend>.<uid>.<gid>.<mode>`),
///   made with the object's access: whoever may open the queue may share its line. Sockets
///   and anonymous pipes are on the line of the calling user. A group object under that name
///   that a user the rule shuts out could have made is refused (EACCES). See docs/c.md,
///   "POLLEXCL with no setup".
/// - **One line's class per call**: the HERDLESS_POLLEXCL descriptors of one call must have
///   one owner, group and mode class (ENOTSUP, HERDLESS_ELINES, otherwise); descriptors
///   without the bit may be anything.
/// - **Backend**: the environment's HERDLESS_BACKEND (auto, the default; native; emulated),
///   read at the process's first call; every process of a line must use the same.
/// - **Consumed**: the thread's next call says that the events of this one were consumed;
///   herdless_consumed_shared(fd) right after the read says it sooner (recommended before long
///   work).
/// - Everything else is poll()'s: a closed number gets POLLNVAL, a reused one is watched anew,
///   a signal handler that runs while it waits ends it with -1 and errno EINTR, a negative fd
///   is ignored, and without either bit in any entry the call is poll() itself.
///
/// Returns the number of entries with non-zero `revents` (0 on timeout), or -1 with errno
/// set: poll()'s EFAULT (fds NULL with nfds > 0), EINVAL (nfds over RLIMIT_NOFILE), EINTR;
/// and EPERM (a descriptor asked for with HERDLESS_POLLEXCL that cannot be watched
/// exclusively), EINVAL (HERDLESS_EBLOCKING: set O_NONBLOCK first; POLLPRI with
/// HERDLESS_POLLEXCL; HERDLESS_BACKEND not auto, native or emulated), ENOTSUP
/// (HERDLESS_ELINES), EACCES (the line's group object shuts this user out, or was planted),
/// ENOSYS (HERDLESS_BACKEND=native where the kernel has none), EIO. herdless_last_error()
/// gives the HERDLESS_E* code and herdless_strerror() its message.
///
/// # Safety
///
/// `fds` must point to `nfds` writable `struct pollfd` (or be NULL when `nfds` is 0).
#[no_mangle]
pub unsafe extern "C" fn herdless_poll_shared(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: c_int,
) -> c_int {
    ffi_poll(|| {
        // SAFETY: the caller's contract (see # Safety).
        let fds = unsafe { pollfds(fds, nfds) }?;
        Ok(herdless::poll(fds, timeout_of(timeout))? as c_int)
    })
}

/// Says that the event of `fd` handed out by the calling thread's last herdless_poll_shared
/// was consumed (the message read, the connection accepted): the line may hand the
/// descriptor's next event to another member while this thread works, and this thread goes to
/// the back of the line. The thread's next herdless_poll_shared does it anyway; call this
/// before long work (under the emulation a held event is waited for, up to 40 ms, before
/// another member takes the descriptor's next one). A descriptor the last call did not hand
/// out is ignored.
///
/// Returns HERDLESS_OK, or HERDLESS_EIO.
#[no_mangle]
pub extern "C" fn herdless_consumed_shared(fd: herdless_fd) -> c_int {
    ffi(|| {
        if fd < 0 {
            return Ok(HERDLESS_OK);
        }
        // SAFETY: used as a number only, to find the events of the thread's last call.
        let source = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        herdless::poll_consumed(&source)?;
        Ok(HERDLESS_OK)
    })
}

/// Waits like `poll(fds, nfds, timeout_ms)` through the waiter, honouring HERDLESS_POLLEXCL
/// and HERDLESS_POLLONE in each entry's `events`: herdless_poll_shared with a waiter of a group
/// of your own (its name, settings and statistics).
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
        // SAFETY: the caller's contract (see # Safety).
        let fds = unsafe { pollfds(fds, nfds) }?;
        let entry = registry::waiter(waiter.id)?;
        let mut state = registry::lock(&entry)?;
        let got = state.poll.poll(fds, timeout_of(timeout_ms));
        state.remember_last();
        let got = got?;
        state.ended_by_leave(got)?;
        Ok(got as c_int)
    })
}

/// The caller's array, checked as poll() checks it: EFAULT for NULL with `nfds` > 0, EINVAL
/// for more than RLIMIT_NOFILE entries.
///
/// # Safety
///
/// `fds` points to `nfds` writable `struct pollfd`, or is NULL.
unsafe fn pollfds<'a>(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
) -> Result<&'a mut [PollFd<'a>], Failure> {
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
    let raw: &mut [libc::pollfd] = if n == 0 {
        &mut []
    } else {
        // SAFETY: the caller gives `nfds` writable pollfd at `fds` (non-NULL, checked).
        unsafe { std::slice::from_raw_parts_mut(fds, n) }
    };
    // SAFETY: the numbers are the C caller's to poll, for this call.
    Ok(unsafe { PollFd::from_raw_slice(raw) })
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
