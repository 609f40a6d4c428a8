//! The emulated waiter's wait. An idle member's wait goes pass after pass through three steps
//! (`wait_idle`): what to watch and until when (`plan`: overdue holds ended, due turns taken,
//! the poller matched, the timers), the sleep (`sleep`: a spin for a release, the queue an
//! earlier kernel wait left, or the kernel wait), and what woke it (`dispatch`); the deadline
//! is checked once per pass. Also the busy member's look without waiting (`poll_once`), the
//! end of a turn once an event is consumed, and the liveness checks that run from the wait.

use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

#[cfg(unix)]
use super::hand_out::poll_event;
use super::hand_out::{ready_now, still_ready};
use super::protocol::{
    Now, Spin, ACTIVE_WINDOW, LIVENESS_CHECK, QUICK_RETURN, SLOW_RETURNS, TAKE_BOUND,
};
use super::{quick_watch, EmulatedWaiter, Protocol};
use crate::contract::Rotation;
use crate::error::{Error, RawSource, Result};
use crate::interest::Events;
#[cfg(unix)]
use crate::registry;
use crate::sync::monotonic_ns;

/// What one pass of `wait_idle` watches, and until when (see `EmulatedWaiter::plan`).
struct Pass {
    /// Just started watching a source: look without sleeping first.
    probe: bool,
    /// The period of the liveness check, if one is needed.
    check_every: Option<Duration>,
    /// A leader is suspected stuck: look again `TAKE_BOUND` later.
    suspect: bool,
    /// This member checks on a leader of an active source: a look for a stuck leader is due
    /// when the timeout comes (`Protocol::stuck_look_in`).
    stuck_look: bool,
    /// The wait's deadline.
    deadline: Option<Instant>,
    /// The deadline comes before every other timer (an empty wake-up is then its own).
    deadline_first: bool,
    /// How long the kernel wait may sleep.
    timeout: Option<Duration>,
}

/// What a member going busy does with the token of a source it holds (`token_at_busy`).
enum AtBusy {
    /// Keeps it through its turn (`ring_watcher`: after a long wait, the watcher is rung to
    /// look at the hold, see `token_at_busy`).
    Keep { ring_watcher: bool },
    /// Ends its turn now: to the back of the line, the token passed on.
    EndTurn,
    /// Passes it on (to the back of the line if its turn is over).
    Pass,
}

/// How a pass's sleep ended.
enum Slept {
    /// The wait is over: its result.
    Done(usize),
    /// Nothing to dispatch: the next pass.
    Again,
    /// A spin saw no change: the next pass, which sleeps without spinning.
    SpunInVain,
    /// The kernel wait returned: dispatch what it found.
    Woke,
}

