//! The hand-off under a backlog under the model checker: the path every message takes when
//! the group is busy, with the deputy, the spinning leader and the hints as they run, on two
//! sources and three members.
//!
//! A member in `wait` is modelled by what `EmulatedWaiter::wait_idle` does with the shared
//! state, step for step: a *round* (`plan`: overdue holds ended, due turns taken or a watcher
//! volunteered, then `match_poller`'s look at what it leads and whether it must watch it), then
//! the spin for its turn (`Protocol::spin_for_turn`, the very loop, bounded by the model's
//! clock), and after any spin one more round (after a vain one without spinning again), until
//! it would sleep in its kernel wait: then its bell's mark is cleared, as before every kernel
//! wait. A member that finds itself watching a source with a message there claims it, as
//! `hand_one` does. What a model checks when the members are done (`settled`):
//!
//! - no token is stranded: a source's leader is an idle member, and a source nobody leads has
//!   no idle member that could lead it;
//! - a ring is never lost: every idle member knows its role on each source as it is now (it
//!   leads and watches a free source, leads one another member holds, or follows) from its last
//!   round, or its bell has rung, so its sleep ends at once; so no released descriptor is left
//!   unwatched, and no new leader sleeps unaware of the hold it must time;
//! - no readiness is handed to two members: a message is read once, by the member whose claim
//!   was kept, and never found gone by a member that was handed it.
//!
//! The models of two threads explore every interleaving (`loom::model`); those of three are
//! bounded to three preemptions (`bounded`), to stay within seconds on a small machine (the
//! figures: `docs/lab.md`, "Model-checking what runs").

use super::*;
use loom::sync::atomic::AtomicBool;

/// What a member's round found it to be on a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Not its leader.
    Follows,
    /// Its leader, nobody holding it: the member watches it (its claim count then).
    Watches(u32),
    /// Its leader while another member holds it: the member waits for the release, and keeps
    /// the hold's timer (`hold_left`).
    Waits,
}

impl Role {
    fn same_as(self, other: Role) -> bool {
        std::mem::discriminant(&self) == std::mem::discriminant(&other)
    }
}

/// A member's roles on sources 0 and 1, as its last round found them.
type Seen = [Role; 2];

/// What a member asleep since before the scene knows: it leads nothing.
const ASLEEP: Seen = [Role::Follows, Role::Follows];

/// The rounds a member may go through in one wait before the model calls it a livelock.
const ROUNDS: usize = 6;

/// Member `m`'s role on source `s` as it is now.
fn role_now(w: &World, m: u32, s: usize) -> Role {
    let src = w.source(s);
    if src.leader() != w.who(m) {
        Role::Follows
    } else if src.hold().is_free() {
        Role::Watches(src.hold().count)
    } else {
        Role::Waits
    }
}

/// One round of member `m`'s wait on `sources` (`EmulatedWaiter::plan` and `match_poller`).
fn round(w: &World, m: u32, sources: &[usize]) -> Seen {
    let (tk, me) = (w.token(), w.who(m));
    let now = Now::new();
    for &s in sources {
        tk.expire_if_overdue(s, me, &now);
        if !tk.take_if_due(s, me) {
            tk.volunteer(s, me);
            tk.offer_deputy(s, me);
        }
    }
    let mut seen = ASLEEP;
    for &s in sources {
        seen[s] = match tk.to_watch(s, me) {
            Some(claims) => Role::Watches(claims),
            None if tk.waits_for_release(s, me) => Role::Waits,
            None => Role::Follows,
        };
    }
    seen
}

