//! The emulated backend: exclusive, fair wake-ups in user space, on top of `polling`.
//!
//! Each member has its own `polling::Poller` (a Poller lets one thread wait at a time) and a door
//! bell (`doorbell`). Its own descriptors stay in its poller, level-triggered. Its exclusive
//! descriptors are in its poller only while it holds their token and their last event has been
//! consumed (`protocol` has the rules); a `match_poller` before every kernel wait makes the
//! poller match that rule. So one readiness event wakes one member, members take events in
//! turn, and a member killed mid-run is cleared out by another (see `crate::liveness` and
//! `crate::members`; on Linux its death wakes the member that depends on it at once, see
//! `deathwatch`).
//!
//! The path of one event: the leader's poller reports the exclusive descriptor → `claim` makes
//! the leader its holder (kept only if no other claim was won since the leader found the
//! source free, or the source is still ready: `confirm_claim`) → `pass` hands the token to the
//! next idle member → the event goes to the caller, who reads and calls `consumed` (or comes
//! back to `wait`) → `release` lets the new leader watch: its `match_poller` puts the
//! descriptor in its poller again.
//!
//! The new leader learns of its turn in one of two ways. Under a backlog with quick holders,
//! `pass` rings it at once and names the member after it (the deputy, which `release` rings),
//! and both spin for their turn instead of sleeping, so the hand-off puts no kernel wake-up on
//! the critical path. Otherwise `release` rings the new leader.
//!
//! Ready descriptors of the member's own: one kernel wait finds every ready registration at
//! once (its buffer grows with the registrations), and those not handed out wait in a queue,
//! served in turn by the next waits without a kernel wait, each looked at again by one poll(2)
//! first. So every ready descriptor is reached however many there are, and a wait costs in
//! proportion to what it returns. Identity: an exclusive descriptor is its open file (device,
//! inode) and its access mode, so the two ends of a pipe are two sources.
//!
//! The rooms: this file is the waiter (its poller, its registrations in a `crate::registry`
//! table, the candidates of a wait and their hand-out); `protocol` is the token protocol, and
//! `Protocol` its view of a group, which the handles build and pass in (this backend does not
//! import them); `identity` says which open file a descriptor is; `kernel_wait` is the kernel
//! wait itself (on Linux one `epoll_wait`, without `polling`'s per-call timer and notifier
//! re-arming); `doorbell` and `deathwatch` wake a member; `other_unix` and `windows` hold what
//! differs per system.

mod deathwatch;
// The door bells live beside the backends (`crate::doorbell`): the native backend rings them too.
use crate::doorbell;
mod identity;
mod kernel_wait;
#[cfg(unix)]
mod other_unix;
mod protocol;
#[cfg(all(windows, not(loom)))]
mod windows;

use std::collections::VecDeque;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::{Duration, Instant};

use polling::{PollMode, Poller};

use crate::contract::Rotation;
use crate::error::{Error, RawSource, Result};
use crate::interest::{Event, Events, Interest, FIRST_RESERVED_KEY};
use crate::liveness::Liveness;
use crate::members::{Life, Membership};
use crate::registry::{self, FileId, Registry};
use crate::shared::SharedState;
use crate::shared::NONE;
use deathwatch::DeathWatch;
use doorbell::Doorbells;
use identity::{identify, refuse_anonymous};
use kernel_wait::RawEvents;
pub(crate) use protocol::Protocol;
use protocol::{Now, LIVENESS_CHECK, LIVENESS_SWEEP, TAKE_BOUND};

/// How long a leader (or deputy) spins for its turn before it sleeps in its poller.
const SPIN_FOR_RELEASE: Duration = Duration::from_micros(50);

/// The poller key of the member's door bell.
const DOORBELL_KEY: usize = FIRST_RESERVED_KEY;

/// What the emulation adds to a group: this process's side of the door bells.
pub(crate) struct EmulatedGroup {
    bells: Doorbells,
}

impl EmulatedGroup {
    /// The protocol's view of the group these door bells belong to: what group.rs passes in.
    pub(crate) fn protocol<'a>(
        &'a self,
        shared: &'a SharedState,
        live: &'a Liveness,
        rotation: Rotation,
    ) -> Protocol<'a> {
        Protocol {
            shared,
            bells: &self.bells,
            live,
            rotation,
        }
    }

    /// The door bells of the group whose shared preamble holds `incarnation`.
    pub(crate) fn new(incarnation: u64, slots: usize) -> Result<EmulatedGroup> {
        Ok(EmulatedGroup {
            bells: Doorbells::new(incarnation, slots)?,
        })
    }
}

/// One registration of an emulated member.
struct Registration {
    key: usize,
    /// The open file behind the descriptor when it was registered.
    identity: u64,
    /// Its device and inode, to tell a number closed or reused since (see `crate::registry`).
    file: FileId,
    interest: Interest,
    /// Registration order, for serving ready descriptors in turn.
    seq: u64,
    /// The shared source slot, for an exclusive registration.
    source: Option<usize>,
    /// Is the descriptor in this member's poller right now?
    in_poller: bool,
    /// Exclusive events handed to this member since it last went to the back of the line.
    handed: u32,
    /// Is it in the member's queue of ready descriptors not yet handed out?
    queued: bool,
    /// (leader, its last claim, when) if this member, checking on the leader of this
    /// exclusive source, last saw it ready with nobody holding it: the leader may be stuck.
    suspect: Option<(u32, u64, Instant)>,
    /// The source's claim count when this member last found it free to watch.
    claims_seen: u64,
}

impl registry::Registered for Registration {
    fn interest(&self) -> Interest {
        self.interest
    }
}

/// A ready descriptor found by one kernel wait, before it is handed out.
struct Candidate {
    fd: RawSource,
    seq: u64,
    event: Event,
}

/// A ready descriptor of the member's own (not exclusive) in the queue of those not yet
/// handed out, served in turn over the next waits.
struct Pending {
    fd: RawSource,
    /// The registration's order, to tell a number registered again since.
    seq: u64,
    event: Event,
    /// The kernel wait that found it ready: from an earlier one, it is looked at again before
    /// it is handed out (another thread may have read it meanwhile).
    found_by: u64,
}

