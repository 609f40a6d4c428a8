//! Door bells: one per member slot, rung to wake a member that sleeps in its poller.
//!
//! The emulation wakes a member for two reasons: it has been handed the token and must start
//! watching the group's exclusive descriptors, or a `Notifier` wants its `wait` to return. On
//! Unix each slot has a non-blocking, close-on-exec pipe made when the group is built (with
//! `pipe2` where the OS has it, so that no exec in another thread inherits it), so members
//! forked later can ring each other; the member adds the read end to its own poller. On other systems
//! (Windows: threads only) a bell is the member's `polling::Poller::notify`; under the model
//! checker (`--cfg loom`), a flag.

#[cfg(all(unix, not(loom)))]
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

#[cfg(all(unix, not(loom)))]
use crate::error::Error;
use crate::error::Result;

/// The door bells of every slot of one group.
#[cfg(all(unix, not(loom)))]
pub(crate) struct Doorbells {
    /// (read end, write end) per slot, both non-blocking.
    pipes: Vec<(OwnedFd, OwnedFd)>,
}

#[cfg(all(unix, not(loom)))]
impl Doorbells {
    pub(crate) fn new(slots: usize) -> Result<Doorbells> {
        let pipes = (0..slots)
            .map(|_| bell_pipe().map_err(|e| Error::io("creating a door bell pipe", e)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Doorbells { pipes })
    }

    /// The end a member watches.
    pub(crate) fn watch_end(&self, slot: u32) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.pipes[slot as usize].0.as_fd()
    }

    /// Wakes the member of `slot`. A full pipe means it is rung already.
    pub(crate) fn ring(&self, slot: u32) {
        let fd = self.pipes[slot as usize].1.as_raw_fd();
        // SAFETY: writes one byte from a live buffer to our own non-blocking pipe.
        unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) };
    }

    /// Empties the bell of `slot` after it woke its member.
    pub(crate) fn drain(&self, slot: u32) {
        let fd = self.pipes[slot as usize].0.as_raw_fd();
        // Large reads: a storm of notifications fills the pipe, and it is emptied in few calls.
        let mut buf = [0u8; 4096];
        // SAFETY: reads into a live buffer from our own non-blocking pipe, until it is empty:
        // a read that did not fill the buffer emptied it (a byte written since stays, and
        // wakes the member again, as one written after a read that found nothing would).
        while unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } == buf.len() as isize {}
    }
}

/// A non-blocking, close-on-exec pipe, made so in one step where the OS has `pipe2`: a fork
/// and exec in another thread at that moment cannot inherit it.
#[cfg(all(
    unix,
    not(loom),
    any(
        target_os = "linux",
        target_os = "android",
        target_os = "freebsd",
        target_os = "dragonfly",
        target_os = "netbsd",
        target_os = "openbsd",
        target_os = "illumos",
        target_os = "solaris"
    )
))]
fn bell_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::OFlag;
    Ok(nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?)
}

/// A non-blocking, close-on-exec pipe (no `pipe2` here, macOS: flags set right after).
#[cfg(all(
    unix,
    not(loom),
    not(any(
        target_os = "linux",
        target_os = "android",
        target_os = "freebsd",
        target_os = "dragonfly",
        target_os = "netbsd",
        target_os = "openbsd",
        target_os = "illumos",
        target_os = "solaris"
    ))
))]
fn bell_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
    let (r, w) = nix::unistd::pipe()?;
    for fd in [&r, &w] {
        fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
        fcntl(fd.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    }
    Ok((r, w))
}

#[cfg(all(test, unix, not(loom)))]
mod tests {
    use std::os::fd::AsRawFd;

    /// Both ends of every bell are non-blocking (a full bell never blocks its ringer) and
    /// close-on-exec (a program exec'd by a member does not inherit them).
    #[test]
    fn bells_are_non_blocking_and_close_on_exec() {
        let bells = super::Doorbells::new(3).unwrap();
        for (r, w) in &bells.pipes {
            for fd in [r.as_raw_fd(), w.as_raw_fd()] {
                // SAFETY: fcntl reads the flags of our own descriptor.
                let (fl, fd_flags) = unsafe {
                    (
                        libc::fcntl(fd, libc::F_GETFL),
                        libc::fcntl(fd, libc::F_GETFD),
                    )
                };
                assert_ne!(fl & libc::O_NONBLOCK, 0, "a blocking bell");
                assert_ne!(
                    fd_flags & libc::FD_CLOEXEC,
                    0,
                    "a bell inherited across exec"
                );
            }
        }
    }
}

/// The door bells of every slot of one group: each member's poller, for its `notify`.
#[cfg(all(not(unix), not(loom)))]
pub(crate) struct Doorbells {
    pollers: std::sync::Mutex<Vec<Option<std::sync::Arc<polling::Poller>>>>,
}

#[cfg(all(not(unix), not(loom)))]
impl Doorbells {
    pub(crate) fn new(slots: usize) -> Result<Doorbells> {
        Ok(Doorbells {
            pollers: std::sync::Mutex::new(vec![None; slots]),
        })
    }

    /// Records the poller of the member that joined `slot`.
    pub(crate) fn install(&self, slot: u32, poller: std::sync::Arc<polling::Poller>) {
        self.pollers.lock().unwrap_or_else(|e| e.into_inner())[slot as usize] = Some(poller);
    }

    pub(crate) fn ring(&self, slot: u32) {
        let pollers = self.pollers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = &pollers[slot as usize] {
            let _ = p.notify();
        }
    }

    pub(crate) fn drain(&self, _slot: u32) {}
}

/// Under the model checker: a bell is a flag, so loom can see every ring and every drain.
#[cfg(loom)]
pub(crate) struct Doorbells {
    rung: Vec<crate::sync::AtomicU32>,
}

#[cfg(loom)]
impl Doorbells {
    pub(crate) fn new(slots: usize) -> Result<Doorbells> {
        Ok(Doorbells {
            rung: (0..slots).map(|_| crate::sync::AtomicU32::new(0)).collect(),
        })
    }
    pub(crate) fn ring(&self, slot: u32) {
        self.rung[slot as usize].store(1, std::sync::atomic::Ordering::SeqCst);
    }
    pub(crate) fn drain(&self, slot: u32) {
        self.rung[slot as usize].store(0, std::sync::atomic::Ordering::SeqCst);
    }
    /// Has the bell of `slot` rung since it was last drained?
    #[cfg(test)]
    pub(crate) fn is_rung(&self, slot: u32) -> bool {
        self.rung[slot as usize].load(std::sync::atomic::Ordering::SeqCst) != 0
    }
}
