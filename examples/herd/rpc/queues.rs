//! The two POSIX message queues of one `herd rpc` row, as a C middleware lays them out: one
//! **service queue** that every server of the service waits on (non-blocking for them, so a
//! wake-up that finds it empty says `EAGAIN`), and one **reply queue of the client's** that the
//! servers open by name and answer on (the way Enduro/X and Tuxedo-like middleware answer:
//! the client owns its reply queue, whichever server took the call writes to it). A request is
//! the call's id (8 bytes); a reply is the call's id and the index of the server that took it
//! (16 bytes). Both queues get fresh names per row and are unlinked when the row ends.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// A request: the call's id.
const REQUEST_BYTES: usize = 8;
/// A reply: the call's id, then the index of the server that answered.
const REPLY_BYTES: usize = 16;
/// Depth of both queues: the default ceiling of `/proc/sys/fs/mqueue/msg_max`, so no root is
/// needed (one call is in flight at a time; the depth only has to hold it).
const DEPTH: i64 = 10;

/// The client's side of a row's two queues: it writes requests (blocking) and reads replies
/// (blocking, with a deadline). Unlinks both names when dropped.
pub struct Queues {
    pub request_name: String,
    pub reply_name: String,
    request: OwnedFd,
    reply: OwnedFd,
}

impl Queues {
    /// Creates a fresh service queue and reply queue (`/herdless-rpc-<pid>-<n>-req|-reply`).
    pub fn create() -> io::Result<Queues> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = format!(
            "/herdless-rpc-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Relaxed)
        );
        let (request_name, reply_name) = (format!("{base}-req"), format!("{base}-reply"));
        let request = create(&request_name, REQUEST_BYTES, libc::O_WRONLY)?;
        let reply = match create(&reply_name, REPLY_BYTES, libc::O_RDONLY) {
            Ok(fd) => fd,
            Err(e) => {
                unlink(&request_name);
                return Err(e);
            }
        };
        Ok(Queues {
            request_name,
            reply_name,
            request,
            reply,
        })
    }

    /// Sends call `id` on the service queue (blocking while it is full, which one call in
    /// flight never makes it).
    pub fn send_request(&self, id: u64) -> io::Result<()> {
        send(self.request.as_raw_fd(), &id.to_ne_bytes())
    }

    /// The next reply, `(call id, server index)`, or `None` if none came within `limit`.
    pub fn receive_reply(&self, limit: Duration) -> io::Result<Option<(u64, u64)>> {
        let deadline = realtime_after(limit);
        let mut buf = [0u8; REPLY_BYTES];
        loop {
            // SAFETY: receives at most REPLY_BYTES into a live buffer of that size, the queue's
            // message size; the deadline is a live timespec.
            let n = unsafe {
                libc::mq_timedreceive(
                    self.reply.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    REPLY_BYTES,
                    std::ptr::null_mut(),
                    &deadline,
                )
            };
            if n == REPLY_BYTES as isize {
                let word = |i: usize| u64::from_ne_bytes(buf[i..i + 8].try_into().expect("8"));
                return Ok(Some((word(0), word(8))));
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ETIMEDOUT) => return Ok(None),
                _ if n >= 0 => return Err(io::Error::other(format!("a reply of {n} bytes"))),
                _ => return Err(e),
            }
        }
    }

    /// Messages still queued: `(requests, replies)`. Both 0 after a row that lost nothing and
    /// answered nothing twice.
    pub fn pending(&self) -> io::Result<(i64, i64)> {
        Ok((
            queued(self.request.as_raw_fd())?,
            queued(self.reply.as_raw_fd())?,
        ))
    }
}

impl Drop for Queues {
    fn drop(&mut self) {
        unlink(&self.request_name);
        unlink(&self.reply_name);
    }
}

/// A server's side: the service queue, non-blocking, read-only; the client's reply queue,
/// write-only; both opened by name, as an exec'd server of a middleware opens them.
pub struct ServerQueues {
    pub request: OwnedFd,
    reply: OwnedFd,
}