impl EmulatedWaiter {
    pub(crate) fn consumed(&mut self, group: &Protocol<'_>, key: usize) -> Result<()> {
        let tk = group;
        let mut i = 0;
        while i < self.holding.len() {
            let (s, k, hold) = self.holding[i];
            if k == key {
                self.holding.swap_remove(i);
                tk.release(s, hold);
                self.end_turn(tk, s);
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// `Rotation::Adaptive`: this member consumed an event of source `s`; if its turn ends
    /// (`Protocol::adaptive_turn_ends`: the source is no longer ready, or the batch is full), it
    /// goes to the back of the line, and passes the token on if it kept it (`token_at_busy`).
    /// In a quick stream the source is not asked whether it is still ready
    /// (`turn::goes_on_unasked`): the turn ends by its length or the share rule.
    /// The batch under a backlog is `turn::backlog_batch` of the member's pace this turn (16,
    /// or about 300 µs of events taken closer than 20 µs apart, at most 96), cut short once the
    /// member is ahead of its share (`Protocol::ahead_of_share`).
    pub(super) fn end_turn(&mut self, tk: &Protocol<'_>, s: usize) {
        if tk.rotation != Rotation::Adaptive {
            return;
        }
        let Some((&fd, reg)) = self
            .registrations
            .iter_mut()
            .find(|(_, r)| r.source == Some(s))
        else {
            return;
        };
        if reg.handed == 0 {
            return; // no turn going on (it ended as the event was handed out): nothing to end
        }
        if !tk.anyone_else_idle(s, self.me) {
            reg.handed = 0; // nobody to hand to: a new turn, with nothing moved
            return;
        }
        // The turn's pace: how far apart this member took its events (asked under a backlog;
        // the clock is read once, whichever rule asks first).
        let (handed, started) = (reg.handed, reg.turn_started_ns);
        let pace_ns = std::cell::OnceCell::new();
        let pace = || {
            *pace_ns
                .get_or_init(|| monotonic_ns().saturating_sub(started) / u64::from(handed.max(1)))
        };
        // A quick stream's turn goes on without asking the descriptor (`turn::goes_on_unasked`).
        let ready = crate::turn::goes_on_unasked(handed, pace)
            || still_ready(fd, reg.interest).unwrap_or_else(|| tk.has_backlog(s));
        let (taken, since) = (reg.taken, reg.claims_at_add);
        let ahead = |batch| tk.ahead_of_share(s, taken, since, batch);
        if tk.adaptive_turn_ends(handed, ready, pace, ahead) {
            reg.handed = 0;
            match tk.leads(s, self.me) {
                true => tk.pass(s, self.me, true),
                false => tk.to_back(s, self.me),
            }
        }
    }

    /// Going busy with the event of `s` it holds: what becomes of the token of `s`? Passing it
    /// for the few microseconds a quick member is away, and taking it back (the member is first
    /// in line while its turn goes on), costs two rings and a wake-up of the next member per
    /// event, for nothing; so a member keeps it (`Keep`) when:
    ///
    /// - its turn goes on (with `Every(n)`, `to_back` was not decided at the hand-out; with
    ///   `Adaptive`, the turn ends at `consumed`, `end_turn`, and the token passes then);
    /// - it is quick: it came back to `wait` within `QUICK_RETURN` of its last return at least
    ///   once in its last `SLOW_RETURNS` (`slow_in_a_row`), so the source waits for it
    ///   microseconds, not the length of its work. Under `Adaptive` a slow member ends its turn
    ///   now instead (`EndTurn`): batches pay only for quick members, and the next member
    ///   serves the backlog meanwhile;
    /// - it is in a batch (its second event of the turn or later, or the source has a backlog);
    /// - another member checks on it (the watcher, set when the token last moved, which plans
    ///   its sleeps with a timer while the source is active, and is rung when a turn's first
    ///   event is kept after a wait of half `ACTIVE_WINDOW` or more): that member times the hold
    ///   (`Protocol::take_from_overdue_leader`: past `HOLD_BOUND` it ends the hold and takes the
    ///   token, as a leader ends another holder's), looks for a ready source left unclaimed
    ///   (`look_for_stuck`, `TAKE_BOUND`), and is woken by its death (`watch_dependencies`).
    ///
    /// Otherwise the token is passed as for any busy member (`Pass`).
    /// (`fd` is the exclusive descriptor of `s`: `sources` and `exclusive_fds` go in step.)
    fn token_at_busy(&self, tk: &Protocol<'_>, s: usize, fd: RawSource) -> AtBusy {
        let holds = self.holding.iter().any(|&(held, _, _)| held == s);
        if !holds || self.to_back.contains(&s) || !tk.leads(s, self.me) {
            return AtBusy::Pass;
        }
        if self.slow_in_a_row >= SLOW_RETURNS {
            return match tk.rotation {
                Rotation::Adaptive => AtBusy::EndTurn,
                Rotation::Every(_) => AtBusy::Pass,
            };
        }
        let handed = self
            .registrations
            .get(&fd)
            .filter(|r| r.source == Some(s))
            .map_or(0, |r| r.handed);
        if !(handed >= 2 || tk.has_backlog(s)) || !tk.has_watcher(s, self.me) {
            return AtBusy::Pass;
        }
        // The watcher plans its sleep with a timer while the source is active; after a wait as
        // long as half the active window it may sleep without one: rung, it plans again.
        let long_wait = || {
            let waited = monotonic_ns().saturating_sub(self.wait_started_ns);
            waited >= ACTIVE_WINDOW.as_nanos() as u64 / 2
        };
        AtBusy::Keep {
            ring_watcher: handed == 1 && long_wait(),
        }
    }

    pub(crate) fn wait(
        &mut self,
        group: &Protocol<'_>,
        events: &mut Events,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        let tk = group;
        let me = self.me;
        // A timeout too long to add to now is no deadline at all (as in `polling`).
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        // Back from handling exclusive events: quickly? (see `token_at_busy`)
        self.wait_started_ns = monotonic_ns();
        if self.returned_ns != 0 {
            let away = self.wait_started_ns.saturating_sub(self.returned_ns);
            self.slow_in_a_row = match away < QUICK_RETURN.as_nanos() as u64 {
                true => 0,
                false => self.slow_in_a_row.saturating_add(1),
            };
            self.returned_ns = 0;
        }
        // Coming back to wait: what was handed out last time has been consumed; what the
        // caller did not say so for is counted.
        if !self.holding.is_empty() {
            let unconsumed = self.holding.len() as u64;
            tk.shared.member(me.slot).unconsumed.add(unconsumed);
        }
        while let Some((s, _, hold)) = self.holding.pop() {
            tk.release(s, hold);
            self.end_turn(tk, s);
        }
        if cfg!(unix) && timeout == Some(Duration::ZERO) {
            // A look, not a wait: the member stays busy (nobody passes it a token, it passes
            // none) and takes only what nobody leads (see `poll_once`).
            let result = self.poll_once(tk, events);
            for &s in &self.sources {
                if tk.leads(s, me) {
                    tk.pass(s, me, false);
                }
            }
            self.to_back.clear();
            return result;
        }
        // Through the member table, against this occupancy: a slot being reaped stays reaped.
        if !group.members().go_idle(&self.membership) {
            return Err(crate::members::lost_slot(tk.shared));
        }
        let result = self.wait_idle(tk, events, deadline);
        // A watch the wait ended without its event lasted at least this long (`quick_watch`).
        self.quick_watch.stop();
        // Going busy: pass on every token this member has, so the group keeps listening (but
        // the one of a turn it goes on with, see `token_at_busy`), and go to the back of the
        // lines where it is due.
        if !group.members().go_busy(&self.membership) {
            return Err(crate::members::lost_slot(tk.shared));
        }
        for i in 0..self.sources.len() {
            let (s, fd) = (self.sources[i], self.exclusive_fds[i]);
            let to_back = match self.token_at_busy(tk, s, fd) {
                AtBusy::Keep { ring_watcher } => {
                    if ring_watcher {
                        tk.ring_watcher(s);
                    }
                    continue;
                }
                AtBusy::EndTurn => {
                    let reg = self.registrations.get_mut(&fd);
                    if let Some(reg) = reg.filter(|r| r.source == Some(s)) {
                        reg.handed = 0; // a new turn, from nothing
                    }
                    true
                }
                AtBusy::Pass => self.to_back.contains(&s),
            };
            if to_back || tk.leads(s, me) {
                tk.pass(s, me, to_back);
            }
        }
        self.to_back.clear();
        if !self.holding.is_empty() {
            self.returned_ns = monotonic_ns();
        }
        result
    }

    /// `wait(Some(Duration::ZERO))`, busy polling: looks once and returns, taking no token and
    /// disturbing no holder. The member stays busy in the member table, so no token is passed
    /// to it and no bell rung for it. Its own descriptors: one kernel look (if it has any).
    /// Exclusive sources: one it may take is one nobody leads (every member busy, or polling)
    /// and nobody holds; a zero-timeout `poll(2)` says whether it is ready, and the claim is
    /// made and confirmed as the leader's would be (`Protocol::claim`, `confirm_claim`), so it
    /// is handed to exactly one member. A source an idle member leads is left to it: that
    /// member's kernel wait takes the event, in its turn. So 100 members polling cost one
    /// `poll(2)` per look and source, never a hand-off (`docs/lab.md`, busy polling).
    #[cfg(unix)]
    pub(super) fn poll_once(&mut self, tk: &Protocol<'_>, events: &mut Events) -> Result<usize> {
        let me = self.me;
        let slot = tk.shared.member(me.slot);
        if slot.take_notified(self.membership.generation()) {
            tk.drain_bell(me.slot);
            return Ok(0);
        }
        self.rebuild_if_due(tk)?;
        let limit = self.registrations.events_per_wait(events.room());
        let own = self.registrations.len() > self.exclusive_fds.len()
            || self
                .exclusive_fds
                .iter()
                .any(|fd| self.registrations[fd].in_poller);
        if own && self.pending.is_empty() {
            self.reserve_raw_events();
            self.raw_events.clear();
            if let Err(e) = self.raw_events.wait(&self.poller, Some(Duration::ZERO)) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(Error::io("looking in the member's poller", e));
                }
                events.set_interrupted();
                return Ok(0);
            }
            self.polls += 1;
            let (died, _) = self
                .deaths
                .fired(&self.poller, self.raw_events.iter().map(|ev| ev.key));
            if died {
                for &s in &self.sources {
                    tk.check(s, me);
                }
            }
            if self.collect_candidates(tk) {
                tk.drain_bell(me.slot);
            }
        }
        self.serve_pending(tk, events, limit);
        let mut stale = std::mem::take(&mut self.stale);
        for i in 0..self.exclusive_fds.len() {
            if events.len() >= limit {
                break;
            }
            let fd = self.exclusive_fds[i];
            let Some(reg) = self.registrations.get_mut(&fd) else {
                continue;
            };
            let Some(s) = reg.source else { continue };
            let Some(seen) = tk.free_for_a_look(s, me).filter(|_| !reg.queued) else {
                continue; // led by an idle member, or held: not this look's to take
            };
            let Some(event) = poll_event(fd, reg.interest, reg.key) else {
                continue;
            };
            if !registry::still_names(fd, reg.file) {
                stale.push(fd);
                continue;
            }
            let Some(hold) = tk.claim(s, me) else {
                continue;
            };
            let interest = reg.interest;
            if !tk.confirm_claim(s, hold, seen, || ready_now(fd, interest)) {
                continue;
            }
            if !tk.busy_claim_stands(s, me, hold) {
                continue; // a member came back to wait meanwhile: its event
            }
            reg.handed += 1;
            reg.taken = reg.taken.wrapping_add(1);
            if reg.handed == 1 {
                reg.turn_started_ns = monotonic_ns();
            }
            self.holding.push((s, reg.key, hold));
            events.push(event);
        }
        for &fd in &stale {
            let _ = self.forget(tk, fd);
        }
        stale.clear();
        self.stale = stale;
        Ok(events.len())
    }

    #[cfg(not(unix))]
    pub(super) fn poll_once(&mut self, _tk: &Protocol<'_>, _events: &mut Events) -> Result<usize> {
        unreachable!("busy polling takes the waiting path outside Unix")
    }

    /// The wait of an idle member, pass after pass until something is handed out, a
    /// notification or a signal comes, or the deadline passes: each pass decides what to watch
    /// and until when (`plan`), sleeps (`sleep`: a spin, the queue left by an earlier kernel
    /// wait, or the kernel wait), and looks at what woke it (`dispatch`). The deadline is
    /// checked in one place, at the top of every pass after the first.
    fn wait_idle(
        &mut self,
        tk: &Protocol<'_>,
        events: &mut Events,
        deadline: Option<Instant>,
    ) -> Result<usize> {
        let limit = self.registrations.events_per_wait(events.room());
        let mut first = true;
        let mut spin = true;
        loop {
            if !std::mem::take(&mut first) && deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(0);
            }
            let pass = self.plan(tk, deadline)?;
            // No spin right after a spin that saw no change (see `Protocol::spin_for_turn`).
            match self.sleep(tk, events, &pass, limit, std::mem::replace(&mut spin, true))? {
                Slept::Done(n) => return Ok(n),
                Slept::Again => continue,
                Slept::SpunInVain => {
                    spin = false;
                    continue;
                }
                Slept::Woke => {}
            }
            if let Some(n) = self.dispatch(tk, events, &pass, limit) {
                return Ok(n);
            }
        }
    }

