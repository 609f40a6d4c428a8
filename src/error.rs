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
    #[error("the {backend:?} backend is not available here: {reason}")]
    BackendUnavailable {
        /// The backend that was asked for.
        backend: Backend,
        /// Why it cannot work here.
        reason: String,
    },
    /// The descriptor is not open (closed, or never opened).
    #[error("descriptor {fd} is not open (closed or never opened)")]
    BadDescriptor {
        /// The descriptor number.
        fd: RawSource,
    },
    /// The kernel will not watch this kind of descriptor (a regular file or a directory).
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
    /// The descriptor is already registered with this waiter.
    #[error("descriptor {fd} is already registered with this waiter (use modify)")]
    AlreadyRegistered {
        /// The descriptor number.
        fd: RawSource,
    },
    /// The descriptor was never registered with this waiter (or was deleted).
    #[error("descriptor {fd} is not registered with this waiter")]
    NotRegistered {
        /// The descriptor number.
        fd: RawSource,
    },
    /// The key is reserved by herdless for its own wake-ups.
    #[error("key {key} is reserved by herdless (keys from usize::MAX - 1 up are internal)")]
    ReservedKey {
        /// The key that was refused.
        key: usize,
    },
    /// The interest asks for a combination no backend can honour.
    #[error("refused interest: {reason}")]
    InvalidInterest {
        /// Why it was refused.
        reason: &'static str,
    },
    /// `wait` was given an `Events` buffer that cannot hold a single event.
    #[error("the Events buffer has capacity 0: it cannot receive an event")]
    ZeroCapacity,
    /// The group has no free member slot.
    #[error(
        "the group is full: it was built for at most {max} members (GroupBuilder::max_members)"
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
    /// A builder setting is out of range.
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
    /// truncated); nothing of it was used.
    #[error("the group named {name:?} is not a valid herdless group: {reason}")]
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
    /// The group's permissions do not let this process open it (another user's group).
    #[error(
        "permission denied for the group named {name:?} (its mode or owner shuts this user out)"
    )]
    PermissionDenied {
        /// The group's name.
        name: String,
    },
    /// A group name this platform cannot use.
    #[error("invalid group name {name:?}: {reason}")]
    InvalidGroupName {
        /// The name asked for.
        name: String,
        /// The rule it breaks.
        reason: String,
    },
    /// Something this platform does not offer.
    #[error("{what} is not supported on this platform: {reason}")]
    Unsupported {
        /// What was asked for.
        what: &'static str,
        /// Why not.
        reason: &'static str,
    },
    /// Any other failure of the operating system.
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
            | Error::ReservedKey { .. }
            | Error::InvalidInterest { .. }
            | Error::ZeroCapacity
            | Error::InvalidSetting { .. }
            | Error::ForkedWaiter { .. } => io::ErrorKind::InvalidInput,
            Error::AlreadyRegistered { .. } => io::ErrorKind::AlreadyExists,
            Error::NotRegistered { .. } => io::ErrorKind::NotFound,
            Error::GroupFull { .. } | Error::TooManySources { .. } => io::ErrorKind::OutOfMemory,
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
            Error::Io { source, .. } => source.kind(),
        }
    }
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
    // SAFETY: stat is plain data; fstat fills it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat only reads the descriptor number and writes the live struct.
    if unsafe { libc::fstat(fd, &mut st) } == -1 {
        return "the poller refuses it (EPERM)";
    }
    match st.st_mode & libc::S_IFMT {
        libc::S_IFCHR => {
            "a character device that does not support readiness polling (EPERM), such as \
             /dev/null or /dev/zero"
        }
        libc::S_IFBLK => "a block device: readiness polling does not apply (EPERM)",
        libc::S_IFREG => "a regular file is always ready: readiness polling does not apply (EPERM)",
        libc::S_IFDIR => "a directory cannot be polled (EPERM)",
        _ => "the poller refuses this kind of descriptor (EPERM)",
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
