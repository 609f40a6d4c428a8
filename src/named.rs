//! Named groups: a group's shared state in a POSIX shared-memory object (`shm_open`) that any
//! process of the right user creates or opens by name, so that workers that were exec'd, or
//! started by a supervisor that has nothing to do with the creator, share one group.
//!
//! The object is the group's shared state (`crate::shared`: the preamble, the header, the
//! member slots) and also its liveness lock file (`crate::liveness`: byte n is member n's
//! record lock), so a member's death is noticed by every process that opened the name. A group
//! of more than `SLOTS_PER_FILE` (256) members has its later members' bytes in lock objects
//! named after it (`/herdless.<name>~1`, `~2`, …: the kernel walks every lock of a file on each
//! lock call). A process opens one when it first needs it, and makes it if nobody has (the
//! header's `lock_objects` bits say which were made); a creator unlinks any an earlier group of
//! the name left, and a removal unlinks them: all under the setup lock. Two more lock bytes,
//! far above the member bytes, guard the object's life:
//!
//! - **setup** (`SETUP_BYTE`, a write lock held for a moment): every opener takes it before it
//!   looks at the object, so a creator sets the group up, or re-makes it, with nobody looking,
//!   and many processes creating one name at once end up in one group. The creator makes the
//!   object with `O_EXCL`; a creator that dies half-way leaves an object whose preamble has no
//!   magic word, which the next creator sets up.
//! - **open** (`OPEN_BYTE`, a read lock held while the process has the group open): a
//!   creator re-makes a group (fresh, with its own settings) only when nobody holds a lock on
//!   it: no process has it open and no member is alive. A group whose members all died is
//!   therefore the next creator's to reuse.
//!
//! **Removal.** A name is one group at a time. [`remove`] takes the setup lock, refuses (unless
//! forced) while a member is alive or another process has the group open, and then marks the
//! object removed ([`REMOVED_MAGIC`] in its first word) before it unlinks the name, both under
//! the lock. An opener that opened the name just before the unlink and takes the setup lock
//! after it finds the mark and opens the name again: it joins the group now under the name (or
//! makes it), never the removed one. A forced removal marks a group in use: its members get
//! `Error::GroupRemoved` on their next call (`SharedState::check`), leave, and open the name
//! again.
//!
//! What an opener trusts: the preamble is checked (magic word, layout version, sizes, settings)
//! before anything else of the memory is used, and every index read from the shared memory is
//! bounded by the group's capacity. Beyond that a group is trusted as far as its permissions
//! (`0600` unless a mode is given): a process that may write it may also truncate it under its
//! members, which then fault.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::AsFd;

use rustix::fs::Mode;
use rustix::shm::OFlags;
use std::time::{Duration, Instant};

use crate::contract::{Backend, Origin, Rotation, MAX_MEMBERS_LIMIT};
use crate::error::{Error, Result};
use crate::liveness::files_for;
use crate::shared::{
    self, RegionSpec, Settings, SharedState, LAYOUT_VERSION, MAGIC, REMOVED_MAGIC,
};
use crate::sys::unix::{record_lock, Mapping};

/// The lock byte every opener holds while it sets up or checks the object.
const SETUP_BYTE: libc::off_t = 1 << 20;
/// The lock byte every process that has the group open holds for reading.
const OPEN_BYTE: libc::off_t = SETUP_BYTE + 1;
/// How long an opener waits for another one's setup (a creator stopped half-way).
const SETUP_PATIENCE: Duration = Duration::from_secs(10);
/// How long an open-only caller waits for a creator that made the object but has not set it up.
const CREATOR_PATIENCE: Duration = Duration::from_secs(2);
/// How many removed objects in a row an opener or a remover goes past before it gives up (each
/// one a removal that came between its `shm_open` and its setup lock).
const REMOVALS_IN_A_ROW: usize = 100;

/// What the shared-memory object's name starts with (after the `/`).
const PREFIX: &str = "herdless.";

/// What a lock object's name adds to the group object's: `~` and its number (1 to 63).
const LOCK_SUFFIX_LEN: usize = 3;

/// The most lock objects a group has besides its object (16 384 members, 256 to a file).
const MOST_LOCK_OBJECTS: usize = MAX_MEMBERS_LIMIT / crate::liveness::SLOTS_PER_FILE - 1;

