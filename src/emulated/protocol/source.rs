//! A source's shared words, and the only code that reads or writes them.
//!
//! Each exclusive descriptor a group shares under the emulation has one [`SourceSlot`] in the
//! group's shared memory, and a bitmap of the members that registered it, both in the source
//! table (`super::table`, the emulation's region of the shared state). Their fields are
//! private to this module: the protocol (`super`) and everyone else go through a [`Source`],
//! the view of one slot and its bitmap, whose methods below name every transition. The words that decide who watches and who holds (`holder`, `leader`,
//! `watcher`) each carry a *tag* beside the member's slot number, so that a compare-and-swap
//! made against an earlier occupant of the slot, or an earlier hold, fails (no ABA), as the
//! member word does (`crate::members`).
//!
//! # The words
//!
//! | word      | bits 0..32 | bits 32..64 | changed by |
//! |-----------|------------|-------------|------------|
//! | `holder`  | slot of the member handling the last event, or `NONE` | claim count: how many claims of the source were ever won (wrapping) | compare-and-swap only |
//! | `leader`  | slot of the member that watches the source (the token), or `NONE` | that member's generation (0 with `NONE`) | compare-and-swap only |
//! | `watcher` | slot of the member that checks on the leader, or `NONE` | that member's generation | stores (`pass` through `hand_watch`, `take_if_due`, `appoint_watcher`), and one compare-and-swap (`volunteer`) |
//!
//! The other fields are single values: `id` (the open file: taken and given back by the
//! source table, under its lock, `super::table`), `members` (a bitmap of the slots registered
//! on the source, bit n for member n, set by its member under the table's lock and cleared by
//! its member or its reaper), `line_head` (a slot), and the hints `deputy`, `stuck`,
//! `claimed_at`, `hold_ns`, `ready_on_arm`, `look_due`, plain stores (or a load and a store
//! where they average): a lost update there costs a check, a spin or a wake-up, never the
//! token.
//!
//! # Transitions of the holder word (`claim`, `end`)
//!
//! | from | to | by | through |
//! |------|----|----|---------|
//! | (NONE, k) | (m, k + 1) | the leader m, or a busy member m looking (`wait(0)`) | `Protocol::claim` |
//! | (m, k) | (NONE, k) | m, its event consumed | `Protocol::release` |
//! | (m, k) | (NONE, k) | m, its claim not confirmed (the readiness was gone) | `Protocol::confirm_claim` |
//! | (m, k) | (NONE, k) | any idle member on the source, the hold overdue (`HOLD_BOUND`) | `Protocol::expire_hold` |
//! | (m, k) | (NONE, k) | the reaper of m | `Protocol::clear_out` |
//!
//! # Transitions of the leader word (`move_token`)
//!
//! | from | to | by | through |
//! |------|----|----|---------|
//! | NONE, or an idle (l, g) behind m in line | (m, g') | m, idle | `Protocol::take_if_due` |
//! | (m, g) | the next idle (n, g''), or NONE | m going busy or leaving, or m's reaper | `Protocol::pass` |
//! | NONE | the next idle (n, g'') | whoever just left it NONE (a member went idle meanwhile) | `Protocol::pass` |
//! | (l, g), its ready source unclaimed for `TAKE_BOUND` | (m, g') | m, the watcher | `Protocol::take_from_stuck` |
//!
//! # Invariants
//!
//! 1. The holder's claim count rises by one with every won claim and never otherwise: a hold
//!    is named by its count, and a compare-and-swap against an ended hold fails even if the
//!    same member claimed again since (so `expire` never ends a fresh hold).
//! 2. The leader and watcher words name an occupant (slot and generation): a member that left
//!    or died, and the next occupant of its slot, are different words.
//! 3. While the holder word names a member, the leader does not watch the source (its poller
//!    holds the descriptor only when the word is NONE), so one readiness wakes one member.
//! 4. A reap clears only what names the dead occupant: its hold, its lead (by compare-and-swap
//!    against its tagged word), its bit (the slot cannot be joined again while the reap holds
//!    the slot's liveness byte).
//!
//! # Memory orderings
//!
//! Every access to `holder`, `leader`, `watcher`, `line_head` and `members` is `SeqCst`. Two
//! store-then-load pairs need it (only sequential consistency forbids both loads of a pair
//! seeing the old values): a member releasing stores the holder then loads the leader, while a
//! new leader stores itself then loads the holder; a member going idle stores its state then
//! loads the leader, while a leader passing the token loads states then stores the leader. The
//! rest follow for one ordering that the model checker sees whole. The hints are `SeqCst` too
//! (they are cheap on the paths that write them), and atomics of `crate::sync` like every other
//! word, so the models see every access to them; but nothing waits on them.

