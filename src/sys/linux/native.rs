//! The native Linux backend: one epoll instance per waiter, `EPOLLEXCLUSIVE`, and rotation.
//!
//! Exclusive registrations are added with `EPOLLEXCLUSIVE`: the kernel appends their wait-queue
//! entries at the tail of the descriptor's queue and, on an event, walks from the head and stops
//! at the first entry whose epoll has a thread waiting. That stops the herd, but the first
//! registrant takes everything (the monopoly). Rotation is the cure nginx shipped in 1.21.6:
//! after a waiter has been handed `rotate_every` events of the descriptor, it deletes and
//! re-adds it, which moves its entry to the tail. We rotate when the caller has *consumed* the
//! readiness ([`NativeWaiter::consumed`], or the next `wait`), never before: a re-added entry
//! that still sees the unread message would wake a second waiter for it.
//!
//! When a turn ends ([`Rotation`]): with `Every(n)`, after `n` events; with `Adaptive`, after
//! one event unless the group's events come in a stream (`stream_batch`: close together and
//! overlapping), then after about `STREAM_TURN` worth of them, or unless the descriptor is
//! still ready (a zero-timeout `poll` of it: a backlog), then after at most `ADAPTIVE_BATCH`.
//! Under `Adaptive`, with no other member of the group inside its wait (the `native_waiting`
//! count in the shared header) when the member comes back to its own wait, there is nobody to
//! hand the turn to and the entry stays where it is: no delete and re-add. Under `Every(n)`
//! only a lone member skips it. Under `Adaptive`, a turn that ends while the descriptor is
//! still ready is handed on to an idle member with a ring, and the member stands aside from
//! the line until its turn comes back (`aside.rs`): a re-add of a ready descriptor would put
//! it straight back on the member's own ready list, and the sleepers would wait.
//!
//! The kernel refuses `EPOLL_CTL_MOD` of an exclusive entry and several flags with it
//! (ONESHOT, RDHUP, PRI): `modify` of an exclusive registration is delete plus add, and the
//! refused flags are never sent. Everything is level-triggered, so no event is lost in the gap
//! between delete and add. `one_event_round_robin` is `maxevents = 1`: level-triggered epoll
//! moves a delivered entry to the tail of its ready list, so ready descriptors come in turn.
//!
//! In a stream under `Adaptive` the members asleep leave the line of the file, so that the
//! kernel wakes none of them while the member in its turn reads: they stand aside from the
//! stream (`stream_aside.rs`), and the turn goes round with a ring.
//!
//! A member handed an exclusive event holds its file's claim until it is consumed
//! (`claims.rs`): a readiness the kernel also reports to a second member (a message queue
//! wakes its pollers for every receive) is not handed out twice.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::contract::Rotation;
use crate::doorbell::{Bell, Doorbells};
use crate::error::{Error, Result};
use crate::interest::{Event, Events, Interest, Readiness};
use crate::registry::{self, FileId, Registry};
use crate::shared::{MemberSlot, SharedState};
use crate::turn;

/// The kernel entry's data for registration `gen` of `fd` (see `crate::registry`).
fn token(fd: RawFd, gen: u64) -> u64 {
    registry::token(fd, gen)
}

mod aside;
mod claims;
use claims::Claim;
mod deaths;
mod hand_on;
mod hints;
mod kernel;
mod registration;
mod stream_aside;
mod turns;

pub(crate) use deaths::OnDeath;
use deaths::DEATH_DATA;

use hints::NativeHints;
pub(crate) use hints::{check_region, region};

pub(crate) use hand_on::ring_idle;

/// The native backend's part of a reap of member `m` (a dead member): it is no longer counted
/// among the members inside their kernel wait, and holds no file's readiness (`claims.rs`).
pub(crate) fn clear_out(shared: &SharedState, m: u32) {
    let hints = NativeHints::of(shared);
    hints.set_waiting(m, false);
    claims::clear_member(&hints, m);
}
use hand_on::BELL_DATA;

use crate::sys::unix::monotonic_ns;
use kernel::{
    ctl, drain_eventfd, entry_is_live, epoll_flags, mod_probe_works, new_epoll, new_eventfd,
    timeout_ms, WAKE_DATA,
};
pub(crate) use kernel::{probe, NativeNotifier};

/// The most events one kernel wait returns.
const EVENTS_PER_WAIT: std::num::NonZeroUsize = std::num::NonZeroUsize::new(256).unwrap();

