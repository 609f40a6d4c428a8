//! The group's shared state: member slots with their statistics, and the token of the emulation.
//!
//! It lives in one anonymous shared mapping made when the group is built, so that threads and
//! processes forked afterwards all see the same memory (on systems without `fork`, a plain heap
//! allocation). Everything in it is an atomic and nothing in it is guarded by a lock: a member
//! killed at any instant must not leave the others stuck behind a lock it held. The member
//! slots ([`MemberSlot`]) belong to the member table (`crate::members`), which alone changes a
//! slot's state, by compare-and-swap on one word per slot; its statistics are counters any
//! member adds to. The sources' fields are the emulation's token protocol's, private to
//! `emulated/protocol/source.rs`, which documents each word (its bits, transitions, invariants
//! and orderings) and is the only code that reads or writes them.

use std::sync::atomic::Ordering::SeqCst;

use crate::sync::{AtomicU32, AtomicU64};

use crate::error::{Error, Result};

/// "No member" in a member-index field.
pub(crate) const NONE: u32 = u32::MAX;
/// How many distinct exclusive descriptors a group can share under the emulation (a handful
/// under the model checker, which explores every interleaving of every access).
#[cfg(not(loom))]
pub(crate) const MAX_SOURCES: usize = 64;
#[cfg(loom)]
pub(crate) const MAX_SOURCES: usize = 2;

/// The states of a member slot (read-only here: `crate::members` alone changes them).
#[allow(unused_imports)]
pub(crate) use crate::members::state;
pub(crate) use crate::members::MemberSlot;

/// Words in a source's member bitmap (one bit per possible member).
#[cfg(not(loom))]
pub(crate) const MEMBER_WORDS: usize = crate::contract::MAX_MEMBERS_LIMIT / 64;
#[cfg(loom)]
pub(crate) const MEMBER_WORDS: usize = 1;

/// One exclusive descriptor shared by the group (emulation only): laid out here, in the
/// header; its words are private to the token protocol (`emulated/protocol/source.rs`), which
/// documents them and is the only code that reads or writes them.
pub(crate) use crate::emulated::SourceSlot;

/// What a process that opens a named group checks before it trusts the memory (`crate::named`),
/// and what every group's door bells are named after. Written once, before anyone else can
/// see the group (anonymous: before it is shared; named: under the setup lock, with `ready`
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
    /// The size of the whole shared state in bytes (header and member slots).
    pub size: std::sync::atomic::AtomicU64,
    /// The backend every member uses: 1 native, 2 emulated.
    pub backend: std::sync::atomic::AtomicU32,
    /// The rotation: `n` for `Every(n)` (n < u32::MAX), u32::MAX for `Adaptive`.
    pub rotation: std::sync::atomic::AtomicU32,
    /// A random number drawn when the group was set up: the door bells' addresses are made of
    /// it, so two groups (or a named group and the one re-made under its name) never ring each
    /// other's members.
    pub incarnation: std::sync::atomic::AtomicU64,
}

/// The first word of a set-up group: "herdless" in ASCII.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"herdless");
/// The first word of a named group removed from its name (`crate::named::remove`): its members
/// get `Error::GroupRemoved`, and an opener that opened the name just before the removal opens
/// the name again.
#[cfg_attr(any(not(unix), loom), allow(dead_code))] // named groups only
pub(crate) const REMOVED_MAGIC: u64 = u64::from_le_bytes(*b"herdgone");
/// The shared layout's version: changed whenever the layout of [`Header`] or [`MemberSlot`]
/// changes, so that a named group made by another version of herdless is refused, not misread.
/// (2: the source's holder, leader and watcher became tagged 64-bit words, and its claim
/// count moved into the holder word.)
pub(crate) const LAYOUT_VERSION: u32 = 2;

