//! Lines: the calling thread's member of the line of an object, with no group to make.
//!
//! POLLEXCL as the AIX request asks for it is a flag: every thread or process that polls a
//! shared object with it is one of the object's waiters. herdless's waiters belong to groups, so
//! an object's *line* is a group found from the object itself: the implicit named group of the
//! object's **permission class** (its owner, group and access bits), `implicit.<backend>.<uid>.
//! <gid>.<mode>`. Every object of a class is a source in that one group, so server A polling
//! q1 and q2 and server B polling q2 and q3 are two members of one group and q1, q2, q3 three
//! sources in it: exclusivity and turns stay per object (the emulation keeps a line per source;
//! natively each registration rotates on its own). A class is a group because a group's shared
//! memory is open to all its members: the group of a class is made with the access its objects
//! give (whoever may read or write the object gets read and write on the group, the object's
//! group as the group's owner group), so whoever may open the queue may share its line, and
//! nobody else.
//!
//! - **Named objects** (POSIX queues, FIFOs on a file system, devices): the class is the
//!   object's owner, group and access bits, as `fstat` gives them.
//! - **Anonymous objects** (sockets, anonymous pipes, eventfds): nobody opens them by name, so
//!   they are on the line of the calling process's user (`<euid>.x.600`, which a named object of
//!   that user with mode 0600 shares).
//! - **Trust.** An opener checks an existing group object before it maps it: it must be owned by
//!   root, the caller, the object's owner, or a user the object's mode lets in, be no wider open
//!   than the class's mode, and have the object's group when it has group bits; anything else
//!   could have been planted by a user the rule shuts out ([`Error::LineRefused`]).
//! - **Members.** Each thread keeps its members in a thread-local table, one per class and per
//!   layer type (the Rust and C poll calls share [`PollWaiter`](crate::PollWaiter)): joined at
//!   the thread's first call on the class, dropped (left) when the thread exits. A forked child
//!   inherits the table of the thread that forked, naming the parent's members: the first call
//!   in the child sees another process id, lets those go (a `Waiter` of another process never
//!   touches the parent's slots) and joins afresh.
//! - **Backend**: `HERDLESS_BACKEND` (`auto`, `native`, `emulated`), read once per process;
//!   it is part of the class's name, so a process that asks another backend is on another line.
//! - **Size**: [`LINE_MEMBERS`] members and [`LINE_SOURCES`] exclusive descriptors at once
//!   (emulated); what that costs is said at the constants.

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::fs::File;
use std::os::fd::RawFd;

use crate::contract::{Backend, Rotation};
use crate::error::{Error, Result};
use crate::group::Group;
use crate::waiter::Waiter;

/// The members an implicit group takes: the limit, 16 384, so that no number of threads and
/// processes sharing a queue meets a full group. A slot is one cache line of shared memory
/// (1 MiB for all, in pages the system gives only when a member touches them) and no
/// descriptor; a join takes a fresh slot without looking at the others.
pub const LINE_MEMBERS: usize = crate::contract::MAX_MEMBERS_LIMIT;

/// The distinct exclusive descriptors an emulated implicit group has registered at once: every
/// object of a class that some member polls. Each place is 128 bytes and one bit per member
/// slot (2 KiB at 16 384 members), so 4096 places are 8.5 MiB of shared memory, given by the
/// system only as places are first used (a place no member has registered is free again).
pub const LINE_SOURCES: usize = 4096;

/// An object's line class: which implicit group its line is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Class {
    /// The permission class of a group object on a line: owner, the group (when the mode has
    /// group bits) and the access bits of the group object.
    Shared {
        backend: Backend,
        uid: u32,
        gid: Option<u32>,
        mode: u32,
    },
    /// No exclusive descriptor: a group of the calling thread alone (POLLONE's turns between
    /// its own descriptors).
    Private { backend: Backend },
}

