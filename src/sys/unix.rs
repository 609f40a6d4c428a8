//! What every Unix system gives herdless, each call wrapped once, through rustix where it has
//! the call (its wrappers are safe: they take `BorrowedFd`s and slices, and return
//! `std::io::Error`s that keep the kernel's error number) and through libc where it does not
//! (byte-range record locks, `poll(2)` on numbers, `kcmp`, the user and group database):
//! descriptors known by number, a descriptor's file type and status flags, `poll(2)` (a look at
//! readiness without waiting, or a wait), whether two descriptors name one open file (Linux),
//! record locks, whether a user is in a group, shared mappings, the monotonic clock and whether
//! a process is there.
//!
//! The `unsafe` here is what no safe crate can promise for us: that a descriptor *number* the
//! caller gave us names something open ([`by_number`]), the C calls and structs rustix does not
//! wrap (`poll` on numbers, record locks, `kcmp`, `getpwuid_r` and `getgrouplist`), and the
//! memory of a mapping ([`Mapping`]). Code above this module calls these and stays safe.

// The model checker's build (`--cfg loom`) leaves out the shared groups, whose locks, mappings,
// clocks and checks of processes these are.
#![cfg_attr(loom, allow(dead_code))]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::AtomicU64;

pub(crate) use rustix::fs::Stat;

/// A descriptor herdless knows by number only (a registration's, a member's, one the caller
/// named with a raw number), borrowed for one call. `EBADF` for a negative number, which no
/// descriptor has (and -1 may not even be held in a `BorrowedFd`).
///
/// The number may have been closed, or closed and reused, since the caller handed it over:
/// the public API tolerates a close of a registered descriptor. The calls herdless makes with
/// such a borrow only name the number to the kernel (`fstat`, `fcntl`, `epoll_ctl`, `poll`,
/// `getsockname`): for a closed number the kernel answers `EBADF`, for a reused one it answers
/// about the other file, and the callers treat both as the registry says (`crate::registry`:
/// a registration whose number no longer names its file). No borrow made here is ever used to
/// close the descriptor, nor kept past the call; the only reads and writes through one go to
/// herdless's own descriptors that their holder keeps open meanwhile (a member's bell eventfd,
/// the fault tests' pipe).
pub(crate) fn by_number<'a>(fd: RawFd) -> io::Result<BorrowedFd<'a>> {
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: `fd` is not -1 (the one value a `BorrowedFd` cannot hold). `BorrowedFd` asks
    // that the number stay open while borrowed; herdless cannot promise it for a number a
    // caller may close at any time, and does not need it: the borrow goes only to calls that
    // name the number to the kernel, which checks it (see above), never to a close, and
    // reads or writes only descriptors of herdless's own that are open meanwhile.
    Ok(unsafe { BorrowedFd::borrow_raw(fd) })
}

/// `fstat(2)` of a descriptor known by number.
pub(crate) fn fstat(fd: RawFd) -> io::Result<Stat> {
    rustix::fs::fstat(by_number(fd)?).map_err(io::Error::from)
}

/// The file status flags of a descriptor known by number (`fcntl(F_GETFL)`): `O_NONBLOCK`,
/// the access mode, as libc spells them.
pub(crate) fn status_flags(fd: RawFd) -> io::Result<libc::c_int> {
    let flags = rustix::fs::fcntl_getfl(by_number(fd)?)?;
    Ok(flags.bits() as libc::c_int)
}

/// `poll(2)` with a zero timeout: fills each entry's `revents` and returns how many have any.
/// Entries name descriptors by number; one that is not open comes back `POLLNVAL`.
pub(crate) fn poll_now(fds: &mut [libc::pollfd]) -> io::Result<usize> {
    poll(fds, 0)
}

/// `poll(2)` of entries that name descriptors by number (one that is not open comes back
/// `POLLNVAL`, a negative one is left alone), waiting up to `timeout_ms` (-1: no limit).
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: libc::c_int) -> io::Result<usize> {
    // SAFETY: the slice is live and writable for the call, and its length is the one passed;
    // poll(2) only reads the numbers and writes each entry's `revents`.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Do descriptors `a` and `b` of process `pid` (the caller's own) name the same open file?
/// (`kcmp(KCMP_FILE)`, which rustix does not wrap; `EBADF` if either number is not open.)
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn same_open_file(pid: u32, a: RawFd, b: RawFd) -> io::Result<bool> {
    const KCMP_FILE: libc::c_long = 0;
    let pid = libc::c_long::from(pid);
    // SAFETY: kcmp only compares two descriptor numbers of a process, passed as integers,
    // and touches no memory of ours; a number that is not open gives EBADF.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            pid,
            pid,
            KCMP_FILE,
            libc::c_long::from(a),
            libc::c_long::from(b),
        )
    };
    match r {
        0 => Ok(true),
        1..=3 => Ok(false),
        _ => Err(io::Error::last_os_error()),
    }
}

/// What one descriptor is ready for now (`poll(2)` of `events`, zero timeout): its `revents`,
/// 0 if nothing (or the call failed).
pub(crate) fn poll_one_now(fd: RawFd, events: libc::c_short) -> libc::c_short {
    let mut pfd = [libc::pollfd {
        fd,
        events,
        revents: 0,
    }];
    match poll_now(&mut pfd) {
        Ok(1) => pfd[0].revents,
        _ => 0,
    }
}

