//! Error codes of the C ABI, the thread's last error message, and the guard every entry point
//! runs in.
//!
//! Every call returns a negative `HERDLESS_E*` code on failure; `herdless_strerror(code)` then
//! gives the message the Rust error carried (kept per thread until the thread's next failing
//! call). [`ffi`] runs each entry point's body under `catch_unwind`, so a panic never crosses
//! the boundary: it becomes `HERDLESS_EPANIC` with the panic's message.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Success.
pub const HERDLESS_OK: c_int = 0;
/// A pointer argument was NULL (or an array pointer was NULL with a non-zero length).
pub const HERDLESS_ENULL: c_int = -1;
/// The handle is not a live group or waiter: never made, already freed (a double free), left,
/// or a handle of the other kind.
pub const HERDLESS_EBADHANDLE: c_int = -2;
/// The waiter was joined by another process (it was inherited across fork): join the group
/// again in this process.
pub const HERDLESS_EWRONGPROCESS: c_int = -3;
/// An argument is out of range: options, interest bits, key, capacity, timeout.
pub const HERDLESS_EINVAL: c_int = -4;
/// The descriptor is not open (closed, or never opened).
pub const HERDLESS_EBADF: c_int = -5;
/// The kernel will not watch this kind of descriptor (a regular file or a directory).
pub const HERDLESS_EUNWATCHABLE: c_int = -6;
/// The descriptor is already registered with this waiter (use herdless_modify).
pub const HERDLESS_EEXIST: c_int = -7;
/// The descriptor is not registered with this waiter.
pub const HERDLESS_ENOENT: c_int = -8;
/// The group is full (max_members), or watches as many exclusive descriptors as it can share.
pub const HERDLESS_EFULL: c_int = -9;
/// The backend asked for is not available on this system.
pub const HERDLESS_EUNAVAILABLE: c_int = -10;
/// Another thread is inside a call on this waiter right now (a waiter is used by one thread at
/// a time; herdless_notify is the exception).
pub const HERDLESS_EBUSY: c_int = -11;
/// The operating system refused something; the message says what and why.
pub const HERDLESS_EIO: c_int = -12;
/// An internal error (a bug in herdless) was caught before it could cross into C.
pub const HERDLESS_EPANIC: c_int = -13;
/// No group has this name (herdless_group_open without options), or its creator never set it
/// up.
pub const HERDLESS_ENOGROUP: c_int = -14;
/// A named group exists with other settings than the options asked for (the message names the
/// setting); open it with NULL options to take its settings.
pub const HERDLESS_ESETTINGS: c_int = -15;
/// The shared memory under a group's name is not a group this herdless can use: made by
/// another version of herdless, or garbage, or truncated.
pub const HERDLESS_EBADGROUP: c_int = -16;
/// The group's permissions shut this user out.
pub const HERDLESS_EACCES: c_int = -17;

/// A failed call: the code returned to C and the message kept for herdless_strerror.
pub(crate) struct Failure {
    pub(crate) code: c_int,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: c_int, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn null(what: &str) -> Failure {
        Failure::new(HERDLESS_ENULL, format!("{what} is NULL"))
    }
}

impl From<herdless::Error> for Failure {
    fn from(e: herdless::Error) -> Failure {
        use herdless::Error as E;
        let code = match &e {
            E::BackendUnavailable { .. } => HERDLESS_EUNAVAILABLE,
            E::BadDescriptor { .. } => HERDLESS_EBADF,
            E::UnwatchableDescriptor { .. } => HERDLESS_EUNWATCHABLE,
            E::AlreadyRegistered { .. } => HERDLESS_EEXIST,
            E::NotRegistered { .. } => HERDLESS_ENOENT,
            E::ReservedKey { .. }
            | E::InvalidInterest { .. }
            | E::ZeroCapacity
            | E::InvalidSetting { .. } => HERDLESS_EINVAL,
            E::GroupFull { .. } | E::TooManySources { .. } => HERDLESS_EFULL,
            E::ForkedWaiter { .. } => HERDLESS_EWRONGPROCESS,
            E::GroupNotFound { .. } => HERDLESS_ENOGROUP,
            E::GroupSettingsDiffer { .. } => HERDLESS_ESETTINGS,
            E::IncompatibleGroup { .. } | E::CorruptGroup { .. } => HERDLESS_EBADGROUP,
            E::PermissionDenied { .. } => HERDLESS_EACCES,
            E::InvalidGroupName { .. } => HERDLESS_EINVAL,
            E::Unsupported { .. } => HERDLESS_EUNAVAILABLE,
            _ => HERDLESS_EIO,
        };
        Failure::new(code, e.to_string())
    }
}

thread_local! {
    /// The code and message of this thread's last failing call.
    static LAST: RefCell<(c_int, CString)> = RefCell::new((HERDLESS_OK, CString::default()));
}

fn remember(failure: Failure) -> c_int {
    // A message with a NUL inside is cut there rather than lost.
    let bytes: Vec<u8> = failure.message.into_bytes();
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let message = CString::new(&bytes[..end]).unwrap_or_default();
    let _ = LAST.try_with(|last| *last.borrow_mut() = (failure.code, message));
    failure.code
}

/// Runs one entry point's body: its value on success, its code (and message kept) on failure,
/// `HERDLESS_EPANIC` if it panicked.
pub(crate) fn ffi(body: impl FnOnce() -> Result<c_int, Failure>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => value,
        Ok(Err(failure)) => remember(failure),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            remember(Failure::new(
                HERDLESS_EPANIC,
                format!("internal error in herdless (please report it): {what}"),
            ))
        }
    }
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
        HERDLESS_EUNWATCHABLE => b"descriptor cannot be watched\0",
        HERDLESS_EEXIST => b"descriptor already registered with this waiter\0",
        HERDLESS_ENOENT => b"descriptor not registered with this waiter\0",
        HERDLESS_EFULL => b"the group is full\0",
        HERDLESS_EUNAVAILABLE => b"backend not available here\0",
        HERDLESS_EBUSY => b"another thread is using this waiter\0",
        HERDLESS_EIO => b"operating-system error\0",
        HERDLESS_EPANIC => b"internal error in herdless\0",
        HERDLESS_ENOGROUP => b"no group of that name\0",
        HERDLESS_ESETTINGS => b"the named group has other settings\0",
        HERDLESS_EBADGROUP => b"not a group this herdless can use\0",
        HERDLESS_EACCES => b"permission denied for the named group\0",
        _ => b"unknown herdless error code\0",
    }
}

/// The message of `code`: if it is the code of this thread's last failing call, the message of
/// that error as the Rust library wrote it (naming the descriptor, the limit, the process…),
/// otherwise a fixed description of the code. The string belongs to herdless; it stays valid
/// until this thread's next failing herdless call.
#[no_mangle]
pub extern "C" fn herdless_strerror(code: c_int) -> *const c_char {
    let fixed = describe(code).as_ptr().cast::<c_char>();
    catch_unwind(|| {
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

    #[test]
    fn the_last_message_is_the_rust_errors_and_other_codes_have_fixed_text() {
        let code = ffi(|| Err(herdless::Error::NotRegistered { fd: 42 }.into()));
        assert_eq!(code, HERDLESS_ENOENT);
        assert_eq!(
            message(code),
            "descriptor 42 is not registered with this waiter"
        );
        assert_eq!(message(HERDLESS_EBADF), "descriptor is not open");
        assert_eq!(message(-999), "unknown herdless error code");
        assert_eq!(ffi(|| Ok(7)), 7, "success passes the value through");
    }
}
