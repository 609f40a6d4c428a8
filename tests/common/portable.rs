//! Helpers for the portable conformance tests (`tests/portable_*.rs`): what they need on every
//! system herdless runs on, Windows included. Loopback UDP and TCP sockets stand in for pipes
//! (on Windows `polling` watches sockets only), raw numbers are borrowed as the platform's source
//! type, and `every_backend!` (from `herdless-fixtures`) runs each behaviour once per backend,
//! skipping loudly where a backend does not exist. Nothing here uses `/proc`, `fork` or Unix descriptors.
//!
//! The Unix-only helpers (pipes, kernel counters, forked members) are in `common/mod.rs`.
#![allow(dead_code)]

use std::io;
use std::net::{TcpListener, TcpStream, UdpSocket};

use herdless::RawSource;
#[allow(unused_imports)] // each test binary uses a part
pub use herdless_fixtures::{every_backend, wait_keys, WAIT_BOUND};

/// A UDP "pipe" on loopback: (receiving socket, non-blocking; sending socket, connected to it).
/// Each datagram is one message, and a datagram left unread keeps the receiver readable.
pub fn udp_pair() -> (UdpSocket, UdpSocket) {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_nonblocking(true).unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    (rx, tx)
}

/// A connected TCP pair on loopback: (reading end, non-blocking; writing end).
pub fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let tx = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (rx, _) = listener.accept().unwrap();
    rx.set_nonblocking(true).unwrap();
    (rx, tx)
}

/// Sends message `id` (8 bytes) as one datagram.
pub fn send_msg(tx: &UdpSocket, id: u64) {
    assert_eq!(tx.send(&id.to_ne_bytes()).unwrap(), 8);
}

/// Receives one message; `None` if there was none (an empty wake-up).
pub fn recv_msg(rx: &UdpSocket) -> Option<u64> {
    let mut buf = [0u8; 8];
    match rx.recv(&mut buf) {
        Ok(8) => Some(u64::from_ne_bytes(buf)),
        Ok(n) => panic!("a datagram of {n} bytes, not 8"),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
        Err(e) => panic!("recv: {e}"),
    }
}

/// The platform's borrowed source for a raw number.
#[cfg(unix)]
pub type Borrowed = std::os::fd::BorrowedFd<'static>;
/// The platform's borrowed source for a raw number.
#[cfg(windows)]
pub type Borrowed = std::os::windows::io::BorrowedSocket<'static>;

/// Borrows a raw number as the platform's source type.
///
/// # Safety
/// Only for numbers herdless must inspect and refuse (closed, never opened, not a socket), or
/// that the caller keeps open while they are used.
pub unsafe fn borrow(raw: RawSource) -> Borrowed {
    #[cfg(unix)]
    // SAFETY: as the caller promised.
    return unsafe { std::os::fd::BorrowedFd::borrow_raw(raw) };
    #[cfg(windows)]
    // SAFETY: as the caller promised.
    return unsafe { std::os::windows::io::BorrowedSocket::borrow_raw(raw) };
}

/// The raw number of a socket.
pub fn raw<S>(socket: &S) -> RawSource
where
    S: herdless::AsSource,
{
    #[cfg(unix)]
    return std::os::fd::AsRawFd::as_raw_fd(&socket.as_fd());
    #[cfg(windows)]
    return std::os::windows::io::AsRawSocket::as_raw_socket(&socket.as_socket());
}

/// The number of a socket that was open and is closed now. On Unix it is moved high first:
/// other tests of this process open descriptors meanwhile, and they get the lowest free numbers.
/// (On Windows run the test binary with `--test-threads=1`, as `.ci/run` does.)
pub fn closed_socket() -> RawSource {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: duplicates our own open socket to a free number at or above 4000 (below any
        // usual limit of open files); the copy is closed right away below.
        let high = unsafe { libc::fcntl(socket.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 4000) };
        assert!(high >= 0, "F_DUPFD: {}", io::Error::last_os_error());
        // SAFETY: closes the copy we just made and nothing else holds.
        unsafe { libc::close(high) };
        high
    }
    #[cfg(windows)]
    {
        let number = raw(&socket);
        drop(socket);
        number
    }
}

/// A number that was never an open descriptor or handle in this process.
pub fn never_opened() -> RawSource {
    #[cfg(unix)]
    return 1_000_000;
    // Windows handles are multiples of 4 counted from the bottom; this one is far above.
    #[cfg(windows)]
    return 0x1234_5670;
}

/// An open regular file (this test program), and its raw number: open, but no socket and
/// nothing to poll.
pub fn regular_file() -> (std::fs::File, RawSource) {
    let file = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
    #[cfg(unix)]
    let number = std::os::fd::AsRawFd::as_raw_fd(&file);
    #[cfg(windows)]
    let number = std::os::windows::io::AsRawHandle::as_raw_handle(&file) as usize as RawSource;
    (file, number)
}