use std::sync::atomic::Ordering::SeqCst;

use crate::shared::NONE;
use crate::sync::{AtomicU32, AtomicU64};

/// A member as a source's words name it: its slot and the occupant's generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Occupant {
    /// The member's slot (`NONE`: nobody).
    pub(crate) slot: u32,
    /// The occupant's generation (`crate::members::Life::generation`).
    pub(crate) generation: u32,
}

impl Occupant {
    /// Nobody.
    pub(crate) const NONE: Occupant = Occupant {
        slot: NONE,
        generation: 0,
    };
    pub(crate) fn new(slot: u32, generation: u32) -> Occupant {
        Occupant { slot, generation }
    }
    pub(crate) fn is_none(self) -> bool {
        self.slot == NONE
    }
    /// The occupant as a source's words (and the source table's lock) hold it.
    pub(crate) fn word(self) -> u64 {
        match self.slot {
            NONE => Occupant::NONE.raw(),
            _ => self.raw(),
        }
    }
    fn raw(self) -> u64 {
        u64::from(self.slot) | u64::from(self.generation) << 32
    }
    /// The occupant a word names.
    pub(crate) fn of(word: u64) -> Occupant {
        Occupant {
            slot: word as u32,
            generation: (word >> 32) as u32,
        }
    }
}

/// One hold of a source (or the word with nobody holding): the holder's slot and the claim
/// count the hold was won at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    /// The holder's slot (`NONE`: nobody holds the source).
    pub(crate) slot: u32,
    /// Claims won so far, this one included.
    pub(crate) count: u32,
}

impl Hold {
    pub(crate) fn is_free(self) -> bool {
        self.slot == NONE
    }
    fn word(self) -> u64 {
        u64::from(self.slot) | u64::from(self.count) << 32
    }
    fn of(word: u64) -> Hold {
        Hold {
            slot: word as u32,
            count: (word >> 32) as u32,
        }
    }
}

/// One exclusive descriptor shared by the group (emulation only): its words live in the
/// group's shared memory (the source table, `super::table`), and only this module touches
/// them. Two cache lines of its own, so that members busy with different descriptors do not
/// bounce one line between them.
#[repr(C, align(128))]
pub(crate) struct SourceSlot {
    /// A non-zero digest of the open file's identity (device, inode); 0 while unused.
    id: AtomicU64,
    /// The hold of the last event: (slot, claim count), see the module docs.
    holder: AtomicU64,
    /// The token: (slot, generation) of the member that watches this source, or NONE.
    leader: AtomicU64,
    /// (slot, generation) of the member that checks on the leader (alive, not stuck): the one
    /// that last handed the token on, or an earlier one that keeps the watch
    /// (`Protocol::hand_watch`).
    watcher: AtomicU64,
    /// Where the line starts: the next leader is the first idle member from here on.
    line_head: AtomicU32,
    /// The idle member after the leader in line, woken early so that it is awake (spinning)
    /// when the token reaches it; NONE if there is none. A hint: nothing depends on it, like
    /// the timings below.
    deputy: AtomicU32,
    /// When the holder claimed the last event (monotonic nanoseconds).
    claimed_at: AtomicU64,
    /// How long holders have kept events lately (a moving average, nanoseconds).
    hold_ns: AtomicU64,
    /// A member that was handed the token and left the ready source unclaimed for a while
    /// (stopped, or starved of CPU): the token was taken from it, and `pass` skips it until it
    /// acts again (then it clears this). NONE if there is none. A hint, like the deputy.
    stuck: AtomicU32,
    /// How often the source was ready at once when a leader started watching it (a moving
    /// average, 0 to 1024): a backlog.
    ready_on_arm: AtomicU32,
    /// When the watcher's next look at the leader is due at the latest (monotonic ns, stored by
    /// the watcher as it plans its sleep; 0: it sleeps with no look planned). A hint in what
    /// earlier versions of the slot left as padding, so the layout is the same: a member that
    /// does not store it leaves 0 (no look planned), and the watch then moves as it always did.
    look_due: AtomicU64,
}

