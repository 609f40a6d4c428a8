//! The typed errors of herdless.
//!
//! Every refusal has its own variant whose message names the problem, so a caller can match on
//! it and a person can read it. Any error converts into `std::io::Error` (the convention of
//! `polling` and `mio`), keeping the variant's message as the error text.

use std::io;

use crate::contract::Backend;

/// The raw descriptor type of this platform, as it appears in error messages.
#[cfg(unix)]
pub type RawSource = std::os::fd::RawFd;
/// The raw socket type of this platform, as it appears in error messages.
#[cfg(windows)]
pub type RawSource = std::os::windows::io::RawSocket;

/// What can go wrong in herdless. Each refusal leaves every registration as it was.
///
/// Match on the variant to act on it, or let `?` turn it into a `std::io::Error` (its message
/// stays the text):
///
/// ```
/// use herdless::{Error, Group};
/// let group = Group::builder().max_members(1).build()?;
/// let _first = group.join()?;
/// match group.join() {
///     Err(Error::GroupFull { max }) => assert_eq!(max, 1), // GroupBuilder::max_members
///     other => panic!("expected a full group, got {other:?}"),
/// }
/// let io: std::io::Error = Group::builder().max_members(0).build().unwrap_err().into();
/// assert_eq!(io.kind(), std::io::ErrorKind::InvalidInput);
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The chosen backend cannot work here: not this OS, or the kernel refused the flag.
    #[error("the {backend:?} backend is not available here: {reason}; build the group with Backend::Auto (or Backend::Emulated), which works on every system")]
    BackendUnavailable {
        /// The backend that was asked for.
        backend: Backend,
        /// Why it cannot work here.
        reason: String,
    },
    /// The descriptor is not open (closed, or never opened).
    #[error("descriptor {fd} is not open (closed or never opened): register a descriptor while it is open, and delete it before closing it")]
    BadDescriptor {
        /// The descriptor number.
        fd: RawSource,
    },
    /// The kernel will not watch this kind of descriptor (a regular file or a directory), or
    /// not exclusively. The reason names what the descriptor is and what to do instead.
    #[error("descriptor {fd} cannot be watched: {reason}")]
    UnwatchableDescriptor {
        /// The descriptor number.
        fd: RawSource,
        /// What the kernel said.
        reason: &'static str,
    },
    /// The descriptor is in blocking mode (`O_NONBLOCK` not set) and was to be registered
    /// `exclusive`. A wake-up of a shared descriptor can find nothing (another member read it
    /// first), and a blocking read would then hang the member, with the group's turn in its
    /// hands. Set the descriptor non-blocking first: `set_nonblocking(true)` on a std socket,
    /// `fcntl(fd, F_SETFL, flags | O_NONBLOCK)` (nix: `fcntl` with `OFlag::O_NONBLOCK`) on a
    /// pipe, `O_NONBLOCK` in `mq_open`'s flags for a message queue.
    #[error("descriptor {fd} is in blocking mode: a wake-up of a shared descriptor can find nothing, and a blocking read would hang; set it non-blocking first (set_nonblocking(true), or O_NONBLOCK with fcntl or mq_open)")]
    BlockingDescriptor {
        /// The descriptor number.
        fd: RawSource,
    },
    /// The open file behind the descriptor is already registered with this waiter: under the
    /// same number, or under another descriptor of the same open file and direction (a
    /// `dup`, `dup2` or `F_DUPFD` of it) where either registration is exclusive. One open file
    /// registered twice would give each of its events twice (the second read finding
    /// nothing), and an exclusive one would take its turns twice. `registered` is the number
    /// it is registered under: `fd` itself, or the descriptor `fd` duplicates. The same on
    /// both backends.
    #[error("{}", already_text(*.fd, *.registered))]
    AlreadyRegistered {
        /// The descriptor number that was to be registered.
        fd: RawSource,
        /// The number the open file is registered under: `fd`, or the descriptor `fd` is a
        /// duplicate of.
        registered: RawSource,
    },
    /// The descriptor was never registered with this waiter (or was deleted).
    #[error("descriptor {fd} is not registered with this waiter: add it first (Waiter::add)")]
    NotRegistered {
        /// The descriptor number.
        fd: RawSource,
    },
    /// The interest asks for a combination no backend can honour. The reason says which
    /// interest to ask for instead.
    #[error("refused interest: {reason}")]
    InvalidInterest {
        /// Why it was refused.
        reason: &'static str,
    },
    /// `wait` was given an `Events` buffer that cannot hold a single event.
    #[error("the Events buffer has capacity 0: it cannot receive an event; make it with Events::default() or Events::with_capacity(n) for n of 1 or more")]
    ZeroCapacity,
    /// The group has no free member slot.
    #[error(
        "the group is full: it was built for at most {max} members; build it with a larger \
         GroupBuilder::max_members (at most 16384), or let a member leave first"
    )]
    GroupFull {
        /// The group's size.
        max: usize,
    },
    /// The members of an emulated group have as many distinct exclusive descriptors registered
    /// at once as its shared table holds (a descriptor no member has registered any more frees
    /// its place).
    #[error(
        "the group's members have {max} distinct exclusive descriptors registered at once, the \
         most its table holds: build the group with a larger \
         GroupBuilder::max_exclusive_descriptors (C: herdless_options.max_exclusive), or delete \
         registrations no longer in use"
    )]
    TooManySources {
        /// The size of the shared table (`GroupBuilder::max_exclusive_descriptors`).
        max: usize,
    },
    /// A Waiter was used in a process other than the one that joined (it moved across `fork`).
    #[error("this waiter was joined by process {joined_pid} and cannot be used in process {current_pid}: join the group again in the child")]
    ForkedWaiter {
        /// The process that joined.
        joined_pid: u32,
        /// The process that used it.
        current_pid: u32,
    },
    /// A builder setting is out of range. The reason names the setting and its range.
    #[error("invalid group setting: {reason}")]
    InvalidSetting {
        /// What is wrong with it.
        reason: String,
    },
    /// No group has this name (open only), or its creator never finished setting it up.
    #[error("no group is named {name:?} (create it with Group::builder().name(..), or wait for its creator)")]
    GroupNotFound {
        /// The group's name.
        name: String,
    },
    /// A named group exists with other settings than the ones the builder asked for.
    #[error("the group named {name:?} has {setting} {group}, not {asked} as asked (open it with Group::open to take its settings)")]
    GroupSettingsDiffer {
        /// The group's name.
        name: String,
        /// Which setting differs: "backend", "rotation" or "max_members".
        setting: &'static str,
        /// The group's value.
        group: String,
        /// The value asked for.
        asked: String,
    },
    /// A named group made by a version of herdless whose shared layout this one cannot read.
    #[error("the group named {name:?} was made by another version of herdless (shared layout {found}, this one reads {expected}): stop its members and remove it, or run the same version")]
    IncompatibleGroup {
        /// The group's name.
        name: String,
        /// The layout version found in the group.
        found: u32,
        /// The layout version this herdless reads.
        expected: u32,
    },
    /// The shared memory under a group's name is not a valid herdless group (garbage, or
    /// truncated, or overwritten under its members); nothing of it was used. Drop the
    /// `Waiter`s and `Group`s of it, then remove the name ([`Group::remove`](crate::Group::remove),
    /// or [`Group::remove_forced`](crate::Group::remove_forced) while other processes still
    /// have it open) and build the group again.
    #[error("the group named {name:?} is not a valid herdless group: {reason}; drop its Waiters and Groups, remove it (Group::remove, or Group::remove_forced while others have it open) and build it again")]
    CorruptGroup {
        /// The group's name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// [`Group::remove`](crate::Group::remove) refused: members of the group are alive, or
    /// another process has it open. Removing it would leave them serving a group that no
    /// opener finds any more, beside the new group the next creator makes under the name.
    /// Nothing was changed. Stop them first (their processes drop their `Waiter`s and
    /// `Group`s, or end), or remove the group by force with
    /// [`Group::remove_forced`](crate::Group::remove_forced): its members then get
    /// [`Error::GroupRemoved`] on their next call, and open the group again.
    #[error("the group named {name:?} is in use ({}): stop them first, or remove it by force with Group::remove_forced (its members then get Error::GroupRemoved and open the group again)", in_use_text(.members, .opened_by))]
    GroupInUse {
        /// The group's name.
        name: String,
        /// The slot and process id of each live member, by slot (the caller's own process's
        /// members included).
        members: Vec<(usize, u32)>,
        /// A process other than the caller's that has the group open, with or without a
        /// member (one of them if several: the system names one).
        opened_by: Option<u32>,
    },
    /// The named group this handle belongs to was removed by force
    /// ([`Group::remove_forced`](crate::Group::remove_forced)), or, for a `Group` the caller's
    /// own process held while it removed the name ([`Group::remove`](crate::Group::remove)),
    /// removed by this process: nobody can open it any more, and the name may already be
    /// another group's. Drop this `Waiter` and `Group` and open the group again
    /// ([`Group::open`](crate::Group::open), or the builder) to join the group now under the
    /// name.
    #[error("the group named {name:?} was removed: drop this Waiter and Group, and open the group again (Group::open or Group::builder().name(..)) to join the group now under that name")]
    GroupRemoved {
        /// The group's name.
        name: String,
    },
    /// The group's permissions do not let this process open it (another user's group). Its
    /// creator gives the users of its group access with
    /// [`GroupBuilder::mode`](crate::GroupBuilder::mode) (`0o660`); or run this process as the
    /// group's owner.
    #[error(
        "permission denied for the group named {name:?} (its mode or owner shuts this user out): \
         let its creator build it with GroupBuilder::mode(0o660) (or 0o666) for other users, or \
         run this process as its owner"
    )]
    PermissionDenied {
        /// The group's name.
        name: String,
    },
    /// A group name this platform cannot use. The reason gives the rule names follow.
    #[error("invalid group name {name:?}: {reason}")]
    InvalidGroupName {
        /// The name asked for.
        name: String,
        /// The rule it breaks.
        reason: String,
    },
    /// A signal handler ran while [`poll`](crate::poll) or
    /// [`PollWaiter`](crate::PollWaiter) waited, and nothing was ready: the wait ended early,
    /// as `poll(2)` ends with `EINTR` (`io::ErrorKind::Interrupted`).
    #[error("interrupted: a signal handler ran while the poll waited (as poll(2)'s EINTR); check the handler's flag, then poll again")]
    Interrupted,
    /// Two descriptors of one [`poll`](crate::poll) call asked for with `POLLEXCL` are on the
    /// lines of two permission classes (their objects' owners, groups or modes differ), and a
    /// call waits on one line's class. Poll them in two threads, or give the objects one owner,
    /// group and mode.
    #[error("descriptors {fd} and {other} are both polled with POLLEXCL but are on the lines of two permission classes ({line} and {other_line}: the objects' owners, groups or modes differ), and one call waits on one class: poll them from two threads, or give the objects the same owner, group and mode")]
    LinesDiffer {
        /// The first descriptor asked for with `POLLEXCL`.
        fd: RawSource,
        /// A descriptor of another class.
        other: RawSource,
        /// The implicit group of `fd`'s line.
        line: String,
        /// The implicit group of `other`'s line.
        other_line: String,
    },
    /// The implicit group of a line (the shared memory of a permission class,
    /// `/dev/shm/herdless.<name>`) cannot be used by this process: its owner or mode is not
    /// what the class's rule allows (someone the objects' permissions shut out may have made
    /// it), or it shuts this user out. The reason says which, and the remedy.
    #[error("the line's group {name:?} cannot be used: {reason}")]
    LineRefused {
        /// The implicit group's name.
        name: String,
        /// What is wrong with it, and what to do.
        reason: String,
    },
    /// Something this platform does not offer. The reason says what to use instead.
    #[error("{what} is not supported on this platform: {reason}")]
    Unsupported {
        /// What was asked for.
        what: &'static str,
        /// Why not.
        reason: &'static str,
    },
    /// Any other failure of the operating system: what herdless was doing, and what the
    /// system said (which names the remedy: a limit to raise, a permission to grant).
    #[error("{context}: {source}")]
    Io {
        /// What herdless was doing.
        context: &'static str,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },
}

