//! The C API's one error rule, its codes, the thread's last error, and the guard every entry
//! point runs in.
//!
//! **The rule.** A failing call returns a negative value, sets `errno`, and records a
//! `HERDLESS_E*` code (and the Rust error's message) for this thread: `herdless_last_error()`
//! gives the code, `herdless_strerror(code)` the message. `herdless_poll` returns −1, as
//! `poll(2)` does, with `errno` as `poll(2)` sets it for the same input (`EFAULT`, `EINTR`,
//! `EINVAL`); every other call returns the code itself, and every code is −1000 or below, so it
//! is never −1 and never a negated `errno`. [`ffi`] runs each entry point's body under
//! `catch_unwind`, so a panic never crosses the boundary: it becomes `HERDLESS_EPANIC` with the
//! panic's message and place.
//!
//! **Silence.** The library writes nothing to the host program's stderr. Rust's default panic
//! hook prints a panic's message (and a backtrace) there before `catch_unwind` sees it, so the
//! first entry point called installs, once, a hook of its own: silent for a panic inside an
//! entry point's body (a thread-local flag set around it), the hook that was there before for
//! every other panic of the process.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Success.
pub const HERDLESS_OK: c_int = 0;
/// A pointer argument was NULL (or an array pointer was NULL with a non-zero length). errno
/// EFAULT.
pub const HERDLESS_ENULL: c_int = -1001;
/// The handle is not a live group or waiter: never made, already freed (a double free), left
/// (also by another thread while this call waited on it), or a handle of the other kind.
/// errno EBADF.
pub const HERDLESS_EBADHANDLE: c_int = -1002;
/// The waiter was joined by another process (it was inherited across fork): join the group
/// again in this process. errno EBADF.
pub const HERDLESS_EWRONGPROCESS: c_int = -1003;
/// An argument is out of range: options, interest bits, capacity, timeout, nfds. errno
/// EINVAL.
pub const HERDLESS_EINVAL: c_int = -1004;
/// The descriptor is not open (closed, or never opened). errno EBADF.
pub const HERDLESS_EBADF: c_int = -1005;
/// The kernel will not watch this descriptor (a regular file, a directory, /dev/null), or not
/// exclusively (an epoll descriptor; an eventfd or timerfd under the emulation). errno EPERM.
pub const HERDLESS_EUNWATCHABLE: c_int = -1006;
/// The descriptor is already registered with this waiter (use herdless_modify), or it is a
/// duplicate (dup) of a registered one where either registration is exclusive (the message
/// names the registered number). errno EEXIST.
pub const HERDLESS_EEXIST: c_int = -1007;
/// The descriptor is not registered with this waiter. errno ENOENT.
pub const HERDLESS_ENOENT: c_int = -1008;
/// The group is full (herdless_options.max_members), or watches as many exclusive descriptors
/// as it can share. errno ENOSPC.
pub const HERDLESS_EFULL: c_int = -1009;
/// The backend asked for is not available on this system. errno ENOSYS.
pub const HERDLESS_EUNAVAILABLE: c_int = -1010;
/// Another thread is inside a call on this waiter right now (a waiter is used by one thread at
/// a time; herdless_notify and herdless_leave are the exceptions). errno EBUSY.
pub const HERDLESS_EBUSY: c_int = -1011;
/// The operating system refused something; the message says what and why. errno: the
/// system's own, else EIO.
pub const HERDLESS_EIO: c_int = -1012;
/// An internal error (a bug in herdless) was caught before it could cross into C. errno EIO.
pub const HERDLESS_EPANIC: c_int = -1013;
/// A signal handler ran while herdless_wait or herdless_poll was waiting, and nothing was
/// ready: the wait ended early, as poll(2) ends with EINTR. errno EINTR.
pub const HERDLESS_EINTR: c_int = -1014;
/// No group has this name (herdless_group_open without options), or its creator never set it
/// up. errno ENOENT.
pub const HERDLESS_ENOGROUP: c_int = -1015;
/// A named group exists with other settings than the options asked for (the message names the
/// setting); open it with NULL options to take its settings. errno EEXIST.
pub const HERDLESS_ESETTINGS: c_int = -1016;
/// The shared memory under a group's name is not a group this herdless can use: made by
/// another version of herdless, or garbage, or truncated. errno EPROTO.
pub const HERDLESS_EBADGROUP: c_int = -1017;
/// The group's permissions shut this user out. errno EACCES.
pub const HERDLESS_EACCES: c_int = -1018;
/// The descriptor is in blocking mode and was to be registered HERDLESS_EXCLUSIVE (or
/// HERDLESS_POLLEXCL): a wake-up can find nothing, and a blocking read would hang. Set
/// O_NONBLOCK first (fcntl F_SETFL, or O_NONBLOCK in mq_open's flags). errno EINVAL.
pub const HERDLESS_EBLOCKING: c_int = -1019;
/// herdless_group_remove refused: members of the group are alive, or another process has it
/// open (the message names them: slot and process of each member). Nothing changed. Stop them
/// first, or remove it by force with herdless_group_remove_forced. errno EBUSY.
pub const HERDLESS_EINUSE: c_int = -1020;
/// The named group of this handle was removed (herdless_group_remove_forced, or
/// herdless_group_remove by this process while only it had the group open): herdless_leave the
/// waiter, herdless_group_free the group, and herdless_group_open the name again to join the
/// group now under it. errno EIDRM.
pub const HERDLESS_EREMOVED: c_int = -1021;
/// herdless_poll_shared was asked for HERDLESS_POLLEXCL on descriptors whose objects are on the
/// lines of two permission classes (their owners, groups or modes differ; the message names
/// both descriptors): one call waits on one class. Poll them from two threads, or give the
/// objects one owner, group and mode. errno ENOTSUP.
pub const HERDLESS_ELINES: c_int = -1022;

