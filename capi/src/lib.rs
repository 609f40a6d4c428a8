//! # herdless-c: the C ABI of herdless
//!
//! The C middleware that asked for POLLEXCL and POLLONE (seed 003) calls `poll()`; this crate
//! lets it use herdless without writing Rust. It builds `libherdless_c.so` and
//! `libherdless_c.a`, and `include/herdless.h` (generated from this code by cbindgen and
//! checked in) declares everything:
//!
//! - the whole contract: make a group with its options, join it, add / modify / delete
//!   descriptors, wait into a caller's array, say consumed, notify, read the statistics, leave,
//!   free;
//! - [`herdless_poll`], a `poll()`-shaped call honouring [`HERDLESS_POLLEXCL`] and
//!   [`HERDLESS_POLLONE`] in `events`, for code that wants to change one line.
//!
//! One error rule for every call (module `errors`): a failing call returns a negative value,
//! sets `errno` and records a `HERDLESS_E*` code; [`herdless_poll`] returns −1 as `poll(2)`
//! does, every other call the code itself (all codes are −1000 or below, never −1);
//! [`herdless_last_error`] and [`herdless_strerror`] give the code and its message. Handles
//! are numbers checked against a registry on every call, so a handle used after free, freed
//! twice, or used in another process after `fork` is refused with a code;
//! every pointer is checked for NULL; a panic never crosses into C. The library crate
//! `herdless` stays a plain Rust library: this package is the only one with a `cdylib`.

// The C names (herdless_group, herdless_event, …) are the ABI.
#![allow(non_camel_case_types)]
#![warn(missing_docs)]

mod errors;
#[cfg(unix)]
mod poll;
mod registry;

use std::ffi::{c_char, c_int};
use std::time::Duration;

pub use errors::*;
#[cfg(unix)]
pub use poll::{
    herdless_consumed_shared, herdless_poll, herdless_poll_shared, HERDLESS_POLLEXCL,
    HERDLESS_POLLONE,
};

use herdless::{Backend, Group, Interest, Rotation};

use errors::{ffi, Failure};

/// A group: the set of waiters sharing descriptors. A number naming an entry of herdless's
/// registry, not a pointer; `{0}` is never a valid handle. Valid in a child after `fork` (make
/// the group before forking workers).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct herdless_group {
    /// The registry's id of the group (kind, slot, generation); opaque.
    pub id: u64,
}

/// One member of a group, with its own kernel poll instance: one per thread or process. A
/// number naming an entry of herdless's registry, not a pointer; `{0}` is never a valid handle.
/// Usable only in the process that joined.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct herdless_waiter {
    /// The registry's id of the waiter (kind, slot, generation); opaque.
    pub id: u64,
}

/// The best backend this system supports (Linux: native if the kernel takes EPOLLEXCLUSIVE).
pub const HERDLESS_BACKEND_AUTO: c_int = 0;
/// The kernel's exclusive wake-ups (Linux EPOLLEXCLUSIVE), rotated by delete and re-add.
pub const HERDLESS_BACKEND_NATIVE: c_int = 1;
/// Userspace token passing (Leader/Followers) over a poller per member; every OS.
pub const HERDLESS_BACKEND_EMULATED: c_int = 2;

/// The options of a new group. Fill it with herdless_options_init, then change what you need.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct herdless_options {
    /// HERDLESS_BACKEND_AUTO (default), HERDLESS_BACKEND_NATIVE or HERDLESS_BACKEND_EMULATED.
    pub backend: c_int,
    /// When a member goes to the back of the line of an exclusive descriptor:
    /// HERDLESS_ROTATE_ADAPTIVE (the default, the Rust API's `Rotation::Adaptive`: strict turns
    /// while events come one at a time, batches of at most 16 under a backlog, 64 in a
    /// stream), or after this many events: 1 is strict turns at any cost, 0 never rotates
    /// (raw EPOLLEXCLUSIVE).
    pub rotate_every: u32,
    /// How many members may join (default 64, at most 16384). A slot costs shared memory only,
    /// no descriptor, and a join costs the same in a large group as in a small one.
    pub max_members: usize,
    /// How many distinct exclusive descriptors the members of an emulated group may have
    /// registered at once (default 1024, at most 65536): past it an exclusive herdless_add
    /// fails with HERDLESS_EFULL. A descriptor no member has registered any more frees its
    /// place. Ignored by the native backend, which keeps no such table.
    pub max_exclusive: usize,
    /// The permission bits of a named group herdless_group_open creates (default 0600: the
    /// creating user only; 0660 lets the users of its group in too, 0666 everyone), applied
    /// exactly whatever the umask. Ignored by herdless_group_new (a group only forked children
    /// share) and when the group exists already.
    pub mode: u32,
}