/// The longest name a group can have here: the platform's limit on a shared-memory object's
/// name, less the `/`, [`PREFIX`] and a lock object's suffix (macOS allows 31 characters in
/// all).
#[cfg(any(target_os = "macos", target_os = "ios"))]
pub(crate) const MAX_NAME_LEN: usize = 31 - 1 - PREFIX.len() - LOCK_SUFFIX_LEN;
/// The longest name a group can have here (a file name's 255 bytes, less the `/`, [`PREFIX`]
/// and a lock object's suffix).
#[cfg(not(any(target_os = "macos", target_os = "ios")))]
pub(crate) const MAX_NAME_LEN: usize = 255 - 1 - PREFIX.len() - LOCK_SUFFIX_LEN;

/// What a caller of [`open`] asks for.
pub(crate) struct Request<'a> {
    pub name: &'a str,
    /// `None`: open an existing group only, and take its settings. `Some`: create the group
    /// with these settings if there is none (or re-make one nobody uses); an existing group
    /// must have them.
    pub create: Option<Create>,
    /// What a group of some settings keeps after its member slots (its backend's region).
    pub region: fn(&Settings) -> RegionSpec,
    /// A check of an object the caller did not make (its owner and mode), before anything of
    /// it is read: an implicit group's opener refuses one a user it does not trust could have
    /// planted (`crate::line`).
    pub trust: Option<Trust<'a>>,
}

/// A check of a group object another process made, before anything of it is read: `Ok` to
/// use it, an error (the refusal) otherwise.
pub(crate) type Trust<'a> = &'a dyn Fn(&File) -> Result<()>;

/// The settings of a named group to create, and how they were asked for.
#[derive(Clone, Copy)]
pub(crate) struct Create {
    /// The settings, backend resolved.
    pub settings: Settings,
    /// The backend as asked: `Auto` takes any backend an existing group has.
    pub asked_backend: Backend,
    /// The source table's size as asked (an existing emulated group must have it, whichever
    /// backend `Auto` resolved to here).
    pub max_exclusive: usize,
    /// The permission bits of a new object.
    pub mode: u32,
    /// The owner group a new object is given (`fchown`), if any: where the creator may not
    /// give it, the object's group bits are cleared instead (nobody is let in wider than
    /// asked).
    pub group: Option<u32>,
}

/// An opened named group: its shared state and the object (the liveness lock file), with this
/// process's open lock held on it.
pub(crate) struct Segment {
    pub shared: SharedState,
    pub file: File,
    /// Whether the group was created, opened or re-made.
    pub origin: Origin,
}

/// Checks a group name: 1 to [`MAX_NAME_LEN`] characters of `A-Z a-z 0-9 . _ -`. Returns the
/// shared-memory object's name.
pub(crate) fn object_name(name: &str) -> Result<CString> {
    let refuse = |reason: String| Error::InvalidGroupName {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(refuse(format!(
            "a name has 1 to {MAX_NAME_LEN} characters of letters, digits, '.', '_' and '-': \
             give it one"
        )));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(refuse(format!(
            "at most {MAX_NAME_LEN} characters here (the platform's limit on a shared-memory \
             object's name), not {}: use a shorter name",
            name.len()
        )));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(refuse(format!(
            "{c:?} is not allowed: use letters, digits, '.', '_' and '-' only"
        )));
    }
    Ok(CString::new(format!("/{PREFIX}{name}")).expect("checked: no NUL"))
}

/// Whether [`remove`] may remove a group in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InUse {
    /// Refuse with `Error::GroupInUse` while a member is alive or another process has it open.
    Refuse,
    /// Remove it all the same: its members get `Error::GroupRemoved` on their next call.
    Force,
}

/// The caller's own process's share of the group it removes, when it has the group open.
pub(crate) struct Own<'a> {
    /// Its descriptor of the object, which the setup lock is taken through: closing another
    /// descriptor of the object would drop every record lock the process holds on it (its
    /// open lock and its members' liveness locks).
    pub file: &'a File,
    /// Its descriptors of the group's lock objects, for the same reason, for those it opened
    /// (it opens no other while the removal runs: `Liveness::with_files`).
    pub more_locks: &'a [Option<&'a File>],
    /// Its live members (slot, process id): the locks of the process's own members are not
    /// seen by its own lock queries.
    pub members: Vec<(usize, u32)>,
}

