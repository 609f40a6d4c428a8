//! Is a member of another process still alive? Asked without any helper process or thread, so
//! that the emulation can clear out a dead member and any group can reuse its slot.
//!
//! Each member holds a POSIX record lock on one byte of a file of the group's (byte n for slot
//! n): an unlinked file made when an anonymous group was built, or a named group's
//! shared-memory object, which every process of the group opens by name; a reaper holds the dead member's byte while it clears the slot
//! out (see `crate::members`). The kernel drops a process's record locks the moment the process
//! dies, SIGKILL included, before it is even reaped, so "byte n is not held by another process"
//! means "whoever owned slot n in another process is gone". Record locks belong to processes,
//! not threads: two threads of one process holding one byte hold one lock, and one `F_UNLCK`
//! would drop it for both. So holds are counted per process and byte, and the lock is dropped
//! when the count falls to zero. Members that are threads of the caller's own process are alive
//! by definition (they leave through `Drop`). On systems without `fork` every member shares the
//! caller's process and is always alive; under the model checker a model of the locks stands in.
//!
//! The kernel keeps one list of record locks per file and walks all of it on every lock call,
//! so a file holds the bytes of at most [`SLOTS_PER_FILE`] slots: slot n's byte is byte n of
//! lock file n / [`SLOTS_PER_FILE`], and a join costs the same in a group of 64 members and
//! one of 16 384. A group of up to [`SLOTS_PER_FILE`] members has one lock file. An anonymous
//! group opens all of its files when it is built (forked members inherit them); a named group's
//! later files are opened by name the first time the process needs one, so a process holds
//! descriptors only for the files of the slots it touches.

use crate::error::Result;

/// How many slots' bytes one lock file holds. A lock call on a file with k locks walks all k
/// in the kernel (about 20 ns each here): 256 keeps that under a tenth of a join.
#[cfg(all(unix, not(loom)))]
pub(crate) const SLOTS_PER_FILE: usize = 256;

/// How many lock files a group of `capacity` slots has.
#[cfg(all(unix, not(loom)))]
pub(crate) fn files_for(capacity: usize) -> usize {
    capacity.div_ceil(SLOTS_PER_FILE).max(1)
}

/// How a named group opens its lock file k (1 or more): by the group object's name, given the
/// object (its first lock file), the name and k.
#[cfg(all(unix, not(loom)))]
pub(crate) type OpenLockFile = (
    fn(&std::fs::File, &std::ffi::CStr, usize) -> std::io::Result<std::fs::File>,
    std::ffi::CString,
);

#[cfg(all(unix, not(loom)))]
pub(crate) struct Liveness {
    /// The lock files, each opened once in the process and kept: file k holds the bytes of
    /// slots k × [`SLOTS_PER_FILE`] onwards.
    files: Box<[std::sync::OnceLock<std::fs::File>]>,
    /// How a named group opens its later files (None: an anonymous group, all open).
    open_later: Option<OpenLockFile>,
    /// The process whose thread opens a later file, or a removal looks at the files this
    /// process has not opened (`with_files`), 0 when none: so that no file is opened twice in
    /// the process (closing either descriptor would drop the process's locks on it). A child
    /// made by `fork` while a thread of its parent held it takes it over.
    opening: std::sync::atomic::AtomicU32,
    /// This process's holds of each byte: the count, and a busy bit while the kernel lock is
    /// being taken or dropped (so threads of the process agree on who calls fcntl).
    holds: Box<[std::sync::atomic::AtomicU32]>,
    /// The process the counts belong to: a child made by `fork` inherits the counts but not
    /// the locks, and starts from zero.
    counted_for: std::sync::atomic::AtomicU32,
}

#[cfg(all(unix, not(loom)))]
const BUSY: u32 = 1 << 31;
/// Set in `counted_for` (with the pid) while a thread of that process resets the counts (no
/// process id reaches bit 31).
#[cfg(all(unix, not(loom)))]
const RESETTING: u32 = 1 << 31;

#[cfg(all(unix, not(loom)))]
impl Liveness {
    pub(crate) fn new(capacity: usize) -> Result<Liveness> {
        let files = (0..files_for(capacity))
            .map(|_| unlinked_file())
            .collect::<Result<Vec<_>>>()?;
        Ok(Liveness::with(files, None, capacity))
    }

