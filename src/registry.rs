//! What both backends keep the same way for one waiter's registrations: the table of registered
//! descriptors with the count of those that asked for one event per wait, modify as delete plus
//! add with the old registration put back when the new one is refused, and the mapping of the
//! kernel's refusals to typed errors. Each backend keeps only what differs (its record's extra
//! fields, how it watches a descriptor, when a turn ends).
//!
//! It also owns the **lifecycle of a registered descriptor**, the same on both backends. A
//! registration is of an open file, not of a number: the user may close the number, have it
//! reused by another file (an `open`, the library's own pidfd, a `dup2` over it) while the file
//! stays open elsewhere (a forked member's copy). The kernel keeps an epoll entry for as long as
//! its file is open anywhere, and lets it be deleted only through the same number naming the same
//! file; so a closed number's entry can outlive the registration and go on taking wake-ups (an
//! exclusive one takes them from the group's other members). The rules:
//!
//! - every registration records its file (`FileId`: device and inode, and a pipe's direction)
//!   and a generation; the kernel entry carries a `token` (generation and number), never the
//!   bare number, so an event of a stale entry is told from one of a live registration under
//!   the same number;
//! - before a member sleeps, its exclusive registrations are checked against their file, and
//!   an event of any other registration when it is handed out: a number closed or naming
//!   another file is forgotten, never reported. One system call each where the entry can be
//!   asked (Linux: an `EPOLL_CTL_MOD`, which the kernel refuses for a live exclusive entry and
//!   lets set a live plain one to what it was, and answers `EBADF` or `ENOENT` for a number
//!   that no longer names the entry's file), else the file (`still_names`: an `fstat`, and an
//!   `fcntl` for a pipe);
//! - a kernel entry that may be stale (its delete refused: `EBADF` or `ENOENT`) is removed by
//!   rebuilding the member's kernel poll instance from its live registrations (the only way the
//!   kernel allows). Exclusive ones at once, since they take wake-ups from others; others when
//!   an event carries a token no live registration has (so a server that closes connections
//!   without `delete` pays nothing: their entries went with their last reference);
//! - `delete` of a closed or reused number succeeds (it forgets the registration), `add` over
//!   a stale registration replaces it, and no library descriptor that takes a closed number is
//!   mistaken for the user's;
//! - one open file (and direction) is registered once per waiter when either registration is
//!   exclusive: an `add` of a duplicate of a registered descriptor (`dup`) is refused with
//!   `AlreadyRegistered` naming the number it duplicates (`duplicate_of`), the same on both
//!   backends. Two descriptors of one file without `exclusive` are two registrations, each with
//!   its events, as epoll has them.
//!
//! Below the handles, beside the backends: it imports only the contract (errors, interests).

use std::collections::HashMap;
use std::ops::Deref;

use rustc_hash::FxBuildHasher;

use crate::error::{Error, RawSource, Result};
use crate::interest::Interest;

/// A backend's record of one registration.
pub(crate) trait Registered {
    /// The interest it was registered with (never changed in place: a change is a new insert).
    fn interest(&self) -> Interest;
    /// The file the descriptor named when it was registered.
    fn file(&self) -> FileId;
}

/// One waiter's registrations by descriptor. Reads go through `Deref` to the map; changes
/// through `insert` and `remove`, which keep the one-event count right.
///
/// Hashed with Fx (a multiply and a rotate), not the standard SipHash: the emulation looks a
/// descriptor up several times per event, and SipHash's resistance to chosen keys buys nothing
/// here, the keys being descriptor numbers the kernel hands out.
pub(crate) struct Registry<R> {
    entries: HashMap<RawSource, R, FxBuildHasher>,
    /// How many registrations asked for one event per wait.
    one_event: u32,
    /// How many are exclusive (none: an add without `exclusive` has no duplicate to look for).
    exclusive: u32,
}

impl<R: Registered> Registry<R> {
    pub(crate) fn new() -> Registry<R> {
        Registry {
            entries: HashMap::with_hasher(FxBuildHasher),
            one_event: 0,
            exclusive: 0,
        }
    }

