//! The member table: every member slot's life, and the only code that changes it.
//!
//! A group's members join, leave and die at any moment, in any process. Each slot's state, the
//! *generation* of its occupant and the process that owns the slot's current transition are
//! packed in one atomic word ([`Life`]), and the word changes only by compare-and-swap in the
//! named methods of [`Members`] (claim, publish, abandon, go idle, go busy, begin and finish a
//! leave, begin and finish a reap). A transition computed against an older occupant fails,
//! because the generation moved on (no ABA); a reaper records itself in the word and holds the
//! dead member's liveness byte while it reaps, so that its own death is noticed and the reap
//! finished by someone else. No other file writes a member state. The layout follows the
//! documentation style of `parking_lot`'s lock word.
//!
//! # The word
//!
//! | bits   | field      | meaning |
//! |--------|------------|---------|
//! | 0..4   | state      | one of [`state`] |
//! | 4..32  | generation | how many occupants the slot has had (28 bits, wrapping) |
//! | 32..64 | owner      | the process that owns the slot in this state: the member (JOINING, IDLE, BUSY, LEAVING), the reaper (REAPING); 0 otherwise |
//!
//! # States, and who may move a slot from each
//!
//! | from | to | by | method | when |
//! |------|----|----|--------|------|
//! | FREE, LEFT, DEAD | JOINING (generation + 1) | a joiner | `claim` | always |
//! | JOINING | BUSY | its owner | `publish` | its liveness lock and pid are in place |
//! | JOINING | LEFT | its owner | `abandon`, or `claim` itself | the join failed after the claim; or the slot's byte stayed held (invariant 6) |
//! | BUSY | IDLE | its owner | `go_idle` | entering `wait` (both backends; natively, whom a hand-on may ring) |
//! | IDLE | BUSY | its owner | `go_busy` | leaving `wait` (both backends) |
//! | IDLE, BUSY | LEAVING | its owner | `begin_leave` | `Waiter::drop` |
//! | LEAVING | LEFT | its owner | `finish_leave` | what it held is handed on; its lock is dropped after |
//! | IDLE, BUSY, LEAVING | REAPING (reaper) | any other process | `begin_reap` | the owner's liveness byte is free: it died |
//! | JOINING | REAPING (reaper) | any other process | `begin_reap` | the byte is free and the owner's process no longer exists |
//! | REAPING (r) | REAPING (reaper) | any process but r | `begin_reap` | r's hold of the byte is gone: the reaper died mid-reap |
//! | REAPING (reaper) | DEAD | the reaper | `finish_reap` | what the dead member held is cleared; the byte is dropped after |
//!
//! Nothing else moves a slot. JOINING and LEAVING are transient states no reaper touches while
//! their owner lives.
//!
//! # Invariants
//!
//! 1. A slot is IDLE or BUSY only while its owner holds the slot's liveness byte (taken before
//!    `publish`, dropped after `finish_leave`) and its `pid` field names the owner. So a
//!    joined slot whose byte is free belongs to a dead process, and no live member is reaped.
//! 2. Every transition is a compare-and-swap from the exact word last seen, generation included:
//!    a reaper, leaver or member acting on an earlier occupant of the slot fails, never
//!    touching the next one.
//! 3. A process never reaps a slot it owns (threads of one process die together).
//! 4. While a slot is REAPING, its reaper holds the slot's liveness byte (taken right after the
//!    compare-and-swap); a free byte under REAPING means the reaper died (or is in the instant
//!    between the two), and another process may take the reap over. The reap of the emulation is
//!    idempotent, so a reap run twice clears nothing twice.
//! 5. Only a FREE, LEFT or DEAD slot is claimed, and the claim bumps the generation: a
//!    `Notifier` or transition of the previous occupant sees that it is gone.
//! 6. A claimer that finds the slot's byte still held (the previous occupant or reaper is in
//!    the instant between giving the slot up and dropping the byte) waits for it, bounded, and
//!    otherwise gives the slot back and tries the next: a join ends with a slot or with
//!    `GroupFull`, never with a lock error.
//!
//! # Memory orderings
//!
//! Every access to the word is `SeqCst`. For `go_idle` and `go_busy` it is required: each is the
//! store half of a store-then-load pair with the token's `leader` field (a member stores IDLE and
//! then loads the leader; a leader passing the token loads states and then stores the leader),
//! and only sequential consistency forbids both loads seeing the old values. For `publish` and
//! the reap and leave transitions, `Release` on the word and `Acquire` on its loads would
//! suffice (the pid, counters and membership bits written before must be seen by whoever sees
//! the new state); they are `SeqCst` too because these transitions are rare, and one ordering
//! for the whole protocol keeps it checkable by loom without a second argument.
//!
//! The slot's statistics (wake-ups, events, empty and token wake-ups) are [`Counter`]s, added to
//! `Relaxed`: nothing is decided by them, and `Group::member_stats` reads a snapshot. Each slot
//! is one cache line (`#[repr(align(64))]`), so a member's word and counters, written at every
//! wait, never share a line with another member's.

