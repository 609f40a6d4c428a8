//! Named groups: a group's shared state in a POSIX shared-memory object (`shm_open`) that any
//! process of the right user creates or opens by name, so that workers that were exec'd, or
//! started by a supervisor that has nothing to do with the creator, share one group.
//!
//! The object is the group's shared state (`crate::shared`: the preamble, the header, the
//! member slots) and also its liveness lock file (`crate::liveness`: byte n is member n's
//! record lock), so a member's death is noticed by every process that opened the name. Two more
//! lock bytes, far above the member bytes, guard the object's life:
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
//! What an opener trusts: the preamble is checked (magic word, layout version, sizes, settings)
//! before anything else of the memory is used, and every index read from the shared memory is
//! bounded by the group's capacity. Beyond that a group is trusted as far as its permissions
//! (`0600` unless a mode is given): a process that may write it may also truncate it under its
//! members, which then fault.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::{Duration, Instant};

use crate::contract::{Backend, Rotation, MAX_MEMBERS_LIMIT};
use crate::error::{Error, Result};
pub(crate) use crate::group::Create;
use crate::shared::{self, RegionSpec, Settings, SharedState, LAYOUT_VERSION, MAGIC};

/// The lock byte every opener holds while it sets up or checks the object.
const SETUP_BYTE: libc::off_t = 1 << 20;
/// The lock byte every process that has the group open holds for reading.
const OPEN_BYTE: libc::off_t = SETUP_BYTE + 1;
/// How long an opener waits for another one's setup (a creator stopped half-way).
const SETUP_PATIENCE: Duration = Duration::from_secs(10);
/// How long an open-only caller waits for a creator that made the object but has not set it up.
const CREATOR_PATIENCE: Duration = Duration::from_secs(2);

/// What the shared-memory object's name starts with (after the `/`).
const PREFIX: &str = "herdless.";

/// The longest name a group can have here: the platform's limit on a shared-memory object's
/// name, less the `/` and [`PREFIX`] (macOS allows 31 characters in all).
#[cfg(any(target_os = "macos", target_os = "ios"))]
pub(crate) const MAX_NAME_LEN: usize = 31 - 1 - PREFIX.len();
/// The longest name a group can have here (a file name's 255 bytes, less the `/` and
/// [`PREFIX`]).
#[cfg(not(any(target_os = "macos", target_os = "ios")))]
pub(crate) const MAX_NAME_LEN: usize = 255 - 1 - PREFIX.len();

/// What a caller of [`open`] asks for.
pub(crate) struct Request<'a> {
    pub name: &'a str,
    /// `None`: open an existing group only, and take its settings. `Some`: create the group
    /// with these settings if there is none (or re-make one nobody uses); an existing group
    /// must have them.
    pub create: Option<Create>,
    /// What a group of some settings keeps after its member slots (its backend's region).
    pub region: fn(&Settings) -> RegionSpec,
}

/// An opened named group: its shared state and the object (the liveness lock file), with this
/// process's open lock held on it.
pub(crate) struct Segment {
    pub shared: SharedState,
    pub file: File,
}

/// Checks a group name: 1 to [`MAX_NAME_LEN`] characters of `A-Z a-z 0-9 . _ -`. Returns the
/// shared-memory object's name.
pub(crate) fn object_name(name: &str) -> Result<CString> {
    let refuse = |reason: String| Error::InvalidGroupName {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(refuse("a name has at least one character".into()));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(refuse(format!(
            "at most {MAX_NAME_LEN} characters here (the platform's limit on a shared-memory \
             object's name), not {}",
            name.len()
        )));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(refuse(format!(
            "{c:?} is not allowed: letters, digits, '.', '_' and '-' only"
        )));
    }
    Ok(CString::new(format!("/{PREFIX}{name}")).expect("checked: no NUL"))
}