/// The fixed part of the shared state. Aligned to a cache line, so that its size is a multiple of
/// 64 and the member slots after it each start a line of their own.
#[repr(C, align(64))]
pub(crate) struct Header {
    /// What the group is (checked by a process that opens it by name).
    pub preamble: Preamble,
    /// One more than the highest slot ever claimed: members live in `0..high`.
    pub high: AtomicU32,
    /// The process of the first member to join (0 before).
    pub first_pid: AtomicU32,
    /// Non-zero once members of more than one process have joined: only then can one die
    /// without the others, and only then do idle members check on each other.
    pub spans_processes: AtomicU32,
    /// How many members of a native group are inside their kernel wait right now: a hint for
    /// rotation (with nobody else waiting there is nobody to hand a turn to, so no rotation).
    /// A member that dies inside its wait leaves one too many, which only means a rotation
    /// more; the emulation keeps IDLE and BUSY in the member table instead.
    pub native_waiting: AtomicU32,
    /// Where the native hand-on looks for an idle member to ring next (a slot number): each
    /// ring starts here and leaves it just past the member rung, so the group's hand-ons go
    /// round the slots in turn, whoever rings (`platform/linux/hand_on.rs`).
    pub native_ring_cursor: AtomicU32,
    /// How many exclusive events the native members of the group were handed in all: a member
    /// notes the count when it is handed one, and if the count moved by the time it consumed
    /// it, another event came while it held its own (see `native_overlap`).
    pub native_handed: AtomicU64,
    /// `native_handed` when a native member's event last overlapped another (0: never): a hint
    /// for `Rotation::Adaptive`, which lets a member take a batch while events overlap (a
    /// stream: the producer does not wait for the readers).
    pub native_overlap_at: AtomicU64,
    /// When a native member was last handed an exclusive event (monotonic ns), and the moving
    /// average of the gaps between such events (1/8 weight): with `native_overlap`, the hint
    /// `Rotation::Adaptive` reads a stream from.
    pub native_last_event_ns: AtomicU64,
    /// See `native_last_event_ns`.
    pub native_gap_ns: AtomicU64,
    /// Shared exclusive descriptors.
    pub sources: [SourceSlot; MAX_SOURCES],
}

/// The shared state of one group: a header followed by `capacity` member slots.
pub(crate) struct SharedState {
    memory: Memory,
    capacity: usize,
}

/// The memory behind the shared state: an anonymous shared mapping (Unix), zeroed heap memory
/// (elsewhere), or, under the model checker, ordinary values of its atomics.
#[cfg(not(loom))]
struct Memory {
    ptr: *mut u8,
}
#[cfg(loom)]
struct Memory {
    header: Box<Header>,
    members: Vec<MemberSlot>,
}

// SAFETY: the memory is only ever accessed through atomics, from any thread.
unsafe impl Send for SharedState {}
// SAFETY: as above; no `&mut` to the memory is ever handed out.
unsafe impl Sync for SharedState {}

// The layout `Memory::members` relies on: a member slot is one cache line, and the header's
// size keeps the slots after it on line boundaries.
#[cfg(not(loom))]
const _: () = {
    assert!(std::mem::size_of::<MemberSlot>() == 64);
    assert!(std::mem::align_of::<MemberSlot>() == 64);
    assert!(std::mem::size_of::<Header>() % 64 == 0);
};

#[cfg(not(loom))]
fn layout(capacity: usize) -> std::alloc::Layout {
    let size = std::mem::size_of::<Header>() + capacity * std::mem::size_of::<MemberSlot>();
    std::alloc::Layout::from_size_align(size, 64).expect("shared state layout")
}

#[cfg(not(loom))]
impl Memory {
    /// Maps zeroed shared memory for `capacity` members (all-zero atomics are valid).
    fn new(capacity: usize) -> Result<Memory> {
        let layout = layout(capacity);
        #[cfg(unix)]
        // SAFETY: a fresh anonymous mapping; no existing memory is touched. MAP_SHARED keeps it
        // shared with children forked later.
        let ptr = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                layout.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANON,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return Err(Error::io(
                    "mapping the group's shared memory",
                    std::io::Error::last_os_error(),
                ));
            }
            p.cast::<u8>()
        };
        #[cfg(not(unix))]
        // SAFETY: the layout has a non-zero size (the header is never empty).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        #[cfg(not(unix))]
        if ptr.is_null() {
            return Err(Error::io(
                "allocating the group's shared state",
                std::io::ErrorKind::OutOfMemory.into(),
            ));
        }
        Ok(Memory { ptr })
    }

    /// Takes over a shared mapping of `layout(capacity).size()` bytes made elsewhere (a named
    /// group's segment, `crate::named`), unmapped on drop like an anonymous one.
    ///
    /// # Safety
    ///
    /// `ptr` is a live, writable, 64-aligned mapping of exactly `layout(capacity).size()`
    /// bytes that nothing else unmaps.
    #[cfg(unix)]
    unsafe fn from_mapping(ptr: *mut u8) -> Memory {
        Memory { ptr }
    }

    fn header(&self) -> &Header {
        // SAFETY: the memory starts with a Header, is aligned to 64 and lives as long as self.
        unsafe { &*self.ptr.cast::<Header>() }
    }

    fn members(&self, capacity: usize) -> &[MemberSlot] {
        // SAFETY: `capacity` slots follow the header; MemberSlot's alignment (64) divides the
        // header's size, a multiple of 64 (both checked at compile time below); they live as
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

    fn free(&mut self, capacity: usize) {
        let layout = layout(capacity);
        #[cfg(unix)]
        // SAFETY: ptr/len are those of our own mapping, unmapped once, when the last handle goes.
        unsafe {
            libc::munmap(self.ptr.cast(), layout.size());
        }
        #[cfg(not(unix))]
        // SAFETY: allocated in `new` with the same layout.
        unsafe {
            std::alloc::dealloc(self.ptr, layout);
        }
    }
}