use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::liveness::Liveness;
use crate::shared::{SharedState, NONE};
use crate::sync::{AtomicU32, AtomicU64, Patience};

/// The life of a member slot (the low bits of its [`Life`] word).
pub(crate) mod state {
    /// Never used.
    pub const FREE: u32 = 0;
    /// Claimed by a joiner that is putting its liveness lock and pid in place.
    pub const JOINING: u32 = 1;
    /// Joined, inside `wait` (or about to be).
    pub const IDLE: u32 = 2;
    /// Joined, handling an event (outside `wait`).
    pub const BUSY: u32 = 3;
    /// Leaving: handing on what it holds; no reaper touches it while it lives.
    pub const LEAVING: u32 = 4;
    /// Left cleanly; its statistics stay readable.
    pub const LEFT: u32 = 5;
    /// Its process died; the reaper named in the word is clearing out what it held.
    pub const REAPING: u32 = 6;
    /// Its process died without leaving; cleared out by another member.
    pub const DEAD: u32 = 7;
}

const STATE_BITS: u32 = 4;
const STATE_MASK: u64 = (1 << STATE_BITS) - 1;
const GENERATION_MASK: u32 = (1 << (32 - STATE_BITS)) - 1;

/// One slot's word: state, generation and owner (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Life(u64);

impl Life {
    fn new(state: u32, generation: u32, owner: u32) -> Life {
        Life(
            u64::from(state)
                | (u64::from(generation & GENERATION_MASK) << STATE_BITS)
                | (u64::from(owner) << 32),
        )
    }
    /// One of [`state`].
    pub(crate) fn state(self) -> u32 {
        (self.0 & STATE_MASK) as u32
    }
    /// The occupant's generation.
    pub(crate) fn generation(self) -> u32 {
        (self.0 >> STATE_BITS) as u32 & GENERATION_MASK
    }
    /// The process that owns this state (0 for FREE, LEFT, DEAD).
    pub(crate) fn owner(self) -> u32 {
        (self.0 >> 32) as u32
    }
    /// The same occupant in another state, owned by `owner`.
    fn to(self, state: u32, owner: u32) -> Life {
        Life::new(state, self.generation(), owner)
    }
    pub(crate) fn is_joined(self) -> bool {
        matches!(self.state(), state::IDLE | state::BUSY)
    }
}

/// The atomic word of one slot. Its value is private to this module: every change goes through
/// [`Members`].
#[repr(transparent)]
pub(crate) struct LifeWord(AtomicU64);

impl LifeWord {
    fn load(&self) -> Life {
        Life(self.0.load(SeqCst))
    }
    /// Compare-and-swap from exactly `from` (generation and owner included).
    fn swap(&self, from: Life, to: Life) -> std::result::Result<(), Life> {
        self.0
            .compare_exchange(from.0, to.0, SeqCst, SeqCst)
            .map(drop)
            .map_err(Life)
    }
}

