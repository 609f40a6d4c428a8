//! The handle registry: what a C handle names, checked on every call.
//!
//! A C handle is a number, never a pointer: the kind (group or waiter), a slot index and the
//! slot's generation. Freeing a handle empties its slot and bumps the generation, so a handle
//! used after free, freed twice, or of the wrong kind is refused with `HERDLESS_EBADHANDLE`
//! without touching freed memory. A waiter also remembers the process that joined: a handle
//! inherited across `fork` is refused with `HERDLESS_EWRONGPROCESS`.
//!
//! Lookups take a read lock for a moment and clone an `Arc`, so a waiter blocked in
//! `herdless_wait` holds no lock another thread needs (`herdless_notify` goes through). The
//! waiter itself lives inside the lock it is used under (`WaiterEntry::state`), and
//! `herdless_leave` takes it out under that lock: a call that looked the handle up either
//! locks before the leave and runs on the live waiter (the leave waits for it, and wakes it
//! first if it waits), or locks after and finds no waiter (`HERDLESS_EBADHANDLE`). With a lookup
//! and a lock in two steps, and the waiter beside the lock, a leave could slip in between and
//! the call would wait for ever on a member that had left and that `herdless_notify` could no
//! longer name (`capi/c/leave_race.c` tests it). On Unix the registry's lock is taken around `fork`
//! (`pthread_atfork`), so a child forked while another thread was in the middle of a lookup
//! finds it unlocked.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
#[cfg(unix)]
use std::sync::Once;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use herdless::{Group, Notifier, Waiter};

use crate::errors::{Failure, HERDLESS_EBADHANDLE, HERDLESS_EBUSY, HERDLESS_EWRONGPROCESS};

/// The kind tag of a group handle (top byte of the id).
const GROUP_TAG: u64 = 0x47; // 'G'
/// The kind tag of a waiter handle.
const WAITER_TAG: u64 = 0x57; // 'W'
/// Generations wrap at 24 bits: a slot must be reused 16 million times before a stale handle
/// could name it again.
const GENERATION_MASK: u32 = 0x00FF_FFFF;

/// What a waiter handle holds.
pub(crate) struct WaiterEntry {
    /// The process that joined.
    pub(crate) pid: u32,
    /// Wakes the waiter without taking its lock.
    pub(crate) notifier: Notifier,
    /// Set by `herdless_leave` before it takes the lock: a call that finds the lock taken by
    /// the leave, or whose wait the leave ended, answers `HERDLESS_EBADHANDLE`.
    leaving: AtomicBool,
    /// The waiter and its buffers, one thread at a time; `None` once the waiter left (taken
    /// out under this lock by `herdless_leave`).
    state: Mutex<Option<WaiterState>>,
}

/// A waiter locked for one call: live, and used by this thread alone until dropped.
pub(crate) struct Locked<'a> {
    guard: MutexGuard<'a, Option<WaiterState>>,
    leaving: &'a AtomicBool,
}

impl std::ops::Deref for Locked<'_> {
    type Target = WaiterState;
    fn deref(&self) -> &WaiterState {
        // `lock` makes a `Locked` only of a live waiter, and only `free_waiter` empties it,
        // under the lock this guard holds.
        self.guard.as_ref().expect("a locked waiter is live")
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut WaiterState {
        self.guard.as_mut().expect("a locked waiter is live")
    }
}

impl Locked<'_> {
    /// A call that waited and got nothing: was it the leave of the waiter (`herdless_leave` in
    /// another thread wakes a wait on it) that ended it? Then the call answers
    /// `HERDLESS_EBADHANDLE`: the handle is gone.
    pub(crate) fn ended_by_leave(&self, got: usize) -> Result<(), Failure> {
        match got == 0 && self.leaving.load(SeqCst) {
            true => Err(left_while_in_call()),
            false => Ok(()),
        }
    }
}

fn left_while_in_call() -> Failure {
    Failure::new(
        HERDLESS_EBADHANDLE,
        "the waiter left (herdless_leave in another thread) while this call was on it",
    )
}

/// The Rust key of the registration of C descriptor `fd`: its number. Every registration of a
/// waiter has a number of its own, so the Rust keys are unique, and the C caller's data can be
/// any value (`WaiterState::data`); the signal watch is known by its number too, and so is
/// every registration `herdless_poll` makes (herdless's `PollWaiter` keys them so).
pub(crate) fn key_of(fd: crate::herdless_fd) -> usize {
    fd as usize
}

/// A Rust key no registration has (no descriptor has this number): what
/// `herdless_found_nothing` counts under when no event of the last wait has its data.
const NO_KEY: usize = usize::MAX;