    /// The marks of a named group of `capacity` members: its shared-memory object is lock file
    /// 0, and `open_later` opens the others when first needed (`crate::named`). Only one
    /// descriptor of each may be open in a process: closing any descriptor of a file drops
    /// every record lock the process holds on it (`crate::group` keeps one open group per name
    /// and process).
    pub(crate) fn on_named(
        object: std::fs::File,
        capacity: usize,
        open_later: OpenLockFile,
    ) -> Liveness {
        Liveness::with(vec![object], Some(open_later), capacity)
    }

    /// `files`: the first of the group's lock files (all of them without `open_later`).
    fn with(
        files: Vec<std::fs::File>,
        open_later: Option<OpenLockFile>,
        capacity: usize,
    ) -> Liveness {
        let slots: Vec<std::sync::OnceLock<std::fs::File>> = (0..files_for(capacity))
            .map(|_| std::sync::OnceLock::new())
            .collect();
        for (slot, file) in slots.iter().zip(files) {
            let _ = slot.set(file);
        }
        Liveness {
            files: slots.into_boxed_slice(),
            open_later,
            opening: std::sync::atomic::AtomicU32::new(0),
            holds: (0..capacity)
                .map(|_| std::sync::atomic::AtomicU32::new(0))
                .collect(),
            counted_for: std::sync::atomic::AtomicU32::new(std::process::id()),
        }
    }

    /// The first lock file: for a named group its shared-memory object, which removing the
    /// group locks through this descriptor (`crate::named::remove`: another one, once closed,
    /// would drop this process's locks on it).
    pub(crate) fn file(&self) -> &std::fs::File {
        self.files[0]
            .get()
            .expect("lock file 0 is open from the start")
    }

    /// Runs `f` with the later lock files this process has open (None for one it has not),
    /// while none is opened: a removal, which opens the others for a moment (this process
    /// holds no lock on those).
    pub(crate) fn with_files<T>(&self, f: impl FnOnce(&[Option<&std::fs::File>]) -> T) -> T {
        let _opening = self.hold_opening();
        let later: Vec<Option<&std::fs::File>> = self.files[1..].iter().map(|f| f.get()).collect();
        f(&later)
    }