/// The result type of herdless.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Wraps an operating-system error with what herdless was doing.
    pub(crate) fn io(context: &'static str, source: io::Error) -> Error {
        Error::Io { context, source }
    }

    fn kind(&self) -> io::ErrorKind {
        match self {
            Error::BackendUnavailable { .. } => io::ErrorKind::Unsupported,
            Error::BadDescriptor { .. }
            | Error::UnwatchableDescriptor { .. }
            | Error::BlockingDescriptor { .. }
            | Error::InvalidInterest { .. }
            | Error::ZeroCapacity
            | Error::InvalidSetting { .. }
            | Error::ForkedWaiter { .. } => io::ErrorKind::InvalidInput,
            Error::AlreadyRegistered { .. } => io::ErrorKind::AlreadyExists,
            Error::NotRegistered { .. } => io::ErrorKind::NotFound,
            // A limit set when the group was built, as a quota is (`EDQUOT` is QuotaExceeded).
            Error::GroupFull { .. } | Error::TooManySources { .. } => io::ErrorKind::QuotaExceeded,
            Error::GroupNotFound { .. } => io::ErrorKind::NotFound,
            Error::GroupSettingsDiffer { .. } | Error::InvalidGroupName { .. } => {
                io::ErrorKind::InvalidInput
            }
            Error::IncompatibleGroup { .. } | Error::CorruptGroup { .. } => {
                io::ErrorKind::InvalidData
            }
            Error::PermissionDenied { .. } => io::ErrorKind::PermissionDenied,
            Error::GroupInUse { .. } => io::ErrorKind::Other,
            Error::GroupRemoved { .. } => io::ErrorKind::NotFound,
            Error::Unsupported { .. } => io::ErrorKind::Unsupported,
            Error::Interrupted => io::ErrorKind::Interrupted,
            Error::LinesDiffer { .. } => io::ErrorKind::Unsupported,
            Error::LineRefused { .. } => io::ErrorKind::PermissionDenied,
            Error::Io { source, .. } => source.kind(),
        }
    }
}