/// Member `m`, idle, in `wait` on `sources` until it sleeps (returns what its last round
/// saw), or, with `message` (source 0's one queued message), until a round finds it watching
/// source 0 with the message there and it is handed it (returns `None`): it claims, keeps the
/// claim only if confirmed (`confirm_claim`), goes busy passing its tokens on (to the back of
/// source 0's line, `Rotation::Every(1)`), reads the message and consumes it (the release), as
/// `hand_one`, `wait` and `consumed` do.
fn until_asleep(
    w: &World,
    m: u32,
    sources: &[usize],
    message: Option<&AtomicBool>,
) -> Option<Seen> {
    let (tk, me) = (w.token(), w.who(m));
    let mut spin = true;
    for _ in 0..ROUNDS {
        let seen = round(w, m, sources);
        if let (Some(message), Role::Watches(claims)) = (message, seen[0]) {
            if message.load(SeqCst) {
                if handed(w, m, sources, claims, message) {
                    return None;
                }
                continue; // not this member's: it waits again
            }
        }
        let spun = match spin {
            true => tk.spin_for_turn(me, sources, || None),
            false => Spin::Not,
        };
        match spun {
            Spin::Not => {
                // `sleep`: the mark cleared before the kernel wait.
                let slot = w.shared.member(m);
                if slot.rung.load(SeqCst) != 0 {
                    slot.rung.swap(0, SeqCst);
                }
                return Some(seen);
            }
            Spin::Changed => spin = true,
            Spin::Vain => spin = false,
        }
    }
    panic!("member {m} went round its wait {ROUNDS} times without sleeping");
}

/// Member `m` saw source 0's message after `claims` claims: `hand_one`'s claim, then, kept,
/// the end of `wait` and the caller's read and `consumed`. Whether it was handed the message.
fn handed(w: &World, m: u32, sources: &[usize], claims: u32, message: &AtomicBool) -> bool {
    let (tk, me) = (w.token(), w.who(m));
    if !tk.leads(0, me) {
        return false;
    }
    let Some(hold) = tk.claim(0, me) else {
        return false;
    };
    if !tk.confirm_claim(0, hold, claims, || message.load(SeqCst)) {
        return false;
    }
    w.set_state(m, state::BUSY);
    for &s in sources {
        let to_back = s == 0;
        if to_back || tk.leads(s, me) {
            tk.pass(s, me, to_back);
        }
    }
    assert!(
        message.swap(false, SeqCst),
        "member {m} was handed a message another member read"
    );
    tk.release(0, hold);
    true
}

/// What must hold once the members are done (see the module docs): `asleep` lists the idle
/// members and what each one's last round saw.
fn settled(w: &World, asleep: &[(u32, Seen)]) {
    let idle = |m: u32| w.token().is_idle(w.who(m));
    for s in 0..2 {
        let src = w.source(s);
        let leader = src.leader();
        if leader.is_none() {
            let could = (0..w.shared.high()).find(|&m| src.has_member(m) && idle(m));
            assert_eq!(
                could, None,
                "source {s}: nobody leads it, member {could:?} is idle"
            );
        } else {
            assert!(
                idle(leader.slot),
                "source {s}: its token is with member {}, busy",
                leader.slot
            );
        }
    }
    for &(m, seen) in asleep {
        if w.bells.is_rung(m) {
            continue;
        }
        for (s, saw) in seen.into_iter().enumerate() {
            let now = role_now(w, m, s);
            assert!(
                saw.same_as(now),
                "member {m} sleeps, its bell silent, seeing itself {saw:?} on source {s}: it is {now:?}"
            );
        }
    }
}

/// The scene of a hand-off: three members, all idle, on both sources, as `shape` adds to it;
/// member 0 leads both and claims source 0's event (the hold).
fn led_by_the_claimer(shape: impl FnOnce(&World)) -> (Arc<World>, Hold) {
    let w = World::with_sources(3, 2);
    for m in 0..3 {
        w.set_state(m, state::IDLE);
    }
    for s in 0..2 {
        w.lead(s, 0);
    }
    shape(&w);
    let hold = w.token().claim(0, w.who(0)).expect("a free source");
    (w, hold)
}

/// Member 0, handed its event, goes busy and passes both tokens on; then, with `hold`, it
/// consumes (the release), and without, it takes its time (slow, or stopped).
fn spawn_hand_off(w: &Arc<World>, hold: Option<Hold>) -> thread::JoinHandle<()> {
    let w = w.clone();
    thread::spawn(move || {
        w.set_state(0, state::BUSY);
        for s in 0..2 {
            w.token().pass(s, w.who(0), false);
        }
        if let Some(hold) = hold {
            w.token().release(0, hold);
        }
    })
}