/// One POSIX record-lock call (`fcntl` with `cmd`: `F_SETLK`, `F_SETLKW` or `F_GETLK`) of
/// `kind` (`F_RDLCK`, `F_WRLCK`, `F_UNLCK`) on the `len` bytes from `start` (0: to the end of
/// the file). Returns the lock structure as the kernel left it: for `F_GETLK`, the first
/// conflicting lock (`l_type`, `l_start`, `l_len`, `l_pid`), or `l_type == F_UNLCK` if none.
/// (rustix locks whole files only.)
pub(crate) fn record_lock(
    file: BorrowedFd<'_>,
    cmd: libc::c_int,
    kind: libc::c_short,
    start: libc::off_t,
    len: libc::off_t,
) -> io::Result<libc::flock> {
    // SAFETY: `flock` is plain data, for which all-zero bytes are a valid value; fcntl gets an
    // open descriptor (borrowed) and a pointer to that live `flock`, which it reads and, for
    // F_GETLK, writes.
    let (res, fl) = unsafe {
        let mut fl: libc::flock = std::mem::zeroed();
        fl.l_type = kind;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = start;
        fl.l_len = len;
        (libc::fcntl(file.as_raw_fd(), cmd, &mut fl), fl)
    };
    if res == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(fl)
}

/// Is user `uid` a member of group `gid`: its primary group (`getpwuid_r`), or a supplementary
/// one (`getgrouplist`, up to 1024 groups)? False if the user is unknown. (Neither call is in
/// rustix.)
pub(crate) fn in_group(uid: u32, gid: u32) -> bool {
    // macOS spells group ids `int` here.
    #[cfg(any(target_os = "macos", target_os = "ios"))]
    type GroupId = libc::c_int;
    #[cfg(not(any(target_os = "macos", target_os = "ios")))]
    type GroupId = libc::gid_t;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut groups = vec![0 as GroupId; 1024];
    let mut n = groups.len() as libc::c_int;
    // SAFETY: `passwd` is plain data, for which all-zero bytes are a valid value; getpwuid_r
    // gets live buffers of the sizes given and sets `found` to `&mut pw` or NULL; on success
    // `pw_name` is the NUL-terminated name it wrote into `buf` (alive until the end of the
    // function), and getgrouplist writes at most `n` entries into `groups`, which holds `n`.
    let rc = unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut found = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            uid as libc::uid_t,
            &mut pw,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        );
        if rc != 0 || found.is_null() {
            return false;
        }
        #[allow(clippy::unnecessary_cast)]
        if pw.pw_gid as u32 == gid {
            return true;
        }
        libc::getgrouplist(
            pw.pw_name,
            pw.pw_gid as GroupId,
            groups.as_mut_ptr(),
            &mut n,
        )
    };
    #[allow(clippy::unnecessary_cast)]
    {
        rc >= 0 && groups[..n.max(0) as usize].iter().any(|&g| g as u32 == gid)
    }
}

/// Monotonic nanoseconds (`CLOCK_MONOTONIC`), comparable across the processes of a machine.
pub(crate) fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `pid` as a process id the kernel could have given: `None` for 0 and for what no process id
/// reaches (above `i32::MAX`: read from a damaged group's memory), which as a negative number
/// would name a process group.
pub(crate) fn process_id(pid: u32) -> Option<rustix::process::Pid> {
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
}

/// Has process `pid` ended? (Signal 0: nothing is sent. A zombie not yet waited for still
/// counts as there; a process of another user, `EPERM`, too.)
pub(crate) fn process_gone(pid: u32) -> bool {
    match process_id(pid) {
        Some(p) => rustix::process::test_kill_process(p) == Err(rustix::io::Errno::SRCH),
        None => false,
    }
}

/// A shared, readable and writable mapping (`mmap` with `MAP_SHARED`), unmapped on drop: of an
/// open file (a named group's shared-memory object) or anonymous (kept shared with children
/// forked later). Its bytes start zeroed (anonymous, or a file grown from nothing) or as the
/// file holds them; herdless reads and writes them through atomics only, for which any bytes
/// are a valid value.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    /// `len` bytes of `file` from its start, shared with every process that maps it.
    pub(crate) fn of_file(file: BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
        Mapping::new(Some(file), len)
    }

    /// `len` zeroed bytes of anonymous shared memory.
    pub(crate) fn anonymous(len: usize) -> io::Result<Mapping> {
        Mapping::new(None, len)
    }

    fn new(file: Option<BorrowedFd<'_>>, len: usize) -> io::Result<Mapping> {
        use rustix::mm::{MapFlags, ProtFlags};
        let prot = ProtFlags::READ | ProtFlags::WRITE;
        // SAFETY: a new mapping at an address the kernel picks (null hint): no memory of ours
        // is touched or replaced.
        let ptr = unsafe {
            match file {
                Some(fd) => {
                    rustix::mm::mmap(std::ptr::null_mut(), len, prot, MapFlags::SHARED, fd, 0)
                }
                None => {
                    rustix::mm::mmap_anonymous(std::ptr::null_mut(), len, prot, MapFlags::SHARED)
                }
            }
        }?;
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }

    /// The mapping's first byte, page-aligned.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The mapping's first 8 bytes as an atomic word (a named group's magic word); `None` if
    /// the mapping is shorter.
    pub(crate) fn first_word(&self) -> Option<&AtomicU64> {
        // SAFETY: at least 8 bytes, page-aligned, live as long as `self`; any bytes are a
        // valid AtomicU64, and the memory is only ever accessed through atomics.
        (self.len >= 8).then(|| unsafe { &*self.ptr.cast::<AtomicU64>() })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping of `len` bytes, unmapped once; no reference into it outlives
        // `self` (they all borrow it).
        let _ = unsafe { rustix::mm::munmap(self.ptr.cast(), self.len) };
    }
}