impl Class {
    /// The implicit group's name (`implicit.native.1000.1000.660`).
    pub(crate) fn name(&self) -> String {
        match self {
            Class::Shared {
                backend,
                uid,
                gid,
                mode,
            } => {
                let gid = gid.map_or("x".to_string(), |g| g.to_string());
                format!("implicit.{}.{uid}.{gid}.{mode:03o}", backend_word(*backend))
            }
            Class::Private { backend } => format!("private.{}", backend_word(*backend)),
        }
    }
}

fn backend_word(backend: Backend) -> &'static str {
    match backend {
        Backend::Emulated => "emulated",
        _ => "native",
    }
}

/// The access bits of the group object of an object with `mode`: read and write for each of
/// owner, group and others that may read or write the object; always for the owner (the
/// group object's maker uses it).
fn group_mode(mode: u32) -> u32 {
    let each = |shift: u32| match (mode >> shift) & 0o6 {
        0 => 0,
        _ => 0o6 << shift,
    };
    0o600 | each(3) | each(0)
}

/// The backend of implicit groups: `HERDLESS_BACKEND` (`auto`, default; `native`; `emulated`),
/// resolved, read once per process.
pub(crate) fn backend() -> Result<Backend> {
    static CHOSEN: std::sync::OnceLock<std::result::Result<Backend, String>> =
        std::sync::OnceLock::new();
    CHOSEN
        .get_or_init(|| {
            let asked = std::env::var("HERDLESS_BACKEND").unwrap_or_default();
            match asked.to_ascii_lowercase().as_str() {
                "" | "auto" => Ok(match crate::sys::native::probe() {
                    Ok(()) => Backend::Native,
                    Err(_) => Backend::Emulated,
                }),
                "emulated" => Ok(Backend::Emulated),
                "native" => match crate::sys::native::probe() {
                    Ok(()) => Ok(Backend::Native),
                    Err(reason) => Err(format!("native: {reason}")),
                },
                _ => Err(format!("?{asked}")),
            }
        })
        .clone()
        .map_err(|e| match e.strip_prefix('?') {
            Some(asked) => Error::InvalidSetting {
                reason: format!(
                    "the environment's HERDLESS_BACKEND is {asked:?}: set it to auto, native or \
                     emulated (or unset it: auto)"
                ),
            },
            None => Error::BackendUnavailable {
                backend: Backend::Native,
                reason: format!(
                    "{} (HERDLESS_BACKEND=native; set it to auto or emulated)",
                    e.trim_start_matches("native: ")
                ),
            },
        })
}

/// The class of the object behind `fd`; None if `fd` is not open.
fn class_of(fd: RawFd, backend: Backend) -> Result<Option<Class>> {
    let st = match crate::poll::identity::fstat(fd) {
        Ok(st) => st,
        Err(libc::EBADF) => return Ok(None),
        Err(errno) => {
            return Err(Error::io(
                "inspecting a polled descriptor's owner and mode",
                std::io::Error::from_raw_os_error(errno),
            ))
        }
    };
    let kind = st.st_mode & libc::S_IFMT;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let anonymous = kind == libc::S_IFSOCK
        || kind == 0 // eventfd, timerfd, signalfd, epoll: anonymous inodes
        || crate::poll::identity::is_anonymous_pipe(&st);
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let anonymous = kind == libc::S_IFSOCK || kind == 0;
    #[allow(clippy::unnecessary_cast)] // uid_t, gid_t and mode_t differ between systems
    let (uid, gid, mode) = match anonymous {
        true => (rustix::process::geteuid().as_raw(), 0, 0o600),
        false => (
            st.st_uid as u32,
            st.st_gid as u32,
            group_mode(st.st_mode as u32),
        ),
    };
    Ok(Some(Class::Shared {
        backend,
        uid,
        gid: (mode & 0o070 != 0).then_some(gid),
        mode,
    }))
}

