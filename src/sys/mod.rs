//! What each operating system gives herdless, one module per OS family, picked here with
//! `cfg_if` (mio's `sys/` is the model): the kernel objects themselves, wrapped once, so that
//! the code above them names what it needs and not how each system spells it.
//!
//! What an OS module provides, where it has it:
//!
//! - `epoll`: an epoll instance (close-on-exec), level-triggered entries with a 64-bit datum,
//!   and a wait into a reusable buffer that hands `EINTR` back (Linux; the emulation's poller
//!   there, `crate::emulated::poller`).
//!
//! Other systems provide nothing here yet: the emulation waits through `polling` (kqueue,
//! poll(2)) or its IOCP poller, and their few other calls stay beside their one user.

cfg_if::cfg_if! {
    if #[cfg(any(target_os = "linux", target_os = "android"))] {
        mod linux;
        // (Unused on polling's poll(2) backend: `linux`'s note.)
        #[cfg_attr(polling_test_poll_backend, allow(unused_imports))]
        pub(crate) use linux::epoll;
    }
}