/// `rotate_every` value: the adaptive rule, turns by the event and batches under a backlog
/// (the default; `Rotation::Adaptive` in the Rust API).
pub const HERDLESS_ROTATE_ADAPTIVE: u32 = u32::MAX;

/// Interest and event bit: readable (or a pending connection; as an event also set when the
/// other end hung up or an error is pending, so that a read returns at once).
pub const HERDLESS_READABLE: u32 = 0x1;
/// Interest and event bit: writable (as an event also set on a hang-up or an error, for a
/// registration that asked for it).
pub const HERDLESS_WRITABLE: u32 = 0x2;
/// Interest and event bit: urgent data (EPOLLPRI); not with HERDLESS_EXCLUSIVE.
pub const HERDLESS_PRIORITY: u32 = 0x4;
/// Interest bit: an event wakes exactly one waiter of the group (POLLEXCL).
pub const HERDLESS_EXCLUSIVE: u32 = 0x8;
/// Interest bit: a wait returns at most one event, ready descriptors served in turn (POLLONE).
pub const HERDLESS_ONE_EVENT: u32 = 0x10;
/// Event bit: the other end hung up (POLLHUP): reads return end of file once the data left is
/// read (a pipe or FIFO whose writers all closed, a socket closed both ways). It stays set at
/// every wait: herdless_delete the descriptor, or close it. Never an interest bit (the kernel
/// always reports it).
pub const HERDLESS_HANGUP: u32 = 0x20;
/// Event bit: an error is pending on the descriptor (POLLERR: a failed connect, a reset
/// connection, a pipe with no reader left); the next read or write, or SO_ERROR, says which.
/// Never an interest bit.
pub const HERDLESS_ERROR: u32 = 0x40;

/// One event handed out by herdless_wait.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct herdless_event {
    /// The data given to herdless_add (or herdless_modify) for the descriptor: the caller's
    /// own, any value, shared by several descriptors if the caller wants; the descriptor
    /// itself for one herdless_poll registered.
    pub data: u64,
    /// HERDLESS_READABLE, HERDLESS_WRITABLE, HERDLESS_PRIORITY, HERDLESS_HANGUP,
    /// HERDLESS_ERROR.
    pub events: u32,
}

/// One member's counters, as herdless_stats reports them.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct herdless_member_stats {
    /// The member's slot in the group (join order, reused after a member is gone).
    pub member: usize,
    /// The member's process.
    pub pid: u32,
    /// Still joined? (false once it left, or once its process died)
    pub alive: bool,
    /// Does it hold the emulation's token of some exclusive descriptor right now?
    pub leader: bool,
    /// Times the member's kernel wait returned with something (events, a notification, the
    /// emulation's token); not timeouts, signals, nor the wake-ups the kernel swallowed inside
    /// its wait (count those with getrusage's voluntary context switches).
    pub wakeups: u64,
    /// Events handed to the member's caller.
    pub events: u64,
    /// Empty wake-ups: events that found nothing as the application reported them
    /// (herdless_found_nothing after EAGAIN), plus kernel wake-ups herdless found already taken
    /// and did not hand out (emulation: another member had the descriptor; natively: another
    /// member held the file's readiness and read it, or the descriptor was closed).
    pub empty_wakeups: u64,
    /// Wake-ups that only passed the emulation's token or rang its door bell (0 for the native
    /// backend).
    pub token_wakeups: u64,
    /// Events of exclusive descriptors that the member's next herdless_wait or herdless_poll
    /// had to consume because herdless_consumed (or herdless_found_nothing) was not called for
    /// them: a count that grows says a herdless_consumed is missing from the loop.
    pub unconsumed: u64,
}

/// A descriptor as this system names it: a file descriptor on Unix.
#[cfg(unix)]
pub type herdless_fd = c_int;
/// A descriptor as this system names it: a SOCKET on Windows.
#[cfg(windows)]
pub type herdless_fd = usize;

/// The most events one herdless_wait returns, whatever its `capacity`.
const MAX_EVENTS_PER_WAIT: usize = 1024;

/// Reads a pointer argument; NULL is refused.
///
/// # Safety
///
/// `ptr` is NULL or points to a live, aligned T (the documented contract of every entry point).
unsafe fn non_null<'a, T>(ptr: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller's contract above; NULL is refused here.
    unsafe { ptr.as_ref() }.ok_or_else(|| Failure::null(what))
}

/// Writes through an out-pointer; NULL is refused.
///
/// # Safety
///
/// `ptr` is NULL or points to a live, aligned, writable T.
unsafe fn out<'a, T>(ptr: *mut T, what: &str) -> Result<&'a mut T, Failure> {
    // SAFETY: the caller's contract above; NULL is refused here.
    unsafe { ptr.as_mut() }.ok_or_else(|| Failure::null(what))
}