/// The token of one source passed to a member while it spins as the deputy of another. Member
/// 0 leads both sources (source 0 under a backlog with quick holds; source 1 shared with member
/// 2 alone), claims source 0's event and goes busy: it passes source 0 to member 1 (naming
/// member 2 its deputy) and source 1 to member 2, then consumes (the release rings the leader
/// and the deputy). Member 2 comes back to `wait` meanwhile and may be spinning, as source 0's
/// deputy, when source 1's token reaches it: the ring is left unrung, and its spin, which looks
/// only at source 0, sees no change. Whatever the interleaving, the settled state holds: member
/// 2 leads source 1 and watches it or is rung, member 1 knows it leads source 0.
///
/// (A wait that sleeps right after a vain spin fails this model: "member 2 sleeps, its bell
/// silent, seeing itself Follows on source 1: it is Watches(0)": the token that reached a
/// member spinning for another source stays unwatched until the member's next timer.)
#[test]
fn a_token_passed_to_the_deputy_of_another_source_while_it_spins() {
    loom::model(|| {
        // Member 0 leads both sources and holds source 0's event (`led_by_the_claimer`).
        let (next, deputy) = (1, 2);
        let (w, hold) = led_by_the_claimer(|w| {
            w.source(1).set_member(next, false);
            w.source(0).force_backlog();
        });
        let consumer = spawn_hand_off(&w, Some(hold));
        let seen = until_asleep(&w, deputy, &[0, 1], None).expect("no message");
        consumer.join().unwrap();
        settled(&w, &[(next, ASLEEP), (deputy, seen)]);
    });
}

/// A leader rung at the pass, during a hold. Member 0 leads both sources, claims source 0's
/// event and goes busy: it passes source 0 to member 1 while it holds it, and source 1, free,
/// to member 2 (its line starts there); then it takes its time with the event (slow, or
/// stopped). Member 1 comes back to `wait` meanwhile: it takes the token or finds it passed,
/// and spins for the release (holds are quick) until its budget is spent. Whatever the
/// interleaving, the settled state holds during the hold: member 1 knows it leads a source
/// another member holds (it times that hold, `hold_left`, and ends it when overdue), or its
/// bell has rung, because `pass` rings every new leader; member 2 is rung for source 1.
///
/// (A `pass` that rings the new leader only for a free source fails this model: "member 1
/// sleeps, its bell silent, seeing itself Follows on source 0: it is Waits": a stalled holder
/// is then timed by nobody.)
#[test]
fn a_leader_rung_at_the_pass_during_a_hold() {
    loom::model(|| {
        let (leader, other) = (1, 2);
        let (w, _) = led_by_the_claimer(|w| w.source(1).set_line_head(other));
        let handed = spawn_hand_off(&w, None);
        let seen = until_asleep(&w, leader, &[0, 1], None).expect("no message");
        handed.join().unwrap();
        settled(&w, &[(leader, seen), (other, ASLEEP)]);
    });
}

/// The holders of two sources consume while their leader spins for both releases and stops
/// spinning. Member 1 leads both sources, held by members 0 and 2 (quick holds): it spins, and
/// each release, finding it spinning, leaves its bell unrung; the leader stores "not spinning"
/// and then reads the state again (the `spinning` word's store-then-load pair against each
/// release's store of the holder and load of the word). Whatever the interleaving, the leader
/// sees each release (while spinning, in its last look, or in its next round) or its bell
/// rings: it never sleeps on a free source nobody watches.
#[test]
fn releases_while_the_leader_stops_spinning() {
    bounded(|| {
        let w = World::with_sources(3, 2);
        let leader = 1;
        w.set_state(leader, state::IDLE);
        let holds = [0, 2].map(|holder| {
            let s = holder as usize / 2;
            w.lead(s, leader);
            w.token().claim(s, w.who(holder)).expect("a free source")
        });
        let releases: Vec<_> = (0..2)
            .map(|s| {
                let (w, hold) = (w.clone(), holds[s]);
                thread::spawn(move || w.token().release(s, hold))
            })
            .collect();
        let seen = until_asleep(&w, leader, &[0, 1], None).expect("no message");
        for r in releases {
            r.join().unwrap();
        }
        settled(&w, &[(leader, seen)]);
    });
}