/// One source as the protocol sees it: its slot and its bitmap of members (bit n: member n
/// registered it), both in the source table.
#[derive(Clone, Copy)]
pub(crate) struct Source<'a> {
    slot: &'a SourceSlot,
    members: &'a [AtomicU64],
}

impl std::ops::Deref for Source<'_> {
    type Target = SourceSlot;
    fn deref(&self) -> &SourceSlot {
        self.slot
    }
}

impl SourceSlot {
    /// A slot as a set-up group holds it (under the model checker, where the memory is not a
    /// zeroed mapping).
    #[cfg(loom)]
    pub(crate) fn new() -> SourceSlot {
        SourceSlot {
            id: AtomicU64::new(0),
            holder: AtomicU64::new(
                Hold {
                    slot: NONE,
                    count: 0,
                }
                .word(),
            ),
            leader: AtomicU64::new(Occupant::NONE.word()),
            watcher: AtomicU64::new(Occupant::NONE.word()),
            line_head: AtomicU32::new(0),
            deputy: AtomicU32::new(NONE),
            claimed_at: AtomicU64::new(0),
            hold_ns: AtomicU64::new(0),
            stuck: AtomicU32::new(NONE),
            ready_on_arm: AtomicU32::new(0),
            look_due: AtomicU64::new(0),
        }
    }

    // ---- the file --------------------------------------------------------------------------

    /// Is the slot taken by a file?
    pub(crate) fn is_used(&self) -> bool {
        self.id.load(SeqCst) != 0
    }
    /// Is the slot taken by file `id`?
    pub(crate) fn is_for(&self, id: u64) -> bool {
        self.id.load(SeqCst) == id
    }
}