/// A C timeout in milliseconds: negative waits for ever.
pub(crate) fn timeout_of(timeout_ms: c_int) -> Option<Duration> {
    u64::try_from(timeout_ms).ok().map(Duration::from_millis)
}

/// The bits of an event (`herdless_event.events`).
fn event_bits(event: &herdless::Event) -> u32 {
    [
        (event.is_readable(), HERDLESS_READABLE),
        (event.is_writable(), HERDLESS_WRITABLE),
        (event.is_priority(), HERDLESS_PRIORITY),
        (event.is_read_closed(), HERDLESS_HANGUP),
        (event.is_error(), HERDLESS_ERROR),
    ]
    .iter()
    .filter(|(set, _)| *set)
    .fold(0, |bits, (_, bit)| bits | bit)
}

/// Interest bits → Interest.
fn interest_of(bits: u32) -> Result<Interest, Failure> {
    const KNOWN: u32 = HERDLESS_READABLE
        | HERDLESS_WRITABLE
        | HERDLESS_PRIORITY
        | HERDLESS_EXCLUSIVE
        | HERDLESS_ONE_EVENT;
    if bits & !KNOWN != 0 {
        return Err(Failure::new(
            HERDLESS_EINVAL,
            format!("unknown interest bits {:#x}", bits & !KNOWN),
        ));
    }
    let mut interest = None::<Interest>;
    for (bit, base) in [
        (HERDLESS_READABLE, Interest::READABLE),
        (HERDLESS_WRITABLE, Interest::WRITABLE),
        (HERDLESS_PRIORITY, Interest::PRIORITY),
    ] {
        if bits & bit != 0 {
            interest = Some(interest.map_or(base, |i| i.add(base)));
        }
    }
    let Some(mut interest) = interest else {
        return Err(Failure::new(
            HERDLESS_EINVAL,
            "neither HERDLESS_READABLE, HERDLESS_WRITABLE nor HERDLESS_PRIORITY: nothing to wait for",
        ));
    };
    if bits & HERDLESS_EXCLUSIVE != 0 {
        interest = interest.exclusive();
    }
    if bits & HERDLESS_ONE_EVENT != 0 {
        interest = interest.one_event_round_robin();
    }
    Ok(interest)
}

/// Borrows a C descriptor for one registration call.
#[cfg(unix)]
fn with_source<R>(
    fd: herdless_fd,
    f: impl FnOnce(&std::os::fd::BorrowedFd<'_>) -> herdless::Result<R>,
) -> Result<R, Failure> {
    if fd < 0 {
        return Err(herdless::Error::BadDescriptor { fd }.into());
    }
    // SAFETY: herdless uses the borrowed descriptor only for the registration system calls of
    // this call, as a number; if the caller closed it, the kernel answers EBADF and herdless
    // returns BadDescriptor. -1 (the one value borrow_raw forbids) is refused above.
    let source = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    Ok(f(&source)?)
}

/// Borrows a C socket for one registration call.
#[cfg(windows)]
fn with_source<R>(
    fd: herdless_fd,
    f: impl FnOnce(&std::os::windows::io::BorrowedSocket<'_>) -> herdless::Result<R>,
) -> Result<R, Failure> {
    let raw = fd as std::os::windows::io::RawSocket;
    if raw == !0 {
        return Err(herdless::Error::BadDescriptor { fd: raw }.into());
    }
    // SAFETY: as on Unix: used only for this call's registration calls; INVALID_SOCKET (the
    // value borrow_raw forbids) is refused above.
    let source = unsafe { std::os::windows::io::BorrowedSocket::borrow_raw(raw) };
    Ok(f(&source)?)
}

/// Fills `options` with the defaults: HERDLESS_BACKEND_AUTO, rotate_every
/// HERDLESS_ROTATE_ADAPTIVE, 64 members, 1024 exclusive descriptors at once, mode 0600.
///
/// Returns HERDLESS_OK, or HERDLESS_ENULL if `options` is NULL.
///
/// # Safety
///
/// `options` is NULL or points to a writable herdless_options.
#[no_mangle]
pub unsafe extern "C" fn herdless_options_init(options: *mut herdless_options) -> c_int {
    ffi(|| {
        // SAFETY: the caller's contract (see # Safety).
        *unsafe { out(options, "options") }? = default_options();
        Ok(HERDLESS_OK)
    })
}

/// Makes a group. Make it before spawning the threads or forking the processes that join it
/// (programs that are exec'd, or started on their own, share a named group instead:
/// herdless_group_open).
/// `options` may be NULL for the defaults (see herdless_options_init).
///
/// Returns HERDLESS_OK and the handle in `*out_group`; HERDLESS_ENULL if `out_group` is NULL;
/// HERDLESS_EINVAL for an unknown backend or a member count out of range;
/// HERDLESS_EUNAVAILABLE if the native backend was asked for where the kernel has none;
/// HERDLESS_EIO if shared memory or pipes cannot be made.
///
/// # Safety
///
/// `options` is NULL or points to a herdless_options; `out_group` is NULL or points to a
/// writable herdless_group.
#[no_mangle]
pub unsafe extern "C" fn herdless_group_new(
    options: *const herdless_options,
    out_group: *mut herdless_group,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's contract (see # Safety).
        let out_group = unsafe { out(out_group, "out_group") }?;
        let options = if options.is_null() {
            default_options()
        } else {
            // SAFETY: the caller's contract (see # Safety).
            *unsafe { non_null(options, "options") }?
        };
        let group = builder(&options)?.build()?;
        *out_group = herdless_group {
            id: registry::insert_group(group),
        };
        Ok(HERDLESS_OK)
    })
}