#[cfg(loom)]
impl Memory {
    fn new(capacity: usize) -> Result<Memory> {
        let zero32 = || AtomicU32::new(0);
        let zero64 = || AtomicU64::new(0);
        let header = Header {
            preamble: Preamble::default(),
            high: zero32(),
            first_pid: zero32(),
            spans_processes: zero32(),
            native_waiting: zero32(),
            native_ring_cursor: zero32(),
            native_handed: zero64(),
            native_overlap_at: zero64(),
            native_last_event_ns: zero64(),
            native_gap_ns: zero64(),
            sources: std::array::from_fn(|_| SourceSlot::new()),
        };
        let members = (0..capacity).map(|_| MemberSlot::zeroed()).collect();
        Ok(Memory {
            header: Box::new(header),
            members,
        })
    }
    fn header(&self) -> &Header {
        &self.header
    }
    fn members(&self, _capacity: usize) -> &[MemberSlot] {
        &self.members
    }
    fn free(&mut self, _capacity: usize) {}
}

/// How many bytes the shared state of a group of `capacity` members takes (what a named
/// group's segment must measure).
#[cfg(not(loom))]
pub(crate) fn size_for(capacity: usize) -> usize {
    layout(capacity).size()
}

/// What the preamble says of a group: its backend, rotation and member count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    pub backend: crate::contract::Backend,
    pub rotation: crate::contract::Rotation,
    pub capacity: usize,
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
    pub(crate) fn decode(
        backend: u32,
        rotation: u32,
        capacity: u32,
    ) -> std::result::Result<Settings, &'static str> {
        use crate::contract::{Backend, Rotation, MAX_MEMBERS_LIMIT};
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
        Ok(Settings {
            backend,
            rotation,
            capacity: capacity as usize,
        })
    }
}

impl SharedState {
    /// Shared state for a new anonymous group, every slot free, no source in use.
    pub(crate) fn new(settings: Settings) -> Result<SharedState> {
        let shared = SharedState {
            memory: Memory::new(settings.capacity)?,
            capacity: settings.capacity,
        };
        shared.set_up(settings);
        Ok(shared)
    }

    /// An emulated group's shared state of `capacity` members (for the unit tests and models).
    #[cfg(test)]
    pub(crate) fn for_tests(capacity: usize) -> Result<SharedState> {
        SharedState::new(Settings {
            backend: crate::contract::Backend::Emulated,
            rotation: crate::contract::Rotation::Adaptive,
            capacity,
        })
    }

    /// The shared state of a named group in a segment mapped by `crate::named`; set up first
    /// if `fresh` (a segment of zeroes that its creator maps first).
    ///
    /// # Safety
    ///
    /// As [`Memory::from_mapping`]: `ptr` is a live, writable, 64-aligned shared mapping of
    /// exactly `size_for(settings.capacity)` bytes, handed over to the shared state.
    #[cfg(all(unix, not(loom)))]
    pub(crate) unsafe fn from_mapping(
        ptr: *mut u8,
        settings: Settings,
        fresh: bool,
    ) -> SharedState {
        let shared = SharedState {
            // SAFETY: the caller's promise, passed on.
            memory: unsafe { Memory::from_mapping(ptr) },
            capacity: settings.capacity,
        };
        if fresh {
            shared.set_up(settings);
        }
        shared
    }

