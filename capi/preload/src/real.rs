//! The C library's own calls, found once with `dlsym(RTLD_NEXT, name)`: the definitions that
//! come after this library in the lookup order (and glibc's `__poll_chk` and `__ppoll_chk`,
//! which programs built with `_FORTIFY_SOURCE` call instead of `poll` and `ppoll`). `epoll_pwait2` (glibc 2.35) falls back to its
//! system call where the C library has no such function.

use libc::{c_int, c_void, epoll_event, nfds_t, pollfd, sigset_t, timespec};
use std::sync::OnceLock;

type EpollCreate = unsafe extern "C" fn(c_int) -> c_int;
type EpollCtl = unsafe extern "C" fn(c_int, c_int, c_int, *mut epoll_event) -> c_int;
type EpollWait = unsafe extern "C" fn(c_int, *mut epoll_event, c_int, c_int) -> c_int;
type EpollPwait =
    unsafe extern "C" fn(c_int, *mut epoll_event, c_int, c_int, *const sigset_t) -> c_int;
type EpollPwait2 =
    unsafe extern "C" fn(c_int, *mut epoll_event, c_int, *const timespec, *const sigset_t) -> c_int;
type Poll = unsafe extern "C" fn(*mut pollfd, nfds_t, c_int) -> c_int;
type Ppoll = unsafe extern "C" fn(*mut pollfd, nfds_t, *const timespec, *const sigset_t) -> c_int;
type PollChk = unsafe extern "C" fn(*mut pollfd, nfds_t, c_int, usize) -> c_int;
type PpollChk =
    unsafe extern "C" fn(*mut pollfd, nfds_t, *const timespec, *const sigset_t, usize) -> c_int;
type Close = unsafe extern "C" fn(c_int) -> c_int;
type Dup2 = unsafe extern "C" fn(c_int, c_int) -> c_int;
type Dup3 = unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;

/// The next definition of each interposed call.
pub(crate) struct Real {
    pub(crate) epoll_create: EpollCreate,
    pub(crate) epoll_create1: EpollCreate,
    pub(crate) epoll_ctl: EpollCtl,
    pub(crate) epoll_wait: EpollWait,
    pub(crate) epoll_pwait: EpollPwait,
    pub(crate) epoll_pwait2: EpollPwait2,
    pub(crate) poll: Poll,
    pub(crate) ppoll: Ppoll,
    pub(crate) poll_chk: PollChk,
    pub(crate) ppoll_chk: PpollChk,
    pub(crate) close: Close,
    pub(crate) dup2: Dup2,
    pub(crate) dup3: Dup3,
}

/// `epoll_pwait2` as a system call, for a C library without the function.
unsafe extern "C" fn epoll_pwait2_syscall(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's arguments, passed on as the kernel's epoll_pwait2 takes them (the
    // sigset's size is the kernel's, 8 bytes).
    unsafe {
        libc::syscall(
            libc::SYS_epoll_pwait2,
            epfd,
            events,
            max,
            timeout,
            sigmask,
            8usize,
        ) as c_int
    }
}

/// The address of the next definition of `name` (NUL-terminated), or null.
fn next(name: &[u8]) -> *mut c_void {
    debug_assert_eq!(name.last(), Some(&0));
    // SAFETY: `name` is NUL-terminated; RTLD_NEXT looks after this library.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) }
}

macro_rules! resolve {
    ($name:literal, $ty:ty) => {{
        let f = next(concat!($name, "\0").as_bytes());
        if f.is_null() {
            // Every C library on Linux defines it: without it the process cannot run on.
            let msg = concat!("libherdless_preload: the C library has no ", $name, "\n");
            // SAFETY: a live buffer of its length; abort ends the process.
            unsafe {
                libc::write(2, msg.as_ptr().cast(), msg.len());
                libc::abort()
            }
        }
        // SAFETY: dlsym found the C library's function of that name, whose type is $ty.
        unsafe { std::mem::transmute::<*mut c_void, $ty>(f) }
    }};
}

/// The C library's calls, resolved at the first use.
pub(crate) fn real() -> &'static Real {
    static REAL: OnceLock<Real> = OnceLock::new();
    REAL.get_or_init(|| {
        let pwait2 = next(b"epoll_pwait2\0");
        Real {
            epoll_create: resolve!("epoll_create", EpollCreate),
            epoll_create1: resolve!("epoll_create1", EpollCreate),
            epoll_ctl: resolve!("epoll_ctl", EpollCtl),
            epoll_wait: resolve!("epoll_wait", EpollWait),
            epoll_pwait: resolve!("epoll_pwait", EpollPwait),
            epoll_pwait2: match pwait2.is_null() {
                true => epoll_pwait2_syscall,
                // SAFETY: the C library's epoll_pwait2, of this type.
                false => unsafe { std::mem::transmute::<*mut c_void, EpollPwait2>(pwait2) },
            },
            poll: resolve!("poll", Poll),
            ppoll: resolve!("ppoll", Ppoll),
            poll_chk: resolve!("__poll_chk", PollChk),
            ppoll_chk: resolve!("__ppoll_chk", PpollChk),
            close: resolve!("close", Close),
            dup2: resolve!("dup2", Dup2),
            dup3: resolve!("dup3", Dup3),
        }
    })
}