/// The class of a poll array (`(fd, events)` of each entry): the one class of its entries asked
/// for with POLLEXCL (closed ones left out: they get POLLNVAL), or the thread's private class
/// if there is none.
///
/// # Errors
///
/// [`Error::LinesDiffer`] for two classes; the backend's errors (`backend`).
pub(crate) fn class_of_array(entries: impl Iterator<Item = (RawFd, i16)>) -> Result<Class> {
    let backend = backend()?;
    let mut found: Option<(RawFd, Class)> = None;
    for (fd, events) in entries {
        if fd < 0 || events & crate::poll::POLLEXCL == 0 {
            continue;
        }
        let Some(class) = class_of(fd, backend)? else {
            continue;
        };
        match &found {
            None => found = Some((fd, class)),
            Some((first, known)) if *known != class => {
                return Err(Error::LinesDiffer {
                    fd: *first,
                    other: fd,
                    line: known.name(),
                    other_line: class.name(),
                })
            }
            Some(_) => {}
        }
    }
    Ok(found.map_or(Class::Private { backend }, |(_, class)| class))
}

/// The name of the line of the object behind `fd` (`implicit.native.1000.x.600`: its permission
/// class's implicit group, see this module), on the backend `HERDLESS_BACKEND` selects: two
/// descriptors with one name may be registered by one member of that line.
///
/// ```
/// let (a, b) = std::os::unix::net::UnixStream::pair()?;
/// // Two sockets of one user: one line.
/// assert_eq!(herdless::line_name(&a)?, herdless::line_name(&b)?);
/// # Ok::<(), herdless::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::BadDescriptor`] if `fd` is not open; [`Error::Io`] if it cannot be inspected; the
/// backend's errors ([`Error::InvalidSetting`], [`Error::BackendUnavailable`]).
pub fn line_name<F: std::os::fd::AsFd + ?Sized>(fd: &F) -> Result<String> {
    Ok(class_of_fd(fd)?.name())
}

/// A new member of the line of the object behind `fd`, owned by the caller instead of kept in
/// the calling thread's table (as [`poll`](crate::poll)'s are): for a layer that keeps its own
/// waiters, such as the preload library's per epoll instance. It leaves the line when dropped.
/// Descriptors of the same [`line_name`] may be registered on it, exclusive or not.
///
/// ```
/// use herdless::Interest;
/// let (_tx, rx) = std::os::unix::net::UnixStream::pair()?;
/// rx.set_nonblocking(true)?;
/// let mut waiter = herdless::join_line(&rx)?;
/// waiter.add(&rx, 0, Interest::SHARED)?;
/// # Ok::<(), herdless::Error>(())
/// ```
///
/// # Errors
///
/// As [`line_name`], and opening or joining the line's group: [`Error::LineRefused`],
/// [`Error::GroupFull`], [`Error::Io`].
pub fn join_line<F: std::os::fd::AsFd + ?Sized>(fd: &F) -> Result<Waiter> {
    join(&class_of_fd(fd)?)
}

/// The class of the open object `fd`.
fn class_of_fd<F: std::os::fd::AsFd + ?Sized>(fd: &F) -> Result<Class> {
    use std::os::fd::AsRawFd;
    let fd = fd.as_fd().as_raw_fd();
    class_of(fd, backend()?)?.ok_or(Error::BadDescriptor { fd })
}

/// One member of this thread: its class, the layer's type, and the layer's state (which holds
/// the `Waiter`).
struct Entry {
    class: Class,
    kind: TypeId,
    state: Box<dyn Any>,
}

/// This thread's members, and the process they were joined in.
struct Members {
    pid: u32,
    entries: Vec<Entry>,
}

thread_local! {
    static MEMBERS: RefCell<Members> = const {
        RefCell::new(Members {
            pid: 0,
            entries: Vec::new(),
        })
    };
}