/// One member's slot in the shared memory: one cache line (64 bytes, aligned), so that the
/// life word a member changes at every `wait` does not share a line with another member's, and
/// its statistics, added to at every wake-up, stay on the member's own line.
#[repr(C, align(64))]
pub(crate) struct MemberSlot {
    /// State, generation and owner (see the module docs); changed only by [`Members`].
    life: LifeWord,
    /// The process of the member (0 while FREE). Written by the joiner while JOINING, before
    /// `publish`; kept after it left or died, for the statistics.
    pub pid: AtomicU32,
    /// Set by a `Notifier` to its occupant's tag (`notified_tag`), taken by the member's next
    /// `wait` that sees it (see `MemberSlot::notify`).
    pub notified: AtomicU32,
    /// Non-zero while the member spins briefly for a release instead of sleeping (emulation):
    /// whoever would ring its door bell leaves it, since the member is looking anyway.
    pub spinning: AtomicU32,
    /// Non-zero once the member's door bell has been rung and not yet drained (emulation): a
    /// second ring would only wake it for the same look at the shared state, so it is left
    /// (see `Protocol::wake`). The member clears it after it drains the bell (never before: a
    /// ring between the clear and the drain would be lost) and before every kernel wait.
    pub rung: AtomicU32,
    /// Times the member's kernel wait returned.
    pub wakeups: Counter,
    /// Events handed to the member's caller.
    pub events: Counter,
    /// Wake-ups for readiness that left nothing to hand over (another member had it).
    pub empty_wakeups: Counter,
    /// Wake-ups that only carried the emulation's token (no event, no notification).
    pub token_wakeups: Counter,
    /// Exclusive events the member's next `wait` consumed because the caller had not.
    pub unconsumed: Counter,
}

/// A statistics counter in a member slot: `Relaxed`, because nothing is ordered by it (the
/// protocol never reads a counter to decide anything; `Group::member_stats` reads them as a
/// snapshot). Only the protocol's store-then-load pairs need `SeqCst`, and keep it.
#[repr(transparent)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`.
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Relaxed);
    }
    /// The count now.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
    /// Back to 0, for a new occupant of the slot (published after, by the life word's `SeqCst`
    /// store, which orders this before any reader that sees the new member).
    pub(crate) fn reset(&self) {
        self.0.store(0, Relaxed);
    }
}

impl MemberSlot {
    /// The slot's word as it is now.
    pub(crate) fn life(&self) -> Life {
        self.life.load()
    }
    /// The occupant's generation (a `Notifier` of an earlier occupant stays quiet).
    pub(crate) fn generation(&self) -> u32 {
        self.life().generation()
    }

    /// Is occupant `generation` joined (IDLE or BUSY) in this slot now?
    pub(crate) fn is_joined_as(&self, generation: u32) -> bool {
        let life = self.life();
        life.is_joined() && life.generation() == generation & GENERATION_MASK
    }

    /// Marks occupant `generation` notified; false (and nobody marked) if it is not joined
    /// any more. The mark names the occupant (`notified_tag`): a notifier that checked an
    /// earlier occupant and stores its mark after that one left and the next joined leaves a
    /// mark the next one ignores (`take_notified`), never a spurious wake-up. The
    /// compare-and-swap is made from the value loaded before the check, so a notifier of a
    /// left occupant never overwrites the mark of the slot's current one: that mark was stored
    /// after the current occupant joined, so a notifier that loaded it sees the new generation
    /// in its check and stops.
    pub(crate) fn notify(&self, generation: u32) -> bool {
        let tag = notified_tag(generation);
        let mut seen = self.notified.load(SeqCst);
        loop {
            if !self.is_joined_as(generation) {
                return false;
            }
            if seen == tag {
                return true;
            }
            match self.notified.compare_exchange(seen, tag, SeqCst, SeqCst) {
                Ok(_) => return true,
                Err(now) => seen = now,
            }
        }
    }

    /// Takes occupant `generation`'s notification: true if it was notified. A mark left for
    /// an earlier occupant is cleared and does not count.
    pub(crate) fn take_notified(&self, generation: u32) -> bool {
        self.notified.swap(0, SeqCst) == notified_tag(generation)
    }