/// The hand-off under a backlog, whole. Member 0 holds source 0's last event and consumes it
/// (the release rings the leader and the deputy) while member 1, its leader, spins for that
/// release and member 2, its deputy, spins for its turn; one more message is queued. Member 2
/// also leads source 1 (free: it watches it, the state that once kept a spin from ending).
/// Whoever leads source 0 when it is free watches it, claims the message and, the claim kept,
/// goes busy passing the token on (to the next idle member, during its hold), reads the
/// message and consumes it. Whatever the interleaving: the message is read once, by the member
/// that was handed it; and the settled state holds for whoever still waits (a message not
/// read yet is watched by its leader, or its leader's bell has rung).
#[test]
fn the_hand_off_under_a_backlog() {
    bounded(|| {
        let w = World::with_sources(3, 2);
        let (holder, leader, deputy) = (0, 1, 2);
        for m in [leader, deputy] {
            w.set_state(m, state::IDLE);
        }
        w.lead(0, leader);
        w.lead(1, deputy);
        w.source(0).force_backlog();
        w.source(0).set_deputy(deputy);
        let hold = w.token().claim(0, w.who(holder)).expect("a free source");
        let message = Arc::new(AtomicBool::new(true));
        let release = {
            let w = w.clone();
            thread::spawn(move || w.token().release(0, hold))
        };
        let led = {
            let (w, message) = (w.clone(), message.clone());
            thread::spawn(move || until_asleep(&w, leader, &[0, 1], Some(&message)))
        };
        let deputy_saw = until_asleep(&w, deputy, &[0, 1], Some(&message));
        release.join().unwrap();
        let leader_saw = led.join().unwrap();
        let asleep: Vec<(u32, Seen)> = [(leader, leader_saw), (deputy, deputy_saw)]
            .into_iter()
            .filter_map(|(m, saw)| saw.map(|saw| (m, saw)))
            .collect();
        assert!(
            !asleep.is_empty(),
            "both members were handed the one message"
        );
        settled(&w, &asleep);
    });
}

/// A claim that loses never makes the winning hold look old. Member 0 saw source 0 ready
/// before it lost the token (a stale view) and claims, its clock read before a stall of
/// `HOLD_BOUND` (the model's clock moves on meanwhile); member 1, the leader, claims too, goes
/// busy and passes the token to member 2, which then looks for an overdue hold. Whatever the
/// interleaving, a hold is ended as overdue only if its own claim is `HOLD_BOUND` old: member
/// 1's fresh hold stands (member 0's, if it won, was claimed with the old reading, as a member
/// starved of CPU between its look at the clock and its claim is).
///
/// (A claim time stored by a plain swap fails this model: "member 1's fresh hold was ended as
/// overdue": the losing claim stores its old reading after the winner's.)
#[test]
fn a_losing_claim_leaves_the_claim_time_alone() {
    loom::model(|| {
        let w = World::with_sources(3, 1);
        let (stale, leader, next) = (0, 1, 2);
        for m in 0..3 {
            w.set_state(m, state::IDLE);
        }
        w.lead(0, leader);
        w.source(0).set_line_head(next);
        let leading = {
            let w = w.clone();
            thread::spawn(move || {
                crate::sync::advance(HOLD_BOUND);
                let won = w.token().claim(0, w.who(leader));
                if won.is_some() {
                    w.set_state(leader, state::BUSY);
                    w.token().pass(0, w.who(leader), false);
                }
                won
            })
        };
        let lost = w.token().claim(0, w.who(stale));
        let won = leading.join().unwrap();
        let expired = w.token().expire_if_overdue(0, w.who(next), &Now::new());
        if let Some(hold) = won {
            assert!(!expired, "member 1's fresh hold was ended as overdue");
            assert_eq!(w.source(0).hold(), hold);
        } else {
            assert!(lost.is_some(), "nobody claimed");
        }
    });
}

