//! Early wake-up under a backlog: who spins for its turn instead of sleeping, and for how long.
//!
//! The hand-off is serial (the next leader watches the source only once the holder has
//! consumed its event), so a next leader asleep would put a kernel wake-up on every message's
//! path. So `pass` rings every new leader as the token reaches it, and a leader waiting for a
//! release spins for it (yielding the CPU, up to `LEADER_SPIN`) when holds of the source are
//! quick; under a backlog with quick holds (`spinning_pays`) `pass` also names the leader's
//! *deputy*, the next idle member after it, which the holder's `release` rings and which spins
//! (up to `SPIN_FOR_RELEASE`) for the token to come to it (a source of two members under strict
//! turns has no other idle member at that moment: the one coming back names itself,
//! `offer_deputy`; with no backlog, a leader that looks for its next event awake names and
//! rings one itself, `wake_deputy_early`). A spin ends when the turn it waits
//! for comes (or a role it spins for changes), a notification comes, or its budget has passed,
//! on the clock of `crate::sync` (so that the models see the very loop, bounded).
//!
//! A ring is never lost on a spinning member. A ringer (`Protocol::wake`) leaves the bell of a
//! member whose `spinning` word is set unrung: it stored its change first, and the member
//! stores "not spinning" before it reads the shared state again (SeqCst, a store-then-load pair
//! against the ringer's store of its change and load of the word). The spin itself looks only
//! at the sources it spins for, so that a role elsewhere (leading a free source, say) cannot
//! feed its loop; a ring it left unrung may have been about another source (the token of one
//! passed to it meanwhile), so whatever the spin's end, the member goes round its wait once
//! more (`Spin::Changed`, `Spin::Vain`) and reads the whole state before it sleeps, and after a
//! vain spin sleeps without spinning again (else it would spin without end for a turn that does
//! not come).
//!
//! The deputy, the stuck leader and the timings are hints: a lost update there costs a check, a
//! wake-up or a spin, never the token.

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use super::{Occupant, Protocol, LEADER_SPIN, SHORT_HOLD, SPIN_FOR_RELEASE};
use crate::contract::Rotation;
use crate::shared::NONE;
use crate::sync::{monotonic_ns, yield_now};

/// How a member's spin for its turn ended (`Protocol::spin_for_turn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spin {
    /// Nothing to spin for: the member sleeps now.
    Not,
    /// The turn came, a role spun for changed, or a notification came: the member goes round
    /// its wait again.
    Changed,
    /// The budget passed with no change: the member goes round its wait once more, without
    /// spinning, and then sleeps (a ring left unrung while it spun is read in that round).
    Vain,
}

