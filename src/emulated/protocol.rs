//! The token protocol of the emulation: Leader/Followers, one token per exclusive descriptor.
//!
//! The pattern is Leader/Followers (Schmidt, O'Ryan, Pyarali, Kircher, Buschmann, 2000): of the
//! members that registered a descriptor, only the token holder (the *leader*) watches it; the
//! others sleep in their own pollers. When the leader is handed an event it first passes the
//! token to the next idle member in line, so the group keeps listening while the event is
//! handled, and marks itself the source's *holder*. The new leader does not watch the source
//! until the holder says it has consumed the readiness (`release`), so a level-triggered
//! descriptor never wakes two members for one message.
//!
//! The line: members in slot order, starting at `line_head`. When a member's turn ends, the
//! head moves just past it (it goes to the back): with `Rotation::Every(n)` after `n` events
//! (`rotation_due`, decided as the event is handed out); with `Rotation::Adaptive` after the
//! consumed event if the source is no longer ready, else after up to `ADAPTIVE_BATCH` in a row
//! (`adaptive_turn_ends`, decided once the event is consumed). Until then a member coming back
//! to `wait` is ahead of the leader in line and takes the token back: its batch. With
//! `Every(0)` the head stays at slot 0, which reproduces the kernel's monopoly.
//!
//! All state is in the group's shared memory, in words only `source` touches (its docs give
//! each word's bits, transitions, invariants and orderings). The token (`leader`) and the claim
//! (`holder`) change by compare-and-swap, each tagged (the leader's generation, the claim's
//! count), so that a swap made against an earlier occupant or an earlier hold fails; the
//! watcher, the line head, the deputy and the timings are stores (a lost update there costs a
//! check or a hint, never the token). A member's own
//! state (IDLE, BUSY) changes only through the member table (`crate::members`), by
//! compare-and-swap against the member's own occupancy of its slot, so that it cannot bring back
//! a slot being reaped. Two store-then-load pairs keep the token from being stranded (SeqCst,
//! Dekker style): a member going idle stores IDLE then loads the leader, while a leader passing
//! the token loads states and then stores the leader, and re-checks after; a member releasing a
//! source stores the holder then loads the leader, while a new leader stores itself then loads
//! the holder.
//!
//! A claim is checked against the readiness it is for. A leader's view of its source can be
//! overtaken: between its kernel wait reporting the source ready and its claim, a member ahead
//! of it in line may come back to `wait` (a batch), take the token back, claim, consume and
//! release. So every won claim is counted (the holder word's tag), a member reads the count as
//! it finds the source free to watch, and a claim won after another one since keeps its event only if
//! the source is still ready (`confirm_claim`); otherwise it is given up as if consumed.
//!
//! Early wake-up (`spin`): `pass` rings every new leader as the token reaches it, and a leader
//! waiting for a quick release spins for it instead of sleeping; under a backlog, while holders
//! consume quickly (`spinning_pays`), `pass` also names the leader's *deputy* (the next idle
//! member after it), which the holder's `release` rings and which spins for its turn too. A
//! third store-then-load pair keeps a ring from being lost: a spinning member's bell is left
//! unrung (`wake`), and the member stores "not spinning" before it reads the whole shared state
//! again (one more round of its wait) and sleeps. The deputy and the timings are hints only.
//!
//! Members that do not act (slow, stopped with SIGSTOP, starved of CPU) are not waited for: a
//! hold that lasts `HOLD_BOUND` is ended by whichever member registered on the source looks
//! first (while a source is active, members that do not watch it sleep at most that long), and
//! a leader that leaves its ready source unclaimed for `TAKE_BOUND` loses the token to the
//! member checking on it, and is skipped (`stuck`) until it acts again.
//!
//! Liveness: a dead leader or holder is noticed by the member that depends on it, the one that
//! last passed the token (the *watcher*; between threads of one process, an earlier passer
//! whose look at the leader is due soon keeps the watch, `hand_watch`) or the leader waiting
//! for the holder, but only when that member is in another process; threads of one process
//! never check. On Linux the dependent member waits on the other process's death as an event
//! (a pidfd in its poller, see `deathwatch`); elsewhere, and as the fallback, it wakes every
//! `LIVENESS_CHECK`. The dead member is cleared out by a reap, which the member table runs
//! (`Members::reap`: exclusive, resumable by another member should the reaper die, and a no-op
//! if it does not begin) with this backend's hook (`watch`, `clear_out`).

