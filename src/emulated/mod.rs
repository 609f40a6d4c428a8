//! The emulated backend: exclusive, fair wake-ups in user space, on top of a poller per member.
//!
//! Each member has its own poller (`poller`: epoll on Linux, `polling` elsewhere) and a door
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
//! The rooms: this file is the waiter's state (its poller, its registrations in a
//! `crate::registry` table, its queue) with its join and leave; `registrations` keeps the
//! poller matched to the registrations and the token; `wait` is the wait (plan, sleep,
//! dispatch) and the end of a turn; `hand_out` turns a kernel wait's events into events handed
//! out, in turn, each exclusive one claimed; `protocol` is the token protocol, and
//! `Protocol` its view of a group, which the handles build and pass in (this backend does not
//! import them); `identity` says which open file a descriptor is; `kernel_wait` is the kernel
//! wait itself and `poller` the poller it waits in, per system; `doorbell` and `deathwatch`
//! wake a member; `other_unix` and `windows` hold what differs per system.

mod deathwatch;
// The door bells live beside the backends (`crate::doorbell`): the native backend rings them too.
use crate::doorbell;
mod hand_out;
mod identity;
mod kernel_wait;
#[cfg(unix)]
mod other_unix;
pub(crate) mod poller;
mod protocol;
mod quick_watch;
mod registrations;
mod wait;
#[cfg(all(windows, not(loom)))]
mod windows;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use poller::Poller;

use crate::contract::Rotation;
use crate::error::{Error, RawSource, Result};
use crate::interest::{Event, Interest};
use crate::liveness::Liveness;
use crate::members::Membership;
use crate::registry::{self, FileId, Registry};
use crate::shared::SharedState;
use deathwatch::DeathWatch;
use doorbell::Doorbells;
use kernel_wait::RawEvents;
use protocol::SLOW_RETURNS;
pub(crate) use protocol::{region, Protocol};
use protocol::{Hold, Occupant};
use protocol::{SourceTable, TableLayout};

/// Poller keys from here up are the emulation's own descriptors' (the door bell, the death
/// watches), above every registration's token (`crate::registry::token`: below 2^63, or a
/// descriptor number). The caller's keys never reach the poller: any key is the caller's.
const FIRST_OWN_KEY: usize = usize::MAX - 1;

/// The poller key of the member's door bell.
const DOORBELL_KEY: usize = FIRST_OWN_KEY;

/// What the emulation adds to a group: this process's side of the door bells, and the shape of
/// the group's source table.
pub(crate) struct EmulatedGroup {
    bells: Doorbells,
    table: TableLayout,
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
            sources: SourceTable::of(shared, self.table),
            bells: &self.bells,
            live,
            rotation,
        }
    }

    /// The emulation's side of the group in `shared` (whose region `check_region` accepted),
    /// with the door bells of this process.
    pub(crate) fn new(shared: &SharedState) -> Result<EmulatedGroup> {
        let settings = shared.settings();
        Ok(EmulatedGroup {
            bells: Doorbells::new(shared.incarnation(), settings.capacity)?,
            table: TableLayout::of(&settings),
        })
    }
}

/// Does `shared`'s region hold the source table its settings ask for? (A named group's, written
/// by another process, is checked before it is used.)
pub(crate) fn check_region(shared: &SharedState) -> std::result::Result<(), String> {
    protocol::table_check(shared, TableLayout::of(&shared.settings()))
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
    /// When the first of them was handed (monotonic ns): the turn's pace (`end_turn`).
    turn_started_ns: u64,
    /// Exclusive events handed to this member from this source since it registered, and the
    /// source's claim count then: its share of the group's events (`end_turn`).
    taken: u32,
    claims_at_add: u32,
    /// Is it in the member's queue of ready descriptors not yet handed out?
    queued: bool,
    /// (leader, its last claim, when) if this member, checking on the leader of this
    /// exclusive source, last saw it ready with nobody holding it: the leader may be stuck.
    suspect: Option<(Occupant, u64, Instant)>,
    /// The source's claim count when this member last found it free to watch.
    claims_seen: u32,
}