impl Protocol<'_> {
    /// Does it pay for `me` to spin for its turn on `s` rather than sleep? For the leader
    /// waiting for the holder to consume the last event, when holds of `s` are quick (it was
    /// rung as the token reached it, and would be rung again at the release); for the deputy of
    /// a leader, when holds are quick (a deputy is named only under a backlog, `spinning_pays`,
    /// or by a leader looking for its next event awake, `wake_deputy_early`).
    pub(crate) fn spin_pays_for(&self, s: usize, me: Occupant) -> bool {
        let src = self.source(s);
        let leader = src.leader();
        if leader == me {
            !src.hold().is_free() && self.holds_shorter_than(s, LEADER_SPIN)
        } else {
            !leader.is_none() && src.deputy() == me.slot && self.holds_shorter_than(s, SHORT_HOLD)
        }
    }

    /// `me` leads `s`, free, and looks for its event awake (`quick_watch`), with no backlog
    /// behind it (one request at a time): the member next in line is named its deputy and rung
    /// now, while `me` waits anyway, so that it is awake, spinning for the token, when the event
    /// comes and the token passes to it. Without it the token reached a member asleep, and its
    /// ring and wake-up lay between the event and the next one (`herd rpc`: 26–27 µs per call
    /// against 21–22, `docs/lab.md`). Under a backlog the turn goes on with `me`
    /// (`EmulatedWaiter::token_at_busy`), and `pass` names the deputy.
    pub(crate) fn wake_deputy_early(&self, s: usize, me: Occupant) {
        let src = self.source(s);
        if src.leader() != me
            || !src.hold().is_free()
            || src.deputy() != NONE
            || self.has_backlog(s)
        {
            return;
        }
        self.name_deputy(s, me.slot);
        let deputy = src.deputy();
        if deputy != NONE && deputy != me.slot {
            self.wake(deputy);
        }
    }

    /// Names the deputy of `s`: the next idle member after `leader` in line. It is rung at the
    /// next `release`, after the holder is done, so the ring (a system call, and an inter-CPU
    /// interrupt) is off the hand-off's critical path.
    pub(super) fn name_deputy(&self, s: usize, leader: u32) {
        let high = self.shared.high().max(1);
        let deputy = self.next_idle(s, leader, Some((leader + 1) % high));
        self.source(s).set_deputy(deputy.map_or(NONE, |d| d.slot));
    }

    /// `me`, idle and not leading `s`, plans its sleep. A source of two members under strict
    /// turns (`Every(1)`: the leader passes the token at its next event) has no deputy, as
    /// `pass` finds nobody idle after the new leader but the member that is handing its event
    /// out; that member then slept and was woken for every turn (27–32 µs per message here).
    /// So, while spinning pays, it makes itself the deputy as it comes back, and spins for its
    /// turn (`spin_pays_for`): 5–6 µs per message on a pipe. Not with more members: one that
    /// spins while a third is busy slows that one down, which then misses turns (at three
    /// members the shares spread to Jain 0.987). Nor with longer turns: the deputy would be rung
    /// at every release of the leader's turn for nothing (under `Adaptive`, twice the CPU per
    /// message at two members).
    pub(crate) fn offer_deputy(&self, s: usize, me: Occupant) {
        if self.rotation != Rotation::Every(1) {
            return;
        }
        let src = self.source(s);
        let leader = src.leader();
        if leader.is_none() || leader == me || src.deputy() != NONE || !self.spinning_pays(s) {
            return;
        }
        let words = (self.shared.high() as usize).div_ceil(64);
        if src.members_up_to(words, 3) == 2 {
            src.set_deputy(me.slot);
        }
    }

    /// Does it pay for the next leaders of `s` to be woken early and spin for their turn (the
    /// leader and its deputy)? Only when there is a backlog (the source has lately been ready
    /// at once when a leader started watching it) and holders consume quickly (well within the
    /// spin). Otherwise a deputy would only burn its CPU and sleep anyway.
    pub(crate) fn spinning_pays(&self, s: usize) -> bool {
        self.has_backlog(s) && self.holds_shorter_than(s, SHORT_HOLD)
    }

    /// Do holders of `s` consume within `bound` (a moving average of the holds)?
    fn holds_shorter_than(&self, s: usize, bound: Duration) -> bool {
        self.source(s).hold_ns() < bound.as_nanos() as u64
    }

    /// Does `me` lead `s` while another member holds it (it waits for the release)?
    pub(crate) fn waits_for_release(&self, s: usize, me: Occupant) -> bool {
        let src = self.source(s);
        src.leader() == me && !src.hold().is_free()
    }

    /// `me`, idle, before it sleeps: if it waits for its turn on one of `sources` where
    /// spinning pays (`spin_pays_for`), spins (yielding the CPU) until that turn comes or its
    /// role there changes, a notification comes, or its budget passes: `LEADER_SPIN` for a
    /// leader waiting for a release, `SPIN_FOR_RELEASE` for a deputy, and never past
    /// `time_left` (the wait's deadline, asked only if it spins). Door bells rung for it
    /// meanwhile are left unrung (see the module docs): whatever the answer but `Spin::Not`,
    /// the member reads the whole state again before it sleeps.
    ///
    /// Each source is looked at on its own: the spin is for the sources `me` waits on when it
    /// starts, and it ends when one of those is no longer waited on. A role on another source
    /// never counts, so a member that leads one source and is the deputy of another cannot
    /// feed its own loop.
    #[inline]
    pub(crate) fn spin_for_turn(
        &self,
        me: Occupant,
        sources: &[usize],
        time_left: impl FnOnce() -> Option<Duration>,
    ) -> Spin {
        // Every wait asks; most have nothing to spin for.
        let at_start = self.waiting_on(me, sources);
        if at_start == 0 {
            return Spin::Not;
        }
        self.spin(me, sources, at_start, time_left())
    }

    /// Bit i: `me` waits for its turn on `sources[i]`, and spinning for it pays.
    #[inline]
    fn waiting_on(&self, me: Occupant, sources: &[usize]) -> u64 {
        let mut mask = 0;
        for (i, &s) in sources.iter().take(64).enumerate() {
            if self.spin_pays_for(s, me) {
                mask |= 1 << i;
            }
        }
        mask
    }

    /// The spin of `spin_for_turn`, for the sources of mask `at_start`.
    fn spin(
        &self,
        me: Occupant,
        sources: &[usize],
        at_start: u64,
        time_left: Option<Duration>,
    ) -> Spin {
        let slot = self.shared.member(me.slot);
        let changed = || {
            slot.is_notified(me.generation) || self.waiting_on(me, sources) & at_start != at_start
        };
        slot.spinning.store(1, SeqCst);
        // A leader waits for a release it would otherwise be rung for; a deputy only for a turn
        // that may come (`spin_pays_for`).
        let leading = sources.iter().any(|&s| self.waits_for_release(s, me));
        let budget = match leading {
            true => LEADER_SPIN,
            false => SPIN_FOR_RELEASE,
        };
        let budget = time_left.map_or(budget, |left| left.min(budget));
        let until = monotonic_ns().saturating_add(budget.as_nanos() as u64);
        let mut spun = false;
        while !spun && monotonic_ns() < until {
            yield_now();
            spun = changed();
        }
        slot.spinning.store(0, SeqCst);
        // A bell left unrung while we spun: its cause is in the shared state, read it again
        // (this look for the sources spun for, the next round of the wait for the rest).
        match spun || changed() {
            true => Spin::Changed,
            false => Spin::Vain,
        }
    }
}
