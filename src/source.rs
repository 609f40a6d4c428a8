//! What can be registered: a borrowed descriptor (Unix) or socket (Windows).
//!
//! The public API takes `&S` for any `S: AsSource`, which every type that lends its descriptor
//! implements (`AsFd` on Unix, `AsSocket` on Windows), as `mio` does: a registration can never
//! name a descriptor the caller does not hold, and since it only borrows, it never takes (and
//! so never closes) a descriptor the caller owns.

/// Anything whose descriptor a [`Waiter`](crate::Waiter) can watch: on Unix every `AsFd` type,
/// on Windows every `AsSocket` type, and references to them.
///
/// You never implement it: it comes with `AsFd` (`AsSocket`). [`Waiter::add`](crate::Waiter::add)
/// takes a reference, so the descriptor stays yours and open: `waiter.add(&listener, 0,
/// interest)`; an owned descriptor passed by value does not compile. Examples of what qualifies:
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
/// use herdless::{AsSource, Group, Interest, Waiter};
/// use std::net::TcpListener;
///
/// fn watch<S: AsSource + ?Sized>(waiter: &mut Waiter, source: &S) -> herdless::Result<()> {
///     waiter.add(source, 0, Interest::SHARED)
/// }
///
/// let listener = TcpListener::bind("127.0.0.1:0")?;
/// listener.set_nonblocking(true)?;
/// let group = Group::new()?;
/// let mut waiter = group.join()?;
/// watch(&mut waiter, &listener)?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// An owned descriptor given by value would be closed when the call returned; `add` borrows,
/// so that does not compile:
///
/// ```compile_fail,E0308
/// # use herdless::{Group, Interest};
/// let (rx, _tx) = std::os::unix::net::UnixStream::pair()?;
/// let owned: std::os::fd::OwnedFd = rx.into();
/// let mut waiter = Group::new()?.join()?;
/// waiter.add(owned, 0, Interest::READABLE)?; // expected `&_`, found `OwnedFd`
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

use crate::error::{RawSource, Result};

/// The raw number of a borrowed source (used as the registration's identity).
pub(crate) fn raw_of<S: AsSource + ?Sized>(source: &S) -> RawSource {
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

/// Refuses an `exclusive` registration of a descriptor in blocking mode
/// ([`Error::BlockingDescriptor`](crate::Error::BlockingDescriptor)): one `fcntl(F_GETFL)`.
///
/// Why exclusive only: the hazard is a wake-up that finds nothing, and that comes from sharing
/// (another member read the message first). `exclusive` is the registration that says the
/// descriptor is shared by the group; one without it, `one_event_round_robin` alone included,
/// may be a member's private descriptor (a stop pipe, a connection), where a level-triggered
/// wake-up always finds something, so it is not refused (a descriptor shared *without*
/// `exclusive` wakes every member and must be non-blocking too: the docs say so).
///
/// What the kernel would refuse anyway keeps its own error: a number that is not open
/// (`BadDescriptor`), a regular file, a directory, `/dev/null`, an epoll descriptor
/// (`UnwatchableDescriptor`). So a blocking descriptor is refused only once it is known to be
/// one the poller takes (`watchable`), which costs nothing on the way that succeeds.
///
/// POSIX message queues carry `O_NONBLOCK` in their file flags on Linux (`mq_open`'s flag, or
/// `mq_setattr`), so they are checked like pipes and sockets. On Windows a socket's blocking
/// mode cannot be read back (Winsock has no query for `FIONBIO`), so nothing is checked there.
pub(crate) fn check_nonblocking(fd: RawSource, interest: crate::interest::Interest) -> Result<()> {
    if !interest.is_exclusive() {
        return Ok(());
    }
    #[cfg(unix)]
    {
        let blocking = crate::sys::unix::status_flags(fd).is_ok_and(|f| f & libc::O_NONBLOCK == 0);
        if blocking && watchable(fd) {
            return Err(crate::error::Error::BlockingDescriptor { fd });
        }
    }
    #[cfg(not(unix))]
    let _ = fd;
    Ok(())
}

/// Would the kernel watch `fd` exclusively? Linux: asked of a throwaway epoll instance with the
/// native backend's own flags (`EPOLLIN | EPOLLEXCLUSIVE`), which refuses what either backend
/// refuses (regular files, directories, `/dev/null`, epoll descriptors) and takes pipes,
/// sockets, message queues, FIFOs. Elsewhere: pipes, FIFOs and sockets, by their file type.
/// Runs only for a blocking descriptor, on the way to an error.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn watchable(fd: RawSource) -> bool {
    use rustix::event::epoll;
    let Ok(probe) = epoll::create(epoll::CreateFlags::CLOEXEC) else {
        return true; // no probe: the blocking mode is what is known
    };
    let flags = epoll::EventFlags::IN | epoll::EventFlags::EXCLUSIVE;
    // (The entry dies with the instance, closed on return.)
    crate::sys::unix::by_number(fd)
        .is_ok_and(|fd| epoll::add(&probe, fd, epoll::EventData::new_u64(0), flags).is_ok())
}

#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
fn watchable(fd: RawSource) -> bool {
    crate::sys::unix::fstat(fd)
        .is_ok_and(|st| matches!(st.st_mode & libc::S_IFMT, libc::S_IFIFO | libc::S_IFSOCK))
}
