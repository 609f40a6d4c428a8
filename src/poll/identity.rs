//! Which open file a descriptor number names, re-checked by `PollWaiter::poll` on every call
//! (so by C's `herdless_poll` and `herdless_poll_shared`), so that a number closed and reused
//! (a new pipe, `mq_close` + `mq_open`, a `dup2` over it) is watched anew and a closed one gets
//! POLLNVAL, as `poll(2)`, which looks the number up on every call, does.
//!
//! Two ways, by kind of file:
//!
//! - **Sockets and anonymous pipes** (Unix everywhere): a new one always has a new inode, so
//!   the device and inode (one `fstat`) tell them apart. Not told apart: the two ends of one
//!   pipe, which share an inode (`dup2` of a pipe's write end over its registered read end;
//!   `F_GETFL` would tell, at one more system call per descriptor per call: measured in
//!   docs/c.md, and left out).
//! - **Everything reopened with the same inode** (POSIX message queues, named FIFOs,
//!   terminals and devices, eventfds and other anonymous inodes), on Linux: the tracker keeps
//!   a duplicate of the descriptor (at a high number, closed on exec) and asks the kernel
//!   whether the number still names that open file (`kcmp(KCMP_FILE)`, one system call). The
//!   duplicate holds the file open until this waiter's next poll sees the
//!   number closed or reused (or the fd leaves the array, or the waiter leaves): until then a
//!   FIFO's writers get no EPIPE, a queue closed by the caller stays open. A first design kept
//!   these files in a private epoll instance instead (no reference held), but each entry sits
//!   on the file's wait queue: 500 members on one message queue ran 5 to 10 times slower
//!   (docs/c.md). Where kcmp is refused (a kernel without it), and elsewhere than Linux, these
//!   files are told apart by device and inode only.

use crate::sys::unix::Stat;
use std::os::fd::RawFd;
#[cfg(any(target_os = "linux", target_os = "android"))]
use std::os::fd::{AsRawFd, OwnedFd};

/// What a number named when it was registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Identity {
    /// A socket or anonymous pipe (elsewhere than Linux: anything): device and inode.
    Inode { dev: u64, ino: u64 },
    /// A duplicate of the descriptor is held by the tracker (Linux).
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    Held,
}

/// What the number names now, compared with what it named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// The same open file.
    Same,
    /// Another open file (the number was closed and reused, or `dup2`'d over).
    Changed,
    /// The number is not open.
    Closed,
}

/// A waiter's tracker: the duplicates it holds and what it knows of pipes.
#[derive(Default)]
pub(crate) struct Tracker {
    /// Registered number -> a duplicate of the open file it named.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    held: std::collections::HashMap<RawFd, OwnedFd>,
    /// Does the kernel answer kcmp (None: not asked yet)?
    #[cfg(any(target_os = "linux", target_os = "android"))]
    kcmp_works: Option<bool>,
    /// This process (set with `kcmp_works`).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pid: libc::pid_t,
}

pub(crate) fn fstat(fd: RawFd) -> Result<Stat, i32> {
    crate::sys::unix::fstat(fd).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

#[allow(clippy::unnecessary_cast)]
fn dev_ino(st: &Stat) -> (u64, u64) {
    (st.st_dev as u64, st.st_ino as u64)
}

impl Tracker {
    /// Records what `fd` names now; `Err(errno)` if it is not open (EBADF) or cannot be
    /// inspected.
    pub(crate) fn identify(&mut self, fd: RawFd) -> Result<Identity, i32> {
        let st = fstat(fd)?;
        let (dev, ino) = dev_ino(&st);
        let inode = Identity::Inode { dev, ino };
        if self.unique_inode(&st) {
            return Ok(inode);
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(copy) = self.duplicate(fd) {
            self.held.insert(fd, copy);
            return Ok(Identity::Held);
        }
        Ok(inode)
    }

    /// Is `fd` still the open file `was`?
    pub(crate) fn check(&mut self, fd: RawFd, was: Identity) -> Check {
        match was {
            Identity::Inode { .. } => match fstat(fd) {
                Err(_) => Check::Closed,
                Ok(st) => {
                    let (dev, ino) = dev_ino(&st);
                    if (Identity::Inode { dev, ino }) == was {
                        Check::Same
                    } else {
                        Check::Changed
                    }
                }
            },
            #[cfg(any(target_os = "linux", target_os = "android"))]
            Identity::Held => {
                let Some(copy) = self.held.get(&fd) else {
                    return Check::Changed;
                };
                match kcmp_file(self.pid, fd, copy.as_raw_fd()) {
                    Ok(true) => Check::Same,
                    Ok(false) => Check::Changed,
                    Err(libc::EBADF) => Check::Closed,
                    Err(_) => Check::Changed,
                }
            }
            #[cfg(not(any(target_os = "linux", target_os = "android")))]
            Identity::Held => Check::Changed,
        }
    }

    /// `fd` is no longer watched: its duplicate, if any, is closed.
    pub(crate) fn forget(&mut self, fd: RawFd, was: Identity) {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if was == Identity::Held {
            self.held.remove(&fd);
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let _ = (fd, was);
    }

    /// Does a new one of this kind of file always get a new inode?
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn unique_inode(&mut self, st: &Stat) -> bool {
        match st.st_mode & libc::S_IFMT {
            libc::S_IFSOCK => true,
            libc::S_IFIFO => is_anonymous_pipe(st),
            _ => false,
        }
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn unique_inode(&mut self, _st: &Stat) -> bool {
        true
    }

    /// A duplicate of `fd` at a high number (so that the caller's next open still gets the
    /// lowest free number, as without herdless), closed on exec; None if kcmp cannot compare
    /// it, or no number is free.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn duplicate(&mut self, fd: RawFd) -> Option<OwnedFd> {
        let source = crate::sys::unix::by_number(fd).ok()?;
        let copy = [1000, 100, 3]
            .into_iter()
            .find_map(|lowest| rustix::io::fcntl_dupfd_cloexec(source, lowest).ok())?;
        if self.kcmp_works.is_none() {
            // The waiter is used only in the process that joined: its pid, read once.
            self.pid = std::process::id() as libc::pid_t;
            self.kcmp_works = Some(kcmp_file(self.pid, fd, copy.as_raw_fd()) == Ok(true));
        }
        self.kcmp_works.unwrap_or(false).then_some(copy)
    }
}

/// Is this FIFO an anonymous pipe (on pipefs, the device of every `pipe()`), not a named FIFO?
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn is_anonymous_pipe(st: &Stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFIFO && Some(dev_ino(st).0) == pipe_device()
}

/// The device of anonymous pipes, from a pipe made (and closed) once per process.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn pipe_device() -> Option<u64> {
    static DEVICE: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *DEVICE.get_or_init(|| {
        let (a, _b) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ok()?;
        fstat(a.as_raw_fd()).ok().map(|st| dev_ino(&st).0)
    })
}

/// Do descriptors `a` and `b` of this process name the same open file? Err(errno) if the
/// kernel cannot say (EBADF: one is not open).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn kcmp_file(pid: libc::pid_t, a: RawFd, b: RawFd) -> Result<bool, i32> {
    crate::sys::unix::same_open_file(pid as u32, a, b)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}
