//! Which open file a descriptor number names, re-checked by `herdless_poll` on every call, so
//! that a number closed and reused (a new pipe, `mq_close` + `mq_open`, a `dup2` over it) is
//! watched anew and a closed one gets POLLNVAL, as `poll(2)`, which looks the number up on
//! every call, does.
//!
//! Two ways, by kind of file:
//!
//! - **Sockets and anonymous pipes** (Unix everywhere): a new one always has a new inode, so
//!   the device, inode and access mode (`fstat` + `F_GETFL`, two system calls) tell them
//!   apart; the access mode tells a pipe's two ends apart.
//! - **Everything reopened with the same inode** (POSIX message queues, named FIFOs,
//!   terminals and devices, eventfds and other anonymous inodes), on Linux: a private *shadow*
//!   epoll instance of the waiter holds an entry with no events for each such descriptor.
//!   epoll keys its entries by (open file, number) and drops an entry when the file is gone,
//!   so `EPOLL_CTL_ADD` of the number answers exactly: `EEXIST` is the same open file, success
//!   a different one, `EBADF` a closed number. One system call, and no reference held: the
//!   file closes when the caller closes it. Its cost is a wait-queue entry on the file, whose
//!   callback (it wakes nobody, events being empty) runs on each of the file's wake-ups: that
//!   is why sockets and pipes, where the inode is enough, do not get one. Elsewhere (macOS,
//!   the BSDs) those files are told apart by inode and access mode only.

use std::os::fd::RawFd;
#[cfg(any(target_os = "linux", target_os = "android"))]
use std::os::fd::{FromRawFd, OwnedFd};

/// What a number named when it was registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Identity {
    /// A socket or anonymous pipe: device, inode, access mode.
    Inode { dev: u64, ino: u64, mode: i32 },
    /// Kept in the waiter's shadow epoll instance (Linux).
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    Shadow,
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

/// A waiter's tracker: the shadow epoll instance (made on first need) and what it knows of
/// pipes.
#[derive(Default)]
pub(crate) struct Tracker {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    shadow: Option<OwnedFd>,
    /// The device of anonymous pipes (pipefs), learnt from a pipe of our own.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pipe_dev: Option<u64>,
}

fn fstat(fd: RawFd) -> Result<libc::stat, i32> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: fstat reads the number and fills the live struct, or fails.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    // SAFETY: filled by fstat (and zeroed before).
    Ok(unsafe { st.assume_init() })
}

/// Device and inode as u64 (their C types differ between systems: the casts are not no-ops
/// everywhere).
#[allow(clippy::unnecessary_cast)]
fn dev_ino(st: &libc::stat) -> (u64, u64) {
    (st.st_dev as u64, st.st_ino as u64)
}

fn access_mode(fd: RawFd) -> i32 {
    // SAFETY: F_GETFL only reads the descriptor's flags.
    match unsafe { libc::fcntl(fd, libc::F_GETFL) } {
        -1 => -1,
        flags => flags & libc::O_ACCMODE,
    }
}

impl Tracker {
    /// Records what `fd` names now; `Err(errno)` if it is not open (EBADF) or cannot be
    /// inspected.
    pub(crate) fn identify(&mut self, fd: RawFd) -> Result<Identity, i32> {
        let st = fstat(fd)?;
        let (dev, ino) = dev_ino(&st);
        let inode = Identity::Inode {
            dev,
            ino,
            mode: access_mode(fd),
        };
        if self.unique_inode(&st) {
            return Ok(inode);
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        match self.shadow_add(fd) {
            // EEXIST: a shadow entry for this open file at this number is there already (a
            // registration deleted and made again, say): it is what we want.
            Ok(()) | Err(libc::EEXIST) => return Ok(Identity::Shadow),
            Err(libc::EBADF) => return Err(libc::EBADF),
            // epoll refuses it (a nesting limit, a file without poll): the inode it is.
            Err(_) => {}
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
                    let now = Identity::Inode {
                        dev,
                        ino,
                        mode: access_mode(fd),
                    };
                    if now == was {
                        Check::Same
                    } else {
                        Check::Changed
                    }
                }
            },
            #[cfg(any(target_os = "linux", target_os = "android"))]
            Identity::Shadow => match self.shadow_add(fd) {
                Err(libc::EEXIST) => Check::Same,
                Err(libc::EBADF) => Check::Closed,
                // Added: the number names a file the shadow did not know. Taken out again;
                // `identify` puts it back if it needs it.
                Ok(()) => {
                    self.forget(fd, Identity::Shadow);
                    Check::Changed
                }
                Err(_) => Check::Changed,
            },
            #[cfg(not(any(target_os = "linux", target_os = "android")))]
            Identity::Shadow => Check::Changed,
        }
    }

    /// `fd` is no longer watched: its shadow entry goes, if the number still names that file
    /// (if not, the entry goes with the file).
    pub(crate) fn forget(&mut self, fd: RawFd, was: Identity) {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let (Identity::Shadow, Some(shadow)) = (was, &self.shadow) {
            use std::os::fd::AsRawFd;
            // SAFETY: our live epoll instance; the event argument may be NULL for DEL.
            unsafe {
                libc::epoll_ctl(
                    shadow.as_raw_fd(),
                    libc::EPOLL_CTL_DEL,
                    fd,
                    std::ptr::null_mut(),
                )
            };
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let _ = (fd, was);
    }

    /// Does a new one of this kind of file always get a new inode?
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn unique_inode(&mut self, st: &libc::stat) -> bool {
        match st.st_mode & libc::S_IFMT {
            libc::S_IFSOCK => true,
            libc::S_IFIFO => Some(dev_ino(st).0) == self.pipe_device(),
            _ => false,
        }
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn unique_inode(&mut self, _st: &libc::stat) -> bool {
        true
    }

    /// The device of anonymous pipes, from a pipe made (and closed) once.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn pipe_device(&mut self) -> Option<u64> {
        if self.pipe_dev.is_none() {
            let mut p = [0; 2];
            // SAFETY: pipe2 fills the two-element array or fails.
            if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } == 0 {
                // SAFETY: two descriptors pipe2 just opened, owned here and closed on drop.
                let (a, _b) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
                use std::os::fd::AsRawFd;
                self.pipe_dev = fstat(a.as_raw_fd()).ok().map(|st| dev_ino(&st).0);
            }
        }
        self.pipe_dev
    }

    /// Adds `fd` to the shadow instance with no events: Ok if it was not there, Err(errno)
    /// otherwise (EEXIST: this open file is there at this number).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn shadow_add(&mut self, fd: RawFd) -> Result<(), i32> {
        use std::os::fd::AsRawFd;
        if self.shadow.is_none() {
            // SAFETY: creates a new epoll instance; its descriptor is owned below.
            let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            if ep < 0 {
                return Err(libc::ENOMEM);
            }
            // SAFETY: a descriptor epoll_create1 just opened, owned by nobody else.
            self.shadow = Some(unsafe { OwnedFd::from_raw_fd(ep) });
        }
        let shadow = self.shadow.as_ref().map_or(-1, |s| s.as_raw_fd());
        let mut event = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: our live epoll instance and a live event; the kernel checks `fd`.
        if unsafe { libc::epoll_ctl(shadow, libc::EPOLL_CTL_ADD, fd, &mut event) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO))
        }
    }
}