/// Removes the named group (see the module docs): refused with `Error::GroupInUse` while a
/// member is alive or another process than the caller's has it open, unless `in_use` forces
/// it; otherwise the object is marked removed and the name unlinked, under the setup lock.
pub(crate) fn remove(name: &str, in_use: InUse, own: Option<Own<'_>>) -> Result<()> {
    let object = object_name(name)?;
    if let Some(own) = own {
        let locks = Some(own.more_locks);
        if remove_object(name, &object, own.file, locks, in_use, &own.members)? {
            return Ok(());
        }
        // Another process removed the group this one has open, a moment ago: the name is
        // another group's now, or nobody's.
    }
    for _ in 0..REMOVALS_IN_A_ROW {
        let file = shm_open(&object, libc::O_RDWR | libc::O_CLOEXEC, 0)
            .map_err(|e| os_error(name, "opening the named group to remove it", e))?;
        if remove_object(name, &object, &file, None, in_use, &[])? {
            return Ok(());
        }
        // Removed by another process between our shm_open and our setup lock: the name is
        // another group's now, or nobody's (GroupNotFound at the next open).
    }
    Err(removed_too_often(name))
}

/// Removes the object `file`, opened by the name `object`, with its setup lock held, and its
/// lock objects (`more_locks`: this process's descriptors of them if it has the group open;
/// otherwise they are opened by name here). False if it was marked removed already (by another
/// remover) and the name no longer names it.
fn remove_object(
    name: &str,
    object: &CString,
    file: &File,
    more_locks: Option<&[Option<&File>]>,
    in_use: InUse,
    own_members: &[(usize, u32)],
) -> Result<bool> {
    let _setup = hold_setup(file, name)?;
    let size = file
        .metadata()
        .map_err(|e| Error::io("reading the named group's size", e))?
        .len();
    if removed(file, size)? {
        return finish_removal(file, object);
    }
    if in_use == InUse::Refuse {
        // Another process's members hold their liveness bytes; the caller's own are listed by
        // the caller. Nobody opens the group meanwhile: every opener takes the setup lock.
        // The lock objects this process has not opened are opened for a moment: it holds no
        // lock on them, so closing them drops nothing.
        let opened = open_existing_lock_objects(object, more_locks.unwrap_or(&[]))?;
        let mut members: Vec<(usize, u32)> = Vec::new();
        let ours = more_locks.unwrap_or(&[]).iter().flatten().copied();
        for lock_file in std::iter::once(file).chain(ours).chain(&opened) {
            members.extend(
                lock_holders(lock_file, 0, MAX_MEMBERS_LIMIT as u64)?
                    .into_iter()
                    .map(|(byte, pid)| (byte as usize, pid)),
            );
        }
        members.extend(own_members.iter().copied());
        members.sort_unstable();
        members.dedup();
        let opened_by = lock_holders(file, OPEN_BYTE as u64, 1)?
            .first()
            .map(|&(_, pid)| pid);
        if !members.is_empty() || opened_by.is_some() {
            return Err(Error::GroupInUse {
                name: name.to_owned(),
                members,
                opened_by,
            });
        }
    }
    // Marked before the unlink, so that no opener that opened the name before the unlink
    // joins the group after it; an object too short for the mark (its creator has not set it
    // up) is lengthened for it.
    let mark_room = std::mem::size_of::<u64>() as u64;
    if size < mark_room {
        file.set_len(mark_room)
            .map_err(|e| os_error(name, "marking the named group removed", e))?;
    }
    let previous = swap_magic(file, REMOVED_MAGIC)?;
    // The lock objects' names first, while the name still names this object: a creator of
    // the name's next group takes this object's setup lock (held here) before it makes its own.
    if let Err(e) = unlink_lock_objects(object) {
        swap_magic(file, previous)?;
        if size < mark_room {
            let _ = file.set_len(size);
        }
        return Err(os_error(name, "removing the named group's lock objects", e));
    }
    if let Err(e) = rustix::shm::unlink(object.as_c_str()) {
        let e = io::Error::from(e);
        // Nothing changed after all: the mark (and the length) as they were.
        swap_magic(file, previous)?;
        if size < mark_room {
            let _ = file.set_len(size);
        }
        return Err(os_error(name, "removing the named group", e));
    }
    Ok(true)
}