/// The message of [`Error::AlreadyRegistered`]: the same number, or a duplicate of another.
fn already_text(fd: RawSource, registered: RawSource) -> String {
    if fd == registered {
        return format!(
            "descriptor {fd} is already registered with this waiter: change it with \
             Waiter::modify, or delete it first"
        );
    }
    format!(
        "descriptor {fd} is a duplicate of descriptor {registered} (the same open file), which \
         is registered with this waiter: register one descriptor per open file (change \
         {registered} with Waiter::modify, or delete it first)"
    )
}

/// Who uses a group that [`Error::GroupInUse`] refused to remove, in words: "members 0 (process
/// 12) and 3 (process 40) are alive, process 12 has it open".
fn in_use_text(members: &[(usize, u32)], opened_by: &Option<u32>) -> String {
    let mut parts = Vec::new();
    if !members.is_empty() {
        let each: Vec<String> = members
            .iter()
            .map(|(slot, pid)| format!("{slot} (process {pid})"))
            .collect();
        parts.push(match each.len() {
            1 => format!("member {} is alive", each[0]),
            _ => format!("members {} are alive", each.join(", ")),
        });
    }
    if let Some(pid) = opened_by {
        parts.push(format!("process {pid} has it open"));
    }
    parts.join(", ")
}

/// Why the kernel's poller refused to watch `fd` with EPERM, named after what `fd` is (a
/// character device such as `/dev/null`, a regular file, a directory), for
/// [`Error::UnwatchableDescriptor`].
#[cfg(unix)]
pub(crate) fn eperm_reason(fd: RawSource) -> &'static str {
    let Ok(st) = crate::sys::unix::fstat(fd) else {
        return "the poller refuses it (EPERM); herdless watches pipes, FIFOs, sockets and message \
                queues";
    };
    match st.st_mode & libc::S_IFMT {
        libc::S_IFCHR => {
            "a character device that does not support readiness polling (EPERM), such as \
             /dev/null or /dev/zero: read or write it without waiting for it"
        }
        libc::S_IFBLK => {
            "a block device: readiness polling does not apply (EPERM); read or write it without \
             waiting for it"
        }
        libc::S_IFREG => {
            "a regular file is always ready: readiness polling does not apply (EPERM); read it \
             without waiting for it"
        }
        libc::S_IFDIR => {
            "a directory cannot be polled (EPERM); watch a pipe, a socket or a queue instead"
        }
        _ => {
            "the poller refuses this kind of descriptor (EPERM); herdless watches pipes, FIFOs, \
             sockets and message queues"
        }
    }
}

