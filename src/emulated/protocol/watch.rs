//! Who checks on whom: the liveness half of the token protocol.
//!
//! A member that depends on a member of another process checks that it is alive: the leader
//! waiting for the holder, and the *watcher* (the member that last passed the token) for the
//! leader; an idle member takes the watcher's job on when nobody able to does it (`volunteer`).
//! A dead one is cleared out by a reap, which the member table runs (`Members::reap`) with this
//! backend's hook (`clear_out`). A leader that leaves its ready source unclaimed for
//! `TAKE_BOUND` (stopped, or starved of CPU) loses the token to its watcher
//! (`take_from_stuck`), and so does a leader that holds its source itself past `HOLD_BOUND`
//! (it kept the token through its turn and stalled with an event: `take_from_overdue_leader`).

use std::time::Duration;

use super::{Now, Occupant, Protocol, ACTIVE_WINDOW, HOLD_BOUND, LIVENESS_CHECK};
use crate::members::Life;
use crate::shared::NONE;
use crate::sync::monotonic_ns;

impl Protocol<'_> {
    /// If `me` checks on the leader of `s` (it is the watcher, another member leads, and
    /// nobody holds the source): that leader and the time of the last claim, which tell
    /// whether the leader acted since `me` last looked (see `take_from_stuck`).
    pub(crate) fn leader_to_check(&self, s: usize, me: Occupant) -> Option<(Occupant, u64)> {
        let src = self.source(s);
        let leader = src.leader();
        let claimed = src.claimed_at();
        let checking =
            !leader.is_none() && leader != me && src.watcher() == me && src.hold().is_free();
        checking.then_some((leader, claimed))
    }

    /// How long `me` may sleep before it looks whether the leader of `s` is stuck (stopped, or
    /// starved of CPU, with the source ready and unclaimed, or holding it itself too long):
    /// only the member that checks on that leader (its watcher) looks. While the leader holds
    /// the source itself (it kept the token through its turn), when that hold would be overdue
    /// (`take_from_overdue_leader`); while another member holds it, after `HOLD_BOUND` (the
    /// leader times that hold and ends it by then, and a watcher that keeps the watch,
    /// `hand_watch`, must not sleep without a look while the leader may come to hold the source
    /// itself); while nobody holds it, only while the source is active (claimed within
    /// `ACTIVE_WINDOW`): every `LIVENESS_CHECK` at first, then as long again as the source has
    /// been quiet, so a source that goes quiet costs a handful of looks and then none.
    pub(crate) fn stuck_look_in(&self, s: usize, me: Occupant, now: &Now) -> Option<Duration> {
        let src = self.source(s);
        let leader = src.leader();
        if leader.is_none() || leader == me || src.watcher() != me {
            return None;
        }
        let hold = src.hold();
        let quiet = Duration::from_nanos(now.get().saturating_sub(src.claimed_at()));
        if hold.slot == leader.slot {
            return Some(HOLD_BOUND.saturating_sub(quiet));
        }
        if !hold.is_free() {
            return (hold.slot != me.slot).then_some(HOLD_BOUND);
        }
        (quiet < ACTIVE_WINDOW).then(|| quiet.max(LIVENESS_CHECK))
    }

    /// `me`, idle, plans its sleep: `stuck_look_in`, and if `me` is the watcher of `s`, when its
    /// look is due stored for `hand_watch` (0 for none).
    pub(crate) fn plan_look(&self, s: usize, me: Occupant, now: &Now) -> Option<Duration> {
        let look = self.stuck_look_in(s, me, now);
        let src = self.source(s);
        if src.watcher() == me {
            let due = look.map_or(0, |d| now.get().saturating_add(d.as_nanos() as u64));
            src.set_look_due(due);
        }
        look
    }

    /// `from` has just passed the token of `s` to `next`: who checks on `next` from now on.
    /// As a rule `from`: it is awake, and plans its next sleep with the look the watch needs.
    /// But the watcher keeps the watch when it will look within `HOLD_BOUND` anyway (idle, not
    /// `next`, its look due by then: `look_due`) and it, `from` and `next` are threads of one
    /// process (between them there is no death to watch for, only a stuck leader). The look it
    /// keeps is due before `next` can have held the source for `HOLD_BOUND`, and at it the
    /// watcher times whatever hold it finds (`stuck_look_in`), so a stall is found as soon as
    /// with a fresh watcher: `HOLD_BOUND` after the stalled claim. In a stream, where turns
    /// last tens of microseconds, moving the watch at every turn left every earlier passer with
    /// a look planned for nothing, one wake-up per turn (`docs/lab.md`, the watch kept).
    pub(crate) fn hand_watch(&self, s: usize, from: Occupant, next: Occupant) {
        let src = self.source(s);
        let watcher = src.watcher();
        let keep = !watcher.is_none()
            && watcher != from
            && watcher != next
            && self.pid(watcher.slot) == self.pid(from.slot)
            && self.pid(next.slot) == self.pid(from.slot)
            && self.is_idle(watcher)
            && {
                let due = src.look_due();
                let now = monotonic_ns();
                due > now && due - now <= HOLD_BOUND.as_nanos() as u64
            };
        if !keep {
            src.set_watcher(from);
        }
    }

    /// Is `me`, leading `s`, checked on by another member (its watcher, idle or about to be)?
    pub(crate) fn has_watcher(&self, s: usize, me: Occupant) -> bool {
        let watcher = self.source(s).watcher();
        !watcher.is_none() && watcher.slot != me.slot
    }

    /// Rings the watcher of `s`, so that it looks at the source again before it sleeps: its
    /// leader has just kept the token through the first event of a turn after a long wait,
    /// while the watcher may sleep with no timer, and the watcher times that hold
    /// (`stuck_look_in`).
    pub(crate) fn ring_watcher(&self, s: usize) {
        let watcher = self.source(s).watcher();
        if !watcher.is_none() {
            self.wake(watcher.slot);
        }
    }

    /// `me` checks on the leader of `s`, which holds `s` itself (it kept the token through its
    /// turn, `EmulatedWaiter::token_at_busy`, and is busy with the event): if that hold is
    /// overdue (`HOLD_BOUND` since its claim), the leader is stalled with it, and nobody else
    /// times it. The hold is ended, as a leader ends another holder's overdue hold, and `me`
    /// takes the token (`take_from_stuck`), so the source is watched again. The hold is read
    /// before its age and ended by compare-and-swap against that very hold, so a leader that
    /// released and claimed again meanwhile keeps its young hold. Returns whether `me` took it.
    pub(crate) fn take_from_overdue_leader(&self, s: usize, me: Occupant, now: &Now) -> bool {
        let src = self.source(s);
        let leader = src.leader();
        let hold = src.hold();
        if leader.is_none() || leader == me || src.watcher() != me || hold.slot != leader.slot {
            return false;
        }
        let since_claim = now.get().saturating_sub(src.claimed_at());
        if since_claim < HOLD_BOUND.as_nanos() as u64 || !src.end(hold) {
            return false;
        }
        self.take_from_stuck(s, me, leader)
    }

    /// `me` checks on `stuck`, which leads `s` but left it ready and unclaimed for
    /// `TAKE_BOUND`: `me` takes the token (it is idle, in `wait`), and `pass` skips `stuck`
    /// until it acts again. The stuck member, when it runs again, finds it no longer leads and
    /// stops watching (one empty wake-up at most). Returns whether `me` took it.
    pub(crate) fn take_from_stuck(&self, s: usize, me: Occupant, stuck: Occupant) -> bool {
        let src = self.source(s);
        if stuck.slot == me.slot || stuck.is_none() || !src.hold().is_free() {
            return false;
        }
        if !src.move_token(stuck, me) {
            return false;
        }
        src.set_stuck(stuck.slot);
        self.wake(stuck.slot);
        self.appoint_watcher(s, me);
        true
    }

    /// Whom `me` depends on for source `s` and must check on: the leader if `me` passed it the
    /// token last, the holder if `me` leads and waits for it. Only members of other processes.
    fn dependency(&self, s: usize, me: Occupant) -> Option<u32> {
        let src = self.source(s);
        let other = |m: u32| m != NONE && m != me.slot && self.pid(m) != crate::pid::current();
        let leader = src.leader();
        let holder = src.hold().slot;
        if leader == me && other(holder) {
            Some(holder)
        } else if src.watcher() == me && other(leader.slot) {
            Some(leader.slot)
        } else {
            None
        }
    }

    /// `me`, idle and not leading `s`, takes on checking the leader when nobody able to does:
    /// no watcher, or one that is busy, gone, or in the leader's own process. So a leader in
    /// another process is always watched while some member of the group is idle.
    pub(crate) fn volunteer(&self, s: usize, me: Occupant) {
        let src = self.source(s);
        let leader = src.leader();
        if leader.is_none() || leader == me || self.pid(leader.slot) == self.pid(me.slot) {
            return;
        }
        let watcher = src.watcher();
        let able = |w: Occupant| {
            !w.is_none() && self.is_idle(w) && self.pid(w.slot) != self.pid(leader.slot)
        };
        if watcher != me && !able(watcher) {
            src.replace_watcher(watcher, me);
        }
    }

    /// The process `me` depends on for `s` (see `dependency`), whose death it waits on (or
    /// checks on periodically).
    pub(crate) fn dependency_pid(&self, s: usize, me: Occupant) -> Option<u32> {
        self.dependency(s, me).map(|m| self.pid(m))
    }

    /// Checks the members `me` depends on for `s` and clears out those that died: the holder
    /// if `me` leads, the leader and the holder if `me` is the watcher.
    pub(crate) fn check(&self, s: usize, me: Occupant) {
        let src = self.source(s);
        let (leader, holder) = (src.leader().slot, src.hold().slot);
        let suspects = if src.watcher() == me {
            [leader, holder]
        } else if src.leader() == me {
            [holder, NONE]
        } else {
            [NONE, NONE]
        };
        let members = self.members();
        let my_pid = std::process::id();
        for m in suspects {
            if m == NONE || m == me.slot {
                continue;
            }
            if let Some(seen) = members.dead(m, my_pid) {
                self.reap(m, seen);
            }
        }
    }

    /// The emulation's part of a reap (`Members::reap` calls it while it holds the dead
    /// member's slot, REAPING, and its liveness byte, so that nobody joins the slot meanwhile):
    /// frees what the dead occupant held and passes its tokens on. Only what names that
    /// occupant is touched (its hold, whatever its count; its lead, by compare-and-swap
    /// against its tagged word), so the clearing is idempotent: a reap taken over from a dead
    /// reaper repeats whatever that one had done.
    pub(crate) fn clear_out(&self, dead: Occupant) {
        for s in 0..self.sources.count() {
            let src = self.source(s);
            if !src.is_used() {
                continue;
            }
            // Its hold and its lead (also on a source it was half-way through leaving), then,
            // last, its bit: a source with no member left may be taken for another file.
            let hold = src.hold();
            if hold.slot == dead.slot {
                self.release(s, hold);
            }
            if self.leads(s, dead) {
                self.pass(s, dead, false);
            }
            src.set_member(dead.slot, false);
        }
        // The source table's lock, if the dead occupant held it, last: a member waiting for it
        // then finds the table as the reap leaves it, the slots of files nobody else registered
        // free (model `a_slot_taken_for_another_file_while_its_last_member_is_reaped`).
        self.release_table_lock_of(dead);
    }

    /// Clears out the dead members of process `pid` (of every process: `None`): see
    /// `GroupInner::reap_dead`. Returns whether it reaped any.
    pub(crate) fn reap_dead(&self, pid: Option<u32>) -> bool {
        let members = self.members();
        let me = std::process::id();
        let mut any = false;
        for m in 0..self.shared.high() {
            if pid.is_some_and(|p| self.pid(m) != p) {
                continue;
            }
            if let Some(seen) = members.dead(m, me) {
                any |= self.reap(m, seen);
            }
        }
        any
    }

    /// Clears out member `m`, found dead in word `seen` (see `Members::reap`): whether this
    /// process reaped it.
    pub(crate) fn reap(&self, m: u32, seen: Life) -> bool {
        let reaped = self
            .members()
            .reap(m, seen, std::process::id(), |slot, generation| {
                self.clear_out(Occupant::new(slot, generation))
            });
        if reaped {
            crate::doorbell::ring_marked(self.shared, self.bells);
        }
        reaped
    }
}