/// The waiter with poll's manners (its registrations following `herdless_poll`'s arrays, its
/// waits ended by signal handlers as `poll(2)`'s): herdless's own on Unix.
#[cfg(unix)]
pub(crate) type PollWaiter = herdless::PollWaiter;

/// Outside Unix (no `herdless_poll`, no signals to end a wait): the waiter and its buffer.
#[cfg(not(unix))]
pub(crate) struct PollWaiter {
    waiter: Waiter,
    events: herdless::Events,
}

#[cfg(not(unix))]
impl PollWaiter {
    fn new(waiter: Waiter) -> PollWaiter {
        PollWaiter {
            waiter,
            events: herdless::Events::with_capacity(1),
        }
    }

    pub(crate) fn waiter_mut(&mut self) -> &mut Waiter {
        &mut self.waiter
    }

    pub(crate) fn waiter(&self) -> &Waiter {
        &self.waiter
    }

    pub(crate) fn events(&self) -> impl Iterator<Item = herdless::Event> + '_ {
        self.events.iter()
    }

    fn wait(
        &mut self,
        capacity: usize,
        timeout: Option<std::time::Duration>,
    ) -> herdless::Result<usize> {
        if self.events.capacity() != capacity {
            self.events = herdless::Events::with_capacity(capacity);
        }
        self.waiter.wait(&mut self.events, timeout)
    }
}

/// A waiter, what `herdless_poll` remembers between calls, and the caller's data.
pub(crate) struct WaiterState {
    /// The waiter (`poll.waiter_mut()`), its receive buffer, and on Unix what herdless_poll
    /// registered.
    pub(crate) poll: PollWaiter,
    /// The caller's data of each registration, by Rust key (`key_of`): herdless_add's and
    /// herdless_modify's; a descriptor herdless_poll registered has its number.
    data: std::collections::HashMap<usize, u64>,
    /// The caller's events of the last wait, as (Rust key, data): what herdless_consumed and
    /// herdless_found_nothing find by data.
    last: Vec<(usize, u64)>,
}

impl WaiterState {
    pub(crate) fn new(waiter: Waiter) -> WaiterState {
        WaiterState {
            poll: PollWaiter::new(waiter),
            data: std::collections::HashMap::new(),
            last: Vec::new(),
        }
    }

    /// The waiter.
    pub(crate) fn waiter(&mut self) -> &mut Waiter {
        self.poll.waiter_mut()
    }

    /// The caller's events of the last wait (the signal watch's left out).
    pub(crate) fn user_events(&self) -> impl Iterator<Item = herdless::Event> + '_ {
        self.poll.events()
    }

    /// Records the caller's `data` for the registration of `fd`.
    pub(crate) fn set_data(&mut self, fd: crate::herdless_fd, data: u64) {
        self.data.insert(key_of(fd), data);
    }

    /// Forgets the data of `fd`'s registration (deleted).
    pub(crate) fn forget_data(&mut self, fd: crate::herdless_fd) {
        self.data.remove(&key_of(fd));
    }

    /// The caller's data of the registration with Rust key `key`.
    pub(crate) fn data_of(&self, key: usize) -> u64 {
        self.data.get(&key).copied().unwrap_or(key as u64)
    }

    /// herdless_consumed (`found_nothing` false) or herdless_found_nothing of `data`: every
    /// event of the last wait with that data is consumed; `found_nothing` counts one empty
    /// wake-up whether or not one had it, as the Rust call does.
    pub(crate) fn consumed(&mut self, data: u64, found_nothing: bool) -> herdless::Result<()> {
        let mut counted = !found_nothing;
        let keys: Vec<usize> = self
            .last
            .iter()
            .filter(|(_, d)| *d == data)
            .map(|&(key, _)| key)
            .collect();
        for key in keys {
            match counted {
                true => self.waiter().consumed(key)?,
                false => self.waiter().found_nothing(key)?,
            }
            counted = true;
        }
        if !counted {
            self.waiter().found_nothing(NO_KEY)?;
        }
        Ok(())
    }

    /// Forgets what `herdless_poll` knew of `fd` (it was deleted by herdless_delete, or added
    /// or modified by hand): the next `herdless_poll` that lists it registers it anew.
    #[cfg(unix)]
    pub(crate) fn forget_polled(&mut self, fd: std::os::fd::RawFd) {
        self.poll.forget(fd);
    }

    /// Remembers the caller's events of the last wait by data, for herdless_consumed.
    pub(crate) fn remember_last(&mut self) {
        let mut last = std::mem::take(&mut self.last);
        last.clear();
        last.extend(self.poll.events().map(|e| (e.key, self.data_of(e.key))));
        self.last = last;
    }

    /// Waits into the receive buffer, sized for `capacity` events; the events are then in
    /// `user_events`. Returns the caller's event count. A blocking wait ends with
    /// HERDLESS_EINTR when a signal handler is due and nothing was ready, as `poll(2)` ends
    /// with EINTR (herdless's `PollWaiter::wait`).
    pub(crate) fn wait(
        &mut self,
        capacity: usize,
        timeout: Option<std::time::Duration>,
    ) -> Result<usize, Failure> {
        let got = self.poll.wait(capacity, timeout);
        self.remember_last();
        Ok(got?)
    }
}

