//! The shared descriptor a lab workload pushes messages through: a pipe or a POSIX message
//! queue carrying 8-byte message ids. The producer writes blocking (it waits while the pipe or
//! queue is full); the waiters share the non-blocking read side and `read_one` message per
//! wake-up; `finish` stops them through a stop pipe that hangs up.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use herdless_fixtures::{pipe, write_all, Blocking};
use serde::{Deserialize, Serialize};

/// The size of one message: a u64 id.
pub const MESSAGE_BYTES: usize = 8;

/// The shared descriptor the waiters wait on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// A pipe: non-blocking read end shared by the waiters, blocking write end for the producer.
    Pipe,
    /// A POSIX message queue (mq_open), non-blocking for the waiters.
    Mq,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Pipe => "pipe",
            Workload::Mq => "mq",
        }
    }
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What one read found.
pub enum Read {
    Message(u64),
    Stop,
    Empty,
}

/// Reads one message from the non-blocking read end.
pub fn read_one(fd: RawFd, workload: Workload) -> io::Result<Read> {
    let mut buf = [0u8; MESSAGE_BYTES];
    loop {
        let n = match workload {
            // SAFETY: reads at most 8 bytes into a live 8-byte buffer.
            Workload::Pipe => unsafe { libc::read(fd, buf.as_mut_ptr().cast(), MESSAGE_BYTES) },
            // SAFETY: as above; the queue's message size is 8, so the buffer is large enough.
            Workload::Mq => unsafe {
                libc::mq_receive(
                    fd,
                    buf.as_mut_ptr().cast(),
                    MESSAGE_BYTES,
                    std::ptr::null_mut(),
                )
            },
        };
        return match n {
            0 => Ok(Read::Stop),
            8 => Ok(Read::Message(u64::from_ne_bytes(buf))),
            -1 => {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => Ok(Read::Empty),
                    io::ErrorKind::Interrupted => continue,
                    _ => Err(e),
                }
            }
            n => Err(io::Error::other(format!("short read of {n} bytes"))),
        };
    }
}

/// The shared descriptor: a pipe (read end non-blocking, write end blocking), or a POSIX
/// message queue (a non-blocking descriptor for the waiters, a blocking one for the producer).
pub struct Channel {
    workload: Workload,
    /// The waiters' side (non-blocking): register it, and `read_one` from it.
    pub read: OwnedFd,
    write: Option<OwnedFd>,
    /// The stop signal: waiters register the read end (not exclusive); `finish` closes the
    /// write end, and the hang-up wakes every waiter. (Not sentinels in the queue: a message
    /// queue does not wake its pollers for a message a receiver moves in from a blocked
    /// sender, so a waiter that left right after such a receive would strand the sentinels.)
    stop_read: OwnedFd,
    stop_write: Option<OwnedFd>,
    /// The queue's name, unlinked when the channel is dropped.
    mq_name: Option<CString>,
    pub mq_depth: Option<i64>,
}

impl Channel {
    /// Opens a fresh channel. `raise_mq_limit`: see [`open_mq`].
    pub fn open(workload: Workload, raise_mq_limit: bool) -> io::Result<Channel> {
        match workload {
            Workload::Pipe => {
                let (read, write) = pipe(Blocking::WriteEnd)?;
                Channel::with_stop(workload, read, write, None, None)
            }
            Workload::Mq => {
                let (read, write, name, depth) = open_mq(raise_mq_limit)?;
                Channel::with_stop(workload, read, write, Some(name), Some(depth))
            }
        }
    }

    fn with_stop(
        workload: Workload,
        read: OwnedFd,
        write: OwnedFd,
        mq_name: Option<CString>,
        mq_depth: Option<i64>,
    ) -> io::Result<Channel> {
        let (stop_read, stop_write) = pipe(Blocking::WriteEnd)?;
        Ok(Channel {
            workload,
            read,
            write: Some(write),
            stop_read,
            stop_write: Some(stop_write),
            mq_name,
            mq_depth,
        })
    }

    /// The message queue's name (`/herdless-herd-<pid>`), for the mq workload: what an exec'd
    /// waiter opens.
    pub fn mq_name(&self) -> Option<&str> {
        self.mq_name.as_ref().and_then(|n| n.to_str().ok())
    }

    /// The descriptor that becomes readable (hang-up) when the run is over.
    pub fn stop_fd(&self) -> RawFd {
        self.stop_read.as_raw_fd()
    }

    /// The same, borrowed.
    pub fn stop(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.stop_read.as_fd()
    }

    pub fn write_fd(&self) -> io::Result<RawFd> {
        self.write
            .as_ref()
            .map(AsRawFd::as_raw_fd)
            .ok_or_else(|| io::Error::other("the write end is closed"))
    }

    /// Sends one message, blocking while the pipe or queue is full.
    pub fn send(&self, id: u64) -> io::Result<()> {
        let fd = self.write_fd()?;
        let buf = id.to_ne_bytes();
        match self.workload {
            Workload::Pipe => write_all(fd, &buf),
            Workload::Mq => loop {
                // SAFETY: sends 8 bytes from a live buffer on our own queue descriptor.
                let r = unsafe { libc::mq_send(fd, buf.as_ptr().cast(), MESSAGE_BYTES, 0) };
                if r == 0 {
                    return Ok(());
                }
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            },
        }
    }