impl registry::Registered for Registration {
    fn interest(&self) -> Interest {
        self.interest
    }
    fn file(&self) -> FileId {
        self.file
    }
}

/// A ready descriptor found by one kernel wait, before it is handed out.
struct Candidate {
    fd: RawSource,
    seq: u64,
    event: Event,
    /// Did the poller say whether it hung up or is in error (see `kernel_wait::Seen`)?
    exact: bool,
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
    /// Are its event's hang-up and error flags known? If not (kqueue), it is looked at again
    /// too (by the poll(2) look, Unix only: IOCP always says).
    #[cfg_attr(not(unix), allow(dead_code))]
    exact: bool,
}

/// One member's emulated half.
pub(crate) struct EmulatedWaiter {
    /// This member as the sources' words name it (slot and generation).
    me: Occupant,
    /// This member's occupancy of slot `me`: its IDLE/BUSY changes are made against it.
    membership: Membership,
    poller: Arc<Poller>,
    /// Registered descriptors by number.
    registrations: Registry<Registration>,
    next_seq: u64,
    /// Registration order of the descriptor served last (for serving ready ones in turn).
    last_served: u64,
    /// Exclusive sources this member holds: handed out, not yet consumed, as (source, key,
    /// the hold).
    holding: Vec<(usize, usize, Hold)>,
    /// Sources whose line this member goes to the back of when it next goes busy.
    to_back: Vec<usize>,
    /// When this member's last wait returned exclusive events (monotonic ns; 0: it did not).
    returned_ns: u64,
    /// When its current (or last) wait started (monotonic ns).
    wait_started_ns: u64,
    /// How many times in a row this member came back to `wait` later than `QUICK_RETURN`
    /// after that return (`token_at_busy`: `SLOW_RETURNS` in a row and it is slow; it starts
    /// slow, until it has shown otherwise).
    slow_in_a_row: u32,
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
    /// How long this member's watches of a free source last (`quick_watch`).
    quick_watch: quick_watch::QuickWatch,
    /// Does this member lead a source nobody holds, and watch it (as `match_poller` last
    /// found)?
    watching_free: bool,
    /// `serve_pending`'s list for poll(2), kept to save an allocation per wait.
    #[cfg(unix)]
    pollfds: Vec<libc::pollfd>,
    /// `match_poller`'s list of poller changes, kept to save an allocation per wait.
    changes: Vec<(RawSource, bool)>,
    /// `match_poller`'s list of registrations whose numbers no longer name their files.
    stale: Vec<RawSource>,
    /// The processes this member depends on, whose deaths it waits on (see `deathwatch`).
    deaths: Box<DeathWatch>,
    /// Whose death this member watches besides its dependencies (`crate::ring`).
    ring: crate::ring::RingWatch,
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
            // The bell is this waiter's, and `leave` deletes it from the poller before it drops
            // it.
            let bell = poller::Event::new(DOORBELL_KEY, true, false);
            poller::add(&poller, std::os::fd::AsRawFd::as_raw_fd(&fd), bell)
                .map_err(|e| Error::io("watching the member's door bell", e))?;
        }
        group.drain_bell(me);
        #[cfg(all(not(unix), not(loom)))]
        group.bells.install(me, poller.clone());
        Ok(EmulatedWaiter {
            me: Occupant::new(me, membership.generation()),
            membership,
            poller,
            registrations: Registry::new(),
            next_seq: 0,
            last_served: u64::MAX,
            holding: Vec::new(),
            to_back: Vec::new(),
            returned_ns: 0,
            wait_started_ns: 0,
            slow_in_a_row: SLOW_RETURNS,
            sources: Vec::new(),
            exclusive_fds: Vec::new(),
            raw_events: RawEvents::new(),
            candidates: Vec::new(),
            pending: VecDeque::new(),
            polls: 0,
            quick_watch: quick_watch::QuickWatch::default(),
            watching_free: false,
            #[cfg(unix)]
            pollfds: Vec::new(),
            changes: Vec::new(),
            stale: Vec::new(),
            deaths: Box::default(),
            ring: crate::ring::RingWatch::default(),
            depends_on: Vec::new(),
            #[cfg(all(unix, not(loom)))]
            bell: Some(bell),
            rebuild_due: false,
            next_check: None,
        })
    }

    /// Leaves the group: frees what this member holds and passes its tokens on.
    pub(crate) fn leave(&mut self, group: &Protocol<'_>) {
        let tk = group;
        let me = self.me;
        for (s, _, hold) in std::mem::take(&mut self.holding) {
            tk.release(s, hold);
        }
        for &s in &self.sources {
            tk.drop_source(s, me, None);
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
            tk.bells.unbind(me.slot, bell);
        }
    }
}