    /// Is occupant `generation` notified (the mark not taken yet)?
    pub(crate) fn is_notified(&self, generation: u32) -> bool {
        self.notified.load(SeqCst) == notified_tag(generation)
    }

    /// A slot of zeroes: under the model checker, where the memory is not a zeroed mapping, and
    /// as a process's spare slot (what an out-of-range slot number read from a damaged group
    /// gets, `SharedState::member`).
    pub(crate) fn zeroed() -> MemberSlot {
        MemberSlot {
            life: LifeWord(AtomicU64::new(0)),
            pid: AtomicU32::new(0),
            notified: AtomicU32::new(0),
            spinning: AtomicU32::new(0),
            rung: AtomicU32::new(0),
            wakeups: Counter(AtomicU64::new(0)),
            events: Counter(AtomicU64::new(0)),
            empty_wakeups: Counter(AtomicU64::new(0)),
            token_wakeups: Counter(AtomicU64::new(0)),
            unconsumed: Counter(AtomicU64::new(0)),
        }
    }
}

/// The `notified` mark of occupant `generation`: never 0 (no mark), and another for each
/// generation of the slot.
pub(crate) fn notified_tag(generation: u32) -> u32 {
    (generation & GENERATION_MASK) | 1 << 31
}

/// A slot claimed by a joiner (JOINING), its liveness byte held.
#[must_use = "a claimed slot is published or abandoned"]
#[derive(Debug)]
pub(crate) struct Joining {
    membership: Membership,
}

impl Joining {
    /// The membership this claim becomes once published.
    pub(crate) fn membership(&self) -> Membership {
        self.membership
    }
}

/// One occupant of one slot: what its owner's transitions are made against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Membership {
    /// The slot.
    pub(crate) member: u32,
    generation: u32,
    pid: u32,
}

impl Membership {
    /// The occupant's generation: what its door bell's address and its notifiers carry.
    pub(crate) fn generation(self) -> u32 {
        self.generation
    }
    fn word(self, state: u32) -> Life {
        Life::new(state, self.generation, self.pid)
    }
}

/// A reap in progress (REAPING, by this process, which holds the slot's liveness byte).
#[must_use = "a reap is finished"]
#[derive(Debug)]
pub(crate) struct Reap {
    /// The dead member's slot.
    pub(crate) member: u32,
    life: Life,
}

/// A claimer that finds the slot's byte still held waits this long for it (invariant 6).
const CLAIM_LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// The member table of one group: its slots in the shared memory, and its liveness marks.
pub(crate) struct Members<'a> {
    shared: &'a SharedState,
    live: &'a Liveness,
}