/// Runs `f` on this thread's member of `class`'s line, as the layer's state `T`: joined (and
/// made with `make`) at the thread's first call on the class, kept until the thread exits. A
/// table inherited across `fork` is let go first, and the child joins afresh.
///
/// # Errors
///
/// Opening or joining the class's group: [`Error::LineRefused`], [`Error::GroupFull`],
/// [`Error::Io`]; [`Error::Unsupported`] for a call made while another call of the same thread
/// is on its members (a signal handler that polls while the thread polls), or while the thread
/// exits.
pub(crate) fn with_member<T: 'static, R>(
    class: &Class,
    make: impl FnOnce(Waiter) -> T,
    f: impl FnOnce(&mut T) -> R,
) -> Result<R> {
    with_table(|members| {
        let kind = TypeId::of::<T>();
        let at = match members
            .entries
            .iter()
            .position(|e| e.kind == kind && e.class == *class)
        {
            Some(at) => at,
            None => {
                let waiter = join(class)?;
                members.entries.push(Entry {
                    class: class.clone(),
                    kind,
                    state: Box::new(make(waiter)),
                });
                members.entries.len() - 1
            }
        };
        let state = members.entries[at]
            .state
            .downcast_mut::<T>()
            .expect("an entry's state is of its kind");
        Ok(f(state))
    })
}

/// Runs `f` on every member of this thread kept as `T` but `class`'s (the thread polls `class`
/// now: what its other members hold is consumed). Errors of `f` end the walk.
pub(crate) fn each_other_member<T: 'static>(
    class: &Class,
    mut f: impl FnMut(&mut T) -> Result<()>,
) -> Result<()> {
    with_table(|members| {
        members
            .entries
            .iter_mut()
            .filter(|e| e.class != *class)
            .filter_map(|e| e.state.downcast_mut::<T>())
            .try_for_each(&mut f)
    })
}

/// Runs `f` on every member of this thread kept as `T`.
pub(crate) fn each_member<T: 'static>(mut f: impl FnMut(&mut T) -> Result<()>) -> Result<()> {
    with_table(|members| {
        members
            .entries
            .iter_mut()
            .filter_map(|e| e.state.downcast_mut::<T>())
            .try_for_each(&mut f)
    })
}

/// This thread's table, checked against the process (a forked child lets the parent's go).
fn with_table<R>(f: impl FnOnce(&mut Members) -> Result<R>) -> Result<R> {
    let busy = || Error::Unsupported {
        what: "a shared poll while the same thread is inside one (a signal handler that polls)",
        reason: "a thread's member of a line is used by one call at a time: poll from the \
                 thread's loop, not from a handler",
    };
    MEMBERS
        .try_with(|cell| {
            let mut members = cell.try_borrow_mut().map_err(|_| busy())?;
            let me = crate::pid::current();
            if members.pid != me {
                // Inherited across fork: the parent's members. Their Waiters leave nothing in a
                // process that did not join them (their drop does nothing here).
                members.entries.clear();
                members.pid = me;
            }
            f(&mut members)
        })
        .unwrap_or_else(|_| Err(busy()))
}

/// Opens `class`'s group and joins it.
fn join(class: &Class) -> Result<Waiter> {
    let group = match class {
        Class::Private { backend } => Group::builder().backend(*backend).max_members(1).build()?,
        Class::Shared {
            backend, gid, mode, ..
        } => {
            let name = class.name();
            let create = crate::named::Create {
                settings: crate::shared::Settings {
                    backend: *backend,
                    rotation: Rotation::Adaptive,
                    capacity: LINE_MEMBERS,
                    sources: match backend {
                        Backend::Emulated => LINE_SOURCES,
                        _ => 0,
                    },
                },
                asked_backend: *backend,
                max_exclusive: LINE_SOURCES,
                mode: *mode,
                group: *gid,
            };
            let trust = |file: &File| trusted(class, &name, file);
            crate::group::open_line(&name, create, &trust).map_err(|e| match e {
                Error::PermissionDenied { name } => Error::LineRefused {
                    reason: format!(
                        "this process's user may not open it ({}): the user that made it could \
                         not give it the objects' group; remove it while unused (as its owner or \
                         root) so that a member of the objects' group makes it, or poll as a user \
                         its mode lets in",
                        describe(&name)
                    ),
                    name,
                },
                e => e,
            })?
        }
    };
    group.join()
}