/// One member's emulated half.
pub(crate) struct EmulatedWaiter {
    me: u32,
    /// This member's occupancy of slot `me`: its IDLE/BUSY changes are made against it.
    membership: Membership,
    poller: Arc<Poller>,
    /// Registered descriptors by number.
    registrations: Registry<Registration>,
    next_seq: u64,
    /// Registration order of the descriptor served last (for serving ready ones in turn).
    last_served: u64,
    /// Exclusive sources this member holds: handed out, not yet consumed, as (source, key).
    holding: Vec<(usize, usize)>,
    /// Sources whose line this member goes to the back of when it next goes busy.
    to_back: Vec<usize>,
    /// The shared source slots of this member's exclusive registrations.
    sources: Vec<usize>,
    /// The descriptors of those registrations (so that a wait's cost does not grow with the
    /// number of other registrations).
    exclusive_fds: Vec<RawSource>,
    raw_events: RawEvents,
    candidates: Vec<Candidate>,
    /// Ready descriptors not yet handed out, in turn order (see `serve_pending`).
    pending: VecDeque<Pending>,
    /// Kernel waits so far (for `Pending::found_by`).
    polls: u64,
    /// `serve_pending`'s list for poll(2), kept to save an allocation per wait.
    #[cfg(unix)]
    pollfds: Vec<libc::pollfd>,
    /// `match_poller`'s list of poller changes, kept to save an allocation per wait.
    changes: Vec<(RawSource, bool)>,
    /// `match_poller`'s list of registrations whose numbers no longer name their files.
    stale: Vec<RawSource>,
    /// The processes this member depends on, whose deaths it waits on (see `deathwatch`).
    deaths: Box<DeathWatch>,
    /// A kernel entry in the poller may be stale (a registration forgotten whose number was
    /// closed or reused): the poller is rebuilt before the next kernel wait (`rebuild`).
    rebuild_due: bool,
    /// When the periodic liveness check is due next: a deadline, kept across waits, so that
    /// neither signals nor early returns put it off (`None`: no check needed).
    next_check: Option<Instant>,
    /// Their pids, found before each kernel wait (kept to save an allocation per wait).
    depends_on: Vec<u32>,
    /// This member's door bell, in its poller under `DOORBELL_KEY` (taken by `leave`).
    #[cfg(all(unix, not(loom)))]
    bell: Option<doorbell::Bell>,
}

impl EmulatedWaiter {
    pub(crate) fn new(group: &Protocol<'_>, membership: Membership) -> Result<EmulatedWaiter> {
        let me = membership.member;
        let poller =
            Arc::new(Poller::new().map_err(|e| Error::io("creating the member's poller", e))?);
        #[cfg(all(unix, not(loom)))]
        let bell = group.bells.bind(me, membership.generation())?;
        #[cfg(all(unix, not(loom)))]
        for fd in bell.watch() {
            // SAFETY: the bell is this waiter's, and `leave` deletes it from the poller before
            // it drops it.
            unsafe {
                poller.add_with_mode(&fd, polling::Event::readable(DOORBELL_KEY), PollMode::Level)
            }
            .map_err(|e| Error::io("watching the member's door bell", e))?;
        }
        group.drain_bell(me);
        #[cfg(all(not(unix), not(loom)))]
        group.bells.install(me, poller.clone());
        Ok(EmulatedWaiter {
            me,
            membership,
            poller,
            registrations: Registry::new(),
            next_seq: 0,
            last_served: u64::MAX,
            holding: Vec::new(),
            to_back: Vec::new(),
            sources: Vec::new(),
            exclusive_fds: Vec::new(),
            raw_events: RawEvents::new(),
            candidates: Vec::new(),
            pending: VecDeque::new(),
            polls: 0,
            #[cfg(unix)]
            pollfds: Vec::new(),
            changes: Vec::new(),
            stale: Vec::new(),
            deaths: Box::default(),
            depends_on: Vec::new(),
            #[cfg(all(unix, not(loom)))]
            bell: Some(bell),
            rebuild_due: false,
            next_check: None,
        })
    }

    pub(crate) fn add(
        &mut self,
        group: &Protocol<'_>,
        fd: RawSource,
        key: usize,
        interest: Interest,
    ) -> Result<()> {
        let identity = identify(fd)?;
        let file = registry::file_id(fd).ok_or(Error::BadDescriptor { fd })?;
        if let Some(old) = self.registrations.get(&fd) {
            if old.identity == identity && old.file == file {
                return Err(Error::AlreadyRegistered { fd });
            }
            // The old descriptor was closed and its number reused: forget the old one.
            self.forget(group, fd);
        }
        self.rebuild_if_due(group)?;
        let source = match interest.is_exclusive() {
            true => {
                refuse_anonymous(fd)?;
                // Ask the poller before answering: an exclusive descriptor enters the poller
                // only later, when this member leads it, and a refusal then would fail every
                // wait of the group. A trial registration now refuses it here instead.
                let trial = registry::token(fd, self.next_seq) as usize;
                self.poller_add(fd, trial, interest)?;
                self.poller_delete(fd);
                let s = group.shared.source_index(identity)?;
                if self.sources.contains(&s) {
                    // Another descriptor of the same open file and direction (a dup) is
                    // registered exclusive already: one token per file and member.
                    return Err(Error::AlreadyRegistered { fd });
                }
                Some(s)
            }
            false => None,
        };
        match source {
            None => self.poller_add(fd, registry::token(fd, self.next_seq) as usize, interest)?,
            Some(s) => {
                group.shared.source(s).set_member(self.me, true);
                self.sources.push(s);
                self.exclusive_fds.push(fd);
            }
        }
        self.registrations.insert(
            fd,
            Registration {
                key,
                identity,
                file,
                interest,
                seq: self.next_seq,
                source,
                in_poller: source.is_none(),
                handed: 0,
                queued: false,
                suspect: None,
                claims_seen: 0,
            },
        );
        self.next_seq += 1;
        Ok(())
    }