impl<'a> Members<'a> {
    pub(crate) fn new(shared: &'a SharedState, live: &'a Liveness) -> Members<'a> {
        Members { shared, live }
    }

    fn slot(&self, m: u32) -> &'a MemberSlot {
        self.shared.member(m)
    }

    /// Takes a slot for a new member of process `pid`: a never-used one first (the header's
    /// `fresh` cursor, so a join does not look at the slots below it), then the one given up
    /// last (`reuse_hint`), then any whose member left or died (a look at every slot, only once
    /// no slot is fresh). The slot is JOINING, its liveness byte held, its counters cleared and
    /// its pid in place; it counts as joined once published.
    ///
    /// # Errors
    ///
    /// [`Error::GroupFull`] when no slot is free; [`Error::Io`] if the liveness lock fails for
    /// another reason than being held.
    pub(crate) fn claim(&self, pid: u32) -> Result<Joining> {
        let header = self.shared.header();
        let capacity = self.shared.capacity();
        loop {
            let m = header.fresh.load(SeqCst);
            if m >= capacity {
                break;
            }
            let seen = self.slot(m).life.load();
            if seen.state() == state::FREE {
                if let Some(claim) = self.try_claim(m, seen, pid)? {
                    return Ok(claim);
                }
            }
            // Taken (by another joiner, or given back): the cursor moves past it.
            let _ = header.fresh.compare_exchange(m, m + 1, SeqCst, SeqCst);
        }
        let hint = header.reuse_hint.swap(NONE, SeqCst);
        if hint < capacity {
            let seen = self.slot(hint).life.load();
            if matches!(seen.state(), state::LEFT | state::DEAD) {
                if let Some(claim) = self.try_claim(hint, seen, pid)? {
                    return Ok(claim);
                }
            }
        }
        for wanted in [state::FREE, state::LEFT, state::DEAD] {
            for m in 0..capacity {
                let seen = self.slot(m).life.load();
                if seen.state() != wanted {
                    continue;
                }
                if let Some(claim) = self.try_claim(m, seen, pid)? {
                    return Ok(claim);
                }
            }
        }
        Err(Error::GroupFull {
            max: capacity as usize,
        })
    }

    /// Claims slot `m`, seen free, left or dead in word `seen`, for process `pid`: None if
    /// another joiner took it first, or its byte stayed held (it is given back, LEFT).
    fn try_claim(&self, m: u32, seen: Life, pid: u32) -> Result<Option<Joining>> {
        let slot = self.slot(m);
        let joining = Life::new(state::JOINING, seen.generation().wrapping_add(1), pid);
        if slot.life.swap(seen, joining).is_err() {
            return Ok(None); // another joiner took it
        }
        let claim = Joining {
            membership: Membership {
                member: m,
                generation: joining.generation(),
                pid,
            },
        };
        match self.hold_patiently(m, pid) {
            Ok(true) => {}
            Ok(false) => {
                // Still held after a long wait: someone stopped between giving the slot up
                // and dropping its byte. Give it back; the caller tries the next.
                let _ = slot.life.swap(joining, joining.to(state::LEFT, 0));
                return Ok(None);
            }
            Err(e) => {
                let _ = slot.life.swap(joining, joining.to(state::LEFT, 0));
                return Err(Error::io("taking a member's liveness lock", e));
            }
        }
        for c in [
            &slot.wakeups,
            &slot.events,
            &slot.empty_wakeups,
            &slot.token_wakeups,
            &slot.unconsumed,
        ] {
            c.reset();
        }
        slot.notified.store(0, SeqCst);
        // A member killed while it spun leaves the flag set: its successor in the slot must
        // get its door bell rung.
        slot.spinning.store(0, SeqCst);
        // Likewise a bell marked rung by a ringer that died before it wrote.
        slot.rung.store(0, SeqCst);
        slot.pid.store(pid, SeqCst);
        let header = self.shared.header();
        header.high.fetch_max(m + 1, SeqCst);
        header.fresh.fetch_max(m + 1, SeqCst);
        if let Err(other) = header.first_pid.compare_exchange(0, pid, SeqCst, SeqCst) {
            if other != pid {
                header.spans_processes.store(1, SeqCst);
            }
        }
        Ok(Some(claim))
    }

    /// Somebody joined, left or was reaped: members watching their neighbours' deaths look
    /// again (`crate::ring`).
    fn roster_changed(&self) {
        self.shared.header().roster.fetch_add(1, SeqCst);
    }

    /// Takes the liveness byte of `m` for `pid`, waiting (bounded) while another process still
    /// holds it: Ok(false) if it stayed held.
    fn hold_patiently(&self, m: u32, pid: u32) -> std::io::Result<bool> {
        let mut patience = Patience::new(CLAIM_LOCK_PATIENCE, Duration::from_micros(200));
        loop {
            if self.live.try_hold(m, pid)? {
                return Ok(true);
            }
            if !patience.wait() {
                return Ok(false);
            }
        }
    }

    /// The claimed slot counts as joined (BUSY) from here on.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the slot was taken from the joiner meanwhile (invariant 1 says it
    /// cannot be).
    pub(crate) fn publish(&self, claim: Joining) -> Result<Membership> {
        let me = claim.membership;
        self.slot(me.member)
            .life
            .swap(me.word(state::JOINING), me.word(state::BUSY))
            .map_err(|_| lost_slot(self.shared))?;
        self.roster_changed();
        Ok(me)
    }

    /// The join failed after the claim: the slot goes back (LEFT), then its byte is dropped.
    pub(crate) fn abandon(&self, claim: Joining) {
        let me = claim.membership;
        let slot = self.slot(me.member);
        if slot
            .life
            .swap(
                me.word(state::JOINING),
                me.word(state::JOINING).to(state::LEFT, 0),
            )
            .is_ok()
        {
            self.live.release(me.member, me.pid);
        }
    }

    /// `me` enters `wait`: BUSY → IDLE. False if the slot is no longer `me`'s.
    pub(crate) fn go_idle(&self, me: &Membership) -> bool {
        self.flip(me, state::BUSY, state::IDLE)
    }

    /// `me` leaves `wait`: IDLE → BUSY. False if the slot is no longer `me`'s.
    pub(crate) fn go_busy(&self, me: &Membership) -> bool {
        self.flip(me, state::IDLE, state::BUSY)
    }

    fn flip(&self, me: &Membership, from: u32, to: u32) -> bool {
        match self.slot(me.member).life.swap(me.word(from), me.word(to)) {
            Ok(()) => true,
            Err(now) => now == me.word(to),
        }
    }

    /// `me` starts leaving: IDLE or BUSY → LEAVING. False if the slot is no longer `me`'s.
    pub(crate) fn begin_leave(&self, me: &Membership) -> bool {
        let life = &self.slot(me.member).life;
        [state::IDLE, state::BUSY]
            .into_iter()
            .any(|from| life.swap(me.word(from), me.word(state::LEAVING)).is_ok())
    }

    /// `me` has handed on what it held: LEAVING → LEFT, and only then is its liveness byte
    /// dropped (a leaver that dies in between is seen dead, not left with a free byte while
    /// LEAVING).
    pub(crate) fn finish_leave(&self, me: &Membership) {
        let leaving = me.word(state::LEAVING);
        if self
            .slot(me.member)
            .life
            .swap(leaving, leaving.to(state::LEFT, 0))
            .is_ok()
        {
            self.shared.header().reuse_hint.store(me.member, SeqCst);
            self.roster_changed();
            self.live.release(me.member, me.pid);
        }
    }

    /// If the owner of slot `m` (or the reaper reaping it) belongs to another process than
    /// `me` and has died, the word it was seen with.
    pub(crate) fn dead(&self, m: u32, me: u32) -> Option<Life> {
        let seen = self.slot(m).life.load();
        let owner = seen.owner();
        if owner == 0 || owner == me {
            return None;
        }
        let dead = match seen.state() {
            state::IDLE | state::BUSY | state::LEAVING | state::REAPING => {
                !self.live.is_held_by_other(m, me)
            }
            // The byte is taken while JOINING: a free one alone says nothing yet.
            state::JOINING => !self.live.is_held_by_other(m, me) && self.live.process_gone(owner),
            _ => false,
        };
        dead.then_some(seen)
    }

    /// Is slot `m` joined by a live member? (as `dead` sees it from process `me`)
    pub(crate) fn is_alive(&self, m: u32, me: u32) -> bool {
        self.slot(m).life().is_joined() && self.dead(m, me).is_none()
    }

    /// `me` (a process) starts clearing out slot `m`, found dead in word `seen`: REAPING, by
    /// `me`. None if the slot changed since (someone else reaps it, or it was never dead).
    pub(crate) fn begin_reap(&self, m: u32, seen: Life, me: u32) -> Option<Reap> {
        let reaping = seen.to(state::REAPING, me);
        self.slot(m).life.swap(seen, reaping).ok()?;
        // The byte is held by another process only if one took the reap over in the instant
        // between the swap and here (and may have finished it, and a new member may have
        // joined the slot since): then this reap must do nothing at all, or it would clear the
        // new occupant's registrations, claims and tokens out.
        if !self.live.try_hold(m, me).unwrap_or(false) {
            return None;
        }
        #[cfg(all(unix, not(loom), feature = "fault-injection"))]
        testing::mid_reap();
        Some(Reap {
            member: m,
            life: reaping,
        })
    }

    /// Reaps slot `m`, found dead in word `seen`, for process `me`, start to end: begins the
    /// reap (REAPING by `me`, the slot's byte held), runs the backend's `clear` on the dead
    /// occupant (its slot and generation: the emulation frees what it held and passes its
    /// tokens on; the native backend has nothing to clear), and finishes it (DEAD, the byte
    /// dropped). A reap that does not begin (the slot changed since it was found dead, or
    /// another reaper took it over and holds the byte) runs nothing at all: whatever `clear`
    /// would touch may belong to the slot's next occupant by then. Returns whether it reaped.
    pub(crate) fn reap(&self, m: u32, seen: Life, me: u32, clear: impl FnOnce(u32, u32)) -> bool {
        let Some(reap) = self.begin_reap(m, seen, me) else {
            return false;
        };
        clear(m, reap.life.generation());
        self.finish_reap(reap);
        true
    }

    /// What the dead member held is cleared: REAPING → DEAD, then the byte is dropped.
    pub(crate) fn finish_reap(&self, reap: Reap) {
        let _ = self
            .slot(reap.member)
            .life
            .swap(reap.life, reap.life.to(state::DEAD, 0));
        self.shared.header().reuse_hint.store(reap.member, SeqCst);
        self.roster_changed();
        self.live.release(reap.member, reap.life.owner());
    }
}

