//! `libherdless_preload.so`: herdless for programs that cannot be rebuilt (Linux).
//!
//! Loaded with `LD_PRELOAD`, the library stands in front of the C library's `epoll_create`,
//! `epoll_create1`, `epoll_ctl`, `epoll_wait`, `epoll_pwait`, `epoll_pwait2`, `poll`, `ppoll`,
//! `close`, `dup2` and `dup3`:
//!
//! - a program's own `epoll_ctl(epfd, EPOLL_CTL_ADD, fd, {EPOLLEXCLUSIVE | ..})` of a
//!   non-blocking, level-triggered descriptor is held by a herdless waiter of that epoll
//!   instance, a member of the object's line (`herdless::join_line`: the implicit group of the
//!   object's permission class, on the backend `HERDLESS_BACKEND` chooses), instead of by the
//!   kernel's epoll; the instance's other registrations stay in the kernel's epoll, which the
//!   waiter watches as one more descriptor. `epoll_wait` on the instance waits in the waiter
//!   (blocking, no spinning), and returns the program's own `epoll_data`; its next
//!   `epoll_wait` on the instance is the consumed point (the member goes to the back of the
//!   line). See `epoll`.
//! - a `poll`/`ppoll` whose array has `HERDLESS_POLLEXCL` (0x0800) or `HERDLESS_POLLONE`
//!   (0x4000) in some `events` is `herdless::poll`; see `hooks`.
//! - everything else goes to the C library untouched, found with `dlsym(RTLD_NEXT)` (`real`).
//!
//! herdless itself calls epoll, poll and close: inside the library, a thread-local flag sends
//! every call straight to the C library (`hooks::Inside`). On other systems the crate is empty.

#[cfg(target_os = "linux")]
mod epoll;
#[cfg(target_os = "linux")]
mod hooks;
#[cfg(target_os = "linux")]
mod real;