    /// Records `fd`, returning the record it replaces, if any.
    pub(crate) fn insert(&mut self, fd: RawSource, record: R) -> Option<R> {
        self.count(record.interest(), 1);
        let old = self.entries.insert(fd, record);
        if let Some(old) = &old {
            self.count(old.interest(), -1);
        }
        old
    }

    /// Forgets `fd`, returning its record.
    pub(crate) fn remove(&mut self, fd: RawSource) -> Option<R> {
        let old = self.entries.remove(&fd)?;
        self.count(old.interest(), -1);
        Some(old)
    }

    /// Keeps the counts of one-event and exclusive registrations as one with `interest` comes
    /// (`by` 1) or goes (`by` -1).
    fn count(&mut self, interest: Interest, by: i32) {
        let change = |n: &mut u32, flag: bool| {
            if flag {
                *n = n.wrapping_add_signed(by);
            }
        };
        change(&mut self.one_event, interest.is_one_event_round_robin());
        change(&mut self.exclusive, interest.is_exclusive());
    }

    /// The number under which this waiter has registered another descriptor of the open file
    /// `fd` names now (`file`, in the same direction), if the new registration (`interest`) or
    /// that one is exclusive: then `fd` is a duplicate (`dup`, `dup2`, `F_DUPFD`) of it, which
    /// both backends refuse alike. Looks only at registrations of the same device and inode
    /// (one comparison each, a system call or two only on a match), and at none when neither
    /// side can be exclusive.
    pub(crate) fn duplicate_of(
        &self,
        fd: RawSource,
        file: FileId,
        interest: Interest,
    ) -> Option<RawSource> {
        if (!interest.is_exclusive() && self.exclusive == 0) || !file.comparable() {
            return None;
        }
        self.entries
            .iter()
            .find(|&(&other, r)| {
                other != fd
                    && r.file() == file
                    && (interest.is_exclusive() || r.interest().is_exclusive())
                    && still_names(other, file)
                    && same_open_file(fd, other, file)
            })
            .map(|(&other, _)| other)
    }

    /// The record of `fd`, to change its bookkeeping (not its interest).
    pub(crate) fn get_mut(&mut self, fd: &RawSource) -> Option<&mut R> {
        self.entries.get_mut(fd)
    }

    /// Every record, to change their bookkeeping (not their interests).
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&RawSource, &mut R)> {
        self.entries.iter_mut()
    }

    /// The record of `fd`, or `NotRegistered`.
    pub(crate) fn registered(&self, fd: RawSource) -> Result<&R> {
        self.entries.get(&fd).ok_or(Error::NotRegistered { fd })
    }

    /// How many events one wait may hand out, given `room` in the caller's buffer: one if any
    /// registration asked for one event per wait.
    pub(crate) fn events_per_wait(&self, room: usize) -> usize {
        if self.one_event > 0 {
            1
        } else {
            room
        }
    }
}

impl<R> Deref for Registry<R> {
    type Target = HashMap<RawSource, R, FxBuildHasher>;
    fn deref(&self) -> &Self::Target {
        &self.entries
    }
}

/// Modify as delete plus add (what an exclusive registration needs on both backends): deletes,
/// adds `new` (key, interest), and if that is refused adds `old` back and returns the refusal.
pub(crate) fn replace<W: ?Sized>(
    waiter: &mut W,
    old: (usize, Interest),
    new: (usize, Interest),
    delete: impl FnOnce(&mut W) -> Result<()>,
    mut add: impl FnMut(&mut W, usize, Interest) -> Result<()>,
) -> Result<()> {
    delete(waiter)?;
    if let Err(e) = add(waiter, new.0, new.1) {
        add(waiter, old.0, old.1)?;
        return Err(e);
    }
    Ok(())
}

/// poll(2)'s events for an interest.
#[cfg(unix)]
pub(crate) fn poll_events(interest: Interest) -> libc::c_short {
    let mut events = 0;
    if interest.is_readable() {
        events |= libc::POLLIN;
    }
    if interest.is_writable() {
        events |= libc::POLLOUT;
    }
    if interest.is_priority() {
        events |= libc::POLLPRI;
    }
    events
}