/// With the setup lock of `file` held, found marked removed: unlinks the name if it still names
/// `file` (a remover died between its mark and its unlink), so the name is free again. Whether
/// the name named it.
fn finish_removal(file: &File, object: &CString) -> Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let again = match shm_open(object, libc::O_RDWR | libc::O_CLOEXEC, 0) {
        Ok(again) => again,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(false),
        Err(e) => return Err(Error::io("opening a removed named group's name", e)),
    };
    let identity = |f: &File| f.metadata().map(|m| (m.dev(), m.ino()));
    let same = identity(file)
        .and_then(|ours| identity(&again).map(|now| ours == now))
        .map_err(|e| Error::io("reading a removed named group's identity", e))?;
    if same {
        // Nobody else unlinks it meanwhile: a herdless unlink takes the setup lock we hold.
        let _ = unlink_lock_objects(object);
        let _ = rustix::shm::unlink(object.as_c_str());
    }
    // (Closing `again` drops this process's locks on the object, the setup lock with them:
    // the caller is done with it.)
    Ok(same)
}

/// Does the object of `size` bytes carry the removed mark?
fn removed(file: &File, size: u64) -> Result<bool> {
    if size < std::mem::size_of::<u64>() as u64 {
        return Ok(false);
    }
    let mapping = map(file, std::mem::size_of::<u64>())?;
    let magic = magic_word(&mapping).load(std::sync::atomic::Ordering::SeqCst);
    Ok(magic == REMOVED_MAGIC)
}

/// Stores `magic` in the first word of the object (at least 8 bytes long); returns the word it
/// replaced.
fn swap_magic(file: &File, magic: u64) -> Result<u64> {
    let mapping = map(file, std::mem::size_of::<u64>())?;
    Ok(magic_word(&mapping).swap(magic, std::sync::atomic::Ordering::SeqCst))
}

/// The first word of a mapping of at least 8 bytes.
fn magic_word(mapping: &Mapping) -> &std::sync::atomic::AtomicU64 {
    mapping.first_word().expect("a mapping of 8 bytes or more")
}

fn removed_too_often(name: &str) -> Error {
    os_error(
        name,
        "opening the named group",
        io::Error::other(format!(
            "it was removed {REMOVALS_IN_A_ROW} times in a row while this process opened it"
        )),
    )
}

/// Opens, creates or re-makes the named group (see the module docs).
pub(crate) fn open(req: &Request<'_>) -> Result<Segment> {
    let object = object_name(req.name)?;
    let started = Instant::now();
    let mut removals = 0;
    loop {
        let (file, made) = open_object(req, &object)?;
        if let (Some(trust), false) = (req.trust, made) {
            trust(&file)?;
        }
        let setup = hold_setup(&file, req.name)?;
        match settle(req, &file)? {
            Settled::Group(shared, origin) => {
                let count = files_for(shared.capacity() as usize) - 1;
                if count > 0 && origin != Origin::Opened {
                    // Nobody uses the name's lock objects: an earlier group's are unlinked.
                    unlink_lock_objects(&object).map_err(|e| {
                        os_error(req.name, "unlinking an earlier group's lock objects", e)
                    })?;
                }
                // Open for as long as the process keeps the file; then the setup is over.
                lock(&file, libc::F_RDLCK as libc::c_short, OPEN_BYTE, 1)
                    .map_err(|e| Error::io("marking the named group open", e))?;
                drop(setup);
                return Ok(Segment {
                    shared,
                    file,
                    origin,
                });
            }
            Settled::Removed => {
                // Removed between our shm_open and our setup lock: the name is another
                // object's now, or nobody's. Opened again.
                removals += 1;
                if removals == REMOVALS_IN_A_ROW {
                    return Err(removed_too_often(req.name));
                }
                finish_removal(&file, &object)?;
                drop(setup);
                drop(file);
            }
            Settled::NotSetUp if started.elapsed() < CREATOR_PATIENCE => {
                // An object its creator has not set up yet (open only): look again shortly.
                drop(setup);
                drop(file);
                std::thread::sleep(Duration::from_millis(2));
            }
            Settled::NotSetUp => {
                return Err(Error::GroupNotFound {
                    name: req.name.to_owned(),
                })
            }
        }
    }
}

