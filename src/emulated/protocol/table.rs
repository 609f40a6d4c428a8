//! The emulation's source table: the region of an emulated group's shared memory that holds, for
//! each exclusive descriptor its members have registered, one [`SourceSlot`] and one bitmap of
//! the members that registered it; and how a member finds or takes the slot of a descriptor.
//!
//! Layout ([`TableLayout`]): a head of 128 bytes (the table's lock), `count` slots of 128 bytes
//! each, then `count` bitmaps of `words` 64-bit words (one bit per member slot). `count` is the
//! group's `max_exclusive_descriptors`; `words` follows from its `max_members`.
//!
//! A slot is *in use* while some member has its bit set: the first member to register a file
//! exclusive takes a slot for it, and once the last one has deleted it (or left, or was reaped)
//! the slot is free again for any file. So a group whose services come and go for months keeps
//! reusing its slots, and `TooManySources` means that more than `count` distinct descriptors are
//! registered at once. Finding or taking a slot and setting the member's bit go under one lock,
//! a word of the table's head naming its holder (a member slot and generation): two members
//! registering one file at once must land on one slot, and a slot must not be taken for another
//! file while a member registers it. The lock is held for a look at the table and a few stores,
//! never across a system call or a wait; a holder that dies leaves it to its reaper
//! (`Protocol::clear_out` gives it back), and a member that finds it held by a dead member reaps
//! that member first. Clearing a bit needs no lock: a member clears its bit last, after it has
//! released its hold and passed its token on, so a slot whose bitmap is empty is touched by
//! nobody and is reset by the member that takes it next.

use std::time::Duration;

use super::source::{Occupant, Source, SourceSlot};
use super::Protocol;
use crate::error::{Error, Result};
use crate::shared::{RegionSpec, Settings, SharedState};
use crate::sync::{AtomicU64, Patience};
use std::sync::atomic::Ordering::SeqCst;

/// How long a member waits for the table's lock held by a live member (stopped, say) before it
/// gives up with an error.
const LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// The table's head: its lock.
#[repr(C, align(128))]
struct TableHead {
    /// The occupant word of the member that holds the lock, or `Occupant::NONE`'s.
    lock: AtomicU64,
}

/// The shape of a group's source table: how many slots, and how many words a bitmap has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TableLayout {
    count: usize,
    words: usize,
}

impl TableLayout {
    /// The table of an emulated group with these settings.
    pub(crate) fn of(settings: &Settings) -> TableLayout {
        TableLayout {
            count: settings.sources.max(1),
            words: settings.capacity.div_ceil(64),
        }
    }

    /// Its size in bytes.
    fn len(self) -> usize {
        std::mem::size_of::<TableHead>()
            + self.count * std::mem::size_of::<SourceSlot>()
            + self.count * self.words * std::mem::size_of::<u64>()
    }
}

// The byte offsets `SourceTable::of` computes rely on these sizes.
#[cfg(not(loom))]
const _: () = {
    assert!(std::mem::size_of::<TableHead>() == 128);
    assert!(std::mem::size_of::<SourceSlot>() == 128);
};

/// What an emulated group keeps in the shared memory after its member slots.
pub(crate) fn region(settings: &Settings) -> RegionSpec {
    RegionSpec {
        len: TableLayout::of(settings).len(),
        set_up,
        #[cfg(loom)]
        make: |settings| Box::new(LoomTable::new(TableLayout::of(settings))),
    }
}

/// A new table: nobody holds its lock, no slot is in use.
fn set_up(shared: &SharedState) {
    let table = SourceTable::of(shared, TableLayout::of(&shared.settings()));
    table.head.lock.store(Occupant::NONE.word(), SeqCst);
    for s in 0..table.count() {
        table.source(s).reset();
    }
}

/// Does the shared state's region hold a source table of this layout? (What a process checks
/// before it uses a named group's table.)
pub(crate) fn check(shared: &SharedState, layout: TableLayout) -> std::result::Result<(), String> {
    #[cfg(not(loom))]
    {
        let (_, len) = shared.region();
        if len != layout.len() {
            return Err(format!(
                "its source table takes {len} bytes, where {} slots for {} members take {}",
                layout.count,
                layout.words * 64,
                layout.len()
            ));
        }
    }
    #[cfg(loom)]
    let _ = (shared, layout);
    Ok(())
}

/// The table under the model checker: ordinary values of its atomics.
#[cfg(loom)]
struct LoomTable {
    head: TableHead,
    slots: Vec<SourceSlot>,
    bits: Vec<AtomicU64>,
}

#[cfg(loom)]
impl LoomTable {
    fn new(layout: TableLayout) -> LoomTable {
        LoomTable {
            head: TableHead {
                lock: AtomicU64::new(0),
            },
            slots: (0..layout.count).map(|_| SourceSlot::new()).collect(),
            bits: (0..layout.count * layout.words)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }
}

/// A view of one group's source table.
#[derive(Clone, Copy)]
pub(crate) struct SourceTable<'a> {
    head: &'a TableHead,
    slots: &'a [SourceSlot],
    bits: &'a [AtomicU64],
    words: usize,
}

