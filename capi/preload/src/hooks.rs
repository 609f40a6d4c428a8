//! The interposed C calls. Each goes straight to the C library (`real`) when the calling
//! thread is inside this library (herdless's own epoll, poll and close calls: `Inside`), and
//! when nothing of the program is herdless's; otherwise to `epoll` or `herdless::poll`. A
//! panic never leaves a call: it is caught and answered EIO (close: closed all the same).

use std::cell::Cell;
use std::os::fd::RawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use libc::{c_int, epoll_event, nfds_t, pollfd, sigset_t, timespec};

use crate::epoll::{self, fail, ACTIVE};
use crate::real::real;

thread_local! {
    /// Set while the thread runs this library's code: its calls go to the C library.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// The calling thread is inside the library while this lives.
struct Inside;

impl Inside {
    /// None if the thread is inside already (or exiting: its flag is gone).
    fn enter() -> Option<Inside> {
        INSIDE
            .try_with(|c| (!c.replace(true)).then(|| Inside))
            .ok()
            .flatten()
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|c| c.set(false));
    }
}

/// Runs `body` inside the library, a panic answered with EIO.
fn guarded(body: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| fail(libc::EIO))
}

/// The timeout of a poll or epoll call in milliseconds (negative: none).
fn millis(ms: c_int) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

/// The timeout of a ppoll or epoll_pwait2 call (NULL: none); None for a bad one (EINVAL).
fn span(ts: *const timespec) -> Option<Option<Duration>> {
    if ts.is_null() {
        return Some(None);
    }
    // SAFETY: a non-NULL timespec of the program's.
    let ts = unsafe { std::ptr::read(ts) };
    if ts.tv_sec < 0 || !(0..1_000_000_000).contains(&ts.tv_nsec) {
        return None;
    }
    Some(Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)))
}

/// Runs `f` with the signal mask `mask` (if not NULL) in place, as ppoll and epoll_pwait
/// do, and puts the thread's mask back.
fn with_mask(mask: *const sigset_t, f: impl FnOnce() -> c_int) -> c_int {
    if mask.is_null() {
        return f();
    }
    // SAFETY: sigset_t is plain data.
    let mut old: sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: the program's mask, and a live sigset for the old one.
    if unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, &mut old) } != 0 {
        return fail(libc::EINVAL);
    }
    let rc = f();
    // SAFETY: errno is this thread's; saved across the mask's restoration.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    rc
}

/// `epoll_wait`'s shape for the three calls: herdless's wait if it holds registrations of
/// `epfd`, else `kernel`.
fn wait_or(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: Option<Duration>,
    kernel: impl FnOnce() -> c_int,
) -> c_int {
    if !ACTIVE.load(SeqCst) {
        return kernel();
    }
    let Some(_inside) = Inside::enter() else {
        return kernel();
    };
    guarded(|| match epoll::wait(epfd, events, max, timeout) {
        Some(rc) => rc,
        None => kernel(),
    })
}

/// # Safety
///
/// As the C library's `epoll_create`.
#[no_mangle]
pub unsafe extern "C" fn epoll_create(size: c_int) -> c_int {
    // SAFETY: the program's call, passed on.
    let fd = unsafe { (real().epoll_create)(size) };
    if fd >= 0 && ACTIVE.load(SeqCst) {
        if let Some(_inside) = Inside::enter() {
            guarded(|| {
                epoll::created(fd);
                0
            });
        }
    }
    fd
}

/// # Safety
///
/// As the C library's `epoll_create1`.
#[no_mangle]
pub unsafe extern "C" fn epoll_create1(flags: c_int) -> c_int {
    // SAFETY: the program's call, passed on.
    let fd = unsafe { (real().epoll_create1)(flags) };
    if fd >= 0 && ACTIVE.load(SeqCst) {
        if let Some(_inside) = Inside::enter() {
            guarded(|| {
                epoll::created(fd);
                0
            });
        }
    }
    fd
}