/// An `io::Error` from the caller's own code, so that `?` works both ways in a function that
/// returns `herdless::Result`; one that carries a `herdless::Error` (made by the conversion
/// below) gives it back as it was.
///
/// ```
/// use herdless::Error;
/// fn open_config() -> herdless::Result<String> {
///     Ok(std::fs::read_to_string("/no/such/herdless/config")?)
/// }
/// assert!(matches!(open_config(), Err(Error::Io { .. })));
/// let round_trip: Error = std::io::Error::from(Error::ZeroCapacity).into();
/// assert!(matches!(round_trip, Error::ZeroCapacity));
/// ```
impl From<io::Error> for Error {
    fn from(err: io::Error) -> Error {
        if err.get_ref().is_some_and(|inner| inner.is::<Error>()) {
            let kind = err.kind();
            return match err.into_inner().map(|inner| inner.downcast::<Error>()) {
                Some(Ok(inner)) => *inner,
                _ => Error::io("an operating-system call", kind.into()),
            };
        }
        Error::io("an operating-system call", err)
    }
}

impl From<Error> for io::Error {
    fn from(err: Error) -> io::Error {
        io::Error::new(err.kind(), err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One error of each variant, with the words of its remedy: every message names one.
    fn each_variant() -> Vec<(Error, &'static str)> {
        let name = || "svc".to_string();
        vec![
            (
                Error::BackendUnavailable {
                    backend: Backend::Native,
                    reason: "no EPOLLEXCLUSIVE".into(),
                },
                "Backend::Auto",
            ),
            (Error::BadDescriptor { fd: 3 }, "while it is open"),
            (
                Error::UnwatchableDescriptor {
                    fd: 3,
                    reason: "a directory cannot be polled (EPERM); watch a pipe, a socket or a \
                             queue instead",
                },
                "instead",
            ),
            (Error::BlockingDescriptor { fd: 3 }, "set it non-blocking"),
            (
                Error::AlreadyRegistered {
                    fd: 3,
                    registered: 3,
                },
                "Waiter::modify",
            ),
            (
                Error::AlreadyRegistered {
                    fd: 4,
                    registered: 3,
                },
                "change 3 with Waiter::modify",
            ),
            (Error::NotRegistered { fd: 3 }, "Waiter::add"),
            (
                Error::InvalidInterest {
                    reason: "priority with exclusive: register priority data without exclusive",
                },
                "without exclusive",
            ),
            (Error::ZeroCapacity, "Events::default()"),
            (Error::GroupFull { max: 2 }, "GroupBuilder::max_members"),
            (
                Error::TooManySources { max: 2 },
                "GroupBuilder::max_exclusive_descriptors",
            ),
            (
                Error::ForkedWaiter {
                    joined_pid: 1,
                    current_pid: 2,
                },
                "join the group again",
            ),
            (
                Error::InvalidSetting {
                    reason: "max_members must be between 1 and 16384, not 0".into(),
                },
                "must be between",
            ),
            (
                Error::GroupNotFound { name: name() },
                "Group::builder().name",
            ),
            (
                Error::GroupSettingsDiffer {
                    name: name(),
                    setting: "max_members",
                    group: "8".into(),
                    asked: "4".into(),
                },
                "Group::open",
            ),
            (
                Error::IncompatibleGroup {
                    name: name(),
                    found: 1,
                    expected: 2,
                },
                "remove it",
            ),
            (
                Error::CorruptGroup {
                    name: name(),
                    reason: "no magic word".into(),
                },
                "Group::remove",
            ),
            (
                Error::GroupInUse {
                    name: name(),
                    members: vec![(0, 12)],
                    opened_by: Some(40),
                },
                "Group::remove_forced",
            ),
            (Error::GroupRemoved { name: name() }, "open the group again"),
            (
                Error::PermissionDenied { name: name() },
                "GroupBuilder::mode",
            ),
            (
                Error::InvalidGroupName {
                    name: "a/b".into(),
                    reason: "'/' is not allowed: use letters, digits, '.', '_' and '-' only".into(),
                },
                "use letters",
            ),
            (
                Error::Unsupported {
                    what: "a named group",
                    reason: "on Windows build the group once and share it between threads",
                },
                "share it between threads",
            ),
            (
                Error::io(
                    "making the shared memory",
                    io::Error::from(io::ErrorKind::OutOfMemory),
                ),
                "making the shared memory",
            ),
            (Error::Interrupted, "then poll again"),
            (
                Error::LinesDiffer {
                    fd: 3,
                    other: 4,
                    line: "implicit.native.0.x.600".into(),
                    other_line: "implicit.native.1000.100.660".into(),
                },
                "poll them from two threads",
            ),
            (
                Error::LineRefused {
                    name: "implicit.native.0.4242.660".into(),
                    reason: "it is owned by user 65534: remove it and poll again".into(),
                },
                "remove it",
            ),
        ]
    }

    /// Every variant is in `each_variant` (a new one fails to compile here until it is).
    fn listed(e: &Error) {
        match e {
            Error::BackendUnavailable { .. }
            | Error::BadDescriptor { .. }
            | Error::UnwatchableDescriptor { .. }
            | Error::BlockingDescriptor { .. }
            | Error::AlreadyRegistered { .. }
            | Error::NotRegistered { .. }
            | Error::InvalidInterest { .. }
            | Error::ZeroCapacity
            | Error::GroupFull { .. }
            | Error::TooManySources { .. }
            | Error::ForkedWaiter { .. }
            | Error::InvalidSetting { .. }
            | Error::GroupNotFound { .. }
            | Error::GroupSettingsDiffer { .. }
            | Error::IncompatibleGroup { .. }
            | Error::CorruptGroup { .. }
            | Error::GroupInUse { .. }
            | Error::GroupRemoved { .. }
            | Error::PermissionDenied { .. }
            | Error::InvalidGroupName { .. }
            | Error::Unsupported { .. }
            | Error::Interrupted
            | Error::LinesDiffer { .. }
            | Error::LineRefused { .. }
            | Error::Io { .. } => {}
        }
    }

    #[test]
    fn every_message_names_its_remedy() {
        let all = each_variant();
        assert_eq!(
            all.len(),
            26,
            "one of each variant (two of AlreadyRegistered)"
        );
        for (e, remedy) in &all {
            listed(e);
            let message = e.to_string();
            assert!(message.contains(remedy), "{remedy:?} not in {message:?}");
        }
    }

    /// The limits a group was built with are quotas; the rest as the standard library names
    /// them.
    #[test]
    fn the_io_kinds_fit() {
        let kind = |e: Error| io::Error::from(e).kind();
        assert_eq!(
            kind(Error::GroupFull { max: 2 }),
            io::ErrorKind::QuotaExceeded
        );
        assert_eq!(
            kind(Error::TooManySources { max: 2 }),
            io::ErrorKind::QuotaExceeded
        );
        assert_eq!(
            kind(Error::AlreadyRegistered {
                fd: 4,
                registered: 3
            }),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(
            kind(Error::NotRegistered { fd: 3 }),
            io::ErrorKind::NotFound
        );
        assert_eq!(kind(Error::ZeroCapacity), io::ErrorKind::InvalidInput);
    }
}
