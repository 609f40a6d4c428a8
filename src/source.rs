//! What can be registered: a borrowed descriptor (Unix) or socket (Windows).
//!
//! The public API takes `impl AsFd` on Unix, as `polling` and `mio` do, so a registration can
//! never name a descriptor the caller does not hold. On Windows, where `polling` watches
//! sockets, it takes `impl AsSocket`.

#[cfg(unix)]
pub use std::os::fd::AsFd as AsSource;
#[cfg(windows)]
pub use std::os::windows::io::AsSocket as AsSource;

use crate::error::RawSource;

/// The raw number of a borrowed source (used as the registration's identity).
pub(crate) fn raw_of(source: &impl AsSource) -> RawSource {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        source.as_fd().as_raw_fd()
    }
    #[cfg(windows)]
    {
        use std::os::windows::io::AsRawSocket;
        source.as_socket().as_raw_socket()
    }
}