/// # Safety
///
/// As the C library's `epoll_ctl`.
#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    event: *mut epoll_event,
) -> c_int {
    // SAFETY: the program's call, passed on.
    let kernel = || unsafe { (real().epoll_ctl)(epfd, op, fd, event) };
    let exclusive = op == libc::EPOLL_CTL_ADD
        && !event.is_null()
        // SAFETY: a non-NULL epoll_event of the program's (EFAULT otherwise, as the kernel).
        && unsafe { std::ptr::read_unaligned(event) }.events & libc::EPOLLEXCLUSIVE as u32 != 0;
    if !exclusive && !ACTIVE.load(SeqCst) {
        return kernel();
    }
    let Some(_inside) = Inside::enter() else {
        return kernel();
    };
    guarded(|| {
        if exclusive {
            return epoll::add_exclusive(epfd, fd, event);
        }
        if !epoll::holds(epfd, fd) {
            return kernel();
        }
        match op {
            libc::EPOLL_CTL_ADD => fail(libc::EEXIST),
            libc::EPOLL_CTL_DEL => epoll::delete(epfd, fd),
            // An exclusive registration cannot be modified (the kernel's EINVAL).
            _ => fail(libc::EINVAL),
        }
    })
}

/// # Safety
///
/// As the C library's `epoll_wait`.
#[no_mangle]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    // SAFETY: the program's call, passed on.
    wait_or(epfd, events, max, millis(timeout), || unsafe {
        (real().epoll_wait)(epfd, events, max, timeout)
    })
}

/// # Safety
///
/// As the C library's `epoll_pwait`.
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    sigmask: *const sigset_t,
) -> c_int {
    // SAFETY: the program's call, passed on.
    let kernel = || unsafe { (real().epoll_pwait)(epfd, events, max, timeout, sigmask) };
    if !ACTIVE.load(SeqCst) {
        return kernel();
    }
    with_mask(sigmask, || {
        wait_or(epfd, events, max, millis(timeout), || {
            // SAFETY: the program's call, its mask already in place.
            unsafe { (real().epoll_wait)(epfd, events, max, timeout) }
        })
    })
}

/// # Safety
///
/// As the C library's `epoll_pwait2`.
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait2(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    // SAFETY: the program's call, passed on.
    let kernel = || unsafe { (real().epoll_pwait2)(epfd, events, max, timeout, sigmask) };
    if !ACTIVE.load(SeqCst) {
        return kernel();
    }
    let Some(span) = span(timeout) else {
        return kernel(); // the kernel's EINVAL
    };
    with_mask(sigmask, || {
        wait_or(epfd, events, max, span, || {
            // SAFETY: the program's call, its mask already in place.
            unsafe { (real().epoll_pwait2)(epfd, events, max, timeout, std::ptr::null()) }
        })
    })
}

/// Does the array ask for HERDLESS_POLLEXCL or HERDLESS_POLLONE?
fn has_bits(fds: *mut pollfd, nfds: nfds_t) -> bool {
    if fds.is_null() || nfds == 0 || nfds > libc::c_int::MAX as nfds_t {
        return false;
    }
    // SAFETY: the program's array of nfds entries (poll reads it all the same).
    let all = unsafe { std::slice::from_raw_parts(fds, nfds as usize) };
    all.iter()
        .any(|p| p.fd >= 0 && p.events & (herdless::POLLEXCL | herdless::POLLONE) != 0)
}

/// herdless's poll of the program's array.
fn shared_poll(fds: *mut pollfd, nfds: nfds_t, timeout: Option<Duration>) -> c_int {
    guarded(|| {
        // SAFETY: the program's array of nfds entries (has_bits checked the bounds).
        let raw = unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) };
        // SAFETY: the numbers are the program's; it keeps them open for the call.
        let entries = unsafe { herdless::PollFd::from_raw_slice(raw) };
        match herdless::poll(entries, timeout) {
            Ok(n) => n as c_int,
            Err(e) => fail(epoll::errno_of(&e)),
        }
    })
}