/// One registration of this waiter.
#[derive(Clone, Copy)]
struct Registration {
    key: usize,
    interest: Interest,
    /// The file the descriptor named when it was registered (see `crate::registry`: a number
    /// that no longer names it is forgotten).
    file: FileId,
    /// This registration's generation: its kernel entry's data is `registry::token(fd, gen)`.
    gen: u64,
    /// Events of this (exclusive) descriptor handed out since its entry last went to the tail.
    handed: u32,
    /// Was its last event handed out by the last `wait` and not consumed yet (exclusive only)?
    /// The next `wait` counts it (`MemberStats::unconsumed`). Meanwhile the member holds the
    /// file's claim (`claims.rs`; not under the raw flag).
    outstanding: bool,
    /// The group's count of handed exclusive events (`native_handed`) just after this member
    /// was handed its last event of this descriptor: if the count moved by the time the member
    /// consumed it, the event overlapped another one (any rotation but the raw flag's).
    mark: u64,
    /// Does the member stand aside from this descriptor's line (its entry deleted, not added
    /// back: `aside.rs`)?
    aside: bool,
    /// The count of its file's claims just after this member's last claim of it (`claims.rs`):
    /// a claim that finds the count moved on by more than its own follows another member's,
    /// whose read may have taken the readiness this member was woken for.
    last_claim: u32,
}

impl registry::Registered for Registration {
    fn interest(&self) -> Interest {
        self.interest
    }
    fn file(&self) -> FileId {
        self.file
    }
}

/// One member's native half: its own epoll instance and registrations.
pub(crate) struct NativeWaiter {
    epoll: OwnedFd,
    /// The eventfd a [`NativeNotifier`] writes to; registered under `WAKE_DATA`.
    wake: Arc<OwnedFd>,
    rotation: Rotation,
    /// The group's shared state, for the count of members inside their wait (see
    /// `nobody_to_hand_to`) and the stream's timing.
    shared: Arc<SharedState>,
    /// Registered descriptors by number. Invariant: each is in `epoll` with its token; `epoll`
    /// may also hold entries of numbers closed since (stale, see `crate::registry`), which
    /// `rebuild` removes.
    registrations: Registry<Registration>,
    /// The exclusive ones among them, checked against their files before each kernel wait.
    exclusive: Vec<RawFd>,
    /// The generation of the next registration.
    next_gen: u64,
    /// Exclusive descriptors whose turn may end once the caller consumed the event (see
    /// `end_turn`).
    rotate_pending: Vec<RawFd>,
    /// Descriptors (and their events) the last kernel wait reported while another member held
    /// their file's claim (`claims.rs`): kept for the hot path, empty between waits.
    contested: Vec<(RawFd, u32)>,
    buffer: crate::sys::epoll::Events,
    /// Exclusive events this member was handed in all (`Adaptive`): against the group's count
    /// (`native_handed`), whether it is ahead of its share (see `end_turn`).
    total_handed: u64,
    /// This process's side of the group's door bells, and this member's own bell (in `epoll`
    /// under `BELL_DATA`; `None` once it left): readiness is handed on through them (`hand_on`).
    bells: Arc<Doorbells>,
    bell: Option<Bell>,
    /// This member's slot.
    me: u32,
    /// The answer of the turn rule's backlog check (`ready_now`) during this `consumed`, which
    /// the hand-on reuses rather than ask the kernel again.
    ready_seen: std::cell::Cell<Option<(RawFd, bool)>>,
    /// When this member last consumed an exclusive event (monotonic ns; 0 once it is back in
    /// `wait`), and whether it came back within `hand_on::QUICK` the last time (see
    /// `hand_on_if_ready`).
    consumed_at: u64,
    quick: bool,
    /// The member's time away from `wait` after each `consumed` (its work per event): a member
    /// that works on its events ends its turn at each of them (`end_turn`, `turn::Away`).
    away: turn::Away,
    /// How many of its exclusive registrations the member stands aside from (`aside.rs`).
    aside: u32,
    /// If it stands aside from a stream (`stream_aside.rs`): how many times it has looked
    /// whether that stream's turn is still live (its bound doubles each time).
    stream_looks: Option<u32>,
    /// Did this kernel wait find its events there already, with no sleep (they came while the
    /// member held its last one: `stream_aside.rs`)?
    pending_at_entry: bool,
    /// The stream turn this member handed on and reads on until its new member takes it
    /// (`stream_aside.rs`).
    reading_on: Option<stream_aside::ReadingOn>,
    /// Whose death this member watches (`crate::ring`), and the pidfd in `epoll` it watches it
    /// by (`deaths.rs`); boxed, as it is looked at only when the group's roster changes.
    deaths: Box<deaths::Deaths>,
}