impl<'a> Source<'a> {
    /// The view of `slot` and its members' bitmap (the source table's words for it).
    pub(crate) fn new(slot: &'a SourceSlot, members: &'a [AtomicU64]) -> Source<'a> {
        Source { slot, members }
    }

    // ---- the file (with the source table's lock held) --------------------------------------

    /// Takes the free slot for file `id` (non-zero), as a source nobody leads, holds or
    /// watches. With the source table's lock held.
    pub(crate) fn take_for(&self, id: u64) {
        self.reset();
        self.slot.id.store(id, SeqCst);
    }
    /// Nobody leads, holds or watches the source, and its hints start afresh; the claim count
    /// goes on (so that a hold of the source's earlier file, ended by a late reaper, never
    /// matches a hold of its next one).
    pub(crate) fn reset(&self) {
        let count = self.hold().count;
        self.slot
            .holder
            .store(Hold { slot: NONE, count }.word(), SeqCst);
        self.slot.leader.store(Occupant::NONE.word(), SeqCst);
        self.slot.watcher.store(Occupant::NONE.word(), SeqCst);
        self.slot.line_head.store(0, SeqCst);
        self.slot.deputy.store(NONE, SeqCst);
        self.slot.stuck.store(NONE, SeqCst);
        self.slot.claimed_at.store(0, SeqCst);
        self.slot.hold_ns.store(0, SeqCst);
        self.slot.ready_on_arm.store(0, SeqCst);
        self.slot.look_due.store(0, SeqCst);
    }

    // ---- who registered it -----------------------------------------------------------------

    /// Has member `m` registered this source? (A slot out of the bitmap's range, read from a
    /// damaged group, has not.)
    pub(crate) fn has_member(&self, m: u32) -> bool {
        self.members
            .get(m as usize / 64)
            .is_some_and(|w| w.load(SeqCst) & (1 << (m % 64)) != 0)
    }
    /// Records that member `m` registered this source (`on`: with the source table's lock
    /// held) or no longer does.
    pub(crate) fn set_member(&self, m: u32, on: bool) {
        let bit = 1u64 << (m % 64);
        let Some(word) = self.members.get(m as usize / 64) else {
            return;
        };
        if on {
            word.fetch_or(bit, SeqCst);
        } else {
            word.fetch_and(!bit, SeqCst);
        }
    }
    /// How many members registered this source, counted in the bitmap's first `words` words
    /// and no further than `limit` (the count is `limit` once it gets there).
    pub(crate) fn members_up_to(&self, words: usize, limit: u32) -> u32 {
        let mut count = 0;
        for word in self.members.iter().take(words) {
            count += word.load(SeqCst).count_ones();
            if count >= limit {
                return limit;
            }
        }
        count
    }
    /// Has any member registered this source?
    pub(crate) fn has_members(&self) -> bool {
        self.members.iter().any(|w| w.load(SeqCst) != 0)
    }

    // ---- the hold --------------------------------------------------------------------------

    /// The hold as it is now (`Hold::is_free` if nobody holds the source).
    pub(crate) fn hold(&self) -> Hold {
        Hold::of(self.holder.load(SeqCst))
    }
    /// `m` claims the source: the new hold, and the claim count before it; `None` if someone
    /// holds it.
    pub(crate) fn claim(&self, m: u32) -> Option<Hold> {
        let mut seen = self.holder.load(SeqCst);
        loop {
            let free = Hold::of(seen);
            if !free.is_free() {
                return None;
            }
            let mine = Hold {
                slot: m,
                count: free.count.wrapping_add(1),
            };
            match self
                .holder
                .compare_exchange(seen, mine.word(), SeqCst, SeqCst)
            {
                Ok(_) => return Some(mine),
                Err(now) => seen = now,
            }
        }
    }
    /// Ends exactly `hold` (whoever ends it: its holder, a reaper, or a member that found it
    /// overdue): false if it has ended already, even if its holder holds the source again.
    pub(crate) fn end(&self, hold: Hold) -> bool {
        let free = Hold {
            slot: NONE,
            count: hold.count,
        };
        !hold.is_free()
            && self
                .holder
                .compare_exchange(hold.word(), free.word(), SeqCst, SeqCst)
                .is_ok()
    }

    // ---- the token -------------------------------------------------------------------------

    /// Who leads the source now.
    pub(crate) fn leader(&self) -> Occupant {
        Occupant::of(self.leader.load(SeqCst))
    }
    /// Moves the token from exactly `from` to `to`: false if it was not with `from` (another
    /// occupant of `from`'s slot included).
    pub(crate) fn move_token(&self, from: Occupant, to: Occupant) -> bool {
        self.leader
            .compare_exchange(from.word(), to.word(), SeqCst, SeqCst)
            .is_ok()
    }

    /// Who checks that the leader is alive.
    pub(crate) fn watcher(&self) -> Occupant {
        Occupant::of(self.watcher.load(SeqCst))
    }
    /// `w` checks on the leader from now on.
    pub(crate) fn set_watcher(&self, w: Occupant) {
        self.watcher.store(w.word(), SeqCst);
    }
    /// When the watcher's next look is due at the latest (0: none planned).
    pub(crate) fn look_due(&self) -> u64 {
        self.look_due.load(SeqCst)
    }
    /// The watcher plans its sleep: its next look is due by `at` (0: none planned).
    pub(crate) fn set_look_due(&self, at: u64) {
        if self.look_due.load(SeqCst) != at {
            self.look_due.store(at, SeqCst);
        }
    }
    /// `w` takes on checking the leader, if the watcher is still `seen`.
    pub(crate) fn replace_watcher(&self, seen: Occupant, w: Occupant) {
        let _ = self
            .watcher
            .compare_exchange(seen.word(), w.word(), SeqCst, SeqCst);
    }

    // ---- the line --------------------------------------------------------------------------

    /// Where the line starts (a slot, taken modulo the members' range by the reader).
    pub(crate) fn line_head(&self) -> u32 {
        self.line_head.load(SeqCst)
    }
    pub(crate) fn set_line_head(&self, slot: u32) {
        self.line_head.store(slot, SeqCst);
    }

    // ---- hints -----------------------------------------------------------------------------

    pub(crate) fn deputy(&self) -> u32 {
        self.deputy.load(SeqCst)
    }
    pub(crate) fn set_deputy(&self, slot: u32) {
        self.deputy.store(slot, SeqCst);
    }
    pub(crate) fn stuck(&self) -> u32 {
        self.stuck.load(SeqCst)
    }
    pub(crate) fn set_stuck(&self, slot: u32) {
        self.stuck.store(slot, SeqCst);
    }
    /// `m` acts again: it is no longer skipped as stuck.
    pub(crate) fn clear_stuck(&self, m: u32) {
        if self.stuck.load(SeqCst) == m {
            let _ = self.stuck.compare_exchange(m, NONE, SeqCst, SeqCst);
        }
    }
    /// When the last claim was made (monotonic ns).
    pub(crate) fn claimed_at(&self) -> u64 {
        self.claimed_at.load(SeqCst)
    }
    /// Notes the time of a claim about to be made, read from the clock just before: the word
    /// keeps the latest time noted, so a claimer that read the clock before another and
    /// stores after it (it lost, or stalled in between) never makes that claim look older.
    pub(crate) fn note_claim_time(&self, now: u64) {
        self.claimed_at.fetch_max(now, SeqCst);
    }
    /// The holds' moving average (ns).
    pub(crate) fn hold_ns(&self) -> u64 {
        self.hold_ns.load(SeqCst)
    }
    /// Adds one hold of `held` ns to the moving average (1/8 weight).
    pub(crate) fn note_hold(&self, held: u64) {
        let average = self.hold_ns.load(SeqCst);
        self.hold_ns.store(average - average / 8 + held / 8, SeqCst);
    }
    /// The ready-at-arm moving average (0 to 1024).
    pub(crate) fn ready_on_arm(&self) -> u32 {
        self.ready_on_arm.load(SeqCst)
    }
    /// Adds one look at arming to the moving average (1/8 weight).
    pub(crate) fn note_ready_on_arm(&self, ready: bool) {
        let average = self.ready_on_arm.load(SeqCst);
        let average = match ready {
            true => average + (1024 - average) / 8,
            false => average - average / 8,
        };
        self.ready_on_arm.store(average, SeqCst);
    }
}

/// Test scenes: words set by hand (the models use some, the unit tests others).
#[cfg(test)]
#[allow(dead_code)]
impl Source<'_> {
    /// The token is with `m`, whoever had it.
    pub(crate) fn force_leader(&self, m: Occupant) {
        self.leader.store(m.word(), SeqCst);
    }
    /// `m` holds the source, whoever did (a claim of its own, counted).
    pub(crate) fn force_hold(&self, m: u32) -> Hold {
        let count = self.hold().count.wrapping_add(1);
        let hold = Hold { slot: m, count };
        self.holder.store(hold.word(), SeqCst);
        hold
    }
    /// The hints say: a backlog, and quick holders.
    pub(crate) fn force_backlog(&self) {
        self.ready_on_arm.store(1024, SeqCst);
        self.hold_ns.store(0, SeqCst);
    }
}