/// Is `fd` still ready for `interest` right now (a zero-timeout `poll`)? What both backends ask
/// once an event is consumed, to tell a backlog from a single event (`Rotation::Adaptive`).
#[cfg(unix)]
pub(crate) fn still_ready(fd: RawSource, interest: Interest) -> bool {
    let events = poll_events(interest);
    // Hang-ups and errors are not a backlog: the turn ends (and the others see them too).
    crate::sys::unix::poll_one_now(fd, events) & events != 0
}

/// Names the kernel's refusal of a descriptor (`epoll_ctl`, or `polling`'s poller underneath):
/// closed, of a kind that cannot be polled, already registered; else the error itself, with
/// what was being done.
pub(crate) fn refusal(fd: RawSource, err: std::io::Error, context: &'static str) -> Error {
    match err.raw_os_error() {
        #[cfg(unix)]
        Some(libc::EBADF) => Error::BadDescriptor { fd },
        #[cfg(unix)]
        Some(libc::EPERM) => Error::UnwatchableDescriptor {
            fd,
            reason: crate::error::eperm_reason(fd),
        },
        #[cfg(unix)]
        Some(libc::EEXIST) => Error::AlreadyRegistered { fd, registered: fd },
        _ => {
            let _ = fd; // only Unix names the refusals
            Error::io(context, err)
        }
    }
}

/// Which file a descriptor names: its device and inode (`fstat`), and for a pipe or FIFO the
/// direction it was opened in (`fcntl`: the two ends share one inode). Two descriptors of one
/// open file, in any process, have the same; a number closed and reused by another file, or a
/// pipe's other end `dup2`'d over it, has not.
#[cfg(unix)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
    /// An anonymous inode (Linux's eventfd, timerfd, signalfd, epoll: no file type), which all
    /// such descriptors share.
    anonymous: bool,
    /// A pipe's or FIFO's access mode (`O_RDONLY`, `O_WRONLY`, `O_RDWR`); 0 for anything else
    /// (whose inode is its own).
    direction: i32,
}

#[cfg(unix)]
impl FileId {
    /// Does the device and inode tell files apart? Not where the system gives none (FreeBSD's
    /// sockets, kqueues and eventfds all report device 0 and inode 0).
    fn comparable(&self) -> bool {
        self.dev != 0 || self.ino != 0
    }

