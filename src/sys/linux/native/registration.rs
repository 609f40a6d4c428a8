//! A native member's registrations and its kernel entries, kept true to each other: `add`,
//! `modify` (delete and add for an exclusive entry, which the kernel will not modify), `delete`,
//! the rotation's delete and re-add, and their upkeep. Before a kernel wait the exclusive
//! entries are checked against their files, and when a stale entry may exist (a registered
//! number closed or reused while its file stays open elsewhere) the member's epoll instance is
//! rebuilt from its live registrations (see `crate::registry`: the only removal of such an
//! entry the kernel allows besides the file's last close). A registration the kernel no longer
//! watches is never kept: a rotation whose re-add fails forgets it and says so.

use std::os::fd::{AsRawFd, RawFd};

use super::kernel::{
    ctl, entry_is_live, epoll_flags, mod_probe_works, new_epoll, refusal, WAKE_DATA,
};
use super::{token, NativeWaiter, Registration};
use crate::error::{Error, Result};
use crate::interest::Interest;
use crate::registry::{self, FileId};

impl NativeWaiter {
    pub(crate) fn add(&mut self, fd: RawFd, key: usize, interest: Interest) -> Result<()> {
        let file = registry::file_id(fd).ok_or(Error::BadDescriptor { fd })?;
        let old = self.registrations.get(&fd).copied();
        if old.is_some_and(|old| old.file == file) {
            return Err(Error::AlreadyRegistered { fd, registered: fd });
        }
        if let Some(registered) = self.registrations.duplicate_of(fd, file, interest) {
            return Err(Error::AlreadyRegistered { fd, registered });
        }
        let gen = self.next_gen;
        let flags = epoll_flags(interest);
        let mut res = ctl(&self.epoll, libc::EPOLL_CTL_ADD, fd, flags, token(fd, gen));
        if res
            .as_ref()
            .is_err_and(|e| e.raw_os_error() == Some(libc::EEXIST))
        {
            // An entry of this very file under this number, from a registration forgotten since
            // (its number was closed, then the file came back to it): stale, so start afresh.
            self.rebuild()?;
            res = ctl(&self.epoll, libc::EPOLL_CTL_ADD, fd, flags, token(fd, gen));
        }
        res.map_err(|e| refusal(fd, e, "adding a descriptor to epoll"))?;
        // A record of another file under this number: that file's number was closed (or
        // `dup2`'d over) without `delete`. Its entry lives on if the file is open elsewhere,
        // and an exclusive one would take the group's wake-ups: removed now.
        if let Some(old) = old {
            self.forget(fd);
            self.insert(fd, key, interest, file);
            if old.interest.is_exclusive() {
                self.rebuild()?;
            }
            return Ok(());
        }
        self.insert(fd, key, interest, file);
        Ok(())
    }

    pub(super) fn insert(&mut self, fd: RawFd, key: usize, interest: Interest, file: FileId) {
        let gen = self.next_gen;
        self.next_gen += 1;
        if interest.is_exclusive() {
            self.exclusive.push(fd);
        }
        self.registrations.insert(
            fd,
            Registration {
                key,
                interest,
                file,
                gen,
                handed: 0,
                outstanding: false,
                mark: 0,
                aside: false,
                last_claim: 0,
            },
        );
    }

    pub(super) fn forget(&mut self, fd: RawFd) -> Option<Registration> {
        let old = self.registrations.remove(fd)?;
        self.release_claim(&old);
        if old.aside {
            self.one_less_aside();
        }
        self.rotate_pending.retain(|&p| p != fd);
        if old.interest.is_exclusive() {
            self.exclusive.retain(|&x| x != fd);
        }
        Some(old)
    }

    pub(crate) fn modify(&mut self, fd: RawFd, key: usize, interest: Interest) -> Result<()> {
        let old = *self.registrations.registered(fd)?;
        if old.interest.is_exclusive() || interest.is_exclusive() {
            // The kernel refuses MOD of an exclusive entry: delete and add, and put the old
            // registration back if the new one is refused.
            return registry::replace(
                self,
                (old.key, old.interest),
                (key, interest),
                |w| w.delete(fd),
                |w, key, interest| w.add(fd, key, interest),
            );
        }
        let gen = self.next_gen;
        if let Err(e) = ctl(
            &self.epoll,
            libc::EPOLL_CTL_MOD,
            fd,
            epoll_flags(interest),
            token(fd, gen),
        ) {
            if registry::maybe_stale(&e) {
                // Closed or reused: the registration is gone (its entry, if it lives on, is
                // removed when it fires: it is not exclusive).
                self.forget(fd);
            }
            return Err(refusal(fd, e, "modifying a descriptor in epoll"));
        }
        self.forget(fd);
        self.insert(fd, key, interest, old.file);
        Ok(())
    }

    pub(crate) fn delete(&mut self, fd: RawFd) -> Result<()> {
        let reg = *self.registrations.registered(fd)?;
        if reg.aside {
            self.forget(fd); // standing aside: no entry to delete
            return Ok(());
        }
        match ctl(&self.epoll, libc::EPOLL_CTL_DEL, fd, 0, 0) {
            Ok(()) => {
                self.forget(fd);
            }
            // EBADF, ENOENT: the number was closed, or names another file now. The registration
            // goes all the same; its entry may live on (the file open elsewhere), and an
            // exclusive one is removed at once.
            Err(e) if registry::maybe_stale(&e) => {
                self.forget(fd);
                if reg.interest.is_exclusive() {
                    self.rebuild()?;
                }
            }
            Err(e) => return Err(refusal(fd, e, "deleting a descriptor from epoll")),
        }
        Ok(())
    }