    /// Takes `opening` for this process's thread (waiting for another thread of the process).
    /// The holder may wait a long time: it opens a lock object under the group's setup lock,
    /// which another process may hold (stopped, even). So after a few yields the wait sleeps,
    /// 500 µs at a time as the wait for the setup lock does (`crate::named`), rather than spin
    /// (a spinning waiter would take a whole core for as long as the lock is held).
    fn hold_opening(&self) -> Opening<'_> {
        use std::sync::atomic::Ordering::SeqCst;
        let me = std::process::id();
        let mut tries = 0u32;
        loop {
            let seen = self.opening.load(SeqCst);
            // Free, or held by the parent this process was forked from.
            if seen != me
                && self
                    .opening
                    .compare_exchange(seen, me, SeqCst, SeqCst)
                    .is_ok()
            {
                return Opening(&self.opening);
            }
            if tries < 64 {
                tries += 1;
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(500));
            }
        }
    }

    /// Lock file `k`, opened now if this is its first use in the process.
    fn lock_file(&self, k: usize) -> std::io::Result<&std::fs::File> {
        let once = self
            .files
            .get(k)
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        if let Some(file) = once.get() {
            return Ok(file);
        }
        let open_later = self
            .open_later
            .as_ref()
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EBADF))?;
        let _opening = self.hold_opening();
        if once.get().is_none() {
            let (open, object) = open_later;
            let _ = once.set(open(self.file(), object, k)?);
        }
        once.get()
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EBADF))
    }

    fn lock(
        &self,
        slot: u32,
        kind: libc::c_short,
        cmd: libc::c_int,
    ) -> std::io::Result<libc::flock> {
        use std::os::fd::AsFd;
        // A slot out of range (from a damaged group's memory) is EINVAL.
        let file = self.lock_file(slot as usize / SLOTS_PER_FILE)?;
        crate::sys::unix::record_lock(file.as_fd(), cmd, kind, slot as libc::off_t, 1)
    }

    /// The hold count of `slot`, reset first in a child made by `fork` (which inherits the
    /// counts but not the locks). Two threads of a fresh child may get here at once: one resets
    /// (it marks `counted_for` with its pid and [`RESETTING`] by compare-and-swap), the other
    /// waits for it, so no count taken after the reset is lost to it. A mark left by another
    /// process (a fork in the middle of a reset) is taken over.
    fn count(&self, slot: u32) -> Option<&std::sync::atomic::AtomicU32> {
        use std::sync::atomic::Ordering::SeqCst;
        let me = std::process::id();
        loop {
            let seen = self.counted_for.load(SeqCst);
            if seen == me {
                break;
            }
            if seen == me | RESETTING {
                std::thread::yield_now(); // another thread of this process is resetting
                continue;
            }
            if self
                .counted_for
                .compare_exchange(seen, me | RESETTING, SeqCst, SeqCst)
                .is_ok()
            {
                for c in self.holds.iter() {
                    c.store(0, SeqCst);
                }
                self.counted_for.store(me, SeqCst);
                break;
            }
        }
        // A slot out of range comes from a damaged group's memory: no hold of it is counted.
        self.holds.get(slot as usize)
    }

    /// Marks `slot` held by this process (counted: each hold is matched by one `release`).
    /// Ok(false) if another process holds it.
    pub(crate) fn try_hold(&self, slot: u32, _me: u32) -> std::io::Result<bool> {
        use std::sync::atomic::Ordering::SeqCst;
        let Some(count) = self.count(slot) else {
            return Ok(false);
        };
        loop {
            let c = count.load(SeqCst);
            if c & BUSY != 0 {
                std::thread::yield_now();
            } else if c > 0 {
                if count.compare_exchange(c, c + 1, SeqCst, SeqCst).is_ok() {
                    return Ok(true);
                }
            } else if count.compare_exchange(0, BUSY, SeqCst, SeqCst).is_ok() {
                let taken = self.lock(slot, libc::F_WRLCK as libc::c_short, libc::F_SETLK);
                count.store(u32::from(taken.is_ok()), SeqCst);
                return match taken {
                    Ok(_) => Ok(true),
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
                        Ok(false)
                    }
                    Err(e) => Err(e),
                };
            }
        }
    }

    /// Drops one hold of `slot` by this process; the lock goes with the last.
    pub(crate) fn release(&self, slot: u32, _me: u32) {
        use std::sync::atomic::Ordering::SeqCst;
        let Some(count) = self.count(slot) else {
            return;
        };
        loop {
            let c = count.load(SeqCst);
            if c & BUSY != 0 {
                std::thread::yield_now();
            } else if c == 0 {
                return; // not held
            } else if c > 1 {
                if count.compare_exchange(c, c - 1, SeqCst, SeqCst).is_ok() {
                    return;
                }
            } else if count.compare_exchange(1, BUSY, SeqCst, SeqCst).is_ok() {
                let _ = self.lock(slot, libc::F_UNLCK as libc::c_short, libc::F_SETLK);
                count.store(0, SeqCst);
                return;
            }
        }
    }

    /// Does a process other than the caller's hold `slot`? (when in doubt: yes)
    pub(crate) fn is_held_by_other(&self, slot: u32, _me: u32) -> bool {
        match self.lock(slot, libc::F_WRLCK as libc::c_short, libc::F_GETLK) {
            Ok(fl) => fl.l_type != libc::F_UNLCK as libc::c_short,
            Err(_) => true, // when in doubt, do not declare a member dead
        }
    }

    /// Has process `pid` ended? (a zombie not yet waited for still counts as there)
    pub(crate) fn process_gone(&self, pid: u32) -> bool {
        crate::sys::unix::process_gone(pid)
    }
}

/// `Liveness::opening` held, let go when this goes.
#[cfg(all(unix, not(loom)))]
struct Opening<'a>(&'a std::sync::atomic::AtomicU32);

#[cfg(all(unix, not(loom)))]
impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.store(0, std::sync::atomic::Ordering::SeqCst);
    }
}