    /// A number spread over 64 bits from the device and inode, the same in every process: where
    /// a table keyed by file (the native backend's claims) looks.
    #[cfg(all(any(target_os = "linux", target_os = "android"), not(loom)))]
    pub(crate) fn spread(&self) -> u64 {
        // Fibonacci hashing of the two words: neighbouring inodes land far apart.
        (self.ino ^ self.dev.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

/// Are `a` and `b`, whose files have the device and inode `file`, the same open file in the
/// same direction, as the emulation tells a source (`emulated::identity`)? The access mode
/// tells a pipe's two ends apart (one inode for both). An anonymous inode is one for every
/// eventfd, timerfd and signalfd: there only the kernel can tell (`kcmp` of the two open
/// files, on Linux), and without it they are taken to differ.
#[cfg(unix)]
fn same_open_file(a: RawSource, b: RawSource, file: FileId) -> bool {
    if file.anonymous {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            return matches!(
                crate::sys::unix::same_open_file(std::process::id(), a, b),
                Ok(true)
            );
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        return false;
    }
    use crate::sys::unix::status_flags;
    match (status_flags(a), status_flags(b)) {
        (Ok(fa), Ok(fb)) => fa & libc::O_ACCMODE == fb & libc::O_ACCMODE,
        _ => false,
    }
}

/// The file `fd` names now, or `None` if the number is not open.
#[cfg(unix)]
pub(crate) fn file_id(fd: RawSource) -> Option<FileId> {
    let st = crate::sys::unix::fstat(fd).ok()?;
    let direction = match st.st_mode & libc::S_IFMT == libc::S_IFIFO {
        true => crate::sys::unix::status_flags(fd).ok()? & libc::O_ACCMODE,
        false => 0,
    };
    Some(FileId {
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        anonymous: cfg!(any(target_os = "linux", target_os = "android"))
            && st.st_mode & libc::S_IFMT == 0,
        direction,
    })
}

/// Does `fd` still name the file `id` (a registration made of it is still live)?
#[cfg(unix)]
pub(crate) fn still_names(fd: RawSource, id: FileId) -> bool {
    file_id(fd) == Some(id)
}

/// Where descriptors are sockets handled by their own checks (Windows): no file to compare.
#[cfg(not(unix))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileId;

#[cfg(not(unix))]
impl FileId {
    /// Sockets have no file to compare: a duplicate is not told apart here.
    fn comparable(&self) -> bool {
        false
    }
}

#[cfg(not(unix))]
fn same_open_file(_a: RawSource, _b: RawSource, _file: FileId) -> bool {
    false
}

#[cfg(not(unix))]
pub(crate) fn file_id(_fd: RawSource) -> Option<FileId> {
    Some(FileId)
}

#[cfg(not(unix))]
pub(crate) fn still_names(_fd: RawSource, _id: FileId) -> bool {
    true
}

/// How many bits of a registration's generation a token keeps: tokens stay below 2^63, clear of
/// the kernel-entry data the library keeps for its own descriptors at the top of the range (the
/// door bell, the death watches, the native waiter's own eventfd). The caller's keys are never
/// a kernel entry's data: a registration's record holds its key.
#[cfg(all(unix, target_pointer_width = "64"))]
const GENERATION_BITS: u32 = 31;

/// The kernel entry's data for a registration of descriptor `fd` made as `generation`: the
/// number in the low 32 bits, the generation (modulo 2^31) above. An event of an entry left
/// behind by an earlier registration of the same number carries another generation.
#[cfg(all(unix, target_pointer_width = "64"))]
pub(crate) fn token(fd: RawSource, generation: u64) -> u64 {
    let generation = generation & ((1 << GENERATION_BITS) - 1);
    (generation << 32) | u64::from(fd as u32)
}

/// The descriptor number and generation in a token.
#[cfg(all(unix, target_pointer_width = "64"))]
pub(crate) fn untoken(token: u64) -> (RawSource, u64) {
    ((token & 0xffff_ffff) as u32 as RawSource, token >> 32)
}

/// Does `token` name the registration made as `generation` (of the number it carries)?
#[cfg(all(unix, target_pointer_width = "64"))]
pub(crate) fn token_matches(token: u64, generation: u64) -> bool {
    token >> 32 == generation & ((1 << GENERATION_BITS) - 1)
}

/// Where a key is 32 bits (and on Windows, whose socket handles are not 32-bit numbers), the
/// token is the number alone: a stale entry is told apart by its file, not by its token.
#[cfg(not(all(unix, target_pointer_width = "64")))]
#[allow(clippy::unnecessary_cast)] // a SOCKET is u64 on 64-bit Windows, not on 32-bit
pub(crate) fn token(fd: RawSource, _generation: u64) -> u64 {
    fd as u64
}

#[cfg(not(all(unix, target_pointer_width = "64")))]
pub(crate) fn untoken(token: u64) -> (RawSource, u64) {
    (token as RawSource, 0)
}

#[cfg(not(all(unix, target_pointer_width = "64")))]
pub(crate) fn token_matches(_token: u64, _generation: u64) -> bool {
    true
}

/// Is this the kernel's answer for a delete of an entry it may not have dropped (the number
/// closed, or naming another file)? Then the entry may live on: see the module docs.
pub(crate) fn maybe_stale(err: &std::io::Error) -> bool {
    #[cfg(unix)]
    return matches!(err.raw_os_error(), Some(libc::EBADF) | Some(libc::ENOENT));
    #[cfg(not(unix))]
    return err.kind() == std::io::ErrorKind::NotFound;
}