/// Test helpers: join a slot in one step, and read a slot's occupancy back, for unit tests and
/// models that set the scene by hand (all within one process).
#[cfg(test)]
#[cfg_attr(not(loom), allow(dead_code))]
impl Members<'_> {
    /// The occupancy slot `m` has now.
    pub(crate) fn occupant(&self, m: u32) -> Membership {
        let life = self.slot(m).life.load();
        Membership {
            member: m,
            generation: life.generation(),
            pid: life.owner(),
        }
    }
}

#[cfg(test)]
#[cfg_attr(not(loom), allow(dead_code))]
impl SharedState {
    /// A member of process `pid` joins, claimed and published through the member table; its
    /// slot. Its liveness mark is not kept (within one process a member is alive anyway).
    pub(crate) fn claim_slot(&self, pid: u32) -> Result<u32> {
        let live = Liveness::new(self.capacity() as usize)?;
        let members = Members::new(self, &live);
        let claim = members.claim(pid)?;
        Ok(members.publish(claim)?.member)
    }
}

/// The first of the slots `start, start + 1, …` (wrapping below `high`, each once) for which
/// `f` gives a value, with that value: the walk in slot order both backends make for the next
/// idle member (the native hand-on's ring from its cursor, the emulation's line from its head).
pub(crate) fn first_in_ring<T>(
    high: u32,
    start: u32,
    f: impl FnMut(u32) -> Option<T>,
) -> Option<T> {
    if high == 0 {
        return None;
    }
    let start = start % high;
    (0..high).map(|i| (start + i) % high).find_map(f)
}

