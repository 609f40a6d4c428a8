//! The soak's service queues: POSIX message queues the supervisor creates (numbered in order of
//! creation, one name per run and backend), sends to, watches while they drain, empties itself
//! when the servers left something in them, and unlinks. A request is 16 bytes: its id and its
//! deadline (CLOCK_MONOTONIC ns). Every queue the supervisor made is unlinked when its
//! [`ServiceQueue`] is dropped, however the run ends.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Bytes of one request: id, deadline.
pub const REQUEST_BYTES: usize = 16;
/// The queue's depth: the ceiling an unprivileged process gets (`fs.mqueue.msg_max`'s default).
pub const DEPTH: i64 = 10;

/// The name of queue `no` of this run (`/herdless-soak-<pid>-<backend>-<no>`).
pub fn name(backend: &str, no: u64) -> String {
    format!("/herdless-soak-{}-{backend}-{no}", std::process::id())
}

/// One queue, as the supervisor holds it: read and write, non-blocking.
pub struct ServiceQueue {
    pub name: String,
    fd: OwnedFd,
}

impl ServiceQueue {
    /// Creates queue `no` (a queue of that name left by an earlier run of this pid is removed).
    pub fn create(backend: &str, no: u64) -> io::Result<ServiceQueue> {
        let name = name(backend, no);
        let c_name = CString::new(name.clone()).map_err(io::Error::other)?;
        // SAFETY: a valid NUL-terminated name.
        unsafe { libc::mq_unlink(c_name.as_ptr()) };
        let fd = crate::queue::create_mq(
            &c_name,
            DEPTH,
            REQUEST_BYTES,
            libc::O_RDWR | libc::O_NONBLOCK,
        )?;
        super::guard::remember(false, &name);
        Ok(ServiceQueue { name, fd })
    }

    /// The descriptor the client sends on.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Messages in the queue now.
    pub fn depth(&self) -> io::Result<i64> {
        // SAFETY: mq_attr is plain data.
        let mut attr: libc::mq_attr = unsafe { std::mem::zeroed() };
        // SAFETY: our own queue descriptor and a live out-parameter.
        if unsafe { libc::mq_getattr(self.fd.as_raw_fd(), &mut attr) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(attr.mq_curmsgs as i64)
    }

    /// Takes one request out of the queue, if there is one: (id, deadline).
    pub fn take(&self) -> io::Result<Option<(u64, u64)>> {
        receive(self.fd.as_raw_fd())
    }
}

impl Drop for ServiceQueue {
    fn drop(&mut self) {
        if let Ok(name) = CString::new(self.name.clone()) {
            // SAFETY: a valid NUL-terminated name.
            unsafe { libc::mq_unlink(name.as_ptr()) };
        }
        super::guard::forget(&self.name);
    }
}

/// Sends one request, non-blocking: `Ok(false)` if the queue is full.
pub fn send(fd: RawFd, id: u64, deadline_ns: u64) -> io::Result<bool> {
    let mut buf = [0u8; REQUEST_BYTES];
    buf[..8].copy_from_slice(&id.to_ne_bytes());
    buf[8..].copy_from_slice(&deadline_ns.to_ne_bytes());
    loop {
        // SAFETY: sends 16 bytes from a live buffer on a queue descriptor of this process.
        if unsafe { libc::mq_send(fd, buf.as_ptr().cast(), REQUEST_BYTES, 0) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(false),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// Receives one request from a non-blocking queue descriptor: (id, deadline), or `None`
/// (`EAGAIN`).
pub fn receive(fd: RawFd) -> io::Result<Option<(u64, u64)>> {
    let mut buf = [0u8; REQUEST_BYTES];
    loop {
        // SAFETY: receives into a live buffer of the queue's message size.
        let n = unsafe {
            libc::mq_receive(
                fd,
                buf.as_mut_ptr().cast(),
                REQUEST_BYTES,
                std::ptr::null_mut(),
            )
        };
        if n == REQUEST_BYTES as isize {
            let word = |i: usize| u64::from_ne_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
            return Ok(Some((word(0), word(8))));
        }
        if n >= 0 {
            return Err(io::Error::other(format!("a request of {n} bytes")));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(None),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// Whether a queue of that name exists now (for the end-of-run count of what is left).
pub fn exists(name: &str) -> bool {
    let Ok(c_name) = CString::new(name) else {
        return false;
    };
    // SAFETY: a valid name; opens an existing queue or fails.
    let fd = unsafe { libc::mq_open(c_name.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    // SAFETY: the descriptor just opened, ours alone.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    true
}
