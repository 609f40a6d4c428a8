//! The native backend's kernel calls: the probes (can this kernel give exclusive wake-ups, and
//! does it refuse an `EPOLL_CTL_MOD` of an exclusive entry), `epoll_ctl` with the flags the
//! kernel accepts beside `EPOLLEXCLUSIVE`, the refusals named, the clock and timeouts, and the
//! waiter's eventfd with its [`NativeNotifier`]. Kept apart from the waiter (`super`) so that
//! its file holds the rotation and the turn rule.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use rustix::event::epoll::{self, EventData, EventFlags};
use rustix::pipe::{pipe_with, PipeFlags};

use crate::error::{Error, Result};
use crate::interest::Interest;
use crate::registry;
use crate::sys::unix::by_number;

/// The epoll data value of the waiter's own wake-up eventfd (descriptors are never negative).
pub(super) const WAKE_DATA: u64 = u64::MAX;

/// Can this kernel give exclusive wake-ups? Asked once per process, with a real pipe.
pub(crate) fn probe() -> std::result::Result<(), String> {
    static PROBE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            let epoll = new_epoll().map_err(|e| format!("epoll_create1 failed: {e}"))?;
            let (r, _w) =
                pipe_with(PipeFlags::CLOEXEC).map_err(|e| format!("pipe2 failed: {e}"))?;
            ctl(
                &epoll,
                libc::EPOLL_CTL_ADD,
                r.as_raw_fd(),
                epoll_flags(Interest::READABLE.exclusive()),
                0,
            )
            .map_err(|e| {
                format!("the kernel refuses EPOLLEXCLUSIVE ({e}); Linux 4.5 or later is needed")
            })
        })
        .clone()
}

/// Does `fd` name, in `epoll`, the very open file of its exclusive entry? Asked with an
/// `EPOLL_CTL_MOD` that the kernel refuses for an exclusive entry (EINVAL, nothing changed)
/// after it has looked the entry up by number *and* open file: EBADF for a closed number,
/// ENOENT for a number that names another file now. Half the cost of an `fstat` here (0.24
/// against 0.44 µs), and exact where (device, inode) is not (a pipe's two ends). Only for
/// exclusive entries (a MOD of another would change it), and only where `mod_probe_works`.
pub(super) fn entry_is_live(epoll: &OwnedFd, fd: RawFd) -> bool {
    ctl(epoll, libc::EPOLL_CTL_MOD, fd, 0, 0).is_err_and(|e| e.raw_os_error() == Some(libc::EINVAL))
}

/// Does this kernel refuse an `EPOLL_CTL_MOD` of an exclusive entry with EINVAL, changing
/// nothing (every kernel since 4.6; 4.5 modified it)? Asked once per process, with a real pipe.
pub(super) fn mod_probe_works() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        let Ok(epoll) = new_epoll() else {
            return false;
        };
        let Ok((r, _w)) = pipe_with(PipeFlags::CLOEXEC) else {
            return false;
        };
        let flags = epoll_flags(Interest::READABLE.exclusive());
        ctl(&epoll, libc::EPOLL_CTL_ADD, r.as_raw_fd(), flags, 0).is_ok()
            && entry_is_live(&epoll, r.as_raw_fd())
    })
}

pub(super) fn new_epoll() -> io::Result<OwnedFd> {
    Ok(epoll::create(epoll::CreateFlags::CLOEXEC)?)
}

/// The epoll flags of an interest: level-triggered, never a flag the kernel refuses with
/// EXCLUSIVE.
pub(super) fn epoll_flags(interest: Interest) -> u32 {
    let mut flags = 0;
    if interest.is_readable() {
        flags |= libc::EPOLLIN as u32;
    }
    if interest.is_writable() {
        flags |= libc::EPOLLOUT as u32;
    }
    if interest.is_priority() {
        flags |= libc::EPOLLPRI as u32;
    }
    if interest.is_exclusive() {
        flags |= libc::EPOLLEXCLUSIVE as u32;
    }
    flags
}

/// One `epoll_ctl` (`op`: `EPOLL_CTL_ADD`, `_MOD` or `_DEL`) of a descriptor known by number
/// (it may have been closed since it was registered: see `crate::sys::unix::by_number`).
pub(super) fn ctl(
    epoll: &OwnedFd,
    op: libc::c_int,
    fd: RawFd,
    flags: u32,
    data: u64,
) -> io::Result<()> {
    let fd = by_number(fd)?;
    let (flags, data) = (
        EventFlags::from_bits_retain(flags),
        EventData::new_u64(data),
    );
    match op {
        libc::EPOLL_CTL_ADD => epoll::add(epoll, fd, data, flags)?,
        libc::EPOLL_CTL_MOD => epoll::modify(epoll, fd, data, flags)?,
        _ => epoll::delete(epoll, fd)?,
    }
    Ok(())
}

/// Names the kernel's refusal of a descriptor.
/// (What the emulation's poller refuses too, plus the epoll that cannot be exclusive.)
pub(super) fn refusal(fd: RawFd, err: io::Error, context: &'static str) -> Error {
    match err.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::EINVAL) if is_epoll(fd) => Error::UnwatchableDescriptor {
            fd,
            reason: "an epoll descriptor cannot be watched exclusively (EINVAL): register it \
                     without exclusive",
        },
        _ => registry::refusal(fd, err, context),
    }
}

pub(super) fn is_epoll(fd: RawFd) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map(|p| p.to_string_lossy().contains("eventpoll"))
        .unwrap_or(false)
}

/// Milliseconds left until `deadline` for epoll_wait, rounded up; -1 for none.
pub(super) fn timeout_ms(deadline: Option<Instant>) -> libc::c_int {
    match deadline {
        None => -1,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            let ms = left.as_nanos().div_ceil(1_000_000);
            ms.min(libc::c_int::MAX as u128) as libc::c_int
        }
    }
}

/// A new eventfd (close-on-exec, non-blocking) at zero: a waiter's wake-up.
pub(super) fn new_eventfd() -> io::Result<OwnedFd> {
    use rustix::event::{eventfd, EventfdFlags};
    Ok(eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?)
}

/// Resets our own non-blocking eventfd to zero (nothing to do if it is zero already).
pub(super) fn drain_eventfd(fd: &OwnedFd) {
    let _ = rustix::io::read(fd, &mut [0u8; 8]);
}

/// Wakes one native waiter through its eventfd.
#[derive(Clone)]
pub(crate) struct NativeNotifier {
    pub(super) wake: Arc<OwnedFd>,
}

impl NativeNotifier {
    pub(crate) fn notify(&self) -> Result<()> {
        match rustix::io::write(&*self.wake, &1u64.to_ne_bytes()).map_err(io::Error::from) {
            Ok(_) => Ok(()),
            // EAGAIN: the counter is full, so the waiter is woken already.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(Error::io("writing the waiter's eventfd", e)),
        }
    }
}