/// The options herdless_options_init writes.
fn default_options() -> herdless_options {
    herdless_options {
        backend: HERDLESS_BACKEND_AUTO,
        rotate_every: HERDLESS_ROTATE_ADAPTIVE,
        max_members: herdless::DEFAULT_MAX_MEMBERS,
        max_exclusive: herdless::DEFAULT_MAX_EXCLUSIVE,
        mode: 0o600,
    }
}

/// A builder with the options' settings.
fn builder(options: &herdless_options) -> Result<herdless::GroupBuilder, Failure> {
    let backend = match options.backend {
        HERDLESS_BACKEND_AUTO => Backend::Auto,
        HERDLESS_BACKEND_NATIVE => Backend::Native,
        HERDLESS_BACKEND_EMULATED => Backend::Emulated,
        other => {
            return Err(Failure::new(
                HERDLESS_EINVAL,
                format!("unknown backend {other} (use HERDLESS_BACKEND_*)"),
            ))
        }
    };
    let rotation = match options.rotate_every {
        HERDLESS_ROTATE_ADAPTIVE => Rotation::Adaptive,
        n => Rotation::Every(n),
    };
    Ok(Group::builder()
        .backend(backend)
        .rotation(rotation)
        .max_members(options.max_members)
        .max_exclusive_descriptors(options.max_exclusive)
        .mode(options.mode))
}

/// The Rust string of a C string argument.
///
/// # Safety
///
/// `s` is NULL or a NUL-terminated string.
unsafe fn c_str<'a>(s: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if s.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: the caller's contract.
    unsafe { std::ffi::CStr::from_ptr(s) }
        .to_str()
        .map_err(|_| Failure::new(HERDLESS_EINVAL, format!("{what} is not UTF-8")))
}

/// Opens the **named group** `name`, which any process of a user the group's mode lets in
/// opens by name: server programs exec'd by a supervisor, or started on their own, all share
/// it. With `options` NULL the group must exist, and its settings are taken (what a server that
/// must not create calls); with options, the group is created with them if there is none (with
/// their `mode`, 0600 by default; a group nobody has open and whose members are all gone is
/// made anew), and an existing
/// one must have them (a backend of HERDLESS_BACKEND_AUTO takes the group's);
/// herdless_group_origin says which it did. A second open of one name in a process returns the
/// same group (unless it was removed meanwhile). A name is 1 to 242 characters (18 on macOS)
/// of letters, digits, '.', '_' and '-' (the POSIX shared-memory object /herdless.<name>).
///
/// Returns HERDLESS_OK and the handle in `*out_group`; HERDLESS_ENULL if `name` or `out_group`
/// is NULL; HERDLESS_EINVAL for an invalid name or options; HERDLESS_ENOGROUP if there is no
/// such group (NULL options); HERDLESS_ESETTINGS if it has other settings than the options;
/// HERDLESS_EBADGROUP if the memory under the name is not a group this herdless can use
/// (another version, garbage: remove it with herdless_group_remove); HERDLESS_EACCES for
/// another user's group; HERDLESS_EUNAVAILABLE outside Unix; HERDLESS_EIO otherwise.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string; `options` is NULL or points to a
/// herdless_options; `out_group` is NULL or points to a writable herdless_group.
#[no_mangle]
pub unsafe extern "C" fn herdless_group_open(
    name: *const c_char,
    options: *const herdless_options,
    out_group: *mut herdless_group,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's contract (see # Safety).
        let out_group = unsafe { out(out_group, "out_group") }?;
        // SAFETY: the caller's contract (see # Safety).
        let name = unsafe { c_str(name, "name") }?;
        let group = if options.is_null() {
            Group::open(name)?
        } else {
            // SAFETY: the caller's contract (see # Safety).
            let options = unsafe { non_null(options, "options") }?;
            builder(options)?.name(name).build()?
        };
        *out_group = herdless_group {
            id: registry::insert_group(group),
        };
        Ok(HERDLESS_OK)
    })
}

