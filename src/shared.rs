//! The group's shared state: what an opener checks (the preamble), the member table (its header
//! and one slot per member), and one region that belongs to the group's backend.
//!
//! It lives in one anonymous shared mapping made when the group is built, so that threads and
//! processes forked afterwards all see the same memory (on systems without `fork`, a plain heap
//! allocation), or in a named group's shared-memory object (`crate::named`). Everything in it is
//! an atomic and nothing in it is guarded by a lock a dead member could leave held: a member
//! killed at any instant must not leave the others stuck. The layout:
//!
//! | part | what | whose |
//! |------|------|-------|
//! | [`Header`] | the preamble, then the member table's words (`high`, the cursors, the roster) | this file, `crate::members` |
//! | `capacity` × [`MemberSlot`] | one cache line per member | `crate::members` |
//! | the region | what the backend shares: the emulation's source table, the native backend's hints | the backend (its [`RegionSpec`]) |
//!
//! This file knows no backend: the layer above (`crate::inner`) hands it the region's
//! [`RegionSpec`], and each backend reads its own region through [`SharedState::region`].
//!
//! A named group's memory can be overwritten by any process allowed to write it. So every
//! index read from it is bounded before use: [`SharedState::member`] answers a slot number out
//! of range with a spare slot of this process and marks the state damaged, and every public
//! call of a member begins with [`SharedState::check`], which turns a damaged state, or a
//! preamble that is no longer a group's, into [`Error::CorruptGroup`].

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

use crate::sync::{AtomicU32, AtomicU64};

use crate::error::{Error, Result};

/// "No member" in a member-index field.
pub(crate) const NONE: u32 = u32::MAX;

/// The states of a member slot (read-only here: `crate::members` alone changes them).
#[allow(unused_imports)]
pub(crate) use crate::members::state;
pub(crate) use crate::members::MemberSlot;

/// What a process that opens a named group checks before it trusts the memory (`crate::named`),
/// and what every group's door bells are named after. Written once, before anyone else can
/// see the group (anonymous: before it is shared; named: under the setup lock, with `magic`
/// stored last); plain atomics, read-only afterwards.
#[repr(C)]
#[derive(Default)]
pub(crate) struct Preamble {
    /// [`MAGIC`] once the group is set up (0 before: a creator that died half-way).
    pub magic: std::sync::atomic::AtomicU64,
    /// [`LAYOUT_VERSION`] of the herdless that made the group.
    pub layout_version: std::sync::atomic::AtomicU32,
    /// How many member slots follow the header.
    pub capacity: std::sync::atomic::AtomicU32,
    /// The size of the whole shared state in bytes (header, member slots, region).
    pub size: std::sync::atomic::AtomicU64,
    /// The backend every member uses: 1 native, 2 emulated.
    pub backend: std::sync::atomic::AtomicU32,
    /// The rotation: `n` for `Every(n)` (n < u32::MAX), u32::MAX for `Adaptive`.
    pub rotation: std::sync::atomic::AtomicU32,
    /// A random number drawn when the group was set up: the door bells' addresses are made of
    /// it, so two groups (or a named group and the one re-made under its name) never ring each
    /// other's members.
    pub incarnation: std::sync::atomic::AtomicU64,
    /// How many exclusive descriptors the group can watch at once (the emulation's source
    /// table; 0 for the native backend, whose kernel keeps no such table).
    pub sources: std::sync::atomic::AtomicU32,
}

/// The first word of a set-up group: "herdless" in ASCII.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"herdless");
/// The first word of a named group removed from its name (`crate::named::remove`): its members
/// get `Error::GroupRemoved`, and an opener that opened the name just before the removal opens
/// the name again.
pub(crate) const REMOVED_MAGIC: u64 = u64::from_le_bytes(*b"herdgone");
/// The shared layout's version: changed whenever the layout of [`Header`], [`MemberSlot`] or a
/// backend's region changes, so that a named group made by another version of herdless is
/// refused, not misread.
pub(crate) const LAYOUT_VERSION: u32 = 7;