/// Opens the object, making it (empty, with `O_EXCL`) if the caller may create and there is
/// none; and whether this call made it. (Whoever takes the setup lock first sets it up: not
/// always the process that made it.)
fn open_object(req: &Request<'_>, object: &CString) -> Result<(File, bool)> {
    for _ in 0..100 {
        if let Some(c) = &req.create {
            let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
            if let Some(file) =
                shm_open(object, flags, c.mode)
                    .map(Some)
                    .or_else(|e| match e.raw_os_error() {
                        Some(libc::EEXIST) => Ok(None),
                        _ => Err(os_error(req.name, "creating the named group", e)),
                    })?
            {
                // The mode exactly as asked, whatever the umask.
                if let Err(e) = rustix::fs::fchmod(&file, Mode::from_bits_truncate(c.mode as _)) {
                    return Err(os_error(
                        req.name,
                        "setting the named group's mode",
                        e.into(),
                    ));
                }
                if let Some(gid) = c.group {
                    give_group(&file, gid, c.mode)
                        .map_err(|e| os_error(req.name, "setting the named group's group", e))?;
                }
                return Ok((file, true));
            }
        }
        match shm_open(object, libc::O_RDWR | libc::O_CLOEXEC, 0) {
            Ok(file) => return Ok((file, false)),
            // Removed between our two calls: make it again.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && req.create.is_some() => continue,
            Err(e) => return Err(os_error(req.name, "opening the named group", e)),
        }
    }
    Err(Error::io(
        "opening the named group",
        io::Error::other("it was created and removed 100 times in a row"),
    ))
}

/// The name of the group object `object`'s lock object `k` (1 to [`MOST_LOCK_OBJECTS`]).
fn lock_object_name(object: &CStr, k: usize) -> CString {
    let mut name = object.to_bytes().to_vec();
    name.extend_from_slice(format!("~{k}").as_bytes());
    CString::new(name).expect("no NUL: a checked name and digits")
}

/// Lock object `k` (1 to 63) of the group object `object` (`file`), for a process that needs
/// it for the first time (`crate::liveness`), under the object's setup lock: opened by its name
/// if the header says it was made (it must be there, and belong to the object's owner), made
/// otherwise (empty, with the object's mode and owner group; one that is there already was not
/// made by the group, and is refused). Refused too once the group was removed: the object is
/// marked before its lock objects' names are unlinked, so one of the name's next group is never
/// used.
pub(crate) fn open_lock_object(file: &File, object: &CStr, k: usize) -> io::Result<File> {
    use std::os::unix::fs::MetadataExt;
    use std::sync::atomic::Ordering::SeqCst;
    let corrupt = |reason: String| io::Error::other(format!("the group is damaged: {reason}"));
    if !(1..=MOST_LOCK_OBJECTS).contains(&k) {
        return Err(corrupt(format!("no lock object {k}")));
    }
    let name = lock_object_name(object, k);
    let _setup = hold_setup(file, "").map_err(io::Error::from)?;
    let meta = file.metadata()?;
    if removed(file, meta.len()).map_err(io::Error::from)? {
        return Err(io::Error::other("the group was removed"));
    }
    let header = std::mem::size_of::<shared::Header>();
    if meta.len() < header as u64 {
        return Err(corrupt("shorter than its header".into()));
    }
    let mapping = map(file, header).map_err(io::Error::from)?;
    let (_mapping, lock) = shared::read_header(mapping, |h| {
        let bit = 1u64 << (k - 1);
        if h.lock_objects.load(SeqCst) & bit != 0 {
            let lock = match shm_open(&name, libc::O_RDWR | libc::O_CLOEXEC, 0) {
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    return Err(corrupt(format!("its lock object {k} is missing")))
                }
                other => other?,
            };
            let lock_owner = lock.metadata()?.uid();
            if lock_owner != meta.uid() {
                return Err(corrupt(format!(
                    "its lock object {k} belongs to user {lock_owner}, the group to user {}",
                    meta.uid()
                )));
            }
            return Ok(lock);
        }
        let mode = meta.mode() & 0o777;
        let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
        let lock = match shm_open(&name, flags, mode) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                return Err(corrupt(format!(
                    "a lock object {k} is there that the group did not make"
                )))
            }
            other => other?,
        };
        let set_up = rustix::fs::fchmod(&lock, Mode::from_bits_truncate(mode as _))
            .map_err(io::Error::from)
            .and_then(|()| match lock.metadata()?.gid() == meta.gid() {
                true => Ok(()),
                false => give_group(&lock, meta.gid(), mode),
            });
        if let Err(e) = set_up {
            let _ = rustix::shm::unlink(name.as_c_str());
            return Err(e);
        }
        h.lock_objects.fetch_or(bit, SeqCst);
        Ok(lock)
    });
    lock
}

/// The lock objects under the group object's name `object` that `ours` (this process's own
/// descriptors, by number less one) does not have open (with the setup lock held): to list the
/// members of a group being removed.
fn open_existing_lock_objects(object: &CString, ours: &[Option<&File>]) -> Result<Vec<File>> {
    let mut files = Vec::new();
    for k in 1..=MOST_LOCK_OBJECTS {
        if matches!(ours.get(k - 1), Some(Some(_))) {
            continue;
        }
        match shm_open(
            &lock_object_name(object, k),
            libc::O_RDWR | libc::O_CLOEXEC,
            0,
        ) {
            Ok(f) => files.push(f),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(Error::io("opening the named group's lock objects", e)),
        }
    }
    Ok(files)
}

