//! Native backends, one module per OS family, picked here with `cfg_if`.
//!
//! Every native backend provides the same small surface, used by `waiter.rs`:
//!
//! - `probe() -> Result<(), String>`: can this kernel give exclusive wake-ups? (the reason if not)
//! - `NativeWaiter::{new, add, modify, delete, wait, consumed, notifier}`;
//! - `NativeNotifier::notify`, cheap to clone and `Send + Sync`;
//! - `ring_idle`: hands readiness on to an idle member (after a dead member is reaped);
//! - `region`, `check_region`: what a native group keeps in the shared memory after its member
//!   slots, and the check of a named group's; `clear_out`: the backend's part of a reap.
//!
//! Linux has one (`EPOLLEXCLUSIVE` plus rotation). Elsewhere (and under loom) `unsupported` answers the probe
//! with the reason and its types cannot be built, so `Backend::Native` is a clear error and
//! `Backend::Auto` picks the emulation.

cfg_if::cfg_if! {
    // Under the model checker (`--cfg loom`) only the emulation's protocol is modelled: the
    // native backend's kernel objects (its door bells) are left out with it.
    if #[cfg(all(any(target_os = "linux", target_os = "android"), not(loom)))] {
        mod linux;
        pub(crate) use linux::{
            check_region, clear_out, probe, region, ring_idle, NativeNotifier, NativeWaiter,
        };
    } else {
        mod unsupported;
        pub(crate) use unsupported::{
            check_region, clear_out, probe, region, ring_idle, NativeNotifier, NativeWaiter,
        };
    }
}