/// The fixed part of the shared state: the preamble and the member table's own words. Aligned
/// to 128 bytes (two cache lines, the unit of the x86 prefetcher), so that the member slots
/// after it each start a line of their own and the words here, read by every `wait`, share
/// their line with nothing a member writes often.
#[repr(C, align(128))]
pub(crate) struct Header {
    /// What the group is (checked by a process that opens it by name).
    pub preamble: Preamble,
    /// One more than the highest slot ever claimed: members live in `0..high`.
    pub high: AtomicU32,
    /// The process of the first member to join (0 before).
    pub first_pid: AtomicU32,
    /// Non-zero once members of more than one process have joined: only then can one die
    /// without the others, and only then do members watch each other's deaths.
    pub spans_processes: AtomicU32,
    /// The lowest slot never claimed (`capacity` once every slot has been): a join takes it
    /// without looking at the slots below.
    pub fresh: AtomicU32,
    /// A slot given up lately (its member left, or was reaped): where a join looks first once
    /// no slot is fresh. A hint: a join that finds it taken looks at every slot.
    pub reuse_hint: AtomicU32,
    /// Changes whenever a member joins, leaves or is reaped: a member that watches another's
    /// death looks for its neighbour again only when it changed (`crate::ring`).
    pub roster: AtomicU64,
    /// A named group's lock objects made so far: bit k − 1 for lock object k
    /// (`crate::named::open_lock_object`, under the setup lock).
    pub lock_objects: AtomicU64,
}

/// What a backend keeps in the group's shared memory after the member slots: its size, and
/// how a new group's region is set up. Handed to the shared state by the layer above the
/// backends (`crate::inner::region_for`), so that this file names no backend.
#[derive(Clone, Copy)]
pub(crate) struct RegionSpec {
    /// The region's size in bytes.
    pub len: usize,
    /// Writes what a new group's region holds besides zeroes, before the group is published.
    pub set_up: fn(&SharedState),
    /// Under the model checker, whose atomics are not plain memory: makes the region's values.
    #[cfg(loom)]
    pub make: fn(&Settings) -> Box<dyn std::any::Any + Send + Sync>,
}

/// The shared state of one group: the header, `capacity` member slots and the backend's region.
pub(crate) struct SharedState {
    memory: Memory,
    settings: Settings,
    /// The backend region's length in bytes (under the model checker the region is values,
    /// not bytes, and its length is not read).
    #[cfg_attr(loom, allow(dead_code))]
    region_len: usize,
    /// What a slot number read from the shared memory that is out of range gets instead
    /// (this process's own, never shared), so that a damaged group gives errors, not panics.
    spare: Box<MemberSlot>,
    /// Set once this process has met a value in the shared memory that no group holds.
    damaged: AtomicBool,
}

/// The memory behind the shared state: a shared mapping (Unix: anonymous, or a named group's
/// object), zeroed heap memory (elsewhere), or, under the model checker, ordinary values of its
/// atomics. Unmapped (or freed) on drop, when the last handle goes.
#[cfg(not(loom))]
struct Memory {
    /// The first byte (page-aligned where mapped, 128-aligned on the heap).
    ptr: *mut u8,
    size: usize,
    /// The mapping `ptr` points into, which owns it.
    #[cfg(unix)]
    _mapping: crate::sys::unix::Mapping,
    /// The heap memory `ptr` points into, which owns it.
    #[cfg(not(unix))]
    _heap: Vec<Line>,
}