/// Unlinks every lock object under the group object's name `object` (with its setup lock held).
fn unlink_lock_objects(object: &CString) -> io::Result<()> {
    for k in 1..=MOST_LOCK_OBJECTS {
        match rustix::shm::unlink(lock_object_name(object, k).as_c_str()) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::NOENT => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Gives the new object `file` the owner group `gid`; where the caller may not (not a member of
/// it, not root), clears the group bits of `mode` instead.
fn give_group(file: &File, gid: u32, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match std::os::unix::fs::fchown(file, None, Some(gid)) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            file.set_permissions(std::fs::Permissions::from_mode(mode & !0o070))
        }
        Err(e) => Err(e),
    }
}

fn shm_open(object: &CString, flags: libc::c_int, mode: u32) -> io::Result<File> {
    let flags = OFlags::from_bits_truncate(flags as _);
    let fd = rustix::shm::open(
        object.as_c_str(),
        flags,
        Mode::from_bits_truncate(mode as _),
    )?;
    Ok(File::from(fd))
}

/// What an opener found with the setup lock held.
enum Settled {
    /// The group, mapped, and how it came to be.
    Group(SharedState, Origin),
    /// An open-only caller found a group not yet set up.
    NotSetUp,
    /// The object was removed: the caller opens the name again.
    Removed,
}

/// With the setup lock held: maps the group, after setting it up if nobody has (its maker has
/// not come to it yet, or died first), or if the caller may create and nobody uses it. An
/// object that is not a group this herdless reads is refused, used or not; one marked removed
/// is left for the name's next object.
fn settle(req: &Request<'_>, file: &File) -> Result<Settled> {
    let size = file
        .metadata()
        .map_err(|e| Error::io("reading the named group's size", e))?
        .len();
    if removed(file, size)? {
        return Ok(Settled::Removed);
    }
    // Looked at even by the process that made the object: another opener may have taken the
    // setup lock first and set the group up (and joined it) already.
    let found = inspect(file, size, req.region)?;
    let (create, origin) = match (found, req.create) {
        (Found::Group(mapping, settings), create) => {
            let remake = match create {
                Some(_) => unused(file)?,
                None => false,
            };
            match create {
                Some(c) if remake => {
                    // Nobody uses it: re-made fresh, with the creator's settings.
                    drop(mapping);
                    (c, Origin::Remade)
                }
                _ => {
                    if let Some(c) = &create {
                        check_settings(req.name, &settings, c)?;
                    }
                    let region = (req.region)(&settings);
                    // `inspect` mapped exactly size_for(capacity, region) bytes, checked.
                    let shared = SharedState::from_mapping(mapping, settings, region, false);
                    return Ok(Settled::Group(shared, Origin::Opened));
                }
            }
        }
        (Found::NotSetUp, Some(c)) => (c, Origin::Created),
        (Found::NotSetUp, None) => return Ok(Settled::NotSetUp),
        // Not ours to overwrite, used or not: the caller removes the name (`Group::remove`).
        (Found::Bad(e), _) => return Err(e.into_error(req.name)),
    };
    let region = (req.region)(&create.settings);
    set_up(file, req.name, create.settings, region).map(|shared| Settled::Group(shared, origin))
}

/// What an object holds.
enum Found {
    /// Nothing set up (a creator that died half-way, or has not started).
    NotSetUp,
    /// A valid group, mapped whole.
    Group(Mapping, Settings),
    Bad(Bad),
}

/// Why an object is not a group this herdless can use.
enum Bad {
    Version(u32),
    Corrupt(String),
}

impl Bad {
    fn into_error(self, name: &str) -> Error {
        match self {
            Bad::Version(found) => Error::IncompatibleGroup {
                name: name.to_owned(),
                found,
                expected: LAYOUT_VERSION,
            },
            Bad::Corrupt(reason) => Error::CorruptGroup {
                name: name.to_owned(),
                reason,
            },
        }
    }
}

/// The largest object that could be a group: the most members with room to spare for a
/// backend's region (a bound for the first check, before the preamble is read).
const MAX_GROUP_SIZE: u64 = 1 << 32;

/// Reads the preamble of an object of `size` bytes and checks it against the size (the size a
/// group of its settings takes with the backend's region `region` gives), mapping the object
/// only when it is big enough to hold what it is read for.
fn inspect(file: &File, size: u64, region: fn(&Settings) -> RegionSpec) -> Result<Found> {
    let header = std::mem::size_of::<shared::Header>() as u64;
    if size == 0 {
        return Ok(Found::NotSetUp);
    }
    if size < header || size > MAX_GROUP_SIZE {
        return Ok(Found::Bad(Bad::Corrupt(format!(
            "{size} bytes, where a group takes {header} to {MAX_GROUP_SIZE} bytes"
        ))));
    }
    let mapping = map(file, size as usize)?;
    // The mapping is at least a Header long (checked above).
    let (mapping, verdict) = shared::read_header(mapping, |header| {
        let p = &header.preamble;
        use std::sync::atomic::Ordering::SeqCst;
        let magic = p.magic.load(SeqCst);
        if magic == 0 {
            Err(Found::NotSetUp)
        } else if magic != MAGIC {
            Err(Found::Bad(Bad::Corrupt(
                "no herdless magic word at its start".into(),
            )))
        } else if p.layout_version.load(SeqCst) != LAYOUT_VERSION {
            Err(Found::Bad(Bad::Version(p.layout_version.load(SeqCst))))
        } else {
            match Settings::decode(
                p.backend.load(SeqCst),
                p.rotation.load(SeqCst),
                p.capacity.load(SeqCst),
                p.sources.load(SeqCst),
            ) {
                Err(field) => Err(Found::Bad(Bad::Corrupt(format!(
                    "its {field} is not valid"
                )))),
                Ok(settings) => {
                    let want = shared::size_for(settings.capacity, region(&settings).len) as u64;
                    if p.size.load(SeqCst) != want || size != want {
                        Err(Found::Bad(Bad::Corrupt(format!(
                            "{size} bytes (its header says {}), where {} members take {want}",
                            p.size.load(SeqCst),
                            settings.capacity
                        ))))
                    } else {
                        Ok(settings)
                    }
                }
            }
        }
    });
    match verdict {
        Ok(settings) => Ok(Found::Group(mapping, settings)),
        Err(found) => Ok(found),
    }
}

/// Gives the object a fresh group's size and contents, with `settings` and the backend's
/// `region`.
fn set_up(file: &File, name: &str, settings: Settings, region: RegionSpec) -> Result<SharedState> {
    let size = shared::size_for(settings.capacity, region.len);
    // Zeroes throughout: cut to nothing, then grown (new bytes of an object read as zero).
    file.set_len(0)
        .and_then(|()| file.set_len(size as u64))
        .map_err(|e| os_error(name, "sizing the named group", e))?;
    let mapping = map(file, size)?;
    // A fresh mapping of exactly size_for(capacity, region) bytes, handed over.
    Ok(SharedState::from_mapping(mapping, settings, region, true))
}

fn map(file: &File, size: usize) -> Result<Mapping> {
    Mapping::of_file(file.as_fd(), size).map_err(|e| Error::io("mapping the named group", e))
}

/// Does nobody use the group: no process holds it open, no member's liveness byte is held?
/// (Asked with the setup lock held, so nobody opens it meanwhile.)
fn unused(file: &File) -> Result<bool> {
    let free = |start, len| match lock(file, libc::F_WRLCK as libc::c_short, start, len) {
        Ok(()) => {
            let _ = lock(file, libc::F_UNLCK as libc::c_short, start, len);
            Ok(true)
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => Ok(false),
        Err(e) => Err(Error::io("checking whether the named group is in use", e)),
    };
    Ok(free(OPEN_BYTE, 1)? && free(0, MAX_MEMBERS_LIMIT as libc::off_t)?)
}

/// An existing group must have the settings a creator asked for (a backend of `Auto` takes
/// either).
pub(crate) fn check_settings(name: &str, group: &Settings, asked: &Create) -> Result<()> {
    let differ = |setting, g: String, a: String| {
        Err(Error::GroupSettingsDiffer {
            name: name.to_owned(),
            setting,
            group: g,
            asked: a,
        })
    };
    if asked.asked_backend != Backend::Auto && group.backend != asked.settings.backend {
        return differ(
            "backend",
            format!("{:?}", group.backend),
            format!("{:?}", asked.settings.backend),
        );
    }
    if group.rotation != asked.settings.rotation {
        return differ(
            "rotation",
            rotation_text(group.rotation),
            rotation_text(asked.settings.rotation),
        );
    }
    if group.capacity != asked.settings.capacity {
        return differ(
            "max_members",
            group.capacity.to_string(),
            asked.settings.capacity.to_string(),
        );
    }
    if group.backend == Backend::Emulated && group.sources != asked.max_exclusive {
        return differ(
            "max_exclusive_descriptors",
            group.sources.to_string(),
            asked.max_exclusive.to_string(),
        );
    }
    Ok(())
}

fn rotation_text(r: Rotation) -> String {
    match r {
        Rotation::Adaptive => "Adaptive".into(),
        Rotation::Every(n) => format!("Every({n})"),
    }
}

/// The setup lock, dropped when this goes.
struct SetupLock<'a>(&'a File);

impl Drop for SetupLock<'_> {
    fn drop(&mut self) {
        let _ = lock(self.0, libc::F_UNLCK as libc::c_short, SETUP_BYTE, 1);
    }
}

