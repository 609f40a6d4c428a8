//! Keeping the waiter's kernel entries true to its registrations: before a kernel wait its
//! exclusive entries are checked against their files, and when a stale entry may exist (a
//! registered number closed or reused while its file stays open elsewhere) the member's epoll
//! instance is rebuilt from its live registrations (see `crate::registry`: the only removal of
//! such an entry the kernel allows besides the file's last close).

use std::os::fd::{AsRawFd, RawFd};

use super::epoll::{ctl, entry_is_live, epoll_flags, mod_probe_works, new_epoll, WAKE_DATA};
use super::{token, NativeWaiter};
use crate::error::{Error, Result};
use crate::registry;

impl NativeWaiter {
    /// Replaces the member's epoll instance with a new one holding its live registrations (and
    /// its eventfd), under the same descriptor number, and forgets those whose number no longer
    /// names their file. Closing the old
    /// instance removes every stale entry in it: the only way to remove an entry whose number
    /// was closed or reused while its file stays open elsewhere (see `crate::registry`).
    /// Costs one `epoll_ctl` and one `fstat` per registration; done only when a stale entry
    /// may exist.
    pub(super) fn rebuild(&mut self) -> Result<()> {
        let epoll = new_epoll().map_err(|e| Error::io("rebuilding the waiter's epoll", e))?;
        let wake = self.wake.as_raw_fd();
        ctl(
            &epoll,
            libc::EPOLL_CTL_ADD,
            wake,
            libc::EPOLLIN as u32,
            WAKE_DATA,
        )
        .map_err(|e| Error::io("registering the waiter's eventfd", e))?;
        self.watch_bell(&epoll)
            .map_err(|e| Error::io("registering the member's door bell", e))?;
        let fds: Vec<RawFd> = self.registrations.keys().copied().collect();
        for fd in fds {
            let reg = self.registrations[&fd];
            let flags = epoll_flags(reg.interest);
            let live = registry::still_names(fd, reg.file)
                && ctl(&epoll, libc::EPOLL_CTL_ADD, fd, flags, token(fd, reg.gen)).is_ok();
            if !live {
                self.forget(fd);
            }
        }
        // The new instance takes the old one's number (and the old instance, with every stale
        // entry in it, closes): the waiter's descriptor numbers stay what they were, so a
        // program that counts on the lowest free number (close, then open) sees no change.
        syscall!(dup3(
            epoll.as_raw_fd(),
            self.epoll.as_raw_fd(),
            libc::O_CLOEXEC
        ))
        .map_err(|e| Error::io("rebuilding the waiter's epoll", e))?;
        Ok(())
    }

    /// Forgets the exclusive registrations whose numbers no longer name their files, and removes
    /// their entries (`rebuild`). Before each kernel wait: a stale exclusive entry in an epoll
    /// with a thread waiting would take the group's wake-ups for a file this member no longer
    /// watches. One system call per exclusive registration: the kernel's own answer where it
    /// has one (`entry_is_live`), else an `fstat`.
    pub(super) fn drop_stale_exclusive(&mut self) -> Result<()> {
        let probe = mod_probe_works();
        let stale = self.exclusive.iter().any(|&fd| match probe {
            true => !entry_is_live(&self.epoll, fd),
            false => !registry::still_names(fd, self.registrations[&fd].file),
        });
        if stale {
            self.rebuild()?;
        }
        Ok(())
    }
}