/// 128 bytes of heap memory, 128-aligned, as zeroed atomics (any bytes are a valid value of
/// every atomic the shared state lays over them).
#[cfg(all(not(unix), not(loom)))]
#[repr(C, align(128))]
struct Line(#[allow(dead_code)] [std::sync::atomic::AtomicU64; 16]);
#[cfg(loom)]
struct Memory {
    header: Box<Header>,
    members: Vec<MemberSlot>,
    region: Box<dyn std::any::Any + Send + Sync>,
}

// SAFETY: the memory is only ever accessed through atomics, from any thread.
unsafe impl Send for SharedState {}
// SAFETY: as above; no `&mut` to the memory is ever handed out.
unsafe impl Sync for SharedState {}

// The layout `Memory::members` and `SharedState::region` rely on: a member slot is one cache
// line, and the header's size keeps the slots after it on line boundaries.
#[cfg(not(loom))]
const _: () = {
    assert!(std::mem::size_of::<MemberSlot>() == 64);
    assert!(std::mem::align_of::<MemberSlot>() == 64);
    assert!(std::mem::size_of::<Header>() % 128 == 0);
};

/// Where the region starts: after the member slots, on a 128-byte boundary.
#[cfg(not(loom))]
fn region_offset(capacity: usize) -> usize {
    let end = std::mem::size_of::<Header>() + capacity * std::mem::size_of::<MemberSlot>();
    end.div_ceil(128) * 128
}

/// How many bytes the shared state of a group of `capacity` members takes with a backend
/// region of `region_len` bytes (what a named group's object must measure).
#[cfg(not(loom))]
pub(crate) fn size_for(capacity: usize, region_len: usize) -> usize {
    region_offset(capacity) + region_len.div_ceil(128) * 128
}

#[cfg(not(loom))]
impl Memory {
    /// Maps `size` zeroed bytes of shared memory (all-zero atomics are valid); anonymous and
    /// shared on Unix, so that children forked later share it.
    #[cfg(unix)]
    fn new(size: usize) -> Result<Memory> {
        crate::sys::unix::Mapping::anonymous(size)
            .map(Memory::of)
            .map_err(|e| Error::io("mapping the group's shared memory", e))
    }

    /// The memory of `mapping`, whole.
    #[cfg(unix)]
    fn of(mapping: crate::sys::unix::Mapping) -> Memory {
        Memory {
            ptr: mapping.as_ptr(),
            size: mapping.len(),
            _mapping: mapping,
        }
    }

    /// `size` zeroed bytes of heap memory (members are threads of one process here).
    #[cfg(not(unix))]
    fn new(size: usize) -> Result<Memory> {
        let lines = size.div_ceil(128);
        let mut heap = Vec::new();
        heap.try_reserve_exact(lines).map_err(|_| {
            Error::io(
                "allocating the group's shared state",
                std::io::ErrorKind::OutOfMemory.into(),
            )
        })?;
        heap.resize_with(lines, || Line(Default::default()));
        Ok(Memory {
            ptr: heap.as_mut_ptr().cast::<u8>(),
            size,
            _heap: heap,
        })
    }

    fn header(&self) -> &Header {
        // SAFETY: the memory starts with a Header, is aligned to 128 and lives as long as self.
        unsafe { &*self.ptr.cast::<Header>() }
    }

    fn members(&self, capacity: usize) -> &[MemberSlot] {
        // SAFETY: `capacity` slots follow the header; MemberSlot's alignment (64) divides the
        // header's size, a multiple of 128 (both checked at compile time above); they live as
        // long as self.
        unsafe {
            std::slice::from_raw_parts(
                self.ptr
                    .add(std::mem::size_of::<Header>())
                    .cast::<MemberSlot>(),
                capacity,
            )
        }
    }
}

/// Reads the header of `mapping` (a named group's object, at least a header long) with `f`;
/// gives the mapping back.
#[cfg(all(unix, not(loom)))]
pub(crate) fn read_header<R>(
    mapping: crate::sys::unix::Mapping,
    f: impl FnOnce(&Header) -> R,
) -> (crate::sys::unix::Mapping, R) {
    assert!(
        mapping.len() >= std::mem::size_of::<Header>(),
        "a mapping shorter than a header"
    );
    let memory = Memory::of(mapping);
    let read = f(memory.header());
    (memory._mapping, read)
}

/// What the preamble says of a group: its backend, rotation, member count and (emulated) how
/// many exclusive descriptors it watches at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    pub backend: crate::contract::Backend,
    pub rotation: crate::contract::Rotation,
    pub capacity: usize,
    /// The source table's size (emulated; 0 for the native backend).
    pub sources: usize,
}