/// The owner and mode of the group object `name`, in words, for a refusal.
fn describe(name: &str) -> String {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(format!("/dev/shm/herdless.{name}")) {
        Ok(m) => format!(
            "owned by user {} and group {}, mode {:03o}",
            m.uid(),
            m.gid(),
            m.mode() & 0o777
        ),
        Err(_) => "its owner and mode cannot be read".to_string(),
    }
}

/// May the group object `file` (opened under `name`, not made by this call) be used for
/// `class`? Its owner must be root, the caller, the class's owner or a user the class's mode
/// lets in; its mode no wider than the class's; its group the class's when it has group bits.
fn trusted(class: &Class, name: &str, file: &File) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Class::Shared { uid, gid, mode, .. } = class else {
        return Ok(());
    };
    let m = file
        .metadata()
        .map_err(|e| Error::io("reading the line's group object's owner and mode", e))?;
    let (owner, group, bits) = (m.uid(), m.gid(), m.mode() & 0o777);
    let refuse = |why: String| {
        Err(Error::LineRefused {
            name: name.to_owned(),
            reason: format!(
                "it is owned by user {owner} and group {group} with mode {bits:03o}, {why}: \
                 a user the objects' permissions shut out may have made it; remove it (as its \
                 owner or root: rm /dev/shm/herdless.{name}) and poll again"
            ),
        })
    };
    if bits & !mode != 0 {
        return refuse(format!("wider open than the objects' {mode:03o}"));
    }
    if bits & 0o070 != 0 && Some(group) != *gid {
        return refuse(format!(
            "group bits for group {group}, not the objects' group {}",
            gid.map_or("(none)".to_string(), |g| g.to_string())
        ));
    }
    let me = rustix::process::geteuid().as_raw();
    let may_open = owner == 0
        || owner == me
        || owner == *uid
        || mode & 0o006 != 0
        || (mode & 0o060 != 0 && gid.is_some_and(|g| in_group(owner, g)));
    if !may_open {
        return refuse(format!(
            "and user {owner} may not open the objects of this line (owner {uid}, mode {mode:03o})"
        ));
    }
    Ok(())
}

/// Is user `uid` a member of group `gid` (its primary group, or a supplementary one)?
fn in_group(uid: u32, gid: u32) -> bool {
    crate::sys::unix::in_group(uid, gid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_object_gets_read_and_write_for_whoever_may_read_or_write() {
        assert_eq!(group_mode(0o600), 0o600);
        assert_eq!(group_mode(0o640), 0o660);
        assert_eq!(group_mode(0o620), 0o660);
        assert_eq!(group_mode(0o604), 0o606);
        assert_eq!(group_mode(0o644), 0o666);
        assert_eq!(group_mode(0o060), 0o660);
        assert_eq!(group_mode(0o711), 0o600);
    }

    #[test]
    fn names_are_valid_group_names() {
        let class = Class::Shared {
            backend: Backend::Native,
            uid: 1000,
            gid: Some(100),
            mode: 0o660,
        };
        assert_eq!(class.name(), "implicit.native.1000.100.660");
        assert!(crate::named::object_name(&class.name()).is_ok());
        let own = Class::Shared {
            backend: Backend::Emulated,
            uid: 0,
            gid: None,
            mode: 0o600,
        };
        assert_eq!(own.name(), "implicit.emulated.0.x.600");
    }

    #[test]
    fn root_and_the_caller_are_members_of_their_own_primary_group() {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        assert!(in_group(uid, gid));
    }
}