/// An unlinked file of the temporary directory, for an anonymous group's locks: the open
/// descriptor is all the group needs (forked members inherit it).
#[cfg(all(unix, not(loom)))]
fn unlinked_file() -> Result<std::fs::File> {
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
        // Opened close-on-exec (the standard library always asks for O_CLOEXEC).
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => {
                let _ = std::fs::remove_file(&path);
                return Ok(file);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(Error::io(
        "creating the group's liveness file",
        last.unwrap_or_else(|| std::io::ErrorKind::Other.into()),
    ))
}

/// Every member is a thread of the caller's process here: always alive.
#[cfg(all(not(unix), not(loom)))]
pub(crate) struct Liveness;

#[cfg(all(not(unix), not(loom)))]
impl Liveness {
    pub(crate) fn new(_capacity: usize) -> Result<Liveness> {
        Ok(Liveness)
    }
    pub(crate) fn try_hold(&self, _slot: u32, _me: u32) -> std::io::Result<bool> {
        Ok(true)
    }
    pub(crate) fn release(&self, _slot: u32, _me: u32) {}
    pub(crate) fn is_held_by_other(&self, _slot: u32, _me: u32) -> bool {
        true
    }
    pub(crate) fn process_gone(&self, _pid: u32) -> bool {
        false
    }
}

/// Under the model checker: a model of the record locks, so that loom sees every hold and
/// every release. Each byte says which process holds it and how many times; `kill` ends a
/// process as the kernel would: its locks are dropped, and it no longer exists.
#[cfg(loom)]
pub(crate) struct Liveness {
    /// Per byte: holder pid (high 32 bits) and hold count (low 32 bits); 0 when free.
    holders: Vec<crate::sync::AtomicU64>,
    /// Bit n: process n has died.
    gone: crate::sync::AtomicU64,
}

#[cfg(loom)]
impl Liveness {
    pub(crate) fn new(capacity: usize) -> Result<Liveness> {
        Ok(Liveness {
            holders: (0..capacity)
                .map(|_| crate::sync::AtomicU64::new(0))
                .collect(),
            gone: crate::sync::AtomicU64::new(0),
        })
    }
    pub(crate) fn try_hold(&self, slot: u32, me: u32) -> std::io::Result<bool> {
        use std::sync::atomic::Ordering::SeqCst;
        let Some(h) = self.holders.get(slot as usize) else {
            return Ok(false);
        };
        loop {
            let v = h.load(SeqCst);
            let next = match v {
                0 => (u64::from(me) << 32) | 1,
                v if (v >> 32) as u32 == me => v + 1,
                _ => return Ok(false),
            };
            if h.compare_exchange(v, next, SeqCst, SeqCst).is_ok() {
                return Ok(true);
            }
        }
    }
    pub(crate) fn release(&self, slot: u32, me: u32) {
        use std::sync::atomic::Ordering::SeqCst;
        let Some(h) = self.holders.get(slot as usize) else {
            return;
        };
        loop {
            let v = h.load(SeqCst);
            if v == 0 || (v >> 32) as u32 != me {
                return;
            }
            let next = if v & 0xffff_ffff == 1 { 0 } else { v - 1 };
            if h.compare_exchange(v, next, SeqCst, SeqCst).is_ok() {
                return;
            }
        }
    }
    pub(crate) fn is_held_by_other(&self, slot: u32, me: u32) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        let v = self
            .holders
            .get(slot as usize)
            .map_or(1, |h| h.load(SeqCst));
        v != 0 && (v >> 32) as u32 != me
    }
    pub(crate) fn process_gone(&self, pid: u32) -> bool {
        self.gone.load(std::sync::atomic::Ordering::SeqCst) & (1 << pid) != 0
    }
    /// Process `pid` dies: the kernel drops its locks; it no longer exists.
    #[cfg(test)]
    pub(crate) fn kill(&self, pid: u32) {
        use std::sync::atomic::Ordering::SeqCst;
        self.gone.fetch_or(1 << pid, SeqCst);
        for h in &self.holders {
            let v = h.load(SeqCst);
            if v != 0 && (v >> 32) as u32 == pid {
                let _ = h.compare_exchange(v, 0, SeqCst, SeqCst);
            }
        }
    }
}
