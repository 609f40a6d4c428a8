//! Linux: epoll as herdless uses it (`epoll`, the emulation's poller's kernel wait) and the
//! native backend (`native`: one epoll per waiter, `EPOLLEXCLUSIVE`, rotation; its probes,
//! eventfds, pidfds and shared-memory region in `native/`), and signal sets and the thread's
//! signal mask (`signals`). The calls Linux shares with every Unix are in `crate::sys::unix`.

// On polling's poll(2) backend (`--cfg polling_test_poll_backend`) the emulation waits through
// `polling`, and the native backend uses its own calls (`native/kernel.rs`).
#[cfg_attr(polling_test_poll_backend, allow(dead_code))]
pub(crate) mod epoll;
#[cfg(not(loom))]
pub(crate) mod native;
#[cfg(not(loom))]
pub(crate) mod signals;