    /// A pass's first step, what to watch and until when: ends the holds that are overdue,
    /// takes the turns that are due (or volunteers to check on a leader), makes the poller
    /// match, and works out the timers (the deadline, the liveness check, a hold's expiry, a
    /// suspected stuck leader).
    fn plan(&mut self, tk: &Protocol<'_>, deadline: Option<Instant>) -> Result<Pass> {
        let me = self.me;
        // One clock reading for this pass's looks at the holds, if any needs it.
        let now = Now::new();
        for &s in &self.sources {
            // A holder that kept its event too long is not waited for (`HOLD_BOUND`).
            tk.expire_if_overdue(s, me, &now);
            if !tk.take_if_due(s, me) {
                tk.volunteer(s, me);
                tk.offer_deputy(s, me);
            }
        }
        // Just started watching a source: look once without sleeping, to learn whether it
        // has a backlog (see `Protocol::spinning_pays`).
        let probe = self.match_poller(tk)?;
        let check_every = self.watch_dependencies(tk);
        // A leader waiting for a holder looks again when the hold expires; a member that
        // suspects a stuck leader looks again `TAKE_BOUND` later.
        let hold = self
            .sources
            .iter()
            .filter_map(|&s| tk.hold_left(s, me, &now))
            .min();
        let suspect = self
            .exclusive_fds
            .iter()
            .any(|fd| self.registrations[fd].suspect.is_some());
        // The watcher of a leader looks for it stuck, less often the longer the source is
        // quiet, and not at all once it has been quiet for a while.
        let stuck_look = self
            .sources
            .iter()
            .filter_map(|&s| tk.plan_look(s, me, &now))
            .min();
        let check_left = self
            .next_check
            .map(|at| at.saturating_duration_since(Instant::now()));
        let timers = [check_left, hold, suspect.then_some(TAKE_BOUND), stuck_look]
            .into_iter()
            .flatten()
            .min();
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let deadline_first = left.is_some_and(|l| timers.is_none_or(|t| l <= t));
        Ok(Pass {
            probe,
            check_every,
            suspect,
            stuck_look: stuck_look.is_some(),
            deadline,
            deadline_first: deadline_first && !probe,
            timeout: match probe {
                true => Some(Duration::ZERO),
                false => [left, timers].into_iter().flatten().min(),
            },
        })
    }