impl ServerQueues {
    pub fn open(request_name: &str, reply_name: &str) -> io::Result<ServerQueues> {
        Ok(ServerQueues {
            request: open(request_name, libc::O_RDONLY | libc::O_NONBLOCK)?,
            reply: open(reply_name, libc::O_WRONLY)?,
        })
    }

    /// One request from the service queue: its id, or `None` if the queue was empty
    /// (`EAGAIN`: an empty wake-up).
    pub fn receive_request(&self) -> io::Result<Option<u64>> {
        let mut buf = [0u8; REQUEST_BYTES];
        loop {
            // SAFETY: receives at most REQUEST_BYTES into a live buffer of that size, the
            // queue's message size.
            let n = unsafe {
                libc::mq_receive(
                    self.request.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    REQUEST_BYTES,
                    std::ptr::null_mut(),
                )
            };
            if n == REQUEST_BYTES as isize {
                return Ok(Some(u64::from_ne_bytes(buf)));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(None),
                _ if n >= 0 => return Err(io::Error::other(format!("a request of {n} bytes"))),
                _ => return Err(e),
            }
        }
    }

    /// Answers call `id` on the client's reply queue, signed with this server's `index`.
    pub fn reply(&self, id: u64, index: u64) -> io::Result<()> {
        let mut buf = [0u8; REPLY_BYTES];
        buf[..8].copy_from_slice(&id.to_ne_bytes());
        buf[8..].copy_from_slice(&index.to_ne_bytes());
        send(self.reply.as_raw_fd(), &buf)
    }
}

/// Creates queue `name` (exclusively: a leftover of a killed run is removed first), messages
/// of `size` bytes, `DEPTH` deep, opened with `access`.
fn create(name: &str, size: usize, access: libc::c_int) -> io::Result<OwnedFd> {
    let c = CString::new(name).map_err(io::Error::other)?;
    // SAFETY: a valid NUL-terminated name.
    unsafe { libc::mq_unlink(c.as_ptr()) };
    crate::queue::create_mq(&c, DEPTH, size, access)
}

/// Opens the existing queue `name` with `flags` (close-on-exec).
fn open(name: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
    let c = CString::new(name).map_err(io::Error::other)?;
    // SAFETY: a valid NUL-terminated name; an existing queue needs no attributes.
    let fd = unsafe { libc::mq_open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::other(format!(
            "mq_open {name}: {}",
            io::Error::last_os_error()
        )));
    }
    // SAFETY: mq_open returned a fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `buf` as one message on queue `fd` (blocking), again after a signal.
fn send(fd: RawFd, buf: &[u8]) -> io::Result<()> {
    loop {
        // SAFETY: sends `buf.len()` bytes from a live buffer on a queue descriptor of ours.
        if unsafe { libc::mq_send(fd, buf.as_ptr().cast(), buf.len(), 0) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The number of messages queue `fd` holds now.
fn queued(fd: RawFd) -> io::Result<i64> {
    // SAFETY: mq_attr is plain data; mq_getattr fills it.
    let mut attr: libc::mq_attr = unsafe { std::mem::zeroed() };
    // SAFETY: a queue descriptor of ours and a pointer to a live mq_attr.
    if unsafe { libc::mq_getattr(fd, &mut attr) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(attr.mq_curmsgs as i64)
}

fn unlink(name: &str) {
    if let Ok(c) = CString::new(name) {
        // SAFETY: a valid NUL-terminated name.
        unsafe { libc::mq_unlink(c.as_ptr()) };
    }
}

/// CLOCK_REALTIME `limit` from now: the absolute deadline `mq_timedreceive` takes.
fn realtime_after(limit: Duration) -> libc::timespec {
    // SAFETY: timespec is plain data; clock_gettime fills it.
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and a pointer to a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
    let ns = now.tv_nsec as u64 + u64::from(limit.subsec_nanos());
    now.tv_sec += limit.as_secs() as libc::time_t + (ns / 1_000_000_000) as libc::time_t;
    now.tv_nsec = (ns % 1_000_000_000) as _;
    now
}