impl<'a> SourceTable<'a> {
    /// The table in `shared`'s region, of the layout `check` accepted (or `set_up` made).
    #[cfg(not(loom))]
    pub(crate) fn of(shared: &'a SharedState, layout: TableLayout) -> SourceTable<'a> {
        let (start, len) = shared.region();
        assert!(len >= layout.len(), "a source table checked at attach");
        let slots_at = std::mem::size_of::<TableHead>();
        let bits_at = slots_at + layout.count * std::mem::size_of::<SourceSlot>();
        // SAFETY: the region is 128-aligned and `layout.len()` bytes long (checked above), all
        // of it atomics (for which any bytes are a value), living as long as `shared`: the
        // head at its start, `count` slots of 128 bytes after it, then the bitmaps' words.
        unsafe {
            SourceTable {
                head: &*start.cast::<TableHead>(),
                slots: std::slice::from_raw_parts(
                    start.add(slots_at).cast::<SourceSlot>(),
                    layout.count,
                ),
                bits: std::slice::from_raw_parts(
                    start.add(bits_at).cast::<AtomicU64>(),
                    layout.count * layout.words,
                ),
                words: layout.words,
            }
        }
    }

    /// The table in `shared`'s region, under the model checker.
    #[cfg(loom)]
    pub(crate) fn of(shared: &'a SharedState, layout: TableLayout) -> SourceTable<'a> {
        let table = shared
            .region()
            .downcast_ref::<LoomTable>()
            .expect("an emulated group's region is its source table");
        SourceTable {
            head: &table.head,
            slots: &table.slots,
            bits: &table.bits,
            words: layout.words,
        }
    }

    /// How many slots the table has: the most distinct exclusive descriptors registered at once.
    pub(crate) fn count(&self) -> usize {
        self.slots.len()
    }

    /// Source `s` (< `count`).
    pub(crate) fn source(&self, s: usize) -> Source<'a> {
        let words = &self.bits[s * self.words..(s + 1) * self.words];
        Source::new(&self.slots[s], words)
    }

    /// Would file `id` (non-zero) find a slot now: its own, or one no member has registered?
    /// A look that takes none (a `modify` checks its new registration with it before it gives
    /// up the old one). Another member may take the last slot meanwhile: the registration then
    /// fails as the look would have.
    pub(crate) fn room(&self, id: u64) -> Result<()> {
        let free = (0..self.count()).any(|s| {
            let src = self.source(s);
            src.is_for(id) || !src.has_members()
        });
        match free {
            true => Ok(()),
            false => Err(Error::TooManySources { max: self.count() }),
        }
    }
}

impl Protocol<'_> {
    /// Registers `me` on the source of file `id` (non-zero): its slot if one has it, else a
    /// slot no member has registered (reset first), with `me`'s bit set, under the table's lock.
    /// Returns the slot.
    ///
    /// # Errors
    ///
    /// [`Error::TooManySources`] when every slot is in use for another file; [`Error::Io`] if
    /// the lock stays held by a live member (stopped mid-registration) for `LOCK_PATIENCE`.
    pub(crate) fn join_source(&self, id: u64, me: Occupant) -> Result<usize> {
        self.with_table_lock(me, || {
            let table = self.sources;
            let own = (0..table.count()).find(|&s| table.source(s).is_for(id));
            let unused = || (0..table.count()).find(|&s| !table.source(s).has_members());
            let s = match own {
                Some(s) => {
                    let src = table.source(s);
                    if !src.has_members() {
                        src.reset(); // nobody's since its last member left: afresh
                    }
                    s
                }
                None => {
                    let s = unused().ok_or(Error::TooManySources { max: table.count() })?;
                    table.source(s).take_for(id);
                    s
                }
            };
            table.source(s).set_member(me.slot, true);
            Ok(s)
        })?
    }

    /// Runs `f` with the source table's lock held by `me`.
    fn with_table_lock<T>(&self, me: Occupant, f: impl FnOnce() -> T) -> Result<T> {
        let lock = &self.sources.head.lock;
        let mut patience = Patience::new(LOCK_PATIENCE, Duration::from_micros(100));
        while let Err(word) =
            lock.compare_exchange(Occupant::NONE.word(), me.word(), SeqCst, SeqCst)
        {
            let owner = Occupant::of(word);
            let my_pid = std::process::id();
            if let Some(seen) = self.members().dead(owner.slot, my_pid) {
                // Its holder died with it: its reap gives it back.
                self.reap(owner.slot, seen);
                continue;
            }
            if self.shared.member(owner.slot).generation() != owner.generation
                || owner.slot >= self.shared.capacity()
            {
                // A holder gone from its slot (reaped by a reaper that did not see the lock),
                // or a word no member wrote: nobody holds it.
                let _ = lock.compare_exchange(word, Occupant::NONE.word(), SeqCst, SeqCst);
                continue;
            }
            if !patience.wait() {
                return Err(Error::io(
                    "registering an exclusive descriptor",
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "member {} (process {}) has held the group's source table for {:?} \
                             (stopped?)",
                            owner.slot,
                            self.shared.member(owner.slot).pid.load(SeqCst),
                            LOCK_PATIENCE
                        ),
                    ),
                ));
            }
        }
        let result = f();
        let _ = lock.compare_exchange(me.word(), Occupant::NONE.word(), SeqCst, SeqCst);
        Ok(result)
    }

    /// The reap's part for the table: a lock the dead occupant held is given back.
    pub(crate) fn release_table_lock_of(&self, dead: Occupant) {
        let _ = self.sources.head.lock.compare_exchange(
            dead.word(),
            Occupant::NONE.word(),
            SeqCst,
            SeqCst,
        );
    }
}

/// Test scenes: the table's lock held by `who`, as a member that died mid-registration leaves it.
#[cfg(all(test, loom))]
impl SourceTable<'_> {
    pub(crate) fn force_lock(&self, who: Occupant) {
        self.head.lock.store(who.word(), SeqCst);
    }
}