/// Removes the named group `name`, once nobody uses it: refused with HERDLESS_EINUSE while any
/// member is alive (in any process, the caller's included) or another process has the group
/// open, so a supervisor that clears stale groups at start-up never splits a running service;
/// the message names each live member (slot and process) and a process that has it open, and
/// nothing changes. Then the name is free: the next herdless_group_open with options creates a
/// new group. A group only the caller's own process has open, with no member, is removed: the
/// caller's handles of it then answer HERDLESS_EREMOVED to herdless_join. A process that
/// opened the name in the instant before the removal opens the name again after it, never
/// the removed group.
///
/// Returns HERDLESS_OK, HERDLESS_EINUSE, HERDLESS_ENULL, HERDLESS_EINVAL (invalid name),
/// HERDLESS_ENOGROUP (no such group), HERDLESS_EACCES, HERDLESS_EUNAVAILABLE outside Unix,
/// HERDLESS_EIO.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn herdless_group_remove(name: *const c_char) -> c_int {
    ffi(|| {
        // SAFETY: the caller's contract (see # Safety).
        let name = unsafe { c_str(name, "name") }?;
        Group::remove(name)?;
        Ok(HERDLESS_OK)
    })
}

/// Removes the named group `name` whoever uses it: herdless_group_remove without its refusal.
/// The group's live members, in every process, get HERDLESS_EREMOVED from their next
/// herdless_wait, herdless_poll (-1, errno EIDRM) or herdless_add (one asleep in a wait hears
/// of it when that wait returns), and herdless_join fails the same way: each then leaves
/// (herdless_leave, herdless_group_free) and opens the name again, joining the group then
/// under it. For a supervisor that restarts a service whose old servers must not linger.
///
/// Returns HERDLESS_OK, or as herdless_group_remove but never HERDLESS_EINUSE.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn herdless_group_remove_forced(name: *const c_char) -> c_int {
    ffi(|| {
        // SAFETY: the caller's contract (see # Safety).
        let name = unsafe { c_str(name, "name") }?;
        Group::remove_forced(name)?;
        Ok(HERDLESS_OK)
    })
}

/// herdless_group_origin: the group is new (every group of herdless_group_new; a name no
/// group had).
pub const HERDLESS_ORIGIN_CREATED: c_int = 1;
/// herdless_group_origin: the group that existed under the name was opened (herdless_group_open
/// with NULL options always).
pub const HERDLESS_ORIGIN_OPENED: c_int = 2;
/// herdless_group_origin: a group existed under the name, but nobody had it open and none of
/// its members was alive: it was made anew with the options, and no members.
pub const HERDLESS_ORIGIN_REMADE: c_int = 3;

/// What the call that made this handle did: HERDLESS_ORIGIN_CREATED, HERDLESS_ORIGIN_OPENED
/// or HERDLESS_ORIGIN_REMADE (a supervisor that must start from a clean slate, or a server that
/// must not be the first, asks), or a negative code (HERDLESS_EBADHANDLE).
#[no_mangle]
pub extern "C" fn herdless_group_origin(group: herdless_group) -> c_int {
    ffi(|| {
        Ok(match registry::group(group.id)?.origin() {
            herdless::Origin::Created => HERDLESS_ORIGIN_CREATED,
            herdless::Origin::Opened => HERDLESS_ORIGIN_OPENED,
            herdless::Origin::Remade => HERDLESS_ORIGIN_REMADE,
        })
    })
}

/// Frees a group handle. Waiters already joined keep working (each holds the group); a child
/// forked earlier keeps its own copy. A second free of the same handle returns
/// HERDLESS_EBADHANDLE.
#[no_mangle]
pub extern "C" fn herdless_group_free(group: herdless_group) -> c_int {
    ffi(|| registry::free_group(group.id).map(|()| HERDLESS_OK))
}

/// The backend in force: HERDLESS_BACKEND_NATIVE or HERDLESS_BACKEND_EMULATED (Auto
/// resolved), or a negative code.
#[no_mangle]
pub extern "C" fn herdless_group_backend(group: herdless_group) -> c_int {
    ffi(|| {
        Ok(match registry::group(group.id)?.backend() {
            Backend::Native => HERDLESS_BACKEND_NATIVE,
            Backend::Emulated => HERDLESS_BACKEND_EMULATED,
            Backend::Auto => HERDLESS_BACKEND_AUTO,
        })
    })
}

