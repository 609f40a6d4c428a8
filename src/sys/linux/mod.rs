//! Linux: the kernel objects herdless wraps itself (`epoll`).

// On polling's poll(2) backend (`--cfg polling_test_poll_backend`) the emulation waits through
// `polling`, and nothing else calls this module yet.
#[cfg_attr(polling_test_poll_backend, allow(dead_code))]
pub(crate) mod epoll;