/// Wakes one emulated member, from any thread or any process of the group.
#[derive(Clone)]
pub(crate) struct EmulatedNotifier {
    member: u32,
    /// The generation of the occupant it was made for: once that one left, another member may
    /// use the slot, and this notifier must not wake that one.
    generation: u32,
}

impl EmulatedNotifier {
    pub(crate) fn new(member: u32, generation: u32) -> EmulatedNotifier {
        EmulatedNotifier { member, generation }
    }

    /// Marks its occupant notified and rings that occupant's bell (by its generation, which
    /// the bell's address carries, and without the `rung` mark, which belongs to whoever
    /// occupies the slot now: a ring without it is only ever one ring too many). An occupant
    /// that left is not there to wake: nothing is done.
    pub(crate) fn notify(&self, group: &Protocol<'_>) -> Result<()> {
        if group.shared.member(self.member).notify(self.generation) {
            group.bells.ring(self.member, self.generation);
        }
        Ok(())
    }
}

#[cfg(all(test, unix, not(loom)))]
mod tests {
    use super::*;
    use crate::contract::Backend;
    use crate::interest::Events;
    use crate::members::Members;
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::time::Duration;

    fn pipe() -> (OwnedFd, OwnedFd) {
        nix::unistd::pipe().unwrap()
    }

    /// A group's parts, named as the test reads them.
    struct Scene<'a, P> {
        protocol: P,
        shared: &'a SharedState,
    }

    impl<'a, P: Fn() -> Protocol<'a>> Scene<'a, P> {
        fn protocol(&self) -> Protocol<'a> {
            (self.protocol)()
        }
    }

    /// The state that locked a group with two exclusive sources under a backlog: a member leads
    /// source A (free, as a leader's source normally is) and is the deputy of source B, and
    /// the hints say spinning pays. Its spin ends within its bound (the role on A does not
    /// count as a change for B), and its `wait` returns at its deadline.
    #[test]
    fn leading_one_source_and_deputy_of_another() {
        // The group's parts, as `GroupInner` holds them (this backend does not import the
        // handles): its shared memory, liveness marks and door bells.
        let shared = crate::inner::test_state(Backend::Emulated, 8);
        let live = Liveness::new(8).unwrap();
        let bells = EmulatedGroup::new(&shared).unwrap();
        let inner = &Scene {
            protocol: || bells.protocol(&shared, &live, Rotation::Adaptive),
            shared: &shared,
        };
        let members = Members::new(&shared, &live);
        let claim = members.claim(std::process::id()).unwrap();
        let membership = claim.membership();
        members.publish(claim).unwrap();
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
        let tk = inner.protocol();
        let src = |s| tk.source(s);
        let other = Occupant::new(other, inner.shared.member(other).generation());
        src(sa).force_leader(Occupant::new(me, membership.generation()));
        src(sb).force_leader(other);
        src(sb).set_deputy(me);
        for s in [sa, sb] {
            src(s).force_backlog();
        }
        let tk = &inner.protocol();
        let start = Instant::now();
        assert_eq!(
            waiter.spin_for_release(tk, None),
            protocol::Spin::Vain,
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