/// Joins the group: one waiter per thread or process, each with its own kernel poll instance.
/// Call it in the process that will wait (after fork, in the child). A waiter may be handed to
/// another thread of that process; it is used by one thread at a time.
///
/// Returns HERDLESS_OK and the handle in `*out_waiter`; HERDLESS_ENULL, HERDLESS_EBADHANDLE,
/// HERDLESS_EFULL when every member slot is taken, HERDLESS_EREMOVED for a named group that
/// was removed (open the name again), HERDLESS_EIO.
///
/// # Safety
///
/// `out_waiter` is NULL or points to a writable herdless_waiter.
#[no_mangle]
pub unsafe extern "C" fn herdless_join(
    group: herdless_group,
    out_waiter: *mut herdless_waiter,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's contract (see # Safety).
        let out_waiter = unsafe { out(out_waiter, "out_waiter") }?;
        let waiter = registry::group(group.id)?.join()?;
        *out_waiter = herdless_waiter {
            id: registry::insert_waiter(waiter),
        };
        Ok(HERDLESS_OK)
    })
}

/// Leaves the group and frees the waiter handle. May be called from any thread of the process
/// that joined, also while another thread is inside a call on the waiter: that call finishes
/// first, and one blocked in herdless_wait or herdless_poll is woken for it and returns
/// HERDLESS_EBADHANDLE (herdless_poll: -1, errno EBADF), as every later call on the handle
/// does. A second call returns HERDLESS_EBADHANDLE; a call from another process
/// HERDLESS_EWRONGPROCESS.
#[no_mangle]
pub extern "C" fn herdless_leave(waiter: herdless_waiter) -> c_int {
    ffi(|| registry::free_waiter(waiter.id).map(|()| HERDLESS_OK))
}

/// This waiter's member slot, as in herdless_member_stats.member (>= 0), or a negative code.
#[no_mangle]
pub extern "C" fn herdless_member(waiter: herdless_waiter) -> c_int {
    ffi(|| {
        let entry = registry::waiter(waiter.id)?;
        let state = registry::lock(&entry)?;
        Ok(state.poll.waiter().member() as c_int)
    })
}

/// Registers `fd` with `data` for `interest` (HERDLESS_READABLE / HERDLESS_WRITABLE /
/// HERDLESS_PRIORITY, with HERDLESS_EXCLUSIVE and/or HERDLESS_ONE_EVENT). `data` is the
/// caller's own, as epoll's: any value (a pointer, an index), none reserved, and several
/// descriptors may share one; every herdless_event of `fd` carries it. Keep `fd` open until it
/// is deleted. A duplicate (dup) of a descriptor registered with this waiter is refused with
/// HERDLESS_EEXIST when either registration is exclusive (the message names the registered
/// number).
///
/// With HERDLESS_EXCLUSIVE, `fd` must be non-blocking (O_NONBLOCK set: fcntl, or mq_open's
/// flags): a wake-up can find nothing, and a blocking read would hang the member. A blocking
/// one is refused with HERDLESS_EBLOCKING. (Not checked on Windows, where a socket's blocking
/// mode cannot be read back; nor without HERDLESS_EXCLUSIVE, for a member's own descriptor.)
///
/// Returns HERDLESS_OK; HERDLESS_EBADF (closed), HERDLESS_EUNWATCHABLE (a regular file),
/// HERDLESS_EBLOCKING (exclusive, without O_NONBLOCK), HERDLESS_EEXIST, HERDLESS_EINVAL,
/// HERDLESS_EBADHANDLE, HERDLESS_EWRONGPROCESS, HERDLESS_EBUSY, HERDLESS_EREMOVED (a named
/// group removed by force). Nothing changes on error.
#[no_mangle]
pub extern "C" fn herdless_add(
    waiter: herdless_waiter,
    fd: herdless_fd,
    data: u64,
    interest: u32,
) -> c_int {
    ffi(|| {
        let interest = interest_of(interest)?;
        let entry = registry::waiter(waiter.id)?;
        let mut state = registry::lock(&entry)?;
        with_source(fd, |s| {
            state.waiter().add(s, registry::key_of(fd), interest)
        })?;
        state.set_data(fd, data);
        Ok(HERDLESS_OK)
    })
}