impl NativeWaiter {
    /// The native half of the member that joins slot `me` as occupant `generation`.
    pub(crate) fn new(
        shared: Arc<SharedState>,
        rotation: Rotation,
        bells: Arc<Doorbells>,
        me: u32,
        generation: u32,
    ) -> Result<NativeWaiter> {
        // Asked now, at join: the first `wait`s of threads that join together would otherwise
        // block on one another's first asking (a futex wait: a kernel wake-up of their own).
        mod_probe_works();
        let epoll = new_epoll().map_err(|e| Error::io("creating the waiter's epoll", e))?;
        let wake =
            Arc::new(new_eventfd().map_err(|e| Error::io("creating the waiter's eventfd", e))?);
        ctl(
            &epoll,
            libc::EPOLL_CTL_ADD,
            wake.as_raw_fd(),
            libc::EPOLLIN as u32,
            WAKE_DATA,
        )
        .map_err(|e| Error::io("registering the waiter's eventfd", e))?;
        let bell = bells.bind(me, generation)?;
        let waiter = NativeWaiter {
            epoll,
            wake,
            rotation,
            shared,
            registrations: Registry::new(),
            exclusive: Vec::new(),
            next_gen: 1,
            rotate_pending: Vec::new(),
            contested: Vec::new(),
            buffer: crate::sys::epoll::Events::with_capacity(EVENTS_PER_WAIT),
            total_handed: 0,
            bells,
            bell: Some(bell),
            me,
            ready_seen: std::cell::Cell::new(None),
            consumed_at: 0,
            quick: false,
            away: turn::Away::default(),
            aside: 0,
            stream_looks: None,
            pending_at_entry: false,
            reading_on: None,
            deaths: Box::default(),
        };
        waiter
            .watch_bell(&waiter.epoll)
            .map_err(|e| Error::io("registering the member's door bell", e))?;
        Ok(waiter)
    }

    pub(crate) fn consumed(&mut self, key: usize) -> Result<()> {
        self.settle_outstanding(Some(key));
        // Usually one pending descriptor: no allocation on this hot path.
        let mut i = 0;
        while i < self.rotate_pending.len() {
            let fd = self.rotate_pending[i];
            let ours = self.registrations.get(&fd).is_some_and(|r| r.key == key);
            if !ours {
                i += 1;
                continue;
            }
            // Out of the list first: `end_turn` may forget `fd` (closed), which takes it out too.
            self.rotate_pending.swap_remove(i);
            let decided = self.end_turn(fd, false);
            // Whatever the turn rule decided (a kept turn under a backlog too: the caller goes to
            // its work now), a readiness still there goes to an idle member.
            self.hand_on_if_ready(fd);
            self.consumed_at = monotonic_ns();
            if !decided? {
                // Deferred to the next `wait`: back in the list, and on to the next one.
                self.rotate_pending.push(fd);
                let last = self.rotate_pending.len() - 1;
                self.rotate_pending.swap(i, last);
                i += 1;
            }
        }
        Ok(())
    }

    /// Is no other member of the group inside its wait? Then a rotation would hand the turn to
    /// nobody: the entry stays at the head. (This member is outside its wait when it asks.)
    /// With `Every(n)` (turns at any cost) only a lone member skips: the count of members in
    /// their wait is a hint, and under a load where every other member is briefly out of it a
    /// skipped rotation would cost the turns that setting promises.
    fn nobody_to_hand_to(&self) -> bool {
        let shared = &self.shared;
        match self.rotation {
            Rotation::Adaptive => !NativeHints::of(shared).anyone_waiting(shared.high()),
            Rotation::Every(_) => shared.high() <= 1,
        }
    }

