//! Socket-lab plumbing shared by `herd accept`, `herd drain` and `herd restart`: listeners
//! (plain or `SO_REUSEPORT`), a thin raw-epoll handle for the setups that must be exactly the
//! experiments' system calls. (Pipes, shared counters, the /proc check that a process sleeps in
//! its wait come from `herdless-fixtures`; resource usage from `exec`.) Kept raw on purpose: the
//! raw setups are the baseline herdless is measured against, so nothing of herdless may hide in
//! them.

use std::io;
use std::net::{SocketAddr, SocketAddrV4, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{self, sockopt, AddressFamily, Backlog, SockFlag, SockType, SockaddrIn};

/// A non-blocking TCP listener on `addr` (port 0: any), with `SO_REUSEPORT` if asked, so that
/// several listeners can share one port and the kernel hashes connections over them.
pub fn listener(addr: SocketAddrV4, reuseport: bool) -> io::Result<TcpListener> {
    let fd = socket::socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    socket::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    if reuseport {
        socket::setsockopt(&fd, sockopt::ReusePort, &true)?;
    }
    socket::bind(fd.as_raw_fd(), &SockaddrIn::from(addr))?;
    socket::listen(&fd, Backlog::new(4096).unwrap_or(Backlog::MAXCONN))?;
    Ok(TcpListener::from(fd))
}

/// The IPv4 address a listener is bound to.
pub fn v4_addr(listener: &TcpListener) -> io::Result<SocketAddrV4> {
    match listener.local_addr()? {
        SocketAddr::V4(a) => Ok(a),
        SocketAddr::V6(_) => Err(io::Error::other("listener is not IPv4")),
    }
}

/// `n` listeners on one loopback port, all with `SO_REUSEPORT`.
pub fn reuseport_group(n: usize) -> io::Result<Vec<TcpListener>> {
    let first = listener(SocketAddrV4::new([127, 0, 0, 1].into(), 0), true)?;
    let addr = v4_addr(&first)?;
    let mut all = vec![first];
    for _ in 1..n {
        all.push(listener(addr, true)?);
    }
    Ok(all)
}

/// Accepts one pending connection, non-blocking; `Ok(None)` when there is none (EAGAIN).
pub fn accept_one(listener: RawFd) -> io::Result<Option<OwnedFd>> {
    // SAFETY: accept4 on a listening descriptor we hold; null address pointers are allowed.
    let fd = unsafe {
        libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if fd >= 0 {
        // SAFETY: accept4 returned a fresh descriptor that nothing else owns.
        return Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }));
    }
    let err = io::Error::last_os_error();
    match err.kind() {
        io::ErrorKind::WouldBlock => Ok(None),
        // A connection reset before we took it: nothing to count, try the next.
        io::ErrorKind::ConnectionAborted | io::ErrorKind::Interrupted => accept_one(listener),
        _ => Err(err),
    }
}

/// A raw epoll instance: exactly the experiments' system calls, nothing of herdless in between.
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes a flag and returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor that nothing else owns.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, flags: u32, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: flags,
            u64: data,
        };
        // SAFETY: our epoll descriptor, a caller's descriptor and a live event struct.
        if unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub fn add(&self, fd: RawFd, flags: u32, data: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, flags, data)
    }

    pub fn modify(&self, fd: RawFd, flags: u32, data: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, flags, data)
    }

    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits up to `timeout_ms` (-1: forever); an interrupting signal returns 0 events.
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> io::Result<usize> {
        // SAFETY: the buffer is live and its length bounds what the kernel writes.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as libc::c_int,
                timeout_ms,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            io::ErrorKind::Interrupted => Ok(0),
            _ => Err(err),
        }
    }
}

/// A zeroed epoll event buffer of `n` entries.
pub fn event_buffer(n: usize) -> Vec<libc::epoll_event> {
    vec![libc::epoll_event { events: 0, u64: 0 }; n]
}