    pub(crate) fn modify(
        &mut self,
        group: &Protocol<'_>,
        fd: RawSource,
        key: usize,
        interest: Interest,
    ) -> Result<()> {
        let old = self
            .registrations
            .registered(fd)
            .map(|r| (r.key, r.interest))?;
        // Check the new registration before touching the old one.
        if interest.is_exclusive() {
            group.shared.source_index(identify(fd)?)?;
        }
        registry::replace(
            self,
            old,
            (key, interest),
            |w| w.delete(group, fd),
            |w, key, interest| w.add(group, fd, key, interest),
        )
    }

    /// Forgets `fd`; closed or reused since it was added, it is forgotten all the same (see
    /// `crate::registry`).
    pub(crate) fn delete(&mut self, group: &Protocol<'_>, fd: RawSource) -> Result<()> {
        self.forget(group, fd).ok_or(Error::NotRegistered { fd })?;
        self.rebuild_if_due(group)
    }

    pub(crate) fn consumed(&mut self, group: &Protocol<'_>, key: usize) -> Result<()> {
        let tk = group;
        let me = self.me;
        let mut i = 0;
        while i < self.holding.len() {
            let (s, k) = self.holding[i];
            if k == key {
                self.holding.swap_remove(i);
                tk.release(s, me);
                self.end_turn(tk, s);
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// `Rotation::Adaptive`: this member consumed an event of source `s`; if its turn ends
    /// (`Protocol::adaptive_turn_ends`: the source is no longer ready, or the batch is full), it
    /// goes to the back of the line.
    fn end_turn(&mut self, tk: &Protocol<'_>, s: usize) {
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
        if !tk.anyone_else_idle(s, self.me) {
            reg.handed = 0; // nobody to hand to: a new turn, with nothing moved
            return;
        }
        let ready = still_ready(fd, reg.interest).unwrap_or_else(|| tk.has_backlog(s));
        if tk.adaptive_turn_ends(reg.handed, ready) {
            reg.handed = 0;
            tk.to_back(s, self.me);
        }
    }

    fn release_source(&mut self, tk: &Protocol<'_>, source: usize) {
        let me = self.me;
        self.holding.retain(|&(s, _)| {
            if s == source {
                tk.release(s, me);
            }
            s != source
        });
    }

    /// After a look at sources it just started watching: were they ready at once?
    fn note_backlog(&self, tk: &Protocol<'_>) {
        for fd in &self.exclusive_fds {
            let reg = &self.registrations[fd];
            let Some(s) = reg.source else { continue };
            if reg.in_poller {
                let key = registry::token(*fd, reg.seq) as usize;
                let ready = self.raw_events.iter().any(|ev| ev.key == key);
                tk.note_ready_on_arm(s, ready);
            }
        }
    }

    /// Makes the poller hold exactly the exclusive descriptors this member must watch now: those
    /// it leads whose last event has been consumed. Returns whether it added any.
    fn match_poller(&mut self, tk: &Protocol<'_>) -> Result<bool> {
        #[cfg(all(windows, not(loom)))]
        self.forget_closed_sockets(tk);
        let me = self.me;
        let mut changes = std::mem::take(&mut self.changes);
        for &fd in &self.exclusive_fds {
            let Some(reg) = self.registrations.get_mut(&fd) else {
                continue;
            };
            let Some(s) = reg.source else { continue };
            // The claims won so far, read before the source is found free: any readiness
            // seen from now on is checked against it (`Protocol::confirm_claim`).
            let claims = tk.claims_won(s);
            let want = tk.shared.source(s).leader.load(SeqCst) == me && tk.needs_watch(s);
            if want {
                reg.claims_seen = claims;
            }
            // A number that no longer names its file is never watched (its entry may be
            // stale, and would report the old file's readiness, for which this member would
            // claim the source): forgotten below, its token passed on.
            if (want || reg.in_poller) && !registry::still_names(fd, reg.file) {
                changes.push((fd, false));
                self.stale.push(fd);
                continue;
            }
            if want != reg.in_poller {
                changes.push((fd, want));
            }
        }
        let stale = std::mem::take(&mut self.stale);
        for &fd in &stale {
            self.forget(tk, fd);
        }
        self.stale = stale;
        self.stale.clear();
        changes.retain(|(fd, _)| self.registrations.contains_key(fd));
        self.rebuild_if_due(tk)?;
        let result = self.apply(tk, &changes);
        changes.clear();
        self.changes = changes;
        result
    }

    /// Adds to or deletes from the poller, as `match_poller` found needed; returns whether it added any.
    fn apply(&mut self, tk: &Protocol<'_>, changes: &[(RawSource, bool)]) -> Result<bool> {
        let mut added = false;
        for &(fd, want) in changes {
            let Some(reg) = self.registrations.get(&fd) else {
                continue;
            };
            let (interest, key) = (reg.interest, registry::token(fd, reg.seq) as usize);
            if want {
                match self.poller_add(fd, key, interest) {
                    Ok(()) => {}
                    // Closed while registered, or its number taken by a descriptor already in
                    // the poller (the library's own, say): forget it, as the kernel did.
                    Err(Error::BadDescriptor { .. }) | Err(Error::AlreadyRegistered { .. }) => {
                        let _ = self.forget(tk, fd);
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            } else if !self.poller_delete(fd) {
                self.rebuild_due = true; // its entry may live on: see `forget`
            }
            if let Some(reg) = self.registrations.get_mut(&fd) {
                reg.in_poller = want;
            }
            added |= want;
        }
        Ok(added)
    }

    /// Forgets a registration (deleted, or its descriptor closed): out of the poller, out of its
    /// source's line, its claim released and its token passed on.
    ///
    /// A registration in the poller whose number was closed or reused cannot be deleted from it
    /// (the kernel deletes an entry only through a number that names its file): its entry may
    /// live on, its file open elsewhere. An exclusive one would take the group's wake-ups, so
    /// the poller is rebuilt before the next kernel wait (`rebuild_due`); another is left until
    /// it fires, when its token names no live registration.
    fn forget(&mut self, tk: &Protocol<'_>, fd: RawSource) -> Option<()> {
        let reg = self.registrations.remove(fd)?;
        if reg.in_poller && !self.poller_delete(fd) && reg.source.is_some() {
            self.rebuild_due = true;
        }
        if let Some(s) = reg.source {
            self.sources.retain(|&x| x != s);
            self.exclusive_fds.retain(|&x| x != fd);
            tk.shared.source(s).set_member(self.me, false);
            self.release_source(tk, s);
            if tk.shared.source(s).leader.load(SeqCst) == self.me {
                tk.pass(s, self.me, false);
            }
        }
        Some(())
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
        // Coming back to wait: what was handed out last time has been consumed.
        while let Some((s, _)) = self.holding.pop() {
            tk.release(s, me);
            self.end_turn(tk, s);
        }
        if cfg!(unix) && timeout == Some(Duration::ZERO) {
            // A look, not a wait: the member stays busy (nobody passes it a token, it passes
            // none) and takes only what nobody leads (see `poll_once`).
            let result = self.poll_once(tk, events);
            for &s in &self.sources {
                if tk.shared.source(s).leader.load(SeqCst) == me {
                    tk.pass(s, me, false);
                }
            }
            self.to_back.clear();
            return result;
        }
        // Through the member table, against this occupancy: a slot being reaped stays reaped.
        if !group.members().go_idle(&self.membership) {
            return Err(crate::members::lost_slot());
        }
        let result = self.wait_idle(tk, events, deadline);
        // Going busy: pass on every token this member has, so the group keeps listening, and go
        // to the back of the lines where it is due.
        if !group.members().go_busy(&self.membership) {
            return Err(crate::members::lost_slot());
        }
        for &s in &self.sources {
            let to_back = self.to_back.contains(&s);
            if to_back || tk.shared.source(s).leader.load(SeqCst) == me {
                tk.pass(s, me, to_back);
            }
        }
        self.to_back.clear();
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
    fn poll_once(&mut self, tk: &Protocol<'_>, events: &mut Events) -> Result<usize> {
        let me = self.me;
        let slot = tk.shared.member(me);
        if slot.notified.swap(0, SeqCst) != 0 {
            tk.drain_bell(me);
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
                tk.drain_bell(me);
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
            let src = tk.shared.source(s);
            let leader = src.leader.load(SeqCst);
            if (leader != NONE && leader != me) || src.holder.load(SeqCst) != NONE || reg.queued {
                continue; // led by an idle member, or held: not this look's to take
            }
            let seen = tk.claims_won(s);
            let Some(event) = poll_event(fd, reg.interest, reg.key) else {
                continue;
            };
            if !registry::still_names(fd, reg.file) {
                stale.push(fd);
                continue;
            }
            let Some(before) = tk.claim(s, me) else {
                continue;
            };
            let interest = reg.interest;
            if !tk.confirm_claim(s, me, seen, before, || ready_now(fd, interest)) {
                continue;
            }
            reg.handed += 1;
            self.holding.push((s, reg.key));
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
    fn poll_once(&mut self, _tk: &Protocol<'_>, _events: &mut Events) -> Result<usize> {
        unreachable!("busy polling takes the waiting path outside Unix")
    }

    fn wait_idle(
        &mut self,
        tk: &Protocol<'_>,
        events: &mut Events,
        deadline: Option<Instant>,
    ) -> Result<usize> {
        let me = self.me;
        let slot = tk.shared.member(me);
        let limit = self.registrations.events_per_wait(events.room());
        let mut first = true;
        loop {
            // Every way round this loop (a spin, a probe, a bell, a stale queue) honours the
            // deadline.
            if !std::mem::take(&mut first) && deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(0);
            }
            // One clock reading for this pass's looks at the holds, if any needs it.
            let now = Now::new();
            for &s in &self.sources {
                // A holder that kept its event too long is not waited for (`HOLD_BOUND`).
                // (The holder is read before the hold's age: a claim made after that read is
                // young, and is not ended.)
                let holder = tk.shared.source(s).holder.load(SeqCst);
                if tk.hold_left(s, me, &now) == Some(Duration::ZERO) {
                    tk.expire_hold(s, me, holder);
                }
                if !tk.take_if_due(s, me) {
                    tk.volunteer(s, me);
                }
            }
            // Just started watching a source: look once without sleeping, to learn whether
            // it has a backlog (see `Protocol::spinning_pays`).
            let probe = self.match_poller(tk)?;
            // The processes this member depends on: their deaths wake it (a pidfd in its
            // poller, on Linux), and the periodic check stays as the fallback.
            self.depends_on.clear();
            for &s in &self.sources {
                if let Some(pid) = tk.dependency_pid(s, me) {
                    if !self.depends_on.contains(&pid) {
                        self.depends_on.push(pid);
                    }
                }
            }
            let must_check = !self.depends_on.is_empty();
            let by_event = must_check && self.deaths.watch(&self.poller, &self.depends_on);
            if self.deaths.take_check_now() {
                for &s in &self.sources {
                    tk.check(s, me);
                }
            }
            let sweep = !self.sources.is_empty() && tk.shared.spans_processes();
            let check_every = match (must_check, sweep) {
                (true, _) if !by_event => Some(LIVENESS_CHECK),
                (true, _) | (false, true) => Some(LIVENESS_SWEEP),
                (false, false) => None,
            };
            // The check is a deadline kept across passes and waits: a signal or an early
            // return does not put it off (a timeout restarted on every pass would).
            self.next_check = check_every.map(|every| {
                let at = Instant::now() + every;
                self.next_check.map_or(at, |next| next.min(at))
            });
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
                .any(|fd| self.registrations[fd].suspect.is_some())
                .then_some(TAKE_BOUND);
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let check_left = self
                .next_check
                .map(|at| at.saturating_duration_since(Instant::now()));
            let poll_timeout = [left, check_left, hold, suspect]
                .into_iter()
                .flatten()
                .min();
            if self.spin_for_release(tk, deadline) {
                if slot.notified.swap(0, SeqCst) != 0 {
                    slot.wakeups.add(1);
                    return Ok(0);
                }
                continue;
            }
            if !self.pending.is_empty() && !probe {
                // Ready descriptors left by the last kernel wait: served in turn, no kernel
                // wait (so a wait costs in proportion to what it returns, not to how many
                // descriptors are ready).
                if slot.notified.swap(0, SeqCst) != 0 {
                    tk.drain_bell(me);
                    return Ok(0);
                }
                self.serve_pending(tk, events, limit);
                if !events.is_empty() {
                    return Ok(events.len());
                }
                continue;
            }
            let poll_timeout = match probe {
                true => Some(Duration::ZERO),
                false => poll_timeout,
            };
            self.reserve_raw_events();
            self.raw_events.clear();
            // A mark left by a ringer that died before it wrote must not silence the bell for
            // long (see `Protocol::wake`); clearing it is always safe (a ring then writes). (A
            // look first: the mark is usually clear, and a clear is a locked swap.)
            if slot.rung.load(SeqCst) != 0 {
                slot.rung.swap(0, SeqCst);
            }
            if let Err(e) = self.raw_events.wait(&self.poller, poll_timeout) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(Error::io("waiting in the member's poller", e));
                }
                // A signal handler ran: the wait ends with no events, so that the caller sees
                // its flag at once (`Waiter::wait`); the timers that are due run first.
                if self.check_due(tk) || suspect.is_some() {
                    self.look_for_stuck(tk);
                }
                events.set_interrupted();
                return Ok(0);
            }
            self.polls += 1;
            // The periodic check, when due, whatever woke the member.
            let checked_now = self.check_due(tk);
            let (died, only_deaths) = self
                .deaths
                .fired(&self.poller, self.raw_events.iter().map(|ev| ev.key));
            if died {
                // A process this member depends on ended: clear it out now.
                for &s in &self.sources {
                    tk.check(s, me);
                }
                if only_deaths {
                    continue;
                }
            }
            if probe {
                self.note_backlog(tk);
                // (A notification counts: on Windows the bell is the poller's notify, which
                // this look consumed without leaving an event.)
                if self.raw_events.is_empty() && slot.notified.load(SeqCst) == 0 {
                    continue; // nothing yet: now sleep until there is
                }
            }
            if self.raw_events.is_empty() {
                let checked = checked_now || check_every.is_some();
                if checked && !checked_now {
                    self.next_check = None;
                    for &s in &self.sources {
                        tk.check(s, me);
                    }
                }
                if checked || suspect.is_some() {
                    self.look_for_stuck(tk);
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(0);
                }
                if slot.notified.swap(0, SeqCst) != 0 {
                    slot.wakeups.add(1);
                    return Ok(0);
                }
                if check_every.is_none() {
                    // Woken with nothing: a door bell where bells are the poller's notify, or
                    // the look at the holds of active sources (`Protocol::hold_left`).
                    slot.wakeups.add(1);
                    slot.token_wakeups.add(1);
                }
                continue;
            }
            slot.wakeups.add(1);
            // On Windows a bell leaves no event to see: look at the flag every time.
            let rung = self.collect_candidates(tk) || cfg!(windows);
            if rung {
                tk.drain_bell(me);
            }
            let found_readiness = !self.pending.is_empty();
            self.serve_pending(tk, events, limit);
            let notified = rung && slot.notified.swap(0, SeqCst) != 0;
            if !events.is_empty() || notified {
                return Ok(events.len());
            }
            if found_readiness {
                slot.empty_wakeups.add(1);
            } else {
                slot.token_wakeups.add(1);
            }
        }
    }

    /// Makes room in the kernel wait's buffer for every registered descriptor at once (and the
    /// door bell), so that one kernel wait finds all that are ready, whatever their number.
    fn reserve_raw_events(&mut self) {
        self.raw_events.reserve(self.registrations.len() + 2);
    }

    /// A leader whose source is still held, or the deputy next in line, spins (yielding the
    /// CPU) for its turn, up to `SPIN_FOR_RELEASE` (and never past the wait's deadline),
    /// instead of sleeping, under a backlog with quick holders: the holder then consumes
    /// within microseconds, while a member asleep costs a kernel wake-up on the critical path
    /// (on a virtual machine, tens of microseconds when its CPU has gone idle). Door bells for
    /// a spinning member are left unrung (see `Protocol::wake`).
    ///
    /// Each source is looked at on its own: the spin is for the sources this member waits on
    /// when it starts, and it ends when one of those is no longer waited on (its turn came, or
    /// its role changed). A role on another source (leading a free one, say) never counts, so
    /// a member that leads one source and is the deputy of another cannot feed its own loop.
    /// Returns whether one of them changed, or a notification came (loop again), rather than
    /// timed out.
    fn spin_for_release(&self, tk: &Protocol<'_>, deadline: Option<Instant>) -> bool {
        if cfg!(loom) {
            return false; // the model checker sees the protocol without spinning
        }
        let me = self.me;
        let slot = tk.shared.member(me);
        // Bit i: the member waits for its turn on `self.sources[i]`.
        let waiting = |tk: &Protocol<'_>| {
            self.sources
                .iter()
                .take(64)
                .enumerate()
                .filter(|&(_, &s)| tk.about_to_watch(s, me) && tk.spinning_pays(s))
                .fold(0u64, |mask, (i, _)| mask | 1 << i)
        };
        let at_start = waiting(tk);
        if at_start == 0 {
            return false;
        }
        let changed = |tk: &Protocol<'_>| {
            slot.notified.load(SeqCst) != 0 || waiting(tk) & at_start != at_start
        };
        slot.spinning.store(1, SeqCst);
        let mut until = Instant::now() + SPIN_FOR_RELEASE;
        if let Some(d) = deadline {
            until = until.min(d);
        }
        let mut spun = false;
        while !spun && Instant::now() < until {
            std::thread::yield_now();
            spun = changed(tk);
        }
        slot.spinning.store(0, SeqCst);
        // A bell left unrung while we spun: its cause is in the shared state, read it again.
        spun || changed(tk)
    }

    /// Turns the poller's events into ready descriptors queued in turn order, behind those
    /// queued already; returns whether the bell rang.
    fn collect_candidates(&mut self, tk: &Protocol<'_>) -> bool {
        let mut rung = false;
        self.candidates.clear();
        for ev in self.raw_events.iter() {
            if ev.key == DOORBELL_KEY {
                rung = true;
                continue;
            }
            if ev.key > isize::MAX as usize {
                continue; // the library's own (a death watch): not a registration's token
            }
            let (fd, _) = registry::untoken(ev.key as u64);
            let Some(reg) = self
                .registrations
                .get_mut(&fd)
                .filter(|r| r.in_poller && registry::token_matches(ev.key as u64, r.seq))
            else {
                // An entry no live registration has (see `forget`): a new poller without it.
                self.rebuild_due = true;
                continue;
            };
            if reg.queued {
                continue; // in the queue already, from an earlier wait
            }
            if let Some(s) = reg.source {
                if tk.shared.source(s).leader.load(SeqCst) != self.me {
                    continue; // the token moved on while we slept
                }
            }
            // Every candidate goes to the queue below.
            reg.queued = true;
            self.candidates.push(Candidate {
                fd,
                seq: reg.seq,
                event: Event {
                    key: reg.key,
                    readable: ev.readable,
                    writable: ev.writable,
                },
            });
        }
        // Serve in registration order, starting after the descriptor served last.
        let last = self.last_served;
        self.candidates
            .sort_by_key(|c| (c.seq <= last && last != u64::MAX, c.seq));
        for c in self.candidates.drain(..) {
            self.pending.push_back(Pending {
                fd: c.fd,
                seq: c.seq,
                event: c.event,
                found_by: self.polls,
            });
        }
        rung
    }

    /// Hands out queued ready descriptors, in turn: one if any registration asked for one
    /// event per wait, else as many as fit. One found by an earlier kernel wait is looked at
    /// again first (one poll(2) for all of them), and dropped if no longer ready. An exclusive
    /// one is handed out only if this member still leads its source and wins its claim.
    fn serve_pending(&mut self, tk: &Protocol<'_>, events: &mut Events, limit: usize) {
        while events.len() < limit && !self.pending.is_empty() {
            let window = (limit - events.len()).min(self.pending.len()).min(4096);
            self.look_again(window);
            for _ in 0..window {
                let Some(p) = self.pending.pop_front() else {
                    break;
                };
                self.hand_one(tk, p, events);
            }
        }
        #[cfg(not(unix))]
        {
            // No cheap second look here: what was not handed out is found again next time.
            for p in self.pending.drain(..) {
                if let Some(reg) = self.registrations.get_mut(&p.fd) {
                    reg.queued = false;
                }
            }
        }
    }

    /// Looks again, with one poll(2), at the first `window` queued descriptors found by an
    /// earlier kernel wait: each one's event is updated, or marked stale (found_by = MAX).
    #[cfg(unix)]
    fn look_again(&mut self, window: usize) {
        let polls = self.polls;
        let mut pollfds = std::mem::take(&mut self.pollfds);
        pollfds.clear();
        for p in self.pending.iter().take(window) {
            if p.found_by != polls {
                let interest = self.registrations.get(&p.fd).map(|r| r.interest);
                pollfds.push(libc::pollfd {
                    fd: p.fd,
                    events: interest.map_or(0, registry::poll_events),
                    revents: 0,
                });
            }
        }
        if !pollfds.is_empty() {
            // SAFETY: polls a live array of pollfd of the length given, without waiting.
            let n = unsafe { libc::poll(pollfds.as_mut_ptr(), pollfds.len() as libc::nfds_t, 0) };
            let mut looked = pollfds.iter();
            for p in self.pending.iter_mut().take(window) {
                if p.found_by == polls {
                    continue;
                }
                let revents = looked.next().map_or(0, |l| l.revents) as libc::c_int;
                let ready = n > 0 && revents & !libc::POLLNVAL as libc::c_int != 0;
                if ready {
                    p.event.readable = revents
                        & (libc::POLLIN | libc::POLLPRI | libc::POLLHUP | libc::POLLERR)
                            as libc::c_int
                        != 0;
                    p.event.writable =
                        revents & (libc::POLLOUT | libc::POLLERR) as libc::c_int != 0;
                    p.found_by = polls;
                } else {
                    p.found_by = u64::MAX;
                }
            }
        }
        self.pollfds = pollfds;
    }

    #[cfg(not(unix))]
    fn look_again(&mut self, _window: usize) {}

    /// Hands out one queued ready descriptor, if it is still registered as it was, still ready
    /// and (exclusive) still led by this member and claimed by it.
    fn hand_one(&mut self, tk: &Protocol<'_>, p: Pending, events: &mut Events) {
        let me = self.me;
        let Some(reg) = self.registrations.get_mut(&p.fd) else {
            return;
        };
        if reg.seq != p.seq {
            return; // the number was registered again since
        }
        reg.queued = false;
        if p.found_by != self.polls {
            return; // no longer ready
        }
        if reg.source.is_none() && !registry::still_names(p.fd, reg.file) {
            // Closed or reused since it was added: forgotten, never reported, and its entry
            // (which fired, so it lives on) removed with a new poller.
            let _ = self.forget(tk, p.fd);
            self.rebuild_due = true;
            return;
        }
        if let Some(s) = reg.source {
            if tk.shared.source(s).leader.load(SeqCst) != me {
                return;
            }
            let Some(before) = tk.claim(s, me) else {
                return;
            };
            let (fd, interest) = (p.fd, reg.interest);
            if !tk.confirm_claim(s, me, reg.claims_seen, before, || ready_now(fd, interest)) {
                return; // consumed by another member since this one saw it ready
            }
            self.holding.push((s, reg.key));
            reg.handed += 1;
            if tk.rotation_due(reg.handed) {
                reg.handed = 0;
                self.to_back.push(s);
            }
        }
        self.last_served = p.seq;
        events.push(p.event);
    }

    /// Runs the periodic liveness check of this member's sources if it is due (`next_check`);
    /// returns whether it ran.
    fn check_due(&mut self, tk: &Protocol<'_>) -> bool {
        if !self.next_check.is_some_and(|at| Instant::now() >= at) {
            return false;
        }
        self.next_check = None;
        for &s in &self.sources {
            tk.check(s, self.me);
        }
        true
    }

    /// For the exclusive sources whose leader this member checks on: a source ready while
    /// nobody holds it and its leader claims nothing for `TAKE_BOUND` has a stuck leader
    /// (stopped, or handed the token while stopped): this member takes the token from it.
    fn look_for_stuck(&mut self, tk: &Protocol<'_>) {
        let me = self.me;
        for &fd in &self.exclusive_fds {
            let Some(reg) = self.registrations.get_mut(&fd) else {
                continue;
            };
            let Some(s) = reg.source else { continue };
            let src = tk.shared.source(s);
            let leader = src.leader.load(SeqCst);
            let claimed = src.claimed_at.load(SeqCst);
            let checking = leader != NONE
                && leader != me
                && src.watcher.load(SeqCst) == me
                && src.holder.load(SeqCst) == NONE;
            if !checking || !ready_now(fd, reg.interest) {
                reg.suspect = None;
                continue;
            }
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

    /// Leaves the group: frees what this member holds and passes its tokens on.
    pub(crate) fn leave(&mut self, group: &Protocol<'_>) {
        let tk = group;
        let me = self.me;
        for (s, _) in std::mem::take(&mut self.holding) {
            tk.release(s, me);
        }
        for &s in &self.sources {
            tk.shared.source(s).set_member(me, false);
            if tk.shared.source(s).leader.load(SeqCst) == me {
                tk.pass(s, me, false);
            }
        }
        let fds: Vec<RawSource> = self
            .registrations
            .iter()
            .filter(|(_, r)| r.in_poller)
            .map(|(&fd, _)| fd)
            .collect();
        for fd in fds {
            self.poller_delete(fd);
        }
        self.deaths.clear(&self.poller);
        #[cfg(all(unix, not(loom)))]
        if let Some(bell) = self.bell.take() {
            for fd in bell.watch() {
                let _ = self.poller.delete(fd);
            }
            tk.bells.unbind(me, bell);
        }
    }

    /// Adds `fd` to the poller under `key` (its registration's token, see `crate::registry`).
    fn poller_add(&self, fd: RawSource, key: usize, interest: Interest) -> Result<()> {
        #[cfg(all(windows, not(loom)))]
        windows::check_socket(fd)?;
        let mut ev = polling::Event::new(key, interest.is_readable(), interest.is_writable());
        ev.set_priority(interest.is_priority());
        // SAFETY: the caller registered this open descriptor and must keep it open until it is
        // deleted; we delete it from the poller on `delete`, when the member stops watching it,
        // and when the member leaves.
        unsafe { self.poller.add_with_mode(fd, ev, PollMode::Level) }
            .map_err(|e| registry::refusal(fd, e, "adding a descriptor to the member's poller"))
    }

    /// Deletes `fd` from the poller. Returns false if the kernel refused as for a number closed
    /// or naming another file since it was added (its entry may live on: see `forget`).
    fn poller_delete(&self, fd: RawSource) -> bool {
        #[cfg(unix)]
        // SAFETY: only used for the duration of the call; a descriptor closed meanwhile only
        // makes the kernel answer EBADF or ENOENT.
        let res = self
            .poller
            .delete(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) });
        #[cfg(windows)]
        // SAFETY: as above, for a socket.
        let res = self
            .poller
            .delete(unsafe { std::os::windows::io::BorrowedSocket::borrow_raw(fd) });
        !res.is_err_and(|e| registry::maybe_stale(&e))
    }

    /// Rebuilds the poller if a stale entry may be in it (`rebuild_due`).
    fn rebuild_if_due(&mut self, tk: &Protocol<'_>) -> Result<()> {
        if std::mem::take(&mut self.rebuild_due) {
            self.rebuild(tk)?;
        }
        Ok(())
    }

    /// Replaces the member's poller with a new one holding its door bell and the registrations
    /// it watches now, and forgets those whose number no longer names their file. Dropping the
    /// old poller removes every stale entry in it, the only way to remove one whose number was
    /// closed or reused while its file stays open elsewhere (see `crate::registry`). The death
    /// watches are opened again by the next pass of `wait`. One `epoll_ctl` and one `fstat`
    /// per registration in the poller; done only when a stale entry may exist. (Windows: its
    /// own check forgets closed sockets, `windows::forget_closed_sockets`; nothing to rebuild.)
    #[cfg(unix)]
    fn rebuild(&mut self, tk: &Protocol<'_>) -> Result<()> {
        let poller =
            Arc::new(Poller::new().map_err(|e| Error::io("rebuilding the member's poller", e))?);
        #[cfg(not(loom))]
        if let Some(bell) = &self.bell {
            for fd in bell.watch() {
                // SAFETY: as in `new`: the bell is this waiter's, and `leave` deletes it from
                // the poller (this new one, by then) before it drops it.
                unsafe {
                    poller.add_with_mode(
                        &fd,
                        polling::Event::readable(DOORBELL_KEY),
                        PollMode::Level,
                    )
                }
                .map_err(|e| Error::io("watching the member's door bell", e))?;
            }
        }
        self.deaths.clear(&self.poller);
        let old = std::mem::replace(&mut self.poller, poller);
        let mut gone = Vec::new();
        let watched: Vec<RawSource> = self
            .registrations
            .iter()
            .filter(|(_, r)| r.in_poller)
            .map(|(&fd, _)| fd)
            .collect();
        for fd in watched {
            let reg = &self.registrations[&fd];
            let key = registry::token(fd, reg.seq) as usize;
            let live = registry::still_names(fd, reg.file)
                && self.poller_add(fd, key, reg.interest).is_ok();
            if !live {
                gone.push(fd);
            }
        }
        drop(old); // every stale entry goes with the old poller
        for fd in gone {
            if let Some(reg) = self.registrations.get_mut(&fd) {
                reg.in_poller = false; // not in the new poller: nothing to delete
            }
            let _ = self.forget(tk, fd);
        }
        // The queue's entries were found by the old poller: looked at again before use.
        self.polls += 1;
        self.rebuild_due = false;
        Ok(())
    }

    #[cfg(not(unix))]
    fn rebuild(&mut self, _tk: &Protocol<'_>) -> Result<()> {
        Ok(())
    }
}

/// Is `fd` ready for `interest` right now? (One poll(2) that does not wait.)
#[cfg(unix)]
fn ready_now(fd: RawSource, interest: Interest) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: registry::poll_events(interest),
        revents: 0,
    };
    // SAFETY: polls one live pollfd without waiting.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n == 1 && pfd.revents & libc::POLLNVAL == 0
}

#[cfg(not(unix))]
fn ready_now(_fd: RawSource, _interest: Interest) -> bool {
    false
}

/// The event of `fd` if it is ready for `interest` right now (one poll(2) that does not wait).
#[cfg(unix)]
fn poll_event(fd: RawSource, interest: Interest, key: usize) -> Option<Event> {
    let mut pfd = libc::pollfd {
        fd,
        events: registry::poll_events(interest),
        revents: 0,
    };
    // SAFETY: polls one live pollfd without waiting.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    let revents = pfd.revents;
    if n != 1 || revents & libc::POLLNVAL != 0 {
        return None;
    }
    Some(Event {
        key,
        readable: revents & (libc::POLLIN | libc::POLLPRI | libc::POLLHUP | libc::POLLERR) != 0,
        writable: revents & (libc::POLLOUT | libc::POLLERR) != 0,
    })
}

/// Is `fd` still ready for `interest` right now (a zero-timeout `poll`)? `None` where the
/// emulation cannot ask (Windows): the caller falls back on the backlog average.
#[cfg(unix)]
fn still_ready(fd: RawSource, interest: Interest) -> Option<bool> {
    Some(registry::still_ready(fd, interest))
}

#[cfg(not(unix))]
fn still_ready(_fd: RawSource, _interest: Interest) -> Option<bool> {
    None
}

/// Clears out member `m` of an emulated group, found dead in word `seen`.
pub(crate) fn reap_member(group: &Protocol<'_>, m: u32, seen: Life) {
    group.reap(m, seen);
}

/// Wakes one emulated member, from any thread or any process of the group.
#[derive(Clone)]
pub(crate) struct EmulatedNotifier {
    member: u32,
    /// The slot's generation when the member joined: once it left, another member may use the
    /// slot, and this notifier must not wake that one.
    generation: u32,
}

impl EmulatedNotifier {
    pub(crate) fn new(group: &Protocol<'_>, member: u32) -> EmulatedNotifier {
        let generation = group.shared.member(member).generation();
        EmulatedNotifier { member, generation }
    }