enum Entry {
    Group(Group),
    Waiter(Arc<WaiterEntry>),
}

struct Slot {
    generation: u32,
    entry: Option<Entry>,
}

#[derive(Default)]
struct Registry {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

static REGISTRY: RwLock<Registry> = RwLock::new(Registry {
    slots: Vec::new(),
    free: Vec::new(),
});

fn read() -> RwLockReadGuard<'static, Registry> {
    guard_fork();
    REGISTRY.read().unwrap_or_else(|e| e.into_inner())
}

fn write() -> RwLockWriteGuard<'static, Registry> {
    guard_fork();
    REGISTRY.write().unwrap_or_else(|e| e.into_inner())
}

fn encode(tag: u64, index: u32, generation: u32) -> u64 {
    (tag << 56) | (u64::from(generation & GENERATION_MASK) << 32) | u64::from(index)
}

fn decode(id: u64, tag: u64) -> Option<(usize, u32)> {
    if id >> 56 != tag {
        return None;
    }
    Some((id as u32 as usize, ((id >> 32) as u32) & GENERATION_MASK))
}

fn bad_handle(kind: &str, id: u64) -> Failure {
    Failure::new(
        HERDLESS_EBADHANDLE,
        format!(
            "{kind} handle {id:#x} is not live: never made, already freed, or of the other kind"
        ),
    )
}

fn insert(entry: Entry, tag: u64) -> u64 {
    let mut reg = write();
    let index = match reg.free.pop() {
        Some(i) => i,
        None => {
            reg.slots.push(Slot {
                generation: 1,
                entry: None,
            });
            (reg.slots.len() - 1) as u32
        }
    };
    let slot = &mut reg.slots[index as usize];
    slot.entry = Some(entry);
    encode(tag, index, slot.generation)
}

/// Registers a group; returns its handle id.
pub(crate) fn insert_group(group: Group) -> u64 {
    insert(Entry::Group(group), GROUP_TAG)
}

/// Registers a waiter; returns its handle id.
pub(crate) fn insert_waiter(waiter: Waiter) -> u64 {
    let entry = WaiterEntry {
        pid: std::process::id(),
        notifier: waiter.notifier(),
        leaving: AtomicBool::new(false),
        state: Mutex::new(Some(WaiterState::new(waiter))),
    };
    insert(Entry::Waiter(Arc::new(entry)), WAITER_TAG)
}

/// The group a handle names.
pub(crate) fn group(id: u64) -> Result<Group, Failure> {
    let reg = read();
    let (index, generation) = decode(id, GROUP_TAG).ok_or_else(|| bad_handle("group", id))?;
    match reg.slots.get(index) {
        Some(Slot {
            generation: g,
            entry: Some(Entry::Group(group)),
        }) if *g & GENERATION_MASK == generation => Ok(group.clone()),
        _ => Err(bad_handle("group", id)),
    }
}

/// The waiter a handle names, checked to belong to this process.
pub(crate) fn waiter(id: u64) -> Result<Arc<WaiterEntry>, Failure> {
    let entry = {
        let reg = read();
        let (index, generation) = decode(id, WAITER_TAG).ok_or_else(|| bad_handle("waiter", id))?;
        match reg.slots.get(index) {
            Some(Slot {
                generation: g,
                entry: Some(Entry::Waiter(w)),
            }) if *g & GENERATION_MASK == generation => w.clone(),
            _ => return Err(bad_handle("waiter", id)),
        }
    };
    let current = std::process::id();
    if entry.pid != current {
        return Err(Failure::new(
            HERDLESS_EWRONGPROCESS,
            format!(
                "this waiter was joined by process {} and cannot be used in process {current}: \
                 join the group again in this process",
                entry.pid
            ),
        ));
    }
    Ok(entry)
}

