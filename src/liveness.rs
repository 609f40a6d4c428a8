//! Is a member of another process still alive? Asked without any helper process or thread, so
//! that the emulation can clear out a dead member and any group can reuse its slot.
//!
//! Each member holds a POSIX record lock on one byte of an unlinked file the group made when it
//! was built (byte n for slot n). The kernel drops a process's record locks the moment the
//! process dies, SIGKILL included, before it is even reaped, so "byte n is unlocked" means
//! "member n's process is gone". Record locks belong to processes, so members that are threads
//! of the caller's own process are alive by definition (they leave through `Drop`). On systems
//! without `fork` every member shares the caller's process and is always alive.

use crate::error::Result;

#[cfg(all(unix, not(loom)))]
pub(crate) struct Liveness {
    file: std::fs::File,
}

#[cfg(all(unix, not(loom)))]
impl Liveness {
    pub(crate) fn new() -> Result<Liveness> {
        use crate::error::Error;
        let dir = std::env::temp_dir();
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mut last = None;
        for attempt in 0..16u32 {
            let path = dir.join(format!(
                ".herdless-{}-{stamp}-{attempt}.lock",
                std::process::id()
            ));
            match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(file) => {
                    // Unlinked at once: the open descriptor is all the group needs.
                    let _ = std::fs::remove_file(&path);
                    return Ok(Liveness { file });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(Error::io(
            "creating the group's liveness file",
            last.unwrap_or_else(|| std::io::ErrorKind::Other.into()),
        ))
    }

    fn lock(
        &self,
        slot: u32,
        kind: libc::c_short,
        cmd: libc::c_int,
    ) -> std::io::Result<libc::flock> {
        use std::os::fd::AsRawFd;
        // SAFETY: flock is plain data; all-zero is a valid starting value.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = kind;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = slot as libc::off_t;
        fl.l_len = 1;
        // SAFETY: a valid descriptor we own and a pointer to a live flock.
        if unsafe { libc::fcntl(self.file.as_raw_fd(), cmd, &mut fl) } == -1 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(fl)
    }

    /// Marks `slot` alive for as long as this process lives (or until `release`).
    pub(crate) fn hold(&self, slot: u32) -> Result<()> {
        self.lock(slot, libc::F_WRLCK as libc::c_short, libc::F_SETLK)
            .map(drop)
            .map_err(|e| crate::error::Error::io("taking a member's liveness lock", e))
    }

    /// Drops the mark of `slot` (the member left).
    pub(crate) fn release(&self, slot: u32) {
        let _ = self.lock(slot, libc::F_UNLCK as libc::c_short, libc::F_SETLK);
    }

    /// Is the member of `slot`, in process `pid`, alive?
    pub(crate) fn is_alive(&self, slot: u32, pid: u32) -> bool {
        if pid == std::process::id() {
            return true;
        }
        match self.lock(slot, libc::F_WRLCK as libc::c_short, libc::F_GETLK) {
            Ok(fl) => fl.l_type != libc::F_UNLCK as libc::c_short,
            Err(_) => true, // when in doubt, do not declare a member dead
        }
    }
}

#[cfg(any(not(unix), loom))]
pub(crate) struct Liveness;

#[cfg(any(not(unix), loom))]
impl Liveness {
    pub(crate) fn new() -> Result<Liveness> {
        Ok(Liveness)
    }
    pub(crate) fn hold(&self, _slot: u32) -> Result<()> {
        Ok(())
    }
    pub(crate) fn release(&self, _slot: u32) {}
    pub(crate) fn is_alive(&self, _slot: u32, _pid: u32) -> bool {
        true
    }
}