    /// Is the group in a stream, and if so, how many events may a turn take? A stream is events
    /// that come closer than `STREAM_GAP` apart on average *and* overlap: while a member held
    /// one (handed, not yet consumed), another member was handed the next, at least once in
    /// the group's last `STREAM_MEMORY` events. The producer then does not wait for the
    /// readers, and handing each event to another member would wake a cold thread per event
    /// for a turn nobody waits for. Events that come one at a time (a gap, or a producer that
    /// waits for each reply) never overlap: strict turns, however close together they come;
    /// events that overlap now and then but come far apart are not a stream either. In a
    /// stream a turn lasts about `STREAM_TURN`: `STREAM_TURN / gap` events, at least
    /// `ADAPTIVE_BATCH` and at most `STREAM_BATCH`. (Hints in the shared header: races between
    /// members only blur them.)
    fn stream_batch(&self, mark: u64) -> Option<u32> {
        let stream = &NativeHints::of(&self.shared).stream;
        let handed = stream.handed.load(SeqCst);
        if handed != mark {
            stream.overlap_at.store(handed, SeqCst); // this event overlapped another
        }
        self.stream_now()
    }

    /// Is the group in a stream now (see `stream_batch`), and if so, how many events may a
    /// turn take? Only looks. (Every rotation but the raw flag's keeps the hint.)
    fn stream_now(&self) -> Option<u32> {
        let stream = &NativeHints::of(&self.shared).stream;
        let handed = stream.handed.load(SeqCst);
        let overlap_at = stream.overlap_at.load(SeqCst);
        let overlapping = overlap_at != 0 && handed.wrapping_sub(overlap_at) < turn::STREAM_MEMORY;
        turn::stream_batch(overlapping, stream.gap_ns.load(SeqCst))
    }

    /// A member was handed an exclusive event now: the gap since the group's last one goes into
    /// the group's moving average (1/32 weight, each gap counted as `2 * STREAM_GAP` at most, so
    /// that one pause of the producer does not end a stream; the first gap starts it). A hint:
    /// races between members only blur it.
    fn note_event(&self) {
        let stream = &NativeHints::of(&self.shared).stream;
        let now = monotonic_ns();
        let last = stream.last_event_ns.swap(now, SeqCst);
        if last == 0 {
            return; // the group's first event: no gap yet
        }
        let gap = now
            .saturating_sub(last)
            .min(turn::STREAM_GAP.as_nanos() as u64 * 2);
        let average = stream.gap_ns.load(SeqCst);
        let average = match average {
            0 => gap,
            _ => average - average / 32 + gap / 32,
        };
        stream.gap_ns.store(average.max(1), SeqCst);
    }

    /// The caller consumed an event of the exclusive `fd`: does this member's turn end, and its
    /// entry go to the tail? `Every(n)`: after `n` events. `Adaptive`: after this event, unless
    /// the descriptor is still ready (a backlog) and the member has taken fewer than
    /// `ADAPTIVE_BATCH` in a row. Never while no other member waits: then the decision waits
    /// for the member's next `wait` (`last_chance`), when the others have had the time to come
    /// back to theirs, and if nobody waits even then, the turn goes on with nothing moved. A
    /// turn that ends goes to the tail (`rotate`), or under `Adaptive` with a backlog is handed
    /// on (`pass_turn`). Returns whether it decided (false: deferred to the next `wait`).
    fn end_turn(&mut self, fd: RawFd, last_chance: bool) -> Result<bool> {
        self.ready_seen.set(None); // asked afresh for this turn, if at all
        let nobody = self.nobody_to_hand_to();
        let Some(reg) = self.registrations.get(&fd).copied() else {
            return Ok(true);
        };
        if nobody {
            if !last_chance {
                return Ok(false);
            }
            self.set_handed(fd, 0); // a new turn, with nothing moved
            return Ok(true);
        }
        // The stream hint is kept under every rotation (the claims read it too), and only
        // `Adaptive` lets a stream lengthen a turn.
        let stream = self.stream_batch(reg.mark);
        let stream = match self.rotation {
            Rotation::Every(_) => None,
            Rotation::Adaptive if self.busy() => None,
            Rotation::Adaptive => stream,
        };
        let due = (self.rotation == Rotation::Adaptive && self.busy())
            || turn::ends(
                self.rotation,
                reg.handed,
                stream,
                || self.lead_over_share(),
                || self.ready_now(fd, reg.interest),
            );
        if !due {
            return Ok(true);
        }
        self.set_handed(fd, 0);
        match self.rotation {
            // In a stream the turn is handed to the next member, who takes over the line
            // (`stream_aside.rs`).
            Rotation::Adaptive if stream.is_some() => {
                self.pass_stream_turn(fd);
                Ok(())
            }
            // Under a backlog the turn is handed on, and the member stands aside (`aside.rs`).
            // A stream that was this member's turn is over: the members standing aside from it
            // are called back into line.
            Rotation::Adaptive => {
                let hints = NativeHints::of(&self.shared);
                let over = turns::end(&hints, reg.file, reg.interest, self.me);
                if over {
                    hand_on::call_back_from_stream(&self.shared, &self.bells, self.me);
                }
                match self.busy() && !self.stands_aside_for_its_lead() {
                    true => self.rotate(fd),
                    false => self.pass_turn(fd),
                }
            }
            // Turns by count only move the entry: a member back in its wait first may take the
            // next event of a backlog itself (a ring per event cost strict turns twice the
            // time of `herd`'s raw flag at 500 waiters, `docs/lab.md`).
            Rotation::Every(_) => self.rotate(fd),
        }
        .map(|()| true)
    }