    /// Writes what a set-up group holds besides zeroes: "no member" in the sources' member
    /// fields, then the preamble, its magic word last (a named group's openers trust the
    /// memory only once they see it).
    fn set_up(&self, settings: Settings) {
        for s in &self.header().sources {
            s.set_up();
        }
        let p = &self.header().preamble;
        p.layout_version.store(LAYOUT_VERSION, SeqCst);
        p.capacity.store(settings.capacity as u32, SeqCst);
        #[cfg(not(loom))]
        p.size.store(size_for(settings.capacity) as u64, SeqCst);
        p.backend.store(settings.backend_code(), SeqCst);
        p.rotation.store(settings.rotation_code(), SeqCst);
        p.incarnation.store(random_u64(), SeqCst);
        p.magic.store(MAGIC, SeqCst);
    }

    /// The settings the preamble holds (checked when a named group was opened).
    pub(crate) fn settings(&self) -> Settings {
        let p = &self.header().preamble;
        Settings::decode(
            p.backend.load(SeqCst),
            p.rotation.load(SeqCst),
            self.capacity(),
        )
        .expect("a group's preamble is checked before the group is used")
    }

    /// The random number the group's door bells are named after (see [`Preamble`]).
    pub(crate) fn incarnation(&self) -> u64 {
        self.header().preamble.incarnation.load(SeqCst)
    }

    pub(crate) fn header(&self) -> &Header {
        self.memory.header()
    }

    /// The slot of member `index` (< capacity).
    pub(crate) fn member(&self, index: u32) -> &MemberSlot {
        &self.memory.members(self.capacity)[index as usize]
    }

    /// How many member slots the group has.
    pub(crate) fn capacity(&self) -> u32 {
        self.capacity as u32
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

    /// Does member `m` hold the token of any source?
    pub(crate) fn leads_any(&self, m: u32) -> bool {
        self.header()
            .sources
            .iter()
            .any(|s| s.is_used() && s.leader().slot == m)
    }

    pub(crate) fn source(&self, index: usize) -> &SourceSlot {
        &self.header().sources[index]
    }

    /// Would the open file `id` (non-zero) find a source slot: its own, or a free one? A look
    /// that takes none (a `modify` checks its new registration with it before it touches the
    /// old one: the slots are never given back, so a check that took one and then failed
    /// would spend it). Another member may take the last free slot meanwhile: the add then
    /// fails as the look would have.
    pub(crate) fn source_room(&self, id: u64) -> Result<()> {
        let sources = &self.header().sources;
        match sources.iter().any(|s| s.is_for(id) || !s.is_used()) {
            true => Ok(()),
            false => Err(Error::TooManySources { max: MAX_SOURCES }),
        }
    }

    /// Finds or takes the source slot of the open file `id` (non-zero). Lock-free: two members
    /// adding the same file at once land on the same slot.
    pub(crate) fn source_index(&self, id: u64) -> Result<usize> {
        debug_assert_ne!(id, 0);
        let sources = &self.header().sources;
        let start = (id % MAX_SOURCES as u64) as usize;
        for probe in 0..MAX_SOURCES {
            let i = (start + probe) % MAX_SOURCES;
            if sources[i].take_for(id) {
                return Ok(i);
            }
        }
        Err(Error::TooManySources { max: MAX_SOURCES })
    }
}

/// A random number, without a dependency: the standard library's hasher keys are drawn from
/// the operating system's random source once per process, and the time and a counter make
/// each draw differ.
fn random_u64() -> u64 {
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

impl Drop for SharedState {
    fn drop(&mut self) {
        self.memory.free(self.capacity);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The look a `modify` makes takes no source slot: the slots are never given back, so a
    /// check that took one would spend it. It finds room while a slot is free or the file's
    /// own is there, and none once every slot holds another file.
    #[test]
    fn a_look_for_room_takes_no_source_slot() {
        let shared = SharedState::for_tests(2).unwrap();
        let used = |shared: &SharedState| {
            (0..MAX_SOURCES)
                .filter(|&s| shared.source(s).is_used())
                .count()
        };
        for id in 1..=10 * MAX_SOURCES as u64 {
            shared.source_room(id).unwrap();
        }
        assert_eq!(used(&shared), 0, "a look took a slot");
        for id in 1..=MAX_SOURCES as u64 {
            shared.source_index(id).unwrap();
        }
        assert!(shared.source_room(1).is_ok(), "the file's own slot is room");
        let full = shared.source_room(MAX_SOURCES as u64 + 1);
        assert!(
            matches!(full, Err(Error::TooManySources { .. })),
            "{full:?}"
        );
        assert_eq!(used(&shared), MAX_SOURCES);
    }
}