/// A busy member's look (`poll_once`) against a member coming back to `wait`: member 0 polls
/// (`wait(Some(ZERO))`) while member 1 comes back, takes the token, and then, asleep, is
/// sent a message (the writer waits for the leader to sleep, as a server's client does). The
/// look finds the source led by nobody before member 1 takes the token, sees the message
/// after, and claims it. Whatever the interleaving, the message is the leader's: the poller's
/// claim never stands (`Protocol::busy_claim_stands` gives it back), and member 1 takes it,
/// at once or once the claim is given back.
///
/// (Without the second look at the leader after the claim this model fails, "the poller took
/// a message sent to a sleeping leader", as `tests/process_life.rs` `busy_polling_members`
/// did about once in 25 runs on polling's poll(2) backend.)
#[test]
fn a_busy_look_leaves_a_returning_leader_its_message() {
    loom::model(|| {
        let w = World::new(2);
        let (poller, leader) = (0, 1);
        let message = Arc::new(AtomicBool::new(false));
        let returning = {
            let (w, message) = (w.clone(), message.clone());
            thread::spawn(move || {
                w.set_state(leader, state::IDLE);
                assert!(w.token().take_if_due(0, w.who(leader)));
                message.store(true, SeqCst); // written once the leader sleeps
                w.token().claim(0, w.who(leader))
            })
        };
        let tk = w.token();
        let me = w.who(poller);
        let mut polled = false;
        if let Some(seen) = tk.free_for_a_look(0, me) {
            if message.load(SeqCst) {
                if let Some(hold) = tk.claim(0, me) {
                    if tk.confirm_claim(0, hold, seen, || message.load(SeqCst))
                        && tk.busy_claim_stands(0, me, hold)
                    {
                        polled = message.swap(false, SeqCst);
                        tk.release(0, hold);
                    }
                }
            }
        }
        let first = returning.join().unwrap();
        assert!(
            !polled,
            "the poller took a message sent to a sleeping leader"
        );
        let hold = first.or_else(|| tk.claim(0, w.who(leader)));
        assert!(hold.is_some(), "the leader could not claim its message");
        assert!(message.swap(false, SeqCst), "the leader's message was gone");
    });
}

/// Member 0 leads source 0 and holds it itself (it kept the token through its turn), checked on
/// by member 1, idle; its hold, claimed now.
fn kept_by_its_leader() -> (Arc<World>, Hold) {
    let w = World::new(2);
    w.set_state(1, state::IDLE);
    w.lead(0, 0);
    w.source(0).set_watcher(w.who(1));
    let hold = w.token().claim(0, w.who(0)).expect("a free source");
    (w, hold)
}

/// A leader that kept the token through its turn (`EmulatedWaiter::token_at_busy`) holds its
/// source past `HOLD_BOUND` while its watcher looks (`Protocol::take_from_overdue_leader`), and
/// at that moment the leader, running again, releases and claims the next event. Whatever the
/// interleaving: the watcher ends only the overdue hold (a claim made after its look is young,
/// and kept), never a hold it did not see; if it takes the token, the source is led by an idle
/// member and the stalled leader's late release finds nothing; and the source is never left
/// held by nobody's claim nor led by nobody.
#[test]
fn a_watcher_ends_a_stalled_leaders_own_hold() {
    loom::model(|| {
        let (w, stale) = kept_by_its_leader();
        let (leader, watcher) = (0, 1);
        crate::sync::advance(HOLD_BOUND);
        let running_again = {
            let w = w.clone();
            thread::spawn(move || {
                let tk = w.token();
                tk.release(0, stale);
                // Back to work: the next event, as `hand_one` takes it, if it still leads.
                match tk.leads(0, w.who(leader)) {
                    true => tk.claim(0, w.who(leader)),
                    false => None,
                }
            })
        };
        let took = w
            .token()
            .take_from_overdue_leader(0, w.who(watcher), &Now::new());
        let young = running_again.join().unwrap();
        let src = w.source(0);
        if took {
            assert_eq!(src.leader(), w.who(watcher), "the watcher took the token");
            if let Some(hold) = young {
                // Claimed while it still led, before the watcher's look: kept.
                assert_eq!(src.hold(), hold, "a young hold was ended");
            }
        } else {
            assert_eq!(
                src.leader(),
                w.who(leader),
                "the token moved with nobody taking it"
            );
            assert!(young.is_some(), "the leader still leads: it claimed again");
            assert_eq!(src.hold(), young.unwrap(), "a young hold was ended");
        }
    });
}