    /// In a stream: by how many events is this member ahead of its share of the group's events
    /// (the group's count over its member slots; negative: behind it)? A member ahead by more
    /// than half a turn ends its turn now (at 500 waiters on a pipe, Jain 0.986 with fixed
    /// turns of 96, 0.996 with this rule); one behind by as much takes its turn on until it
    /// has caught up, up to `turn::CATCH_UP` turns (`turn::ends`). A hint: slots of members
    /// gone, or of members not on this descriptor, lower the share (a member of a descriptor
    /// few members watch is ahead of it, and rotates sooner); a member of a descriptor whose
    /// events are slower than the group's others' is behind it, and takes longer turns.
    pub(super) fn lead_over_share(&self) -> i64 {
        let members = u64::from(self.shared.high().max(1));
        let share = NativeHints::of(&self.shared).stream.handed.load(SeqCst) / members;
        self.total_handed as i64 - share as i64
    }

    fn set_handed(&mut self, fd: RawFd, handed: u32) {
        if let Some(reg) = self.registrations.get_mut(&fd) {
            reg.handed = handed;
        }
    }

    /// Waits for events. `on_death` clears out the slots of a process that died (and hands on
    /// what they held: `GroupInner::reap_process`); it runs when the pidfd of this member's
    /// neighbour fires (`deaths.rs`), or, where no pidfd can be had, every `ring::SWEEP` of a
    /// wait in a group that spans processes while this member has an exclusive registration.
    pub(crate) fn wait(
        &mut self,
        slot: &MemberSlot,
        events: &mut Events,
        timeout: Option<Duration>,
        on_death: OnDeath<'_>,
    ) -> Result<usize> {
        self.note_back();
        // Coming back to wait means the last events were consumed: those the caller did not
        // say so for are counted.
        let unconsumed = self.settle_outstanding(None);
        if unconsumed > 0 {
            slot.unconsumed.add(unconsumed);
        }
        while let Some(fd) = self.rotate_pending.pop() {
            self.end_turn(fd, true)?;
        }
        // Back into the lines whose backlog was served while the member stood aside.
        self.step_back_where_due(false)?;
        // A look that does not sleep lets no stale entry take a wake-up (only an epoll with a
        // thread waiting stops the kernel's walk): its exclusive events are checked one by one
        // instead, which costs a busy poller nothing while there are none.
        let looking = timeout == Some(Duration::ZERO);
        if !looking {
            self.drop_stale_exclusive()?;
        }
        // A timeout too long to add to now is no deadline at all (as in `polling`).
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let max = self
            .registrations
            .events_per_wait(events.room().min(self.buffer.capacity().get()));
        // A bell marked rung by a ringer that died before its write would silence it for good:
        // cleared before each wait (a ring on its way still arrives, and a second ring only
        // wakes this member for the same look).
        if slot.rung.load(SeqCst) != 0 {
            slot.rung.store(0, SeqCst);
        }
        let mut by_event = looking || self.watch_neighbour(on_death);
        loop {
            let sweeping = !by_event && !self.exclusive.is_empty();
            let (ms, capped) = deaths::sweep_cap(timeout_ms(deadline), sweeping);
            let (ms, aside_capped) = self.aside_cap(ms);
            // Under `Adaptive`, first a look: events already there when the member comes back
            // (they came while it held its last one: a stream's sign, `stream_aside.rs`) are
            // taken with no sleep. Other rotations go to sleep at once, as the raw flag does.
            let mut looked = None;
            self.pending_at_entry = false;
            if looking || self.rotation == Rotation::Adaptive {
                let zero = Some(Duration::ZERO);
                let res = crate::sys::epoll::wait(self.epoll.as_fd(), &mut self.buffer, max, zero);
                self.pending_at_entry = matches!(res, Ok(n) if n > 0);
                if looking || ms == 0 || !matches!(res, Ok(0)) {
                    looked = Some(res);
                }
            }
            let res = match looked {
                Some(res) => res,
                None => {
                    // Marked waiting (someone to hand a turn to) while inside the kernel wait; a
                    // look is not (it sleeps nowhere, and busy pollers would bounce the bitmap's
                    // line at every look).
                    let hints = NativeHints::of(&self.shared);
                    hints.set_waiting(self.me, true);
                    // A whole number of milliseconds (`timeout_ms` rounded up): one `epoll_pwait`.
                    let timeout = u64::try_from(ms).ok().map(Duration::from_millis);
                    let res =
                        crate::sys::epoll::wait(self.epoll.as_fd(), &mut self.buffer, max, timeout);
                    hints.set_waiting(self.me, false);
                    res
                }
            };
            let n = match res {
                Ok(n) => n,
                // A signal handler ran: the wait ends with no events, so that the caller sees
                // the handler's flag at once (`Waiter::wait`).
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    events.set_interrupted();
                    return Ok(0);
                }
                Err(e) => return Err(Error::io("waiting in epoll_wait", e)),
            };
            if n == 0 && aside_capped {
                if let Some(looks) = self.stream_looks.filter(|_| self.stream_still_held()) {
                    self.stream_looks = Some(looks + 1);
                    continue; // the stream goes on in another member's turn: still aside
                }
                self.step_back_where_due(true)?; // stood aside long enough: back in line
                continue;
            }
            if n == 0 && capped {
                on_death(None); // a dead member's readiness is handed on through a bell
                by_event = self.watch_neighbour(on_death);
                continue;
            }
            if n == 0 {
                return Ok(0); // timed out
            }
            slot.wakeups.add(1);
            let mut notified = false;
            let mut rung = false;
            let mut noted = false;
            let mut stale = false;
            let mut died = false;
            for i in 0..n {
                let (data, flags) = self.buffer.get(i);
                let flags = flags.bits();
                if data == WAKE_DATA {
                    drain_eventfd(&self.wake);
                    notified = true;
                    continue;
                }
                if data == BELL_DATA {
                    rung = true; // handed on: see below
                    continue;
                }
                if data == DEATH_DATA {
                    died = true; // the neighbour's process ended: see below
                    continue;
                }
                let (fd, _) = registry::untoken(data);
                let Some(reg) = self
                    .registrations
                    .get_mut(&fd)
                    .filter(|r| registry::token_matches(data, r.gen))
                else {
                    stale = true; // an entry no live registration has (see `crate::registry`)
                    continue;
                };
                // An exclusive registration was checked before the wait (unless this is a look);
                // another is checked now, when it is handed out, by its own entry.
                let live = match reg.interest.is_exclusive() {
                    false => {
                        let flags =
                            crate::sys::epoll::Flags::from_bits_retain(epoll_flags(reg.interest));
                        crate::sys::epoll::entry_is_live(self.epoll.as_fd(), fd, flags, data)
                            .unwrap_or_else(|| registry::still_names(fd, reg.file))
                    }
                    true if !looking => true,
                    true if mod_probe_works() => entry_is_live(&self.epoll, fd),
                    true => registry::still_names(fd, reg.file),
                };
                if !live {
                    self.forget(fd);
                    stale = true;
                    continue;
                }
                // In another member's stream turn: out of the line (`stream_aside.rs`).
                let exclusive = reg.interest.is_exclusive();
                if exclusive && self.rotation == Rotation::Adaptive && self.aside_from_stream(fd)? {
                    continue;
                }
                match self.claim(fd) {
                    Claim::Held => {
                        self.contested.push((fd, flags)); // another member holds it: see below
                        continue;
                    }
                    Claim::AfterAnother => match self.still_ready_after_another(fd) {
                        Ok(true) => {}
                        Ok(false) => continue, // another member read it: absorbed
                        Err(e) => {
                            self.contested.clear(); // as `take_contested` leaves it
                            return Err(e);
                        }
                    },
                    Claim::Fresh | Claim::Untaken => {}
                }
                noted |= self.hand_out(fd, flags, events);
            }
            if !self.contested.is_empty() {
                // Handed out only if it is still ready once its holder has consumed it.
                noted |= self.take_contested(events)?;
            }
            if died {
                // Its dead slots are cleared out first: their reap rings an idle member for a
                // readiness the dead took with it (this one, maybe: its bell is looked at next).
                by_event = self.neighbour_died(on_death);
            }
            if rung {
                let was_aside_from_stream = self.stream_looks.is_some();
                if was_aside_from_stream {
                    // A stream's turn, most likely: the member is trusted to come back as
                    // quickly as the one before it (no hand-on at its first `consumed`).
                    self.quick = true;
                    self.consumed_at = 0;
                }
                // A ring hands this member a turn: back into every line it stood aside from.
                self.step_back_where_due(true)?;
                noted |= self.take_handed_on(events, max, was_aside_from_stream)?;
            }
            if noted {
                self.note_event();
            }
            if stale {
                self.rebuild()?;
                // The stale entry may have taken the wake-up of a file other members watch (a
                // shared descriptor this member closed): an idle member looks.
                ring_idle(&self.shared, &self.bells, Some(self.me));
            }
            if !events.is_empty() || notified {
                return Ok(events.len());
            }
            slot.empty_wakeups.add(1);
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(0); // woken for nothing it could hand out, past its deadline
            }
        }
    }

    /// Puts the event `flags` of the registered `fd` into `events`, and for an exclusive
    /// descriptor counts it towards the member's turn. Returns whether it was an exclusive
    /// event the group's stream hint counts (any rotation but the raw flag's).
    fn hand_out(&mut self, fd: RawFd, flags: u32, events: &mut Events) -> bool {
        let Some(reg) = self.registrations.get_mut(&fd) else {
            return false;
        };
        let ready = Readiness::from_poll(flags as libc::c_int);
        events.push(Event::new(reg.key, reg.interest, ready));
        reg.outstanding = reg.interest.is_exclusive();
        let mut noted = false;
        if reg.interest.is_exclusive() && self.rotation != Rotation::Every(0) {
            reg.handed += 1;
            let handed = &NativeHints::of(&self.shared).stream.handed;
            reg.mark = handed.fetch_add(1, SeqCst) + 1;
            if self.rotation == Rotation::Adaptive {
                let hints = NativeHints::of(&self.shared);
                if self.pending_at_entry {
                    // It came while this member held its last event: an overlap.
                    hints.stream.overlap_at.store(reg.mark, SeqCst);
                }
                let (file, interest) = (reg.file, reg.interest);
                // Reading on for the member the turn went to, the word stays that member's.
                let reading_on = self.reading_on.is_some_and(|on| on.fd == fd);
                if !reading_on && !self.busy() && self.stream_now().is_some() {
                    turns::note(&hints, file, interest, self.me);
                }
            }
            self.total_handed += 1;
            noted = true;
            if !self.rotate_pending.contains(&fd) {
                self.rotate_pending.push(fd);
            }
        }
        noted
    }

    /// The caller consumed the events with `key` (`None`: all of them, at the next `wait`):
    /// they are no longer outstanding, and each releases its file's claim (`claims.rs`).
    /// Returns how many were. One look per exclusive registration.
    fn settle_outstanding(&mut self, key: Option<usize>) -> u64 {
        let hints = NativeHints::of(&self.shared);
        let claims = self.claims_events();
        let mut settled = 0;
        for fd in &self.exclusive {
            if let Some(reg) = self.registrations.get_mut(fd) {
                if reg.outstanding && key.is_none_or(|k| k == reg.key) {
                    reg.outstanding = false;
                    settled += 1;
                    if claims {
                        claims::release(&hints, reg.file, self.me);
                    }
                }
            }
        }
        settled
    }

    pub(crate) fn notifier(&self) -> NativeNotifier {
        NativeNotifier {
            wake: self.wake.clone(),
        }
    }
}

// The stream's constants (`STREAM_MEMORY`, `STREAM_GAP`, `STREAM_TURN`, `STREAM_BATCH`) are
// the turn rule's, in `crate::turn`.

impl Drop for NativeWaiter {
    /// The member leaves: what it gives up goes to an idle member (`hand_on`), then its bell
    /// is unbound.
    fn drop(&mut self) {
        self.settle_outstanding(None); // its claims go first (`claims.rs`)
        self.unwatch();
        self.hand_on_at_leave();
        if let Some(bell) = self.bell.take() {
            self.bells.unbind(self.me, bell);
        }
    }
}