    /// The processes this member depends on (the holder of a source it leads, the leader of
    /// one it passed the token to) and its neighbour in the group (`crate::ring`): their deaths
    /// wake it (a pidfd in its poller, on Linux). Where one cannot be watched so, it checks
    /// on them periodically instead: returns the period of that check (`None`: every death
    /// comes as an event, or there is none to watch), kept as a deadline across passes and
    /// waits, so that a signal or an early return does not put it off.
    fn watch_dependencies(&mut self, tk: &Protocol<'_>) -> Option<Duration> {
        self.depends_on.clear();
        for &s in &self.sources {
            if let Some(pid) = tk.dependency_pid(s, self.me) {
                if !self.depends_on.contains(&pid) {
                    self.depends_on.push(pid);
                }
            }
        }
        let dependencies = self.depends_on.len();
        let neighbour = self
            .ring
            .neighbour(tk.shared, self.me.slot, crate::pid::current());
        if let Some(n) = neighbour {
            if !self.depends_on.contains(&n.pid) {
                self.depends_on.push(n.pid);
            }
        }
        let by_event =
            self.depends_on.is_empty() || self.deaths.watch(&self.poller, &self.depends_on);
        if self.deaths.take_check_now() {
            self.check_now(tk);
        }
        let check_every = match (by_event, dependencies) {
            (true, _) => None,
            (false, 0) => Some(crate::ring::SWEEP),
            (false, _) => Some(LIVENESS_CHECK),
        };
        self.next_check = check_every.map(|every| {
            let at = Instant::now() + every;
            self.next_check.map_or(at, |next| next.min(at))
        });
        check_every
    }