/// # Safety
///
/// As the C library's `poll`.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the program's call, passed on.
    let kernel = || unsafe { (real().poll)(fds, nfds, timeout) };
    let Some(_inside) = Inside::enter() else {
        return kernel();
    };
    if !has_bits(fds, nfds) {
        return kernel();
    }
    shared_poll(fds, nfds, millis(timeout))
}

/// # Safety
///
/// As the C library's `ppoll`.
#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    nfds: nfds_t,
    timeout: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    // SAFETY: the program's call, passed on.
    let kernel = || unsafe { (real().ppoll)(fds, nfds, timeout, sigmask) };
    let Some(_inside) = Inside::enter() else {
        return kernel();
    };
    if !has_bits(fds, nfds) {
        return kernel();
    }
    let Some(span) = span(timeout) else {
        return kernel(); // the kernel's EINVAL
    };
    with_mask(sigmask, || shared_poll(fds, nfds, span))
}

/// Does a fortified call's array of `len` bytes hold `nfds` entries (else glibc's own check
/// ends the program, as without the preload)?
fn fits(nfds: nfds_t, len: usize) -> bool {
    (len / std::mem::size_of::<pollfd>()) as nfds_t >= nfds
}

/// `poll` as `_FORTIFY_SOURCE` builds call it.
///
/// # Safety
///
/// As glibc's `__poll_chk`.
#[no_mangle]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut pollfd,
    nfds: nfds_t,
    timeout: c_int,
    len: usize,
) -> c_int {
    if !fits(nfds, len) {
        // SAFETY: the program's call, passed on (glibc reports the overflow).
        return unsafe { (real().poll_chk)(fds, nfds, timeout, len) };
    }
    // SAFETY: the program's call, checked as glibc checks it.
    unsafe { poll(fds, nfds, timeout) }
}

/// `ppoll` as `_FORTIFY_SOURCE` builds call it.
///
/// # Safety
///
/// As glibc's `__ppoll_chk`.
#[no_mangle]
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut pollfd,
    nfds: nfds_t,
    timeout: *const timespec,
    sigmask: *const sigset_t,
    len: usize,
) -> c_int {
    if !fits(nfds, len) {
        // SAFETY: the program's call, passed on (glibc reports the overflow).
        return unsafe { (real().ppoll_chk)(fds, nfds, timeout, sigmask, len) };
    }
    // SAFETY: the program's call, checked as glibc checks it.
    unsafe { ppoll(fds, nfds, timeout, sigmask) }
}

/// # Safety
///
/// As the C library's `close`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if ACTIVE.load(SeqCst) {
        if let Some(_inside) = Inside::enter() {
            guarded(|| {
                epoll::closing(fd);
                0
            });
        }
    }
    // SAFETY: the program's call, passed on.
    unsafe { (real().close)(fd) }
}

/// Before `new` is replaced by a duplicate of `old`: what herdless holds under `new` goes, if
/// the duplication can succeed (`old` open, `new` another number).
fn replacing(old: RawFd, new: RawFd) {
    if !ACTIVE.load(SeqCst) || old == new {
        return;
    }
    let Some(_inside) = Inside::enter() else {
        return;
    };
    // SAFETY: fcntl of a number; -1 for a closed one.
    if unsafe { libc::fcntl(old, libc::F_GETFD) } < 0 {
        return;
    }
    guarded(|| {
        epoll::closing(new);
        0
    });
}

/// # Safety
///
/// As the C library's `dup2`.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    replacing(old, new);
    // SAFETY: the program's call, passed on.
    unsafe { (real().dup2)(old, new) }
}

/// # Safety
///
/// As the C library's `dup3`.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    replacing(old, new);
    // SAFETY: the program's call, passed on.
    unsafe { (real().dup3)(old, new, flags) }
}