/// Locks a waiter for one call; refuses if another thread is in a call on it, and if the
/// waiter left (meanwhile: the caller looked the handle up before `herdless_leave` took the
/// waiter out).
pub(crate) fn lock(entry: &WaiterEntry) -> Result<Locked<'_>, Failure> {
    let guard = match entry.state.try_lock() {
        Ok(guard) => guard,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        // The leave sets its flag before it takes the lock.
        Err(std::sync::TryLockError::WouldBlock) if entry.leaving.load(SeqCst) => {
            return Err(left_while_in_call())
        }
        Err(std::sync::TryLockError::WouldBlock) => {
            return Err(Failure::new(
                HERDLESS_EBUSY,
                "another thread is inside a call on this waiter (a waiter is used by one \
                 thread at a time; only herdless_notify and herdless_leave may be called from \
                 others)",
            ))
        }
    };
    if guard.is_none() {
        return Err(left_while_in_call());
    }
    Ok(Locked {
        guard,
        leaving: &entry.leaving,
    })
}

/// Frees a group handle.
pub(crate) fn free_group(id: u64) -> Result<(), Failure> {
    let removed = {
        let mut reg = write();
        let (index, generation) = decode(id, GROUP_TAG).ok_or_else(|| bad_handle("group", id))?;
        match reg.slots.get_mut(index) {
            Some(slot)
                if slot.generation & GENERATION_MASK == generation
                    && matches!(slot.entry, Some(Entry::Group(_))) =>
            {
                slot.generation = slot.generation.wrapping_add(1);
                let removed = slot.entry.take();
                reg.free.push(index as u32);
                removed
            }
            _ => return Err(bad_handle("group", id)),
        }
    };
    // Dropped outside the lock.
    drop(removed);
    Ok(())
}

/// Frees a waiter handle (the member leaves the group). Refused in another process. A call
/// on the waiter in another thread finishes first; one blocked in a wait is woken for it and
/// answers `HERDLESS_EBADHANDLE`, as every call that comes after.
pub(crate) fn free_waiter(id: u64) -> Result<(), Failure> {
    let entry = waiter(id)?;
    if entry.leaving.swap(true, SeqCst) {
        return Err(bad_handle("waiter", id)); // another thread is leaving it
    }
    // Out of the registry first: no lookup finds it from here on.
    let removed = {
        let mut reg = write();
        let (index, generation) = decode(id, WAITER_TAG).ok_or_else(|| bad_handle("waiter", id))?;
        match reg.slots.get_mut(index) {
            Some(slot) if slot.generation & GENERATION_MASK == generation => {
                slot.generation = slot.generation.wrapping_add(1);
                let removed = slot.entry.take();
                reg.free.push(index as u32);
                removed
            }
            _ => return Err(bad_handle("waiter", id)),
        }
    };
    // A wait in another thread returns (a notification sent before it waits ends its wait at
    // once), sees the flag and lets go of the lock.
    let _ = entry.notifier.notify();
    // Then the waiter comes out under its lock: a call that holds the lock finishes first; one
    // that locks after finds nothing.
    let state = entry.state.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(removed);
    drop(entry);
    // The Waiter drops here, outside every lock, and leaves the group.
    drop(state);
    Ok(())
}

/// Takes the registry's write lock around `fork`, so the child never inherits it locked.
#[cfg(unix)]
fn guard_fork() {
    use std::cell::RefCell;
    thread_local! {
        static HELD: RefCell<Option<RwLockWriteGuard<'static, Registry>>> =
            const { RefCell::new(None) };
    }
    extern "C" fn prepare() {
        let guard = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
        let _ = HELD.try_with(|h| *h.borrow_mut() = Some(guard));
    }
    extern "C" fn release() {
        let _ = HELD.try_with(|h| h.borrow_mut().take());
    }
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers three functions that only lock and unlock our own static lock;
        // they never panic across the C boundary (poisoning is ignored, TLS access is tried).
        unsafe { libc::pthread_atfork(Some(prepare), Some(release), Some(release)) };
    });
}

#[cfg(not(unix))]
fn guard_fork() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_tags_differ() {
        let id = encode(GROUP_TAG, 7, 3);
        assert_eq!(decode(id, GROUP_TAG), Some((7, 3)));
        assert_eq!(decode(id, WAITER_TAG), None);
        assert_eq!(decode(0, GROUP_TAG), None);
    }

    #[test]
    fn a_freed_group_handle_is_refused_and_a_double_free_too() {
        let group = Group::builder().build().unwrap();
        let id = insert_group(group);
        assert!(self::group(id).is_ok());
        assert!(free_group(id).is_ok());
        assert_eq!(
            free_group(id).err().map(|f| f.code),
            Some(HERDLESS_EBADHANDLE)
        );
        let again = insert_group(Group::builder().build().unwrap());
        assert_ne!(again, id, "a reused slot has a new generation");
        assert!(self::group(id).is_err());
        assert!(free_group(again).is_ok());
    }
}