/// Removes the group's name, as `unlink` does a file's: processes that have it open keep it,
/// the next creator makes a new group under the name.
pub(crate) fn remove(name: &str) -> Result<()> {
    let object = object_name(name)?;
    // SAFETY: a valid C string; shm_unlink touches nothing of ours.
    if unsafe { libc::shm_unlink(object.as_ptr()) } == -1 {
        return Err(os_error(
            name,
            "removing the named group",
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Opens, creates or re-makes the named group (see the module docs).
pub(crate) fn open(req: &Request<'_>) -> Result<Segment> {
    let object = object_name(req.name)?;
    let started = Instant::now();
    loop {
        let file = open_object(req, &object)?;
        let setup = hold_setup(&file, req.name)?;
        match settle(req, &file)? {
            Some(shared) => {
                // Open for as long as the process keeps the file; then the setup is over.
                lock(&file, libc::F_RDLCK as libc::c_short, OPEN_BYTE, 1)
                    .map_err(|e| Error::io("marking the named group open", e))?;
                drop(setup);
                return Ok(Segment { shared, file });
            }
            None if started.elapsed() < CREATOR_PATIENCE => {
                // An object its creator has not set up yet (open only): look again shortly.
                drop(setup);
                drop(file);
                std::thread::sleep(Duration::from_millis(2));
            }
            None => {
                return Err(Error::GroupNotFound {
                    name: req.name.to_owned(),
                })
            }
        }
    }
}

/// Opens the object, making it (empty, with `O_EXCL`) if the caller may create and there is
/// none. (Whoever takes the setup lock first sets it up: not always the process that made it.)
fn open_object(req: &Request<'_>, object: &CString) -> Result<File> {
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
                // SAFETY: fchmod on our own open descriptor.
                if unsafe { libc::fchmod(file.as_raw_fd(), c.mode as libc::mode_t) } == -1 {
                    let e = io::Error::last_os_error();
                    return Err(os_error(req.name, "setting the named group's mode", e));
                }
                return Ok(file);
            }
        }
        match shm_open(object, libc::O_RDWR | libc::O_CLOEXEC, 0) {
            Ok(file) => return Ok(file),
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

fn shm_open(object: &CString, flags: libc::c_int, mode: u32) -> io::Result<File> {
    // macOS declares shm_open variadic (the mode goes as an unsigned int); elsewhere it takes a
    // mode_t.
    #[cfg(any(target_os = "macos", target_os = "ios"))]
    let mode = mode as libc::c_uint;
    #[cfg(not(any(target_os = "macos", target_os = "ios")))]
    let mode = mode as libc::mode_t;
    // SAFETY: a valid C string; the descriptor returned is new and ours alone.
    let fd = unsafe { libc::shm_open(object.as_ptr(), flags, mode) };
    if fd == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// With the setup lock held: maps the group, after setting it up if nobody has (its maker has
/// not come to it yet, or died first), or if the caller may create and nobody uses it. An
/// object that is not a group this herdless reads is refused, used or not.
/// `None`: an open-only caller found a group not yet set up.
fn settle(req: &Request<'_>, file: &File) -> Result<Option<SharedState>> {
    let size = file
        .metadata()
        .map_err(|e| Error::io("reading the named group's size", e))?
        .len();
    // Looked at even by the process that made the object: another opener may have taken the
    // setup lock first and set the group up (and joined it) already.
    let found = inspect(file, size, req.region)?;
    let create = match (found, req.create) {
        (Found::Group(ptr, settings), create) => {
            let remake = match create {
                Some(_) => unused(file)?,
                None => false,
            };
            match create {
                Some(c) if remake => {
                    // Nobody uses it: re-made fresh, with the creator's settings.
                    unmap(ptr, size as usize);
                    c
                }
                _ => {
                    if let Some(c) = &create {
                        if let Err(e) = check_settings(req.name, &settings, c) {
                            unmap(ptr, size as usize);
                            return Err(e);
                        }
                    }
                    // SAFETY: `inspect` mapped exactly size_for(capacity, region) bytes, checked.
                    return Ok(Some(unsafe {
                        SharedState::from_mapping(ptr, settings, (req.region)(&settings), false)
                    }));
                }
            }
        }
        (Found::NotSetUp, Some(c)) => c,
        (Found::NotSetUp, None) => return Ok(None),
        // Not ours to overwrite, used or not: the caller removes the name (`Group::remove`).
        (Found::Bad(e), _) => return Err(e.into_error(req.name)),
    };
    set_up(
        file,
        req.name,
        create.settings,
        (req.region)(&create.settings),
    )
    .map(Some)
}

/// What an object holds.
enum Found {
    /// Nothing set up (a creator that died half-way, or has not started).
    NotSetUp,
    /// A valid group, mapped at this address.
    Group(*mut u8, Settings),
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
    let ptr = map(file, size as usize)?;
    // SAFETY: the mapping is at least a Header long, page-aligned, and a Header is all atomics,
    // for which any bytes are a valid value.
    let p = unsafe { &(*ptr.cast::<shared::Header>()).preamble };
    use std::sync::atomic::Ordering::SeqCst;
    let magic = p.magic.load(SeqCst);
    let verdict = if magic == 0 {
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
    };
    match verdict {
        Ok(settings) => Ok(Found::Group(ptr, settings)),
        Err(found) => {
            unmap(ptr, size as usize);
            Ok(found)
        }
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
    let ptr = map(file, size)?;
    // SAFETY: a fresh mapping of exactly size_for(capacity, region) bytes, handed over.
    Ok(unsafe { SharedState::from_mapping(ptr, settings, region, true) })
}

fn map(file: &File, size: usize) -> Result<*mut u8> {
    // SAFETY: maps `size` bytes of our own open object, shared; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::io(
            "mapping the named group",
            io::Error::last_os_error(),
        ));
    }
    Ok(p.cast())
}

fn unmap(ptr: *mut u8, size: usize) {
    // SAFETY: our own mapping of `size` bytes, not used after.
    unsafe { libc::munmap(ptr.cast(), size) };
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
    // SAFETY: flock is plain data; all-zero is a valid starting value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = len;
    // SAFETY: a valid descriptor we own and a pointer to a live flock.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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
            reason: "too long for this platform's shared-memory objects".into(),
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