    pub(crate) fn notify(&self, group: &Protocol<'_>) -> Result<()> {
        let slot = group.shared.member(self.member);
        if slot.generation() != self.generation {
            return Ok(()); // the member left: there is nobody to wake
        }
        slot.notified.store(1, SeqCst);
        group.wake(self.member);
        Ok(())
    }
}

#[cfg(all(test, unix, not(loom)))]
mod tests {
    use super::*;
    use crate::{Backend, Group};
    use std::os::fd::{AsRawFd, OwnedFd};

    fn pipe() -> (OwnedFd, OwnedFd) {
        nix::unistd::pipe().unwrap()
    }

    /// The state that locked a group with two exclusive sources under a backlog: a member leads
    /// source A (free, as a leader's source normally is) and is the deputy of source B, and
    /// the hints say spinning pays. Its spin ends within its bound (the role on A does not
    /// count as a change for B), and its `wait` returns at its deadline.
    #[test]
    fn leading_one_source_and_deputy_of_another() {
        let group = Group::builder().backend(Backend::Emulated).build().unwrap();
        let inner = &group.inner;
        let claim = inner.members().claim(std::process::id()).unwrap();
        let membership = claim.membership();
        inner.members().publish(claim).unwrap();
        let me = membership.member;
        let other = inner.shared.claim_slot(std::process::id()).unwrap();
        let mut waiter = EmulatedWaiter::new(&inner.protocol(), membership).unwrap();
        let (a, _a_w) = pipe();
        let (b, _b_w) = pipe();
        let exclusive = Interest::READABLE.exclusive();
        waiter
            .add(&inner.protocol(), a.as_raw_fd(), 0, exclusive)
            .unwrap();
        waiter
            .add(&inner.protocol(), b.as_raw_fd(), 1, exclusive)
            .unwrap();
        let (sa, sb) = (waiter.sources[0], waiter.sources[1]);
        let src = |s| inner.shared.source(s);
        src(sa).leader.store(me, SeqCst);
        src(sb).leader.store(other, SeqCst);
        src(sb).deputy.store(me, SeqCst);
        for s in [sa, sb] {
            src(s).ready_on_arm.store(1024, SeqCst);
            src(s).hold_ns.store(0, SeqCst);
        }
        let tk = &inner.protocol();
        let start = Instant::now();
        assert!(
            !waiter.spin_for_release(tk, None),
            "leading A counted as a change for B"
        );
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the spin overran"
        );
        let mut events = Events::with_capacity(4);
        let timeout = Duration::from_millis(100);
        let start = Instant::now();
        assert_eq!(
            waiter
                .wait(&inner.protocol(), &mut events, Some(timeout))
                .unwrap(),
            0
        );
        let took = start.elapsed();
        // A hang detector, not a timing bound: a loaded machine may run it late.
        assert!(
            took >= timeout && took < timeout + Duration::from_secs(10),
            "wait({timeout:?}) took {took:?}"
        );
        waiter.leave(&inner.protocol());
    }
}
