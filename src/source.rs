//! What can be registered: a borrowed descriptor (Unix) or socket (Windows).
//!
//! The public API takes `impl AsSource`, which every type that lends its descriptor implements
//! (`impl AsFd` on Unix, `impl AsSocket` on Windows), as `polling` and `mio` do: a registration
//! can never name a descriptor the caller does not hold.

/// Anything whose descriptor a [`Waiter`](crate::Waiter) can watch: on Unix every `AsFd` type,
/// on Windows every `AsSocket` type, and references to them.
///
/// You never implement it: it comes with `AsFd` (`AsSocket`). Pass a reference, so the
/// descriptor stays yours: `waiter.add(&listener, 0, interest)`. Examples of what qualifies:
/// [`TcpListener`](std::net::TcpListener), [`UdpSocket`](std::net::UdpSocket),
/// [`UnixListener`](std::os::unix::net::UnixListener), a pipe's read end or a POSIX message
/// queue's descriptor held as an [`OwnedFd`](std::os::fd::OwnedFd) or lent as a
/// [`BorrowedFd`](std::os::fd::BorrowedFd).
///
/// What the kernel will watch is checked at [`Waiter::add`](crate::Waiter::add): a regular file
/// or a directory is refused with [`Error::UnwatchableDescriptor`](crate::Error).
///
/// ```
/// # #[cfg(unix)] {
/// use herdless::{AsSource, Group, Interest};
/// use std::net::TcpListener;
///
/// fn watch(waiter: &mut herdless::Waiter, source: impl AsSource) -> herdless::Result<()> {
///     waiter.add(source, 0, Interest::READABLE.exclusive())
/// }
///
/// let listener = TcpListener::bind("127.0.0.1:0")?;
/// listener.set_nonblocking(true)?;
/// let group = Group::builder().build()?;
/// let mut waiter = group.join()?;
/// watch(&mut waiter, &listener)?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg(unix)]
pub trait AsSource: std::os::fd::AsFd {}
#[cfg(unix)]
impl<T: std::os::fd::AsFd + ?Sized> AsSource for T {}

/// Anything whose socket a [`Waiter`](crate::Waiter) can watch: every `AsSocket` type, and
/// references to them. You never implement it: it comes with `AsSocket`.
#[cfg(windows)]
pub trait AsSource: std::os::windows::io::AsSocket {}
#[cfg(windows)]
impl<T: std::os::windows::io::AsSocket + ?Sized> AsSource for T {}

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