/// Changes the data or interest of a registered `fd` (an exclusive registration is deleted and
/// added again, which the caller never sees).
///
/// Returns HERDLESS_OK, or as herdless_add, with HERDLESS_ENOENT for an fd never added.
#[no_mangle]
pub extern "C" fn herdless_modify(
    waiter: herdless_waiter,
    fd: herdless_fd,
    data: u64,
    interest: u32,
) -> c_int {
    ffi(|| {
        let interest = interest_of(interest)?;
        let entry = registry::waiter(waiter.id)?;
        let mut state = registry::lock(&entry)?;
        with_source(fd, |s| {
            state.waiter().modify(s, registry::key_of(fd), interest)
        })?;
        state.set_data(fd, data);
        // Changed by hand: herdless_poll no longer owns what it registered.
        #[cfg(unix)]
        state.forget_polled(fd);
        Ok(HERDLESS_OK)
    })
}

/// Stops watching `fd` (also one herdless_poll registered: the next herdless_poll that lists it
/// registers it again).
///
/// Returns HERDLESS_OK, HERDLESS_ENOENT for an fd never added, or a handle error.
#[no_mangle]
pub extern "C" fn herdless_delete(waiter: herdless_waiter, fd: herdless_fd) -> c_int {
    ffi(|| {
        let entry = registry::waiter(waiter.id)?;
        let mut state = registry::lock(&entry)?;
        #[cfg(unix)]
        state.forget_polled(fd);
        state.forget_data(fd);
        with_source(fd, |s| state.waiter().delete(s))?;
        Ok(HERDLESS_OK)
    })
}

/// Waits for events and writes at most `capacity` of them to `events` (at most 1024 per call,
/// and one if any registration asked for HERDLESS_ONE_EVENT). `timeout_ms` < 0 waits for
/// ever. A signal handler that runs while it waits ends it with HERDLESS_EINTR, as
/// epoll_wait() ends with EINTR (on Linux; see herdless_poll).
///
/// Coming back to herdless_wait says that the events of the previous call were consumed (see
/// herdless_consumed).
///
/// Returns the number of events (0 on timeout or herdless_notify); HERDLESS_ENULL if `events`
/// is NULL; HERDLESS_EINVAL if `capacity` is 0; HERDLESS_EINTR; a handle error
/// (HERDLESS_EBADHANDLE also when another thread's herdless_leave ended the wait);
/// HERDLESS_EREMOVED (a named group removed by force: leave, and open the name again);
/// HERDLESS_EIO.
///
/// # Safety
///
/// `events` is NULL or points to `capacity` writable herdless_event.
#[no_mangle]
pub unsafe extern "C" fn herdless_wait(
    waiter: herdless_waiter,
    events: *mut herdless_event,
    capacity: usize,
    timeout_ms: c_int,
) -> c_int {
    ffi(|| {
        if events.is_null() {
            return Err(Failure::null("events"));
        }
        if capacity == 0 {
            return Err(herdless::Error::ZeroCapacity.into());
        }
        // At most this many events per call (as epoll's maxevents): the buffer is allocated
        // once per waiter, not sized by whatever count the caller passes.
        let capacity = capacity.min(MAX_EVENTS_PER_WAIT);
        let entry = registry::waiter(waiter.id)?;
        let mut state = registry::lock(&entry)?;
        let n = state.wait(capacity, timeout_of(timeout_ms))?;
        state.ended_by_leave(n)?;
        // SAFETY: the caller gave `capacity` writable herdless_event slots at `events` (checked
        // non-NULL above); at most `capacity` are written.
        let out = unsafe { std::slice::from_raw_parts_mut(events, capacity) };
        for (slot, event) in out.iter_mut().zip(state.user_events()) {
            *slot = herdless_event {
                data: state.data_of(event.key),
                events: event_bits(&event),
            };
        }
        Ok(n as c_int)
    })
}

/// Says that the readiness of the event with `data` has been consumed (the message read, the
/// connection accepted). Call it right after the read and before handling the request: then
/// the group watches the descriptor again without waking two members for one message, and this
/// waiter goes to the back of the line. The next herdless_wait or herdless_poll does it
/// anyway (and counts it in herdless_member_stats.unconsumed). Every event of the last wait
/// with that data is consumed (several descriptors may share one); data with no event
/// outstanding is ignored. For descriptors registered by herdless_poll, the data is the
/// descriptor itself.
///
/// Returns HERDLESS_OK, a handle error, or HERDLESS_EIO.
#[no_mangle]
pub extern "C" fn herdless_consumed(waiter: herdless_waiter, data: u64) -> c_int {
    ffi(|| {
        let entry = registry::waiter(waiter.id)?;
        let mut state = registry::lock(&entry)?;
        state.consumed(data, false)?;
        Ok(HERDLESS_OK)
    })
}