    /// The liveness check: the members this member depends on, and the dead members of its
    /// neighbour's process, are cleared out if they died.
    fn check_now(&mut self, tk: &Protocol<'_>) {
        for &s in &self.sources {
            tk.check(s, self.me);
        }
        if let Some(n) = self
            .ring
            .neighbour(tk.shared, self.me.slot, crate::pid::current())
        {
            tk.reap_dead(Some(n.pid));
        }
    }

    /// A pass's second step, the sleep: a spin for a release (under a backlog, if `spin`), or
    /// the ready descriptors an earlier kernel wait left (served without a kernel wait, so a
    /// wait costs in proportion to what it returns), or the kernel wait itself, until the
    /// pass's timeout.
    fn sleep(
        &mut self,
        tk: &Protocol<'_>,
        events: &mut Events,
        pass: &Pass,
        limit: usize,
        spin: bool,
    ) -> Result<Slept> {
        let slot = tk.shared.member(self.me.slot);
        let spun = match spin {
            true => self.spin_for_release(tk, pass.deadline),
            false => Spin::Not,
        };
        if spun != Spin::Not {
            if slot.take_notified(self.membership.generation()) {
                slot.wakeups.add(1);
                return Ok(Slept::Done(0));
            }
            return Ok(match spun {
                Spin::Vain => Slept::SpunInVain,
                _ => Slept::Again,
            });
        }
        if !self.pending.is_empty() && !pass.probe {
            if slot.take_notified(self.membership.generation()) {
                tk.drain_bell(self.me.slot);
                return Ok(Slept::Done(0));
            }
            self.serve_pending(tk, events, limit);
            return Ok(match events.is_empty() {
                true => Slept::Again,
                false => Slept::Done(events.len()),
            });
        }
        self.reserve_raw_events();
        self.raw_events.clear();
        // A mark left by a ringer that died before it wrote must not silence the bell for
        // long (see `Protocol::wake`); clearing it is always safe (a ring then writes). (A
        // look first: the mark is usually clear, and a clear is a locked swap.)
        if slot.rung.load(SeqCst) != 0 {
            slot.rung.swap(0, SeqCst);
        }
        // Leading a free source: a watch, looked for awake first if this member's watches end
        // quickly (`quick_watch`; not right after a vain spin). Not on Windows, where a ring is
        // the poller's notify, which a look without sleeping would take unseen.
        let watching = pass.timeout != Some(Duration::ZERO) && self.watching_free;
        if watching {
            self.quick_watch.start();
        }
        let res = match cfg!(unix) && spin && watching && self.quick_watch.pays() {
            true => {
                for &s in &self.sources {
                    tk.wake_deputy_early(s, self.me); // the next member awake for the token
                }
                self.look_awake_then_wait(pass.timeout)
            }
            false => self.raw_events.wait(&self.poller, pass.timeout),
        };
        if let Err(e) = res {
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::io("waiting in the member's poller", e));
            }
            // A signal handler ran: the wait ends with no events, so that the caller sees
            // its flag at once (`Waiter::wait`); the timers that are due run first.
            if self.check_due(tk) || pass.suspect {
                self.look_for_stuck(tk);
            }
            events.set_interrupted();
            return Ok(Slept::Done(0));
        }
        self.polls += 1;
        Ok(Slept::Woke)
    }

    /// A pass's last step, dispatch: what woke the member (a death, a probe's answer, a timer,
    /// its bell, ready descriptors). The wait's result, or `None` to go round again.
    fn dispatch(
        &mut self,
        tk: &Protocol<'_>,
        events: &mut Events,
        pass: &Pass,
        limit: usize,
    ) -> Option<usize> {
        let slot = tk.shared.member(self.me.slot);
        // The periodic check, when due, whatever woke the member.
        let checked_now = self.check_due(tk);
        let (died, only_deaths) = self
            .deaths
            .fired(&self.poller, self.raw_events.iter().map(|ev| ev.key));
        if died {
            // A process this member watches ended: its dead members are cleared out now
            // (their holds released, their tokens passed on), and the neighbour looked for
            // again.
            for pid in self.deaths.take_ended() {
                tk.reap_dead(Some(pid));
            }
            for &s in &self.sources {
                tk.check(s, self.me);
            }
            self.ring.look_again();
            if only_deaths {
                return None;
            }
        }
        if pass.probe {
            self.note_backlog(tk);
            // (A notification counts: on Windows the bell is the poller's notify, which
            // this look consumed without leaving an event.)
            if self.raw_events.is_empty() && !slot.is_notified(self.membership.generation()) {
                return None; // nothing yet: now sleep until there is
            }
        }
        if self.raw_events.is_empty() {
            return self.woken_empty(tk, pass, checked_now);
        }
        slot.wakeups.add(1);
        // On Windows a bell leaves no event to see: look at the flag every time.
        let rung = self.collect_candidates(tk) || cfg!(windows);
        if rung {
            tk.drain_bell(self.me.slot);
        }
        let found_readiness = !self.pending.is_empty();
        if self.quick_watch.is_on() && self.found_exclusive() {
            self.quick_watch.found(); // a led source's event: the watch ended
        }
        self.serve_pending(tk, events, limit);
        let notified = rung && slot.take_notified(self.membership.generation());
        if !events.is_empty() || notified {
            return Some(events.len());
        }
        if found_readiness {
            slot.empty_wakeups.add(1);
        } else {
            slot.token_wakeups.add(1);
        }
        None
    }

    /// Woken with nothing to see: a timer (the liveness check, a hold's expiry, a suspected
    /// stuck leader, the deadline), or a door bell where bells are the poller's notify. Runs
    /// the checks that are due; a notification ends the wait.
    fn woken_empty(&mut self, tk: &Protocol<'_>, pass: &Pass, checked_now: bool) -> Option<usize> {
        let slot = tk.shared.member(self.me.slot);
        let checked = checked_now || pass.check_every.is_some();
        if checked && !checked_now {
            self.next_check = None;
            self.check_now(tk);
        }
        if checked || pass.suspect || pass.stuck_look {
            self.look_for_stuck(tk);
        }
        if slot.take_notified(self.membership.generation()) {
            slot.wakeups.add(1);
            return Some(0);
        }
        if !pass.deadline_first && pass.check_every.is_none() {
            // Woken with nothing: a door bell where bells are the poller's notify, or the look
            // at the holds of active sources (`Protocol::hold_left`).
            slot.wakeups.add(1);
            slot.token_wakeups.add(1);
        }
        None // (the deadline, if it passed, ends the wait at the top of the next pass)
    }

    /// Looks for an event awake (`quick_watch::look_awake`), then, if none came, sleeps in
    /// the kernel wait for what is left of `timeout`.
    fn look_awake_then_wait(&mut self, timeout: Option<Duration>) -> std::io::Result<()> {
        let started = Instant::now();
        if quick_watch::look_awake(&mut self.raw_events, &self.poller, timeout)? {
            return Ok(());
        }
        let left = timeout.map(|t| t.saturating_sub(started.elapsed()));
        self.raw_events.wait(&self.poller, left)
    }

    /// Is an exclusive source's event among those queued to be handed out?
    fn found_exclusive(&self) -> bool {
        let exclusive = |fd| {
            self.registrations
                .get(fd)
                .is_some_and(|r| r.source.is_some())
        };
        self.pending.iter().any(|p| exclusive(&p.fd))
    }

    /// Makes room in the kernel wait's buffer for every registered descriptor at once (and the
    /// door bell), so that one kernel wait finds all that are ready, whatever their number.
    pub(super) fn reserve_raw_events(&mut self) {
        self.raw_events.reserve(self.registrations.len() + 2);
    }

    /// A leader whose source is still held, or the deputy next in line, spins for its turn
    /// instead of sleeping, under a backlog with quick holders (`Protocol::spin_for_turn`; never
    /// past the wait's deadline): the holder then consumes within microseconds, while a member
    /// asleep costs a kernel wake-up on the critical path (on a virtual machine, tens of
    /// microseconds when its CPU has gone idle). Door bells for a spinning member are left
    /// unrung (see `Protocol::wake`), so after a spin the wait goes round once more.
    pub(super) fn spin_for_release(&self, tk: &Protocol<'_>, deadline: Option<Instant>) -> Spin {
        tk.spin_for_turn(self.me, &self.sources, || {
            deadline.map(|d| d.saturating_duration_since(Instant::now()))
        })
    }

    /// Runs the periodic liveness check of this member's sources if it is due (`next_check`);
    /// returns whether it ran.
    pub(super) fn check_due(&mut self, tk: &Protocol<'_>) -> bool {
        if self.next_check.is_none_or(|at| Instant::now() < at) {
            return false;
        }
        self.next_check = None;
        self.check_now(tk);
        true
    }

    /// For the exclusive sources whose leader this member checks on: a source ready while
    /// nobody holds it and its leader claims nothing for `TAKE_BOUND` has a stuck leader
    /// (stopped, or handed the token while stopped), and so has one that holds the source
    /// itself past `HOLD_BOUND` (`Protocol::take_from_overdue_leader`): this member takes the
    /// token from it.
    pub(super) fn look_for_stuck(&mut self, tk: &Protocol<'_>) {
        let me = self.me;
        let now = Now::new();
        for &fd in &self.exclusive_fds {
            let Some(reg) = self.registrations.get_mut(&fd) else {
                continue;
            };
            let Some(s) = reg.source else { continue };
            if tk.take_from_overdue_leader(s, me, &now) {
                reg.suspect = None;
                continue;
            }
            let checking = tk.leader_to_check(s, me);
            let Some((leader, claimed)) = checking.filter(|_| ready_now(fd, reg.interest)) else {
                reg.suspect = None;
                continue;
            };
            match reg.suspect {
                Some((l, c, since))
                    if l == leader && c == claimed && since.elapsed() >= TAKE_BOUND =>
                {
                    reg.suspect = None;
                    tk.take_from_stuck(s, me, leader);
                }
                Some((l, c, _)) if l == leader && c == claimed => {}
                _ => reg.suspect = Some((leader, claimed, Instant::now())),
            }
        }
    }
}