/// The error of a member whose slot was taken from it: never, while invariant 1 holds, so it
/// means the shared memory was overwritten, and the state is marked damaged (the caller's
/// call then says `CorruptGroup`).
pub(crate) fn lost_slot(shared: &SharedState) -> Error {
    shared.mark_damaged();
    Error::io(
        "this member's slot was cleared out by another member",
        std::io::Error::other("its liveness lock was lost"),
    )
}

/// A hook for the fault tests, and nothing else (feature `fault-injection`, which the
/// test fixtures turn on; never in a default build): it makes this process's next reap stop
/// in its middle, so that a test can kill a reaper exactly there.
#[cfg(all(unix, not(loom), feature = "fault-injection"))]
pub mod testing {
    static MID_REAP: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

    /// Test only: this process's next reap, once the dead member's slot is REAPING and the
    /// reaper holds its liveness byte, and before anything the dead member held is cleared,
    /// writes one byte to `fd` and blocks for ever (until the test kills the process).
    pub fn block_mid_reap(fd: i32) {
        MID_REAP.store(fd, std::sync::atomic::Ordering::SeqCst);
    }

    pub(crate) fn mid_reap() {
        let fd = MID_REAP.load(std::sync::atomic::Ordering::SeqCst);
        if fd < 0 {
            return;
        }
        // One byte to the descriptor the test gave (open until the test kills us), then
        // pause(2) until killed.
        if let Ok(fd) = crate::sys::unix::by_number(fd) {
            let _ = rustix::io::write(fd, &[1]);
        }
        loop {
            rustix::event::pause();
        }
    }
}