    /// Tells every waiter to stop, once every message has been read: closes the producer's
    /// ends, so the stop descriptor hangs up.
    pub fn finish(&mut self) {
        self.close_write_end();
    }

    /// Closes the producer's ends (a forked waiter must not hold them open).
    pub fn close_write_end(&mut self) {
        self.write = None;
        self.stop_write = None;
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        if let Some(name) = &self.mq_name {
            // SAFETY: a valid NUL-terminated name.
            unsafe { libc::mq_unlink(name.as_ptr()) };
        }
    }
}

/// The system's ceiling on mq_maxmsg for a process without CAP_SYS_RESOURCE.
const MSG_MAX: &str = "/proc/sys/fs/mqueue/msg_max";

/// Opens a fresh queue of 8-byte messages, as deep as the system allows: raises our own
/// RLIMIT_MSGQUEUE to its hard limit and tries depths from 65536 down. Without
/// CAP_SYS_RESOURCE the ceiling is /proc/sys/fs/mqueue/msg_max (10 by default); with
/// `raise_mq_limit`, root raises that file for the moment of the mq_open and restores it at once
/// (the queue keeps its depth) — a brief machine-wide change, so only on request.
fn open_mq(raise_mq_limit: bool) -> io::Result<(OwnedFd, OwnedFd, CString, i64)> {
    // SAFETY: rlimit is plain data; getrlimit/setrlimit read and write it.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_MSGQUEUE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_MSGQUEUE, &limit);
        }
    }
    let name =
        CString::new(format!("/herdless-herd-{}", std::process::id())).expect("no NUL in the name");
    // SAFETY: a valid NUL-terminated name; a leftover queue of a killed run is removed.
    unsafe { libc::mq_unlink(name.as_ptr()) };
    let saved_max = std::fs::read_to_string(MSG_MAX)
        .ok()
        .filter(|_| raise_mq_limit);
    let raised = saved_max.is_some() && std::fs::write(MSG_MAX, "65536").is_ok();
    let opened = open_deepest(&name);
    if let (true, Some(saved)) = (raised, &saved_max) {
        let _ = std::fs::write(MSG_MAX, saved.trim());
    }
    let (read, depth) = opened?;
    // SAFETY: a valid name; opens the existing queue, blocking, for the producer.
    let fd = unsafe { libc::mq_open(name.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        // SAFETY: as above.
        unsafe { libc::mq_unlink(name.as_ptr()) };
        return Err(e);
    }
    // SAFETY: mq_open returned a fresh descriptor.
    let write = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok((read, write, name, depth))
}

/// Opens an existing queue by name, non-blocking and read-only: an exec'd waiter's side.
pub fn open_mq_reader(name: &str) -> io::Result<OwnedFd> {
    let name = CString::new(name).map_err(io::Error::other)?;
    // SAFETY: a valid NUL-terminated name; opens an existing queue, no attributes needed.
    let fd = unsafe {
        libc::mq_open(
            name.as_ptr(),
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: mq_open returned a fresh descriptor (a queue descriptor is an fd on Linux).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Creates the queue (non-blocking, for the waiters) at the deepest depth the system accepts.
fn open_deepest(name: &CString) -> io::Result<(OwnedFd, i64)> {
    let mut depth = 65536;
    loop {
        let flags = libc::O_RDONLY | libc::O_NONBLOCK;
        match create_mq(name, depth, MESSAGE_BYTES, flags) {
            Ok(fd) => return Ok((fd, depth)),
            Err(e) if depth > 10 && is_too_deep(&e) => depth = (depth / 2).max(10),
            Err(e) => return Err(e),
        }
    }
}

/// Did `mq_open` refuse a queue for its depth (or for the memory its depth needs)?
fn is_too_deep(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::EMFILE) | Some(libc::ENOMEM)
    )
}

/// Creates queue `name`, which must not exist (`O_CREAT | O_EXCL`, mode 0600, close-on-exec),
/// `depth` messages of `size` bytes deep, opened with `flags` (its access and `O_NONBLOCK`):
/// the one `mq_open` that makes a queue, for the herd, `herd rpc` and `herd soak`.
pub fn create_mq(
    name: &std::ffi::CStr,
    depth: i64,
    size: usize,
    flags: libc::c_int,
) -> io::Result<OwnedFd> {
    // SAFETY: mq_attr is plain data.
    let mut attr: libc::mq_attr = unsafe { std::mem::zeroed() };
    attr.mq_maxmsg = depth as _;
    attr.mq_msgsize = size as _;
    let flags = flags | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
    // SAFETY: a valid name, flags, mode and a pointer to a live mq_attr.
    let fd = unsafe {
        libc::mq_open(
            name.as_ptr(),
            flags,
            0o600 as libc::mode_t,
            &mut attr as *mut libc::mq_attr,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: mq_open returned a fresh descriptor (a queue descriptor is an fd on Linux).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
