//! Everything herdless asks of the operating system, one place per OS family (mio's `sys/` is
//! the model), picked here with `cfg_if`:
//!
//! - `unix`: the calls every Unix system has, wrapped once (descriptors known by number,
//!   `fstat`, `fcntl`, `poll(2)`, `kcmp`, record locks, group membership, shared mappings, the
//!   clock, whether a process is there); the rest of the crate calls these, not libc;
//! - `linux`: epoll as herdless uses it (`linux::epoll`, the emulation's poller there) and the
//!   native backend (`linux::native`: `EPOLLEXCLUSIVE` plus rotation, its eventfds, pidfds and
//!   the region it keeps in the shared memory), and signal sets and masks (`linux::signals`,
//!   through nix: a poll-shaped wait's and a nested waiter's thread's);
//! - `unsupported`: the native backend where there is none (every other system, and the model
//!   checker's build).
//!
//! `native` is the native backend picked for this build. Every native backend provides the
//! same small surface, used by `waiter.rs`, `group.rs` and `inner.rs`:
//!
//! - `probe() -> Result<(), String>`: can this kernel give exclusive wake-ups? (the reason if not)
//! - `NativeWaiter::{new, add, modify, delete, wait, consumed, notifier}`;
//! - `NativeNotifier::notify`, cheap to clone and `Send + Sync`;
//! - `ring_idle`: hands readiness on to an idle member (after a dead member is reaped);
//! - `region`, `check_region`: what a native group keeps in the shared memory after its member
//!   slots, and the check of a named group's; `clear_out`: the backend's part of a reap.
//!
//! Elsewhere `unsupported` answers the probe with the reason and its types cannot be built, so
//! `Backend::Native` is a clear error and `Backend::Auto` picks the emulation. What the
//! emulation needs of each system beyond these (its pollers, a descriptor's identity) is under
//! `crate::emulated` (`poller/`, `identity.rs`, `other_unix.rs`, `windows.rs`).

#[cfg(unix)]
pub(crate) mod unix;

cfg_if::cfg_if! {
    if #[cfg(any(target_os = "linux", target_os = "android"))] {
        mod linux;
        // (Unused on polling's poll(2) backend: `linux`'s note.)
        #[cfg_attr(polling_test_poll_backend, allow(unused_imports))]
        pub(crate) use linux::epoll;
    }
}

cfg_if::cfg_if! {
    // Under the model checker (`--cfg loom`) only the emulation's protocol is modelled: the
    // native backend's kernel objects (its door bells) are left out with it.
    if #[cfg(all(any(target_os = "linux", target_os = "android"), not(loom)))] {
        pub(crate) use linux::native;
        pub(crate) use linux::signals;
    } else {
        pub(crate) mod unsupported;
        pub(crate) use unsupported as native;
    }
}