#[cfg(all(test, loom))]
mod model;
mod source;
mod spin;
mod table;
mod watch;

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use super::doorbell::Doorbells;
use crate::contract::Rotation;
use crate::liveness::Liveness;
use crate::members::{first_in_ring, state, Members};
use crate::shared::{SharedState, NONE};
use crate::sync::monotonic_ns;
pub(crate) use source::{Hold, Occupant, Source};
pub(crate) use spin::Spin;
pub(crate) use table::{check as table_check, region, SourceTable, TableLayout};

/// How often a member that depends on another process checks that it is alive, when it
/// cannot wait on that process's death as an event (no pidfd).
pub(crate) const LIVENESS_CHECK: Duration = Duration::from_millis(40);
/// Holds shorter than this on average let the next leaders spin for the release (see
/// `Protocol::spinning_pays`); half the spin, so a spinner usually sees the release.
pub(crate) const SHORT_HOLD: Duration = Duration::from_micros(25);
/// A leader rung as the token reached it during a hold (`pass`) spins for the release, up to
/// this long, when holds of the source last less than this on average: a wake-up here (the ring,
/// the scheduler, a CPU gone idle on a virtual machine) costs tens of microseconds, so spinning
/// through a shorter hold saves the second wake-up, at the release, and puts none on the
/// hand-off's path. Longer holds are slept through (the release rings).
pub(crate) const LEADER_SPIN: Duration = Duration::from_micros(100);
/// A member that came back to `wait` within this long of its last wait's return (it read,
/// consumed and came straight back) keeps the token of the source it holds through its turn
/// (`EmulatedWaiter::token_at_busy`): passing it for the few microseconds the member is away,
/// and taking it back, cost two rings and a wake-up per event. The same bound as the native
/// hand-on's trust in a quick member.
pub(crate) const QUICK_RETURN: Duration = Duration::from_micros(100);
/// A member that came back later than `QUICK_RETURN` this many times in a row is slow (it
/// works on its events): it no longer keeps the token (`EmulatedWaiter::token_at_busy`). One
/// late return is usually a preemption, which should not cut a quick member's batch.
pub(crate) const SLOW_RETURNS: u32 = 4;
/// How long a deputy spins for the token to come to it (see `spin`) before it sleeps.
pub(crate) const SPIN_FOR_RELEASE: Duration = Duration::from_micros(50);
/// A holder that keeps an event longer than this (slow, stopped, or starved of CPU) is not
/// waited for: the leader expires its hold and watches the source again, at the price of at
/// most one empty wake-up if the holder had not read its message yet.
pub(crate) const HOLD_BOUND: Duration = Duration::from_millis(40);
/// A leader that leaves its ready source unclaimed, with nobody holding it, across two looks
/// this far apart (it was stopped, or handed the token while stopped) loses the token to the
/// member checking on it.
pub(crate) const TAKE_BOUND: Duration = Duration::from_millis(15);
/// A source claimed within this long is active: the watcher of its leader looks for it stuck
/// (see `Protocol::stuck_look_in`); a source quiet for longer costs no look at all.
pub(crate) const ACTIVE_WINDOW: Duration = Duration::from_secs(1);

/// The protocol's view of one group: its shared memory, source table, door bells and liveness
/// marks.
pub(crate) struct Protocol<'a> {
    pub(crate) shared: &'a SharedState,
    pub(crate) sources: SourceTable<'a>,
    pub(crate) bells: &'a Doorbells,
    pub(crate) live: &'a Liveness,
    pub(crate) rotation: Rotation,
}