    /// Moves the entry of `fd` to the tail of the descriptor's wait queue: delete, then add.
    /// A re-add the kernel refuses for want of resources (ENOMEM, or ENOSPC past
    /// `max_user_watches`) leaves the file unwatched: the registration is forgotten too, so
    /// that the registry says what the kernel watches, and the error says it is gone (the
    /// caller adds it again).
    pub(super) fn rotate(&mut self, fd: RawFd) -> Result<()> {
        let Some(reg) = self.registrations.get(&fd).copied() else {
            return Ok(());
        };
        let flags = epoll_flags(reg.interest);
        let res = match ctl(&self.epoll, libc::EPOLL_CTL_DEL, fd, 0, 0) {
            Ok(()) => ctl(
                &self.epoll,
                libc::EPOLL_CTL_ADD,
                fd,
                flags,
                token(fd, reg.gen),
            )
            .map_err(|e| (e, true)),
            Err(e) => Err((e, false)),
        };
        match res {
            Ok(()) => Ok(()),
            // Closed or reused while registered: the registration goes, and its entry with a
            // new epoll instance (it may live on, its file open elsewhere).
            Err((e, _)) if registry::maybe_stale(&e) => {
                self.forget(fd);
                self.rebuild()
            }
            Err((e, true)) => Err(self.readd_failed(fd, e)),
            Err((e, false)) => Err(Error::io("rotating an exclusive registration", e)),
        }
    }

    /// The rotation deleted the entry of `fd` and the kernel refused to add it again (`err`):
    /// the registration goes too (the kernel no longer watches the file), and the error says
    /// so.
    pub(super) fn readd_failed(&mut self, fd: RawFd, err: std::io::Error) -> Error {
        self.forget(fd);
        Error::io(
            "re-adding an exclusive descriptor after its rotation; the kernel no longer \
             watches it and it is no longer registered (add it again)",
            err,
        )
    }

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
        self.watch_death(&epoll)
            .map_err(|e| Error::io("watching the neighbour's death", e))?;
        let fds: Vec<RawFd> = self.registrations.keys().copied().collect();
        // Every live registration gets an entry in the new instance: none stands aside.
        self.aside = 0;
        self.stream_looks = None;
        for fd in fds {
            let reg = self
                .registrations
                .get_mut(&fd)
                .expect("a registered number");
            reg.aside = false;
            let reg = *reg;
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
        rustix::io::dup3(&epoll, &mut self.epoll, rustix::io::DupFlags::CLOEXEC)
            .map_err(|e| Error::io("rebuilding the waiter's epoll", e.into()))?;
        Ok(())
    }

    /// Forgets the exclusive registrations whose numbers no longer name their files, and removes
    /// their entries (`rebuild`). Before each kernel wait: a stale exclusive entry in an epoll
    /// with a thread waiting would take the group's wake-ups for a file this member no longer
    /// watches. One system call per exclusive registration: the kernel's own answer where it
    /// has one (`entry_is_live`), else an `fstat`.
    pub(super) fn drop_stale_exclusive(&mut self) -> Result<()> {
        let probe = mod_probe_works();
        let stale = self.exclusive.iter().any(|&fd| {
            let reg = &self.registrations[&fd];
            match probe && !reg.aside {
                true => !entry_is_live(&self.epoll, fd),
                // Standing aside, it has no entry to probe (`aside.rs`): its file is asked.
                false => !registry::still_names(fd, reg.file),
            }
        });
        if stale {
            self.rebuild()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::sync::Arc;

    use super::NativeWaiter;
    use crate::contract::Rotation;
    use crate::doorbell::Doorbells;
    use crate::error::Error;
    use crate::interest::Interest;

    /// A rotation whose re-add the kernel refuses (ENOMEM, which no test can make the kernel
    /// say on demand: the entry is deleted for real, the refusal is handed in) leaves no record
    /// of a registration the kernel no longer watches: the error is an `Io` that says so, the
    /// descriptor is not registered any more, and adding it again works.
    #[test]
    fn a_failed_readd_forgets_the_registration() {
        let shared = Arc::new(crate::inner::test_state(crate::Backend::Native, 2));
        let bells = Arc::new(Doorbells::new(std::process::id().into(), 2).unwrap());
        let mut w = NativeWaiter::new(shared, Rotation::Every(1), bells, 0, 1).unwrap();
        let (rx, _tx) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = rx.as_raw_fd();
        w.add(fd, 3, Interest::READABLE.exclusive()).unwrap();
        super::ctl(&w.epoll, libc::EPOLL_CTL_DEL, fd, 0, 0).unwrap();
        let err = w.readd_failed(fd, std::io::Error::from_raw_os_error(libc::ENOMEM));
        assert!(matches!(err, Error::Io { .. }), "{err:?}");
        assert!(
            w.registrations.get(&fd).is_none(),
            "a record the kernel does not watch"
        );
        assert!(!w.exclusive.contains(&fd));
        assert!(matches!(w.delete(fd), Err(Error::NotRegistered { .. })));
        w.add(fd, 3, Interest::READABLE.exclusive()).unwrap();
        w.consumed(3).unwrap();
    }
}