/// Takes the setup lock, waiting (bounded) for another opener's setup.
fn hold_setup<'a>(file: &'a File, name: &str) -> Result<SetupLock<'a>> {
    let started = Instant::now();
    loop {
        match lock(file, libc::F_WRLCK as libc::c_short, SETUP_BYTE, 1) {
            Ok(()) => return Ok(SetupLock(file)),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
                if started.elapsed() > SETUP_PATIENCE {
                    return Err(os_error(
                        name,
                        "waiting for another process to finish setting the named group up",
                        io::Error::new(io::ErrorKind::TimedOut, "its setup lock stayed held"),
                    ));
                }
                std::thread::sleep(Duration::from_micros(500));
            }
            Err(e) => return Err(Error::io("locking the named group for setup", e)),
        }
    }
}

/// One non-blocking record-lock call on `len` bytes from `start`.
fn lock(file: &File, kind: libc::c_short, start: libc::off_t, len: libc::off_t) -> io::Result<()> {
    record_lock(file.as_fd(), libc::F_SETLK, kind, start, len).map(drop)
}

/// The record locks other processes hold on the `len` bytes from `start`: (byte, process id)
/// for each byte held. `F_GETLK` names one conflicting lock per query, in no set order, so the
/// range is split around each lock found and both sides asked again: 2k + 1 queries for k
/// locks.
fn lock_holders(file: &File, start: u64, len: u64) -> Result<Vec<(u64, u32)>> {
    let mut held = Vec::new();
    let mut ranges = vec![(start, start + len)];
    while let Some((from, to)) = ranges.pop() {
        if from >= to {
            continue;
        }
        let (kind, start, len) = (libc::F_WRLCK as libc::c_short, from as _, (to - from) as _);
        let fl = record_lock(file.as_fd(), libc::F_GETLK, kind, start, len)
            .map_err(|e| Error::io("checking whether the named group is in use", e))?;
        if fl.l_type == libc::F_UNLCK as libc::c_short {
            continue;
        }
        // The lock found, within the range asked (a length of 0 runs to the end of the file).
        let lock_from = (fl.l_start as u64).max(from);
        let lock_to = match fl.l_len {
            0 => to,
            n => (fl.l_start as u64).saturating_add(n as u64).min(to),
        };
        if lock_from >= lock_to {
            continue; // not within the range asked: no lock the kernel would report there
        }
        held.extend((lock_from..lock_to).map(|byte| (byte, fl.l_pid as u32)));
        ranges.push((from, lock_from));
        ranges.push((lock_to, to));
    }
    held.sort_unstable();
    Ok(held)
}

/// An operating-system error about the named group, typed where it has a type of its own.
fn os_error(name: &str, context: &'static str, e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => Error::PermissionDenied {
            name: name.to_owned(),
        },
        Some(libc::ENOENT) => Error::GroupNotFound {
            name: name.to_owned(),
        },
        Some(libc::ENAMETOOLONG) => Error::InvalidGroupName {
            name: name.to_owned(),
            reason: "too long for this platform's shared-memory objects: use a shorter name".into(),
        },
        _ => Error::io(context, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(object_name("svc.ORDERS-1_a").is_ok());
        for bad in ["", "a/b", "a b", "é", &"x".repeat(MAX_NAME_LEN + 1)] {
            assert!(
                matches!(object_name(bad), Err(Error::InvalidGroupName { .. })),
                "{bad:?} accepted"
            );
        }
        assert!(object_name(&"x".repeat(MAX_NAME_LEN)).is_ok());
    }
}