impl Settings {
    fn backend_code(&self) -> u32 {
        match self.backend {
            crate::contract::Backend::Native => 1,
            _ => 2,
        }
    }
    fn rotation_code(&self) -> u32 {
        match self.rotation {
            crate::contract::Rotation::Every(n) => n.min(u32::MAX - 1),
            crate::contract::Rotation::Adaptive => u32::MAX,
        }
    }
    /// Decodes a preamble's settings; `Err` names the field that holds no valid value.
    #[cfg_attr(any(not(unix), loom), allow(dead_code))] // named groups only
    pub(crate) fn decode(
        backend: u32,
        rotation: u32,
        capacity: u32,
        sources: u32,
    ) -> std::result::Result<Settings, &'static str> {
        use crate::contract::{Backend, Rotation, MAX_EXCLUSIVE_LIMIT, MAX_MEMBERS_LIMIT};
        let backend = match backend {
            1 => Backend::Native,
            2 => Backend::Emulated,
            _ => return Err("backend"),
        };
        let rotation = match rotation {
            u32::MAX => Rotation::Adaptive,
            n => Rotation::Every(n),
        };
        if capacity == 0 || capacity as usize > MAX_MEMBERS_LIMIT {
            return Err("member count");
        }
        let sources_ok = match backend {
            Backend::Native => sources == 0,
            _ => sources > 0 && sources as usize <= MAX_EXCLUSIVE_LIMIT,
        };
        if !sources_ok {
            return Err("source table's size");
        }
        Ok(Settings {
            backend,
            rotation,
            capacity: capacity as usize,
            sources: sources as usize,
        })
    }
}

impl SharedState {
    /// Shared state for a new anonymous group, every slot free, its region set up.
    pub(crate) fn new(settings: Settings, region: RegionSpec) -> Result<SharedState> {
        #[cfg(not(loom))]
        let memory = Memory::new(size_for(settings.capacity, region.len))?;
        #[cfg(loom)]
        let memory = Memory {
            header: Box::new(Header::zeroed()),
            members: (0..settings.capacity)
                .map(|_| MemberSlot::zeroed())
                .collect(),
            region: (region.make)(&settings),
        };
        let shared = SharedState::with_memory(memory, settings, region.len);
        shared.set_up(region);
        Ok(shared)
    }

    fn with_memory(memory: Memory, settings: Settings, region_len: usize) -> SharedState {
        SharedState {
            memory,
            settings,
            region_len,
            spare: Box::new(MemberSlot::zeroed()),
            damaged: AtomicBool::new(false),
        }
    }

    /// The shared state of a named group in a segment mapped by `crate::named`; set up first
    /// if `fresh` (a segment of zeroes that its creator maps first).
    ///
    /// `mapping` must measure exactly `size_for(settings.capacity, region.len)` bytes (the
    /// caller checked the object's size); it is handed over to the shared state.
    #[cfg(all(unix, not(loom)))]
    pub(crate) fn from_mapping(
        mapping: crate::sys::unix::Mapping,
        settings: Settings,
        region: RegionSpec,
        fresh: bool,
    ) -> SharedState {
        assert_eq!(
            mapping.len(),
            size_for(settings.capacity, region.len),
            "a named group's mapping of another size than its settings'"
        );
        let memory = Memory::of(mapping);
        let shared = SharedState::with_memory(memory, settings, region.len);
        if fresh {
            shared.set_up(region);
        }
        shared
    }

    /// Writes what a set-up group holds besides zeroes: the member table's cursors, the
    /// backend's region, then the preamble, its magic word last (a named group's openers trust
    /// the memory only once they see it).
    fn set_up(&self, region: RegionSpec) {
        let settings = self.settings;
        let header = self.header();
        header.reuse_hint.store(NONE, SeqCst);
        (region.set_up)(self);
        let p = &header.preamble;
        p.layout_version.store(LAYOUT_VERSION, SeqCst);
        p.capacity.store(settings.capacity as u32, SeqCst);
        #[cfg(not(loom))]
        p.size.store(self.memory.size as u64, SeqCst);
        p.backend.store(settings.backend_code(), SeqCst);
        p.rotation.store(settings.rotation_code(), SeqCst);
        p.sources.store(settings.sources as u32, SeqCst);
        p.incarnation.store(random_u64(), SeqCst);
        p.magic.store(MAGIC, SeqCst);
    }

    /// The group's settings, as its preamble held them when this process opened it.
    pub(crate) fn settings(&self) -> Settings {
        self.settings
    }

    /// The random number the group's door bells are named after (see [`Preamble`]).
    pub(crate) fn incarnation(&self) -> u64 {
        self.header().preamble.incarnation.load(SeqCst)
    }