/// Between threads of one process a pass may leave the watch with an idle watcher whose look is
/// due (`Protocol::hand_watch`), and that watcher may be planning its next look as the token
/// moves. Member 1, the leader, goes busy with an event it holds: it passes the token to member
/// 0 and then releases, while member 2, its watcher, plans its sleep (`plan_look`); then member
/// 0 holds the source itself and stalls. Whatever the interleaving, whoever watches member 0
/// then will look: the passer, awake, plans its sleep when it comes back to `wait`, and a
/// watcher that kept the watch sleeps with a look planned (`look_due`); and that look,
/// `HOLD_BOUND` on, ends the stalled hold and takes the token.
#[test]
fn a_kept_watch_finds_the_next_leaders_stall() {
    loom::model(|| {
        let w = World::new(3);
        let (next, leader, watcher) = (0, 1, 2);
        w.set_state(next, state::IDLE);
        w.set_state(watcher, state::IDLE);
        w.lead(0, leader);
        w.source(0).set_watcher(w.who(watcher));
        let tk = w.token();
        // The source is active (an event claimed and consumed), and the watcher planned a look.
        let first = tk.claim(0, w.who(leader)).expect("a free source");
        tk.release(0, first);
        assert!(tk.plan_look(0, w.who(watcher), &Now::new()).is_some());
        let held = tk.claim(0, w.who(leader)).expect("a free source");
        let planning = {
            let w = w.clone();
            thread::spawn(move || {
                let _ = w.token().plan_look(0, w.who(watcher), &Now::new());
            })
        };
        tk.pass(0, w.who(leader), false);
        tk.release(0, held);
        planning.join().unwrap();
        assert_eq!(
            w.source(0).leader(),
            w.who(next),
            "the token went to the next idle member"
        );
        let _stalled = tk.claim(0, w.who(next)).expect("a free source");
        let checker = w.source(0).watcher();
        if checker == w.who(watcher) {
            assert_ne!(
                w.source(0).look_due(),
                0,
                "the watch was kept by a member asleep with no look planned"
            );
        } else {
            assert_eq!(checker, w.who(leader), "watched by {checker:?}");
            w.set_state(leader, state::IDLE); // the passer comes back to wait
        }
        assert!(tk.plan_look(0, checker, &Now::new()).is_some());
        crate::sync::advance(HOLD_BOUND);
        assert!(tk.take_from_overdue_leader(0, checker, &Now::new()));
        assert_eq!(w.source(0).leader(), checker);
        assert!(w.source(0).hold().is_free());
    });
}

/// The same watcher's look while the stalled leader stays stalled: it ends the overdue hold and
/// takes the token, once, and a second look changes nothing.
#[test]
fn a_watcher_takes_the_token_from_a_leader_stalled_with_its_event() {
    loom::model(|| {
        let (w, stale) = kept_by_its_leader();
        let watcher = 1;
        let tk = w.token();
        assert!(
            !tk.take_from_overdue_leader(0, w.who(watcher), &Now::new()),
            "a young hold was ended"
        );
        crate::sync::advance(HOLD_BOUND);
        assert!(tk.take_from_overdue_leader(0, w.who(watcher), &Now::new()));
        assert!(w.source(0).hold().is_free());
        assert_eq!(w.source(0).leader(), w.who(watcher));
        assert!(!tk.take_from_overdue_leader(0, w.who(watcher), &Now::new()));
        tk.release(0, stale); // the leader's late release: nothing left to release
        assert!(w.source(0).hold().is_free());
    });
}
