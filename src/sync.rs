//! The atomics of the shared state: the standard ones, or loom's under `--cfg loom`, so that the
//! model checker can explore every interleaving of the token protocol (see `emulated/protocol.rs`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64};

/// Lets another thread run (under the model checker, lets loom switch threads).
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}