/// A failed call: the code recorded for C, the errno set, and the message kept for
/// herdless_strerror.
pub(crate) struct Failure {
    pub(crate) code: c_int,
    pub(crate) message: String,
    /// The system's errno behind an HERDLESS_EIO, when there is one.
    pub(crate) os_errno: Option<c_int>,
}

impl Failure {
    pub(crate) fn new(code: c_int, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
            os_errno: None,
        }
    }

    pub(crate) fn null(what: &str) -> Failure {
        Failure::new(HERDLESS_ENULL, format!("{what} is NULL"))
    }

    /// The errno this failure sets: the system's own for an OS error, else the code's.
    pub(crate) fn errno(&self) -> c_int {
        self.os_errno.unwrap_or_else(|| errno_of(self.code))
    }
}

/// The errno that goes with each code (the table of docs/c.md).
pub(crate) fn errno_of(code: c_int) -> c_int {
    match code {
        HERDLESS_ENULL => libc::EFAULT,
        HERDLESS_EBADHANDLE | HERDLESS_EWRONGPROCESS | HERDLESS_EBADF => libc::EBADF,
        HERDLESS_EINVAL | HERDLESS_EBLOCKING => libc::EINVAL,
        HERDLESS_EUNWATCHABLE => libc::EPERM,
        HERDLESS_EEXIST => libc::EEXIST,
        HERDLESS_ENOENT => libc::ENOENT,
        HERDLESS_EFULL => libc::ENOSPC,
        HERDLESS_EUNAVAILABLE => libc::ENOSYS,
        HERDLESS_EBUSY => libc::EBUSY,
        HERDLESS_EINTR => libc::EINTR,
        HERDLESS_ENOGROUP => libc::ENOENT,
        HERDLESS_ESETTINGS => libc::EEXIST,
        HERDLESS_EBADGROUP => libc::EPROTO,
        HERDLESS_EACCES => libc::EACCES,
        HERDLESS_EINUSE => libc::EBUSY,
        HERDLESS_EREMOVED => libc::EIDRM,
        HERDLESS_ELINES => libc::ENOTSUP,
        _ => libc::EIO,
    }
}