/// The table under the model checker (`members/model.rs`).
#[cfg(all(test, loom))]
mod model;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn table(capacity: usize) -> (SharedState, Liveness) {
        (
            crate::inner::test_state(crate::Backend::Emulated, capacity),
            Liveness::new(capacity).unwrap(),
        )
    }

    /// A slot is claimed clean: a member that died while it spun must not leave its
    /// successor's door bell silenced, nor a notification behind.
    #[test]
    fn a_reclaimed_slot_starts_clean() {
        let (shared, live) = table(1);
        let members = Members::new(&shared, &live);
        let first = members.publish(members.claim(1).unwrap()).unwrap();
        let slot = shared.member(first.member);
        slot.spinning.store(1, SeqCst);
        slot.notified.store(1, SeqCst);
        slot.rung.store(1, SeqCst);
        assert!(members.begin_leave(&first));
        members.finish_leave(&first);
        let second = members.publish(members.claim(2).unwrap()).unwrap();
        assert_eq!(second.member, first.member, "the slot is reused");
        assert_eq!(slot.spinning.load(SeqCst), 0);
        assert_eq!(slot.notified.load(SeqCst), 0);
        assert_eq!(slot.rung.load(SeqCst), 0);
        assert_eq!(slot.pid.load(SeqCst), 2);
        assert_ne!(second.generation, first.generation);
    }

    /// Transitions made for an earlier occupant fail on the next one (no ABA), and a slot
    /// being reaped is not brought back by its member's IDLE/BUSY changes.
    #[test]
    fn stale_transitions_fail() {
        let (shared, live) = table(1);
        let members = Members::new(&shared, &live);
        let me = std::process::id();
        let first = members.publish(members.claim(me).unwrap()).unwrap();
        assert!(members.begin_leave(&first));
        members.finish_leave(&first);
        let second = members.publish(members.claim(me).unwrap()).unwrap();
        assert!(!members.go_idle(&first), "an earlier occupant went idle");
        assert!(!members.begin_leave(&first), "an earlier occupant left");
        assert!(members.go_idle(&second));
        // A reap (here by a made-up other process) holds the slot: its member cannot flip it.
        let seen = shared.member(0).life();
        let reap = members.begin_reap(0, seen, u32::MAX - 1).unwrap();
        assert!(!members.go_busy(&second));
        assert!(!members.go_idle(&second));
        assert_eq!(shared.member(0).life().state(), state::REAPING);
        members.finish_reap(reap);
        assert_eq!(shared.member(0).life().state(), state::DEAD);
    }

    /// A member of this process is never found dead by this process (threads of one process
    /// die together), and a second hold of one byte by the process is counted: dropping one
    /// keeps the other.
    #[cfg(unix)]
    #[test]
    fn holds_are_counted_per_process() {
        let (shared, live) = table(2);
        let members = Members::new(&shared, &live);
        let me = std::process::id();
        let a = members.publish(members.claim(me).unwrap()).unwrap();
        assert!(members.dead(a.member, me).is_none());
        assert!(live.try_hold(a.member, me).unwrap());
        live.release(a.member, me);
        // Still held once: a forked child (another process) sees it held.
        // SAFETY: the child only asks the kernel about a lock and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let held = live.is_held_by_other(a.member, std::process::id());
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(i32::from(!held)) };
        }
        use rustix::process::{waitpid, Pid, WaitOptions};
        let (_, status) = waitpid(Pid::from_raw(pid), WaitOptions::empty())
            .unwrap()
            .unwrap();
        assert_eq!(status.exit_status(), Some(0));
        assert!(members.begin_leave(&a));
        members.finish_leave(&a);
    }
}
