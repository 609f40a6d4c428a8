//! What herdless's own pollers (`epoll`, `windows`) take to add, as `polling`'s take its
//! `AsRawSource`: a raw descriptor (on Windows, a socket), which the caller vouches is open, or
//! a borrowed one.

use crate::error::RawSource;

pub(crate) trait AsRawSource {
    fn raw(self) -> RawSource;
}

impl AsRawSource for RawSource {
    fn raw(self) -> RawSource {
        self
    }
}

#[cfg(unix)]
impl<T: std::os::fd::AsFd> AsRawSource for &T {
    fn raw(self) -> RawSource {
        use std::os::fd::AsRawFd;
        self.as_fd().as_raw_fd()
    }
}

#[cfg(windows)]
impl<T: std::os::windows::io::AsSocket> AsRawSource for &T {
    fn raw(self) -> RawSource {
        use std::os::windows::io::AsRawSocket;
        self.as_socket().as_raw_socket()
    }
}