impl From<herdless::Error> for Failure {
    /// The Rust error's code and message, in C's words where the Rust message names Rust API
    /// (the backend, the builder's `max_members`, `modify`, the `Events` buffer, the removal
    /// and mode of a named group), so that every message names the C call that remedies it.
    fn from(e: herdless::Error) -> Failure {
        use herdless::Error as E;
        let (code, message) = match &e {
            E::BackendUnavailable { backend, reason } => (
                HERDLESS_EUNAVAILABLE,
                format!(
                    "{} is not available here: {reason}; make the group with \
                     HERDLESS_BACKEND_AUTO (or HERDLESS_BACKEND_EMULATED), which works on every \
                     system",
                    c_value(&format!("{backend:?}"))
                ),
            ),
            E::BadDescriptor { fd } => (
                HERDLESS_EBADF,
                format!(
                    "descriptor {fd} is not open (closed or never opened): herdless_add a \
                     descriptor while it is open, and herdless_delete it before closing it"
                ),
            ),
            E::UnwatchableDescriptor { .. } => (
                HERDLESS_EUNWATCHABLE,
                e.to_string()
                    .replace(
                        "without exclusive",
                        "without HERDLESS_EXCLUSIVE (herdless_poll: HERDLESS_POLLEXCL)",
                    )
                    .replace(
                        "use the native backend",
                        "use HERDLESS_BACKEND_NATIVE (herdless_poll_shared: HERDLESS_BACKEND=native)",
                    ),
            ),
            E::AlreadyRegistered { fd, registered } if fd == registered => (
                HERDLESS_EEXIST,
                format!(
                    "descriptor {fd} is already registered with this waiter: change it with \
                     herdless_modify, or herdless_delete it first"
                ),
            ),
            E::AlreadyRegistered { fd, registered } => (
                HERDLESS_EEXIST,
                format!(
                    "descriptor {fd} is a duplicate of descriptor {registered} (the same open \
                     file), which is registered with this waiter: register one descriptor per \
                     open file (change {registered} with herdless_modify, or herdless_delete it \
                     first)"
                ),
            ),
            E::NotRegistered { fd } => (
                HERDLESS_ENOENT,
                format!(
                    "descriptor {fd} is not registered with this waiter: herdless_add it first"
                ),
            ),
            E::BlockingDescriptor { fd } => (
                HERDLESS_EBLOCKING,
                format!(
                    "descriptor {fd} is in blocking mode: a wake-up of a shared descriptor can \
                     find nothing, and a blocking read would hang; set O_NONBLOCK first \
                     (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), or O_NONBLOCK in \
                     mq_open's flags)"
                ),
            ),
            E::ZeroCapacity => (
                HERDLESS_EINVAL,
                "capacity is 0: the events array cannot receive an event; pass herdless_wait an \
                 array of 1 or more and its length"
                    .to_string(),
            ),
            E::InvalidInterest { .. } => (
                HERDLESS_EINVAL,
                e.to_string()
                    .replace(
                        "priority with exclusive:",
                        "HERDLESS_PRIORITY with HERDLESS_EXCLUSIVE (POLLPRI with HERDLESS_POLLEXCL):",
                    )
                    .replace(
                        "register priority data without exclusive",
                        "register HERDLESS_PRIORITY without HERDLESS_EXCLUSIVE (POLLPRI without \
                         HERDLESS_POLLEXCL)",
                    )
                    .replace(
                        "ask for readability, writability or priority data",
                        "ask for HERDLESS_READABLE, HERDLESS_WRITABLE or HERDLESS_PRIORITY",
                    ),
            ),
            E::InvalidSetting { .. } => (
                HERDLESS_EINVAL,
                e.to_string()
                    .replace(
                        "max_exclusive_descriptors",
                        "herdless_options.max_exclusive",
                    )
                    .replace(" max_members", " herdless_options.max_members"),
            ),
            E::GroupFull { max } => (
                HERDLESS_EFULL,
                format!(
                    "the group is full: it was made for at most {max} members \
                     (herdless_options.max_members)"
                ),
            ),
            E::TooManySources { max } => (
                HERDLESS_EFULL,
                format!(
                    "the group's members have {max} distinct exclusive descriptors registered at \
                     once, the most its table holds: make the group with a larger \
                     herdless_options.max_exclusive, or delete registrations no longer in use"
                ),
            ),
            E::ForkedWaiter {
                joined_pid,
                current_pid,
            } => (
                HERDLESS_EWRONGPROCESS,
                format!(
                    "this waiter was joined by process {joined_pid} and cannot be used in process \
                     {current_pid}: herdless_join the group again in the child (herdless_poll_shared \
                     needs nothing: it joins afresh)"
                ),
            ),
            E::GroupNotFound { name } => (
                HERDLESS_ENOGROUP,
                format!(
                    "no group is named {name:?}: create it with herdless_group_open and options, \
                     or wait for its creator"
                ),
            ),
            E::GroupSettingsDiffer {
                name,
                setting,
                group,
                asked,
            } => (
                HERDLESS_ESETTINGS,
                format!(
                    "the group named {name:?} has {} {}, not {} as asked: herdless_group_open \
                     it with NULL options to take its settings",
                    c_option(setting),
                    c_value(group),
                    c_value(asked)
                ),
            ),
            E::IncompatibleGroup {
                name,
                found,
                expected,
            } => (
                HERDLESS_EBADGROUP,
                format!(
                    "the group named {name:?} was made by another version of herdless (shared \
                     layout {found}, this one reads {expected}): stop its members and remove it \
                     (herdless_group_remove), or run the same version"
                ),
            ),
            E::CorruptGroup { name, reason } => (
                HERDLESS_EBADGROUP,
                format!(
                    "the group named {name:?} is not a valid herdless group: {reason}; \
                     herdless_leave its waiters and herdless_group_free it, remove it \
                     (herdless_group_remove, or herdless_group_remove_forced while others have \
                     it open) and open it again"
                ),
            ),
            E::PermissionDenied { name } => (
                HERDLESS_EACCES,
                format!(
                    "permission denied for the group named {name:?} (its mode or owner shuts \
                     this user out): let its creator make it with herdless_options.mode 0660 \
                     (its users' group) or 0666 (everyone), or run this process as the user \
                     that created it (the default mode, 0600, lets that user only)"
                ),
            ),
            E::GroupInUse { .. } => (HERDLESS_EINUSE, in_use_message(&e.to_string())),
            E::GroupRemoved { name } => (
                HERDLESS_EREMOVED,
                format!(
                    "the group named {name:?} was removed: herdless_leave this waiter, \
                     herdless_group_free the group, and herdless_group_open the name again to \
                     join the group now under it"
                ),
            ),
            E::InvalidGroupName { .. } => (HERDLESS_EINVAL, e.to_string()),
            E::Unsupported { .. } => (HERDLESS_EUNAVAILABLE, e.to_string()),
            E::Interrupted => (
                HERDLESS_EINTR,
                "interrupted: a signal handler ran while the call waited (poll(2)'s EINTR): \
                 check the handler's flag, then call herdless_poll again"
                    .to_string(),
            ),
            E::LinesDiffer { .. } => (
                HERDLESS_ELINES,
                e.to_string().replace("one call waits", "one herdless_poll_shared waits"),
            ),
            E::LineRefused { .. } => (HERDLESS_EACCES, e.to_string()),
            _ => (HERDLESS_EIO, e.to_string()),
        };
        let os_errno = match &e {
            E::Io { source, .. } => source.raw_os_error(),
            _ => None,
        };
        Failure {
            code,
            message,
            os_errno,
        }
    }
}

