//! Native backends, one module per OS family, picked here with `cfg_if`.
//!
//! Every native backend provides the same small surface, used by `waiter.rs`:
//!
//! - `probe() -> Result<(), String>`: can this kernel give exclusive wake-ups? (the reason if not)
//! - `NativeWaiter::{new, add, modify, delete, wait, consumed, notifier}`;
//! - `NativeNotifier::notify`, cheap to clone and `Send + Sync`;
//! - `ring_idle`: hands readiness on to an idle member (after a dead member is reaped).
//!
//! Linux has one (`EPOLLEXCLUSIVE` plus rotation). Elsewhere `unsupported` answers the probe
//! with the reason and its types cannot be built, so `Backend::Native` is a clear error and
//! `Backend::Auto` picks the emulation.

cfg_if::cfg_if! {
    if #[cfg(any(target_os = "linux", target_os = "android"))] {
        mod linux;
        pub(crate) use linux::{probe, ring_idle, NativeNotifier, NativeWaiter};
    } else {
        mod unsupported;
        pub(crate) use unsupported::{probe, ring_idle, NativeNotifier, NativeWaiter};
    }
}
