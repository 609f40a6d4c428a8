//! The contract's own words besides errors and interests: which backend delivers the wake-ups,
//! and how many members a group may have.
//!
//! With `error.rs` and `interest.rs` this is the contract layer, the vocabulary every other room
//! of the crate speaks: the three import nothing of the crate but one another, so the backends
//! (`platform/`, `emulated/`) and the shared state below the handles can use them without
//! reaching up to `group.rs` or `waiter.rs`.

/// Which mechanism delivers exclusive, fair wake-ups.
///
/// | OS      | `Auto` resolves to | `Native` | `Emulated` |
/// |---------|--------------------|----------|------------|
/// | Linux   | `Native` (`EPOLLEXCLUSIVE` + rotation) if the kernel takes the flag, else `Emulated` | yes | yes |
/// | others  | `Emulated` (token passing over `polling`) | error | yes |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The best backend this system supports.
    Auto,
    /// The kernel's own exclusive wake-ups (Linux `EPOLLEXCLUSIVE`), rotated by delete and re-add.
    Native,
    /// Userspace token passing (Leader/Followers) on top of the `polling` crate.
    Emulated,
}

/// The default number of member slots.
pub const DEFAULT_MAX_MEMBERS: usize = 64;
/// The most member slots a group may have.
pub const MAX_MEMBERS_LIMIT: usize = 4096;