/// A group setting's C name: the `herdless_options` field that sets it.
fn c_option(setting: &str) -> String {
    match setting {
        "rotation" => "herdless_options.rotate_every".into(),
        "max_exclusive_descriptors" => "herdless_options.max_exclusive".into(),
        other => format!("herdless_options.{other}"),
    }
}

/// A group setting's value in C's words (the Rust names of backends and rotations as the C
/// constants and numbers).
fn c_value(value: &str) -> String {
    match value {
        "Adaptive" => "HERDLESS_ROTATE_ADAPTIVE".into(),
        "Native" => "HERDLESS_BACKEND_NATIVE".into(),
        "Emulated" => "HERDLESS_BACKEND_EMULATED".into(),
        "Auto" => "HERDLESS_BACKEND_AUTO".into(),
        other => match other
            .strip_prefix("Every(")
            .and_then(|n| n.strip_suffix(')'))
        {
            Some(n) => n.to_string(),
            None => other.to_string(),
        },
    }
}

/// The message of a refused removal in C's words: the Rust message's account of who uses the
/// group ("the group named .. is in use (member 0 (process 12) is alive, ..)"), then the C
/// calls that remedy it.
fn in_use_message(rust: &str) -> String {
    let who = rust
        .split_once(": stop them first")
        .map_or(rust, |(who, _)| who);
    format!(
        "{who}: stop them first (herdless_leave and herdless_group_free in their processes, or \
         end them), or remove it by force with herdless_group_remove_forced (its members then \
         get HERDLESS_EREMOVED and open the group again)"
    )
}