/// Says that the event with `data` found nothing: the read or accept failed with EAGAIN
/// (EWOULDBLOCK), another member having taken the message first. It counts one empty wake-up
/// for this member (herdless_member_stats.empty_wakeups) and then does what herdless_consumed
/// does: call it instead of herdless_consumed for that event, not as well. For descriptors
/// registered by herdless_poll, the data is the descriptor itself.
///
/// Returns HERDLESS_OK, a handle error, or HERDLESS_EIO.
#[no_mangle]
pub extern "C" fn herdless_found_nothing(waiter: herdless_waiter, data: u64) -> c_int {
    ffi(|| {
        let entry = registry::waiter(waiter.id)?;
        let mut state = registry::lock(&entry)?;
        state.consumed(data, true)?;
        Ok(HERDLESS_OK)
    })
}

/// Wakes the waiter's herdless_wait or herdless_poll, which then returns 0. May be called from
/// any thread of the process that joined, also while another thread waits on the waiter. A
/// notification sent while the waiter is not waiting wakes its next wait.
///
/// Returns HERDLESS_OK, a handle error, or HERDLESS_EIO.
#[no_mangle]
pub extern "C" fn herdless_notify(waiter: herdless_waiter) -> c_int {
    ffi(|| {
        registry::waiter(waiter.id)?.notifier.notify()?;
        Ok(HERDLESS_OK)
    })
}

/// Puts the waiter in another event loop (libevent, libuv, a middleware's own epoll or poll
/// loop) and returns its descriptor: readable while the waiter has an event to take. From the
/// first call on, a thread of the waiter's own does its kernel wait (so that an exclusive event
/// still wakes one member's loop: a waiter's epoll nested in the loop's would wake every
/// member's; docs/c.md, "In another event loop"). Register the descriptor in the loop for
/// reading (level- or edge-triggered), never read, write or close it; when it fires, call
/// herdless_wait with timeout 0 until it returns 0, with the usual read and herdless_consumed
/// after each event. herdless_add, herdless_modify and herdless_delete stop the thread's wait
/// while they change the registrations: the descriptor is then readable once with nothing to
/// take. herdless_notify makes it readable, and the next herdless_wait returns 0. A second call
/// returns the same descriptor (a new one if the loop closed it by mistake; the closed number
/// is never closed or written to by herdless). It is close-on-exec; herdless_leave ends the
/// thread and closes it. In a forked child the waiter and its descriptor are the parent's:
/// HERDLESS_EWRONGPROCESS (the child joins the group itself).
///
/// Returns the descriptor (>= 0); HERDLESS_EBADHANDLE, HERDLESS_EWRONGPROCESS, HERDLESS_EBUSY,
/// HERDLESS_EREMOVED, HERDLESS_EIO (no descriptor or thread left: the waiter is then as it
/// was), or HERDLESS_EUNAVAILABLE where there are no descriptors to give (Windows).
#[no_mangle]
pub extern "C" fn herdless_waiter_fd(waiter: herdless_waiter) -> c_int {
    ffi(|| {
        let entry = registry::waiter(waiter.id)?;
        let mut state = registry::lock(&entry)?;
        state.waiter().nest()?;
        #[cfg(unix)]
        {
            use std::os::fd::AsRawFd;
            Ok(state.waiter().as_raw_fd())
        }
        #[cfg(not(unix))]
        unreachable!("nest is Unsupported off Unix")
    })
}

/// The counters of every member that ever joined the group: writes at most `capacity` of them
/// to `out_stats` (which may be NULL when `capacity` is 0) and returns how many members there
/// are, so a return larger than `capacity` says the array was too short. Readable from any
/// process of the group (a parent reads its forked members' figures after they exit).
///
/// Returns the member count, HERDLESS_ENULL, or HERDLESS_EBADHANDLE.
///
/// # Safety
///
/// `out_stats` is NULL or points to `capacity` writable herdless_member_stats.
#[no_mangle]
pub unsafe extern "C" fn herdless_stats(
    group: herdless_group,
    out_stats: *mut herdless_member_stats,
    capacity: usize,
) -> c_int {
    ffi(|| {
        if out_stats.is_null() && capacity > 0 {
            return Err(Failure::null("out_stats"));
        }
        let stats = registry::group(group.id)?.stats();
        if capacity > 0 {
            // SAFETY: the caller gave `capacity` writable slots at `out_stats` (non-NULL).
            let out = unsafe { std::slice::from_raw_parts_mut(out_stats, capacity) };
            for (slot, s) in out.iter_mut().zip(&stats) {
                *slot = herdless_member_stats {
                    member: s.member,
                    pid: s.pid,
                    alive: s.alive,
                    leader: s.leader,
                    wakeups: s.wakeups,
                    events: s.events,
                    empty_wakeups: s.empty_wakeups,
                    token_wakeups: s.token_wakeups,
                    unconsumed: s.unconsumed,
                };
            }
        }
        Ok(stats.len().min(c_int::MAX as usize) as c_int)
    })
}