impl<'a> Protocol<'a> {
    /// The shared words of source `s` (their methods are the only way to them).
    pub(crate) fn source(&self, s: usize) -> Source<'a> {
        self.sources.source(s)
    }
}

impl Protocol<'_> {
    /// The member table of the group.
    pub(crate) fn members(&self) -> Members<'_> {
        Members::new(self.shared, self.live)
    }

    /// Does member `m` hold the token of any source? (for its statistics)
    pub(crate) fn leads_any(&self, m: u32) -> bool {
        (0..self.sources.count()).any(|s| {
            let src = self.source(s);
            src.has_members() && src.leader().slot == m
        })
    }

    /// Slot `m`'s occupant as it is now, if it is idle (inside `wait`).
    fn idle_occupant(&self, m: u32) -> Option<Occupant> {
        let life = self.shared.member(m).life();
        (life.state() == state::IDLE).then(|| Occupant::new(m, life.generation()))
    }

    /// Is `who` (that very occupant) idle?
    fn is_idle(&self, who: Occupant) -> bool {
        self.idle_occupant(who.slot)
            .is_some_and(|now| now.generation == who.generation)
    }

    /// The process of the member in slot `m`.
    fn pid(&self, m: u32) -> u32 {
        self.shared.member(m).pid.load(SeqCst)
    }

    /// Wakes member `m` through its door bell, unless it is spinning for its turn: then it
    /// looks at the shared state itself (the caller stored what changed before calling, and the
    /// member re-reads the state after it stops spinning, so nothing is missed).
    ///
    /// Nor is a bell rung twice before the member drains it: the first ring marks it (`rung`,
    /// set before the write) and later ones, seeing the mark, write nothing. That is safe
    /// because the member drains the bell, then clears the mark, then reads the state again
    /// (`drain_bell`). Mark and clear are both swaps (read-modify-writes, so each reads the
    /// latest mark, and a clear that follows a ring's mark sees the change stored before it:
    /// plain loads and stores would need the store-then-load order of SeqCst, which the
    /// model checker does not give). A ring that saw the mark came before the member's next
    /// clear (the caller's change, then the swap); the byte of the ring that set the mark was
    /// written after the last clear, so no drain before that clear took it: either it is
    /// still in the bell, and wakes the member, which drains, clears and reads the state
    /// again, or a later drain took it, and that drain's clear and its reads come after this
    /// ring's change. (Clearing first would be wrong: a drain could take the byte of a mark set
    /// after its clear, and leave the mark with nothing behind it.) A clear alone is always
    /// safe (the next ring writes), so the member also clears the mark before every kernel
    /// wait; and a ringer that dies between marking and writing, leaving a mark with no byte,
    /// is reaped by a member that then rings every marked bell again
    /// (`crate::doorbell::ring_marked`).
    pub(crate) fn wake(&self, m: u32) {
        let slot = self.shared.member(m);
        // (Not on Windows, where the bell is the poller's notify, which the member's kernel
        // wait consumes by itself, not a drain: every ring rings.)
        if slot.spinning.load(SeqCst) == 0 && (cfg!(not(unix)) || slot.rung.swap(1, SeqCst) == 0) {
            self.bells.ring(m, slot.generation());
        }
    }

    /// Drains the door bell of `me`, then clears its mark (in that order, see `wake`); the
    /// caller reads the shared state after.
    pub(crate) fn drain_bell(&self, me: u32) {
        self.bells.drain(me);
        self.shared.member(me).rung.swap(0, SeqCst);
    }

    /// Does `me` lead `s`?
    pub(crate) fn leads(&self, s: usize, me: Occupant) -> bool {
        self.source(s).leader() == me
    }

    /// The leader of `s` started watching it and found it `ready` at once, or not.
    pub(crate) fn note_ready_on_arm(&self, s: usize, ready: bool) {
        self.source(s).note_ready_on_arm(ready);
    }

    /// Position of member `m` in the line of source `s` (0 = first).
    fn line_pos(&self, s: usize, m: u32) -> u32 {
        let high = self.shared.high().max(1);
        let head = self.source(s).line_head() % high;
        (m + high - head) % high
    }

    /// Does anyone need to watch `s` now? (its last event has been consumed)
    pub(crate) fn needs_watch(&self, s: usize) -> bool {
        self.source(s).hold().is_free()
    }

    /// If `me` leads `s` and nobody holds it (so `me` must watch it): the claim count now,
    /// which a readiness seen from here on is checked against (`confirm_claim`).
    pub(crate) fn to_watch(&self, s: usize, me: Occupant) -> Option<u32> {
        let src = self.source(s);
        if src.leader() != me {
            return None;
        }
        let hold = src.hold();
        hold.is_free().then_some(hold.count)
    }

    /// For a member that is busy and looks without waiting (`wait(0)`): if nobody else leads
    /// `s` and nobody holds it, the claim count now (see `to_watch`).
    #[cfg(unix)] // busy polling takes the waiting path elsewhere
    pub(crate) fn free_for_a_look(&self, s: usize, me: Occupant) -> Option<u32> {
        let src = self.source(s);
        let leader = src.leader();
        if !leader.is_none() && leader != me {
            return None;
        }
        let hold = src.hold();
        hold.is_free().then_some(hold.count)
    }

    /// Called by `me`, idle, for a source it registered: takes the token if nobody has it, or
    /// if `me` is ahead of an idle leader in line (a busy leader is passing it on already).
    /// Returns whether `me` leads `s` now.
    pub(crate) fn take_if_due(&self, s: usize, me: Occupant) -> bool {
        let src = self.source(s);
        // Acting again: `pass` may hand it the token again.
        src.clear_stuck(me.slot);
        for _ in 0..8 {
            let leader = src.leader();
            if leader == me {
                return true;
            }
            let due = leader.is_none()
                || (self.is_idle(leader)
                    && self.line_pos(s, me.slot) < self.line_pos(s, leader.slot));
            if !due {
                return false;
            }
            if src.move_token(leader, me) {
                if !leader.is_none() {
                    // The old leader still watches `s`: wake it so it stops; it also becomes
                    // the one who checks that `me` stays alive.
                    src.set_watcher(leader);
                    self.wake(leader.slot);
                } else {
                    self.appoint_watcher(s, me);
                }
                return true;
            }
        }
        src.leader() == me
    }

    /// `me` took the token of `s` from nobody: an idle member of another process, if there is
    /// one, is told to check that `me` stays alive (threads of one process die together).
    fn appoint_watcher(&self, s: usize, me: Occupant) {
        let src = self.source(s);
        let my_pid = self.pid(me.slot);
        let watcher = (0..self.shared.high()).find_map(|m| {
            if m == me.slot || !src.has_member(m) || self.pid(m) == my_pid {
                return None;
            }
            self.idle_occupant(m)
        });
        if let Some(w) = watcher {
            src.set_watcher(w);
            self.wake(w.slot);
        }
    }

    /// The first idle member registered on `s`, in line order from `start` (default: the
    /// head), other than slot `not`.
    fn next_idle(&self, s: usize, not: u32, start: Option<u32>) -> Option<Occupant> {
        let src = self.source(s);
        let head = start.unwrap_or_else(|| src.line_head());
        let stuck = src.stuck();
        first_in_ring(self.shared.high(), head, |m| {
            if m == not || m == stuck || !src.has_member(m) {
                return None;
            }
            self.idle_occupant(m)
        })
    }

    /// Moves the token of `s` away from `from` (leaving, going busy, or dead) to the next idle
    /// member in line, waking it if there is something to watch; with no idle member, nobody
    /// leads and the next member to come back to `wait` takes the token. With `to_back`, `from`
    /// goes to the back of the line: the search starts just after it, and the head moves there
    /// once the token has moved (so nobody sees `from` first in line meanwhile).
    pub(crate) fn pass(&self, s: usize, from: Occupant, to_back: bool) {
        let high = self.shared.high().max(1);
        let start = to_back.then_some((from.slot + 1) % high);
        self.pass_from(s, from, start);
        if let Some(head) = start {
            self.source(s).set_line_head(head);
        }
    }

    fn pass_from(&self, s: usize, from: Occupant, start: Option<u32>) {
        let src = self.source(s);
        let mut from = from;
        for _ in 0..=self.shared.high() {
            if src.leader() != from {
                return; // someone else moved it already
            }
            match self.next_idle(s, from.slot, start) {
                Some(next) => {
                    if !src.move_token(from, next) {
                        return;
                    }
                    self.hand_watch(s, from, next);
                    // Rung whatever it will do: with the source free it must watch it; with a
                    // hold in progress it depends on the holder (it ends an overdue hold, and
                    // spins for the release when holds are quick, see `EmulatedWaiter`), and a
                    // leader that sleeps unaware would leave a stalled holder unwatched.
                    self.wake(next.slot);
                    if !self.needs_watch(s) && self.spinning_pays(s) {
                        // Under a backlog its own deputy is woken early too.
                        self.name_deputy(s, next.slot);
                    } else {
                        src.set_deputy(NONE);
                    }
                    if self.is_idle(next) {
                        return;
                    }
                    from = next; // it went busy meanwhile: pass it on
                }
                None => {
                    if !src.move_token(from, Occupant::NONE) {
                        return;
                    }
                    // A member may have gone idle after we looked: give it the token.
                    match self.next_idle(s, NONE, start) {
                        Some(next) if src.move_token(Occupant::NONE, next) => {
                            self.hand_watch(s, from, next);
                            self.wake(next.slot);
                            if self.is_idle(next) {
                                return;
                            }
                            from = next;
                        }
                        _ => return,
                    }
                }
            }
        }
    }

    /// `me`, the leader, saw `s` ready: claims its event. `None` if another member holds it;
    /// else the hold (for `confirm_claim` and `release`).
    pub(crate) fn claim(&self, s: usize, me: Occupant) -> Option<Hold> {
        let src = self.source(s);
        // The claim's time is stored before the claim itself: a member that sees the new
        // holder then sees its time, and never ends a young hold as overdue (`hold_left`). A
        // claim that loses only makes the current hold look younger: the word keeps the
        // latest time noted, so a loser that read the clock before the winner and stores after
        // it leaves the winner's time (model `a_losing_claim_leaves_the_claim_time_alone`).
        src.note_claim_time(monotonic_ns());
        src.claim(me.slot)
    }

    /// `me`, busy polling (`EmulatedWaiter::poll_once`), won `hold` of `s` after it found `s`
    /// led by nobody (or by itself) and ready. Does the claim stand? Not if another member
    /// took the token in between: that member came back to `wait`, and may be waking for this
    /// very readiness now (it led before the event came, which the look cannot tell from one
    /// that came first). Then the claim is given up, unconsumed, and the leader rung: the
    /// event is the leader's. The leader is read after the claim, so a leader that took the
    /// token before the readiness the look saw is always seen.
    #[cfg(unix)] // busy polling's own look is Unix's (`poll_once`)
    pub(crate) fn busy_claim_stands(&self, s: usize, me: Occupant, hold: Hold) -> bool {
        let leader = self.source(s).leader();
        if leader.is_none() || leader == me {
            return true;
        }
        if self.source(s).end(hold) {
            self.ring_after_release(s, hold.slot);
        }
        false
    }

    /// `me` won `hold` of `s`, for a readiness it saw after it last found `s` free, when `seen`
    /// claims had been won. If another claim was won in between, the readiness may be gone:
    /// the member that claimed in between may have consumed it. (That is the batch's race: the
    /// leader sees the source ready, a member ahead of it in line comes back to `wait`, takes
    /// the token back, claims, consumes and releases, all before the first one's claim;
    /// without this check the first reads nothing.) Then `me` keeps its claim only if the
    /// source is `still_ready` (asked only then, while `me` holds it, so nobody else consumes
    /// meanwhile), and otherwise gives it up, as if consumed, and returns false. A claim with
    /// no other in between keeps the event as it was seen: every hold that could consume it
    /// was released before `me` found the source free.
    pub(crate) fn confirm_claim(
        &self,
        s: usize,
        hold: Hold,
        seen: u32,
        still_ready: impl FnOnce() -> bool,
    ) -> bool {
        if hold.count.wrapping_sub(1) == seen || still_ready() {
            return true;
        }
        if self.source(s).end(hold) {
            self.ring_after_release(s, hold.slot);
        }
        false
    }

    /// After `handed` events of source `s` since it last went to the back of the line, is it
    /// the member's turn to go there, decided when the event is handed out? Only with
    /// `Every(n)`: after `n`. (`Adaptive` decides when the event has been consumed: see
    /// `adaptive_turn_ends`.)
    pub(crate) fn rotation_due(&self, handed: u32) -> bool {
        crate::turn::due_by_count(self.rotation, handed)
    }

    /// `Adaptive`, the rule *turns by the event, batches under a backlog*: a member that has
    /// just consumed its `handed`-th event of a source in a row goes to the back of the line
    /// unless the source is `still_ready` (a backlog), and under a backlog after a batch
    /// whose length the member's `pace` sets (ns between its events this turn, asked only
    /// then: `turn::backlog_batch`).
    pub(crate) fn adaptive_turn_ends(
        &self,
        handed: u32,
        still_ready: bool,
        pace: impl FnOnce() -> u64,
        ahead: impl FnOnce(u32) -> bool,
    ) -> bool {
        crate::turn::ends_under_backlog(handed, still_ready, pace, ahead)
    }

    /// Has a member that was handed `taken` events of `s` since the source's claim count was
    /// `since` taken more than its share of them (the claims over the group's member slots) by
    /// more than the lead a turn of `batch` allows (`turn::share_lead`)? A hint, erring
    /// towards turns, as the native backend's.
    pub(crate) fn ahead_of_share(&self, s: usize, taken: u32, since: u32, batch: u32) -> bool {
        let claims = self.source(s).hold().count.wrapping_sub(since);
        let share = claims / self.shared.high().max(1);
        taken > share + crate::turn::share_lead(batch)
    }

    /// Is a member other than `me` registered on `s` and idle (someone to hand a turn to)?
    pub(crate) fn anyone_else_idle(&self, s: usize, me: Occupant) -> bool {
        self.next_idle(s, me.slot, None).is_some()
    }

    /// `me` goes to the back of the line of `s` after its turn (the token has moved on
    /// already, when `me` went busy).
    pub(crate) fn to_back(&self, s: usize, me: Occupant) {
        let high = self.shared.high().max(1);
        self.source(s).set_line_head((me.slot + 1) % high);
    }

    /// Has `s` lately been ready at once when a leader started watching it (a backlog)?
    pub(crate) fn has_backlog(&self, s: usize) -> bool {
        self.source(s).ready_on_arm() > 512
    }

    /// `hold` of `s` is over (its event consumed): the leader may watch it again. Nothing
    /// happens if the hold was ended already (expired as overdue, or given up).
    pub(crate) fn release(&self, s: usize, hold: Hold) {
        let src = self.source(s);
        if src.hold() == hold {
            // A moving average over the last few holds (1/8 weight); a hint, so races between
            // holders of one source only blur it (`holds_are_quick`).
            src.note_hold(monotonic_ns().saturating_sub(src.claimed_at()));
        }
        if src.end(hold) {
            self.ring_after_release(s, hold.slot);
        }
    }

    /// After a hold of `s` by slot `me` ended: rings the leader, which may watch the source
    /// again, and the deputy after it.
    fn ring_after_release(&self, s: usize, me: u32) {
        let src = self.source(s);
        let leader = src.leader().slot;
        if leader != NONE && leader != me {
            self.wake(leader);
        }
        let deputy = src.deputy();
        if deputy != NONE && deputy != leader && deputy != me {
            self.wake(deputy);
        }
    }

    /// `me` no longer watches or holds `s` (it deleted the registration, or leaves): its hold
    /// (if any) released, its token passed on, and last out of the source's members (a source
    /// with no member left is nobody's, and may be taken for another file: see `table`).
    pub(crate) fn drop_source(&self, s: usize, me: Occupant, hold: Option<Hold>) {
        if let Some(hold) = hold {
            self.release(s, hold);
        }
        if self.leads(s, me) {
            self.pass(s, me, false);
        }
        self.source(s).set_member(me.slot, false);
    }

    /// How long `me`, idle and leading `s` while another member holds its last event, may sleep
    /// before it must look at that hold again (zero: the hold is overdue now). Only the leader
    /// depends on the holder (it watches the source again once the hold ends), so only the
    /// leader keeps a timer, and only while the hold lasts: `pass` rings a member it makes
    /// leader during a hold, so the leader knows. Every other member, and every member of a
    /// source nobody holds, sleeps with no timer for it.
    ///
    /// The clock is read through `now`, only when a hold's age matters, and at most once per
    /// `now`. The time is read before the claim's: an age so measured is never more than the
    /// real one, so a young hold is never ended as overdue, and a reading shared by several
    /// calls (one pass of `wait`) only makes a timer run later by that pass.
    pub(crate) fn hold_left(&self, s: usize, me: Occupant, now: &Now) -> Option<Duration> {
        let src = self.source(s);
        let holder = src.hold().slot;
        if holder == NONE || holder == me.slot || src.leader() != me {
            return None;
        }
        let since_claim = Duration::from_nanos(now.get().saturating_sub(src.claimed_at()));
        Some(HOLD_BOUND.saturating_sub(since_claim))
    }

    /// Ends the hold of `s` if it is overdue (kept past `HOLD_BOUND` by another member): `me`
    /// (its leader, see `hold_left`) ends it, as if released, so that the leader watches
    /// the source again; the late holder's own `release` then finds nothing to release. Only
    /// the hold found overdue is ended: the hold is read before its age (a claim made after
    /// that read is young), and ended by compare-and-swap against that very hold, so that a
    /// holder that released and claimed again meanwhile keeps its new hold. Returns whether
    /// it ended the hold.
    pub(crate) fn expire_if_overdue(&self, s: usize, me: Occupant, now: &Now) -> bool {
        let hold = self.source(s).hold();
        if hold.is_free() || hold.slot == me.slot {
            return false;
        }
        if self.hold_left(s, me, now) != Some(Duration::ZERO) {
            return false;
        }
        self.expire_hold(s, me, hold)
    }

    /// Ends `hold` of `s`, found overdue by `me`: whether it ended it (false if that hold is
    /// over already, even if its member holds `s` again).
    pub(crate) fn expire_hold(&self, s: usize, me: Occupant, hold: Hold) -> bool {
        if hold.is_free() || hold.slot == me.slot {
            return false;
        }
        let expired = self.source(s).end(hold);
        if expired {
            self.ring_after_release(s, me.slot);
        }
        expired
    }
}

/// One reading of the monotonic clock, taken when first asked for and then kept: the calls
/// of one pass that need the time share a reading, and a pass that needs none reads no clock.
pub(crate) struct Now(std::cell::Cell<u64>);

impl Now {
    /// Not read yet.
    pub(crate) fn new() -> Now {
        Now(std::cell::Cell::new(0))
    }

    /// The reading, taken now if not taken yet (0 stands for "not yet": the clock is far past it).
    pub(crate) fn get(&self) -> u64 {
        match self.0.get() {
            0 => {
                let now = monotonic_ns();
                self.0.set(now);
                now
            }
            now => now,
        }
    }
}