thread_local! {
    /// The code and message of this thread's last failing call.
    static LAST: RefCell<(c_int, CString)> = RefCell::new((HERDLESS_OK, CString::default()));
}

/// Sets the calling thread's errno.
fn set_errno(value: c_int) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    // SAFETY: __errno_location returns the calling thread's errno, always valid.
    unsafe {
        *libc::__errno_location() = value;
    }
    #[cfg(any(
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd",
        target_os = "dragonfly"
    ))]
    // SAFETY: __error returns the calling thread's errno, always valid.
    unsafe {
        *libc::__error() = value;
    }
    #[cfg(not(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd",
        target_os = "dragonfly"
    )))]
    let _ = value; // elsewhere (Windows): herdless_last_error only
}

/// Records a failure for this thread (code, message) and sets errno; returns the code.
fn remember(failure: Failure) -> c_int {
    let errno = failure.errno();
    // A message with a NUL inside is cut there rather than lost.
    let bytes: Vec<u8> = failure.message.into_bytes();
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let message = CString::new(&bytes[..end]).unwrap_or_default();
    let _ = LAST.try_with(|last| *last.borrow_mut() = (failure.code, message));
    // Last: nothing above may change errno after it is set.
    set_errno(errno);
    failure.code
}

thread_local! {
    /// Set while this thread runs inside an entry point ([`caught`]): a panic there is the
    /// library's own, caught and reported as a code, and the panic hook prints nothing for it.
    static IN_CALL: Cell<bool> = const { Cell::new(false) };
    /// Where the last panic inside an entry point of this thread happened, as the hook saw it.
    static PANICKED_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs the library's panic hook, once per process (see the module docs): a panic while
/// [`IN_CALL`] is set leaves only its place in [`PANICKED_AT`]; any other goes to the hook that
/// was installed before (the default one prints it).
fn silence_own_panics() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_CALL.try_with(Cell::get).unwrap_or(false) {
                let at = info.location().map(|l| l.to_string());
                let _ = PANICKED_AT.try_with(|p| *p.borrow_mut() = at);
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f` as an entry point's body: under `catch_unwind`, with the panic hook silent.
fn caught<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    silence_own_panics();
    let outer = IN_CALL.try_with(|c| c.replace(true)).unwrap_or(false);
    let result = catch_unwind(AssertUnwindSafe(f));
    let _ = IN_CALL.try_with(|c| c.set(outer));
    result
}

/// Runs `body`, turning a panic into a failure.
fn guarded(body: impl FnOnce() -> Result<c_int, Failure>) -> Result<c_int, Failure> {
    match caught(body) {
        Ok(result) => result,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            let at = PANICKED_AT
                .try_with(|p| p.borrow_mut().take())
                .ok()
                .flatten()
                .map(|at| format!(" (at {at})"))
                .unwrap_or_default();
            Err(Failure::new(
                HERDLESS_EPANIC,
                format!("internal error in herdless (please report it): {what}{at}"),
            ))
        }
    }
}

/// Runs one entry point's body: its value on success; on failure its code (the rule: errno
/// set, code and message recorded); `HERDLESS_EPANIC` if it panicked.
pub(crate) fn ffi(body: impl FnOnce() -> Result<c_int, Failure>) -> c_int {
    guarded(body).unwrap_or_else(remember)
}

/// As [`ffi`], for the `poll(2)`-shaped call: −1 on failure (errno set, code recorded).
#[cfg(unix)]
pub(crate) fn ffi_poll(body: impl FnOnce() -> Result<c_int, Failure>) -> c_int {
    guarded(body).unwrap_or_else(|failure| {
        remember(failure);
        -1
    })
}

/// The fixed description of a code, NUL-terminated.
fn describe(code: c_int) -> &'static [u8] {
    match code {
        HERDLESS_OK => b"success\0",
        HERDLESS_ENULL => b"a pointer argument is NULL\0",
        HERDLESS_EBADHANDLE => {
            b"not a live handle (never made, freed, left, or of the other kind)\0"
        }
        HERDLESS_EWRONGPROCESS => b"the waiter was joined by another process\0",
        HERDLESS_EINVAL => b"invalid argument\0",
        HERDLESS_EBADF => b"descriptor is not open\0",
        HERDLESS_EUNWATCHABLE => b"descriptor cannot be watched (or not exclusively)\0",
        HERDLESS_EEXIST => b"descriptor already registered with this waiter\0",
        HERDLESS_ENOENT => b"descriptor not registered with this waiter\0",
        HERDLESS_EFULL => b"the group is full\0",
        HERDLESS_EUNAVAILABLE => b"backend not available here\0",
        HERDLESS_EBUSY => b"another thread is using this waiter\0",
        HERDLESS_EIO => b"operating-system error\0",
        HERDLESS_EPANIC => b"internal error in herdless\0",
        HERDLESS_EINTR => b"interrupted by a signal handler\0",
        HERDLESS_ENOGROUP => b"no group of that name\0",
        HERDLESS_ESETTINGS => b"the named group has other settings\0",
        HERDLESS_EBADGROUP => b"not a group this herdless can use\0",
        HERDLESS_EACCES => b"permission denied for the named group\0",
        HERDLESS_EBLOCKING => b"descriptor in blocking mode (set O_NONBLOCK)\0",
        HERDLESS_EINUSE => b"the named group is in use (members alive, or open elsewhere)\0",
        HERDLESS_EREMOVED => b"the named group was removed: open the name again\0",
        HERDLESS_ELINES => b"POLLEXCL descriptors of two permission classes in one call\0",
        _ => b"unknown herdless error code\0",
    }
}

/// The HERDLESS_E* code of this thread's last failing herdless call (HERDLESS_OK if none has
/// failed). The detail behind herdless_poll's -1: herdless_strerror(herdless_last_error())
/// gives its message. Calls that succeed leave it alone, as errno.
#[no_mangle]
pub extern "C" fn herdless_last_error() -> c_int {
    caught(|| LAST.try_with(|last| last.borrow().0).unwrap_or(HERDLESS_OK)).unwrap_or(HERDLESS_OK)
}

/// The message of `code`: if it is the code of this thread's last failing call, the message of
/// that error as the library wrote it (naming the descriptor, the limit, the process...),
/// otherwise a fixed description of the code. The string belongs to herdless; it stays valid
/// until this thread's next failing herdless call.
#[no_mangle]
pub extern "C" fn herdless_strerror(code: c_int) -> *const c_char {
    let fixed = describe(code).as_ptr().cast::<c_char>();
    caught(|| {
        LAST.try_with(|last| {
            let last = last.borrow();
            if last.0 == code && code != HERDLESS_OK && !last.1.as_bytes().is_empty() {
                // The CString lives in the thread-local until the next failure replaces it.
                last.1.as_ptr()
            } else {
                fixed
            }
        })
        .unwrap_or(fixed)
    })
    .unwrap_or(fixed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn message(code: c_int) -> String {
        // SAFETY: herdless_strerror returns a valid NUL-terminated string.
        unsafe { CStr::from_ptr(herdless_strerror(code)) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_a_code_and_its_message() {
        let code = ffi(|| panic!("boom"));
        assert_eq!(code, HERDLESS_EPANIC);
        assert!(message(code).contains("boom"), "{}", message(code));
    }

    /// What `a_panic_inside_a_call_prints_nothing` runs in a process of its own (this test
    /// binary, executed again with `HERDLESS_TEST_PANIC_CHILD` set): a panic inside an entry
    /// point, then one outside. Run without the variable, it returns at once.
    #[test]
    fn panicking_child() {
        if std::env::var_os("HERDLESS_TEST_PANIC_CHILD").is_none() {
            return;
        }
        let code = ffi(|| panic!("boom inside a call"));
        assert_eq!(code, HERDLESS_EPANIC);
        let text = message(code);
        assert!(text.contains("boom inside a call"), "{text}");
        assert!(
            text.contains("errors.rs"),
            "the place is in the message: {text}"
        );
        // Not the library's: the hook that was there before prints it.
        let _ = std::panic::catch_unwind(|| panic!("boom outside the library"));
        println!("CHILD DONE: {text}");
    }

    /// A panic inside a C entry point leaves nothing on the host program's stderr (the code and
    /// message reach herdless_last_error and herdless_strerror); a panic elsewhere in the
    /// process is still printed by the hook that was there before.
    #[test]
    fn a_panic_inside_a_call_prints_nothing() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "errors::tests::panicking_child", "--nocapture"])
            .args(["--test-threads", "1"])
            .env("HERDLESS_TEST_PANIC_CHILD", "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(stdout.contains("CHILD DONE"), "the child ran: {stdout}");
        assert!(
            !stderr.contains("boom inside a call"),
            "printed on stderr: {stderr}"
        );
        assert!(
            stderr.contains("boom outside the library"),
            "the previous hook was not called: {stderr}"
        );
    }

    #[test]
    fn the_last_message_is_the_rust_errors_and_other_codes_have_fixed_text() {
        let code = ffi(|| Err(herdless::Error::NotRegistered { fd: 42 }.into()));
        assert_eq!(code, HERDLESS_ENOENT);
        assert_eq!(
            message(code),
            "descriptor 42 is not registered with this waiter: herdless_add it first"
        );
        assert_eq!(message(HERDLESS_EBADF), "descriptor is not open");
        assert_eq!(message(-999), "unknown herdless error code");
        assert_eq!(ffi(|| Ok(7)), 7, "success passes the value through");
        assert_eq!(herdless_last_error(), HERDLESS_ENOENT);
    }

    #[test]
    fn every_code_is_below_minus_1000_and_sets_its_errno() {
        let codes = [
            HERDLESS_ENULL,
            HERDLESS_EBADHANDLE,
            HERDLESS_EWRONGPROCESS,
            HERDLESS_EINVAL,
            HERDLESS_EBADF,
            HERDLESS_EUNWATCHABLE,
            HERDLESS_EEXIST,
            HERDLESS_ENOENT,
            HERDLESS_EFULL,
            HERDLESS_EUNAVAILABLE,
            HERDLESS_EBUSY,
            HERDLESS_EIO,
            HERDLESS_EPANIC,
            HERDLESS_EINTR,
            HERDLESS_ENOGROUP,
            HERDLESS_ESETTINGS,
            HERDLESS_EBADGROUP,
            HERDLESS_EACCES,
            HERDLESS_EBLOCKING,
            HERDLESS_EINUSE,
            HERDLESS_EREMOVED,
            HERDLESS_ELINES,
        ];
        for code in codes {
            assert!(code <= -1000, "{code}");
            assert_ne!(describe(code), describe(-999), "{code} has its own text");
            let got = ffi(|| Err(Failure::new(code, "x")));
            assert_eq!(got, code);
            assert_eq!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(errno_of(code))
            );
        }
    }

    #[test]
    fn the_removal_messages_name_the_c_calls() {
        let f = Failure::from(herdless::Error::GroupInUse {
            name: "svc".into(),
            members: vec![(0, 12), (3, 40)],
            opened_by: Some(12),
        });
        assert_eq!(f.code, HERDLESS_EINUSE);
        for part in [
            "members 0 (process 12), 3 (process 40) are alive",
            "process 12 has it open",
            "herdless_group_remove_forced",
            "HERDLESS_EREMOVED",
        ] {
            assert!(f.message.contains(part), "{part}: {}", f.message);
        }
        assert!(!f.message.contains("Group::"), "{}", f.message);
        let f = Failure::from(herdless::Error::GroupRemoved { name: "svc".into() });
        assert_eq!(f.code, HERDLESS_EREMOVED);
        assert!(f.message.contains("herdless_group_open"), "{}", f.message);
        assert!(!f.message.contains("Group::"), "{}", f.message);
    }

    #[test]
    fn the_full_group_message_names_the_c_option() {
        let f = Failure::from(herdless::Error::GroupFull { max: 3 });
        assert_eq!(f.code, HERDLESS_EFULL);
        assert!(
            f.message.contains("herdless_options.max_members"),
            "{}",
            f.message
        );
        assert!(!f.message.contains("GroupBuilder"), "{}", f.message);
    }

    /// Every error a C call can meet, in C's words: a remedy named, and no Rust API
    /// (`Type::method`) in it.
    #[test]
    fn every_message_names_a_c_remedy_and_no_rust_api() {
        use herdless::{Backend, Error as E};
        let name = || "svc".to_string();
        let errors = [
            E::BackendUnavailable {
                backend: Backend::Native,
                reason: "no EPOLLEXCLUSIVE".into(),
            },
            E::BadDescriptor { fd: 3 },
            E::AlreadyRegistered {
                fd: 3,
                registered: 3,
            },
            E::AlreadyRegistered {
                fd: 4,
                registered: 3,
            },
            E::NotRegistered { fd: 3 },
            E::BlockingDescriptor { fd: 3 },
            E::ZeroCapacity,
            E::GroupFull { max: 2 },
            E::TooManySources { max: 2 },
            E::InvalidSetting {
                reason: "max_members must be between 1 and 16384, not 0".into(),
            },
            E::GroupNotFound { name: name() },
            E::GroupSettingsDiffer {
                name: name(),
                setting: "max_members",
                group: "8".into(),
                asked: "4".into(),
            },
            E::CorruptGroup {
                name: name(),
                reason: "no magic word".into(),
            },
            E::GroupInUse {
                name: name(),
                members: vec![(0, 12)],
                opened_by: None,
            },
            E::GroupRemoved { name: name() },
            E::PermissionDenied { name: name() },
            E::GroupSettingsDiffer {
                name: name(),
                setting: "rotation",
                group: "Adaptive".into(),
                asked: "Every(1)".into(),
            },
            E::GroupSettingsDiffer {
                name: name(),
                setting: "backend",
                group: "Native".into(),
                asked: "Emulated".into(),
            },
            E::IncompatibleGroup {
                name: name(),
                found: 1,
                expected: 2,
            },
            E::ForkedWaiter {
                joined_pid: 1,
                current_pid: 2,
            },
            E::InvalidInterest {
                reason: "priority with exclusive: the kernel refuses EPOLLPRI with \
                         EPOLLEXCLUSIVE, and herdless refuses it on every backend; register \
                         priority data without exclusive",
            },
            E::UnwatchableDescriptor {
                fd: 3,
                reason: "an anonymous-inode descriptor (eventfd, timerfd, signalfd, epoll) has \
                         no identity the emulation can share between members: register it \
                         without exclusive, or use the native backend",
            },
            E::Interrupted,
            E::LinesDiffer {
                fd: 3,
                other: 4,
                line: "implicit.native.1.x.600".into(),
                other_line: "implicit.native.2.x.600".into(),
            },
        ];
        for e in errors {
            let f = Failure::from(e);
            assert!(!f.message.contains("::"), "{}", f.message);
            for rust in [
                "Adaptive", "Every(", "Native", "Emulated", "Rotation", "Backend",
            ] {
                assert!(!f.message.contains(rust), "{rust} in {}", f.message);
            }
            let remedy = [
                "herdless_",
                "O_NONBLOCK",
                "HERDLESS_",
                "join",
                "run this process",
                "two threads",
            ];
            assert!(
                remedy.iter().any(|r| f.message.contains(r)),
                "no C remedy in {:?}",
                f.message
            );
        }
    }
}