    pub(crate) fn header(&self) -> &Header {
        #[cfg(not(loom))]
        return self.memory.header();
        #[cfg(loom)]
        return &self.memory.header;
    }

    /// The slot of member `index`. An index out of range (read from a damaged group's memory)
    /// gets this process's spare slot instead, and marks the state damaged (see [`check`]).
    ///
    /// [`check`]: SharedState::check
    pub(crate) fn member(&self, index: u32) -> &MemberSlot {
        #[cfg(not(loom))]
        let slots = self.memory.members(self.settings.capacity);
        #[cfg(loom)]
        let slots = &self.memory.members[..];
        match slots.get(index as usize) {
            Some(slot) => slot,
            None => {
                self.mark_damaged();
                &self.spare
            }
        }
    }

    /// How many member slots the group has.
    pub(crate) fn capacity(&self) -> u32 {
        self.settings.capacity as u32
    }

    /// One more than the highest member slot ever claimed (never more than the capacity, even
    /// in a named group's memory that another process wrote garbage to).
    pub(crate) fn high(&self) -> u32 {
        self.header().high.load(SeqCst).min(self.capacity())
    }

    /// Have members of more than one process joined?
    pub(crate) fn spans_processes(&self) -> bool {
        self.header().spans_processes.load(SeqCst) != 0
    }

    /// The backend's region: its start (128-aligned) and length, as set up by its
    /// [`RegionSpec`]. The backend alone reads it, through atomics.
    #[cfg(not(loom))]
    pub(crate) fn region(&self) -> (*const u8, usize) {
        // `region_offset(capacity)` is within the memory of `size_for(capacity, region_len)`
        // bytes, and the region's `region_len` bytes follow it: the pointer is in bounds (the
        // backend that reads through it says why, `wrapping_add` asks nothing).
        let start = self
            .memory
            .ptr
            .wrapping_add(region_offset(self.settings.capacity));
        (start.cast_const(), self.region_len)
    }

    /// The backend's region, under the model checker: the values its `RegionSpec::make` made.
    #[cfg(loom)]
    pub(crate) fn region(&self) -> &(dyn std::any::Any + Send + Sync) {
        &*self.memory.region
    }

    /// Notes that this process met a value in the shared memory that no group holds (a slot
    /// out of range, a word no transition writes): every call of a member says so from now on.
    pub(crate) fn mark_damaged(&self) {
        self.damaged.store(true, Relaxed);
    }

    /// Is the group still one a member can use? `Err(GroupRemoved)` once a named group was
    /// removed from its name by force (`Group::remove_forced`); `Err(CorruptGroup)` once its
    /// preamble no longer holds the magic word (zeroed, or overwritten) or this process met a
    /// value no group holds: what every public call of a member checks first (two loads).
    pub(crate) fn check(&self, name: Option<&str>) -> Result<()> {
        let magic = self.header().preamble.magic.load(Relaxed);
        if magic == REMOVED_MAGIC {
            if let Some(name) = name {
                return Err(Error::GroupRemoved {
                    name: name.to_owned(),
                });
            }
        }
        let reason = if magic != MAGIC {
            "its shared memory was overwritten: the magic word at its start is gone"
        } else if self.damaged.load(Relaxed) {
            "its shared memory holds values no group writes (overwritten by another process)"
        } else {
            return Ok(());
        };
        Err(Error::CorruptGroup {
            name: name.unwrap_or("(anonymous)").to_owned(),
            reason: reason.into(),
        })
    }
}

#[cfg(loom)]
impl Header {
    fn zeroed() -> Header {
        let zero32 = || AtomicU32::new(0);
        Header {
            preamble: Preamble::default(),
            high: zero32(),
            first_pid: zero32(),
            spans_processes: zero32(),
            fresh: zero32(),
            reuse_hint: zero32(),
            roster: AtomicU64::new(0),
            lock_objects: AtomicU64::new(0),
        }
    }
}

/// A random number, without a dependency: the standard library's hasher keys are drawn from
/// the operating system's random source once per process, and the time and a counter make
/// each draw differ.
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static DRAWS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(DRAWS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish()
}
