//! The token protocol under the model checker: every interleaving of two or three members'
//! steps, on this very code. Each model is a piece of the protocol's specification: the
//! scene, the race, and what must hold whatever the interleaving. Run with
//! `RUSTFLAGS="--cfg loom" cargo test --release --lib model::` (CI does). The hand-off under a
//! backlog (the deputy, the spinning, the hints) has its models in `model/hand_off.rs`.
//!
//! The models run the protocol's own code, hints and spins included (`crate::sync` swaps the
//! atomics, the yield and the clock, nothing else). A member's kernel wait is what a model
//! stands in for: a member "sleeps" by stopping, and its door bell is a flag that says whether
//! that sleep would end at once.

use super::*;
use crate::members::state;
use crate::shared::SharedState;
use crate::Backend;
use loom::sync::Arc;
use loom::thread;

mod hand_off;
mod table;

/// A group of `members` members registered on source 0 (all busy, nobody leading).
struct World {
    shared: SharedState,
    bells: Doorbells,
    live: Liveness,
}

/// Source identities that land on slots 0 and 1.
const IDS: [u64; 2] = [2, 3];

impl World {
    fn new(members: u32) -> Arc<World> {
        World::with_sources(members, 1)
    }
    /// A group of `capacity` slots and two sources, nobody joined: for the models that join
    /// members of several processes themselves.
    fn empty(capacity: usize) -> Arc<World> {
        crate::sync::start_model_clock();
        Arc::new(World {
            shared: crate::inner::test_state_with(Backend::Emulated, capacity, 2),
            bells: Doorbells::new(0, capacity).unwrap(),
            live: Liveness::new(capacity).unwrap(),
        })
    }
    /// A group of `members` members registered on `sources` sources (0, then 1).
    fn with_sources(members: u32, sources: usize) -> Arc<World> {
        crate::sync::start_model_clock();
        let shared = crate::inner::test_state_with(Backend::Emulated, 4, 2);
        for _ in 0..members {
            shared.claim_slot(1).unwrap();
        }
        let w = World {
            shared,
            bells: Doorbells::new(0, 4).unwrap(),
            live: Liveness::new(4).unwrap(),
        };
        for (want, &id) in IDS.iter().enumerate().take(sources) {
            for m in 0..members {
                assert_eq!(w.token().join_source(id, w.who(m)).unwrap(), want);
            }
        }
        Arc::new(w)
    }
    fn token(&self) -> Protocol<'_> {
        Protocol {
            shared: &self.shared,
            sources: SourceTable::of(&self.shared, TableLayout::of(&self.shared.settings())),
            bells: &self.bells,
            live: &self.live,
            rotation: Rotation::Every(1),
        }
    }
    /// Source `s`'s words.
    fn source(&self, s: usize) -> Source<'_> {
        SourceTable::of(&self.shared, TableLayout::of(&self.shared.settings())).source(s)
    }
    /// Member `m` enters (IDLE) or leaves (BUSY) `wait`, through the member table.
    fn set_state(&self, m: u32, st: u32) {
        let table = Members::new(&self.shared, &self.live);
        let me = table.occupant(m);
        let flipped = match st {
            state::IDLE => table.go_idle(&me),
            _ => table.go_busy(&me),
        };
        assert!(flipped);
    }
    fn leader(&self) -> u32 {
        self.source(0).leader().slot
    }
    /// Member `m` as the sources' words name it.
    fn who(&self, m: u32) -> Occupant {
        Occupant::new(m, self.shared.member(m).generation())
    }
    /// Member `m` leads source `s`.
    fn lead(&self, s: usize, m: u32) {
        self.source(s).force_leader(self.who(m));
    }
    /// `leader` (idle) leads source 0 while `holder` still holds its last event.
    fn led_while_held(members: u32, holder: u32, leader: u32) -> Arc<World> {
        let w = World::new(members);
        w.set_state(leader, state::IDLE);
        w.lead(0, leader);
        w.source(0).force_hold(holder);
        w
    }
}

/// Runs a model with a bound on preemptions, to keep three members on two sources within
/// minutes (the bugs found so far need two).
fn bounded(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

/// Two sources and three members: member 0 leads both and goes busy, passing both tokens,
/// while members 1 and 2 come back to wait. Each source ends led by an idle member that
/// knows it (it took the token, or its bell rang): a member's role on one source never
/// stands in for its role on the other.
#[test]
fn two_sources_passed_while_two_members_go_idle() {
    bounded(|| {
        let w = World::with_sources(3, 2);
        w.set_state(0, state::IDLE);
        for s in 0..2 {
            w.lead(s, 0);
        }
        let busy = {
            let w = w.clone();
            thread::spawn(move || {
                w.set_state(0, state::BUSY);
                for s in 0..2 {
                    w.token().pass(s, w.who(0), true);
                }
            })
        };
        let idle: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|m| {
                let w = w.clone();
                thread::spawn(move || {
                    w.set_state(m, state::IDLE);
                    [0, 1].map(|s| w.token().take_if_due(s, w.who(m)))
                })
            })
            .collect();
        let took: Vec<[bool; 2]> = idle.into_iter().map(|h| h.join().unwrap()).collect();
        busy.join().unwrap();
        for s in [0, 1] {
            let leader = w.source(s).leader().slot;
            assert!(leader == 1 || leader == 2, "source {s} led by {leader}");
            let knows = took[leader as usize - 1][s] || w.bells.is_rung(leader);
            assert!(knows, "source {s}: its leader {leader} was never told");
        }
    });
}

/// Two sources held by two members, one leader for both: the holder of source 0 releases
/// it while the third member ends the same hold as overdue, and the holder of source 1
/// releases it meanwhile. Both sources end free, and their leader was rung for each.
#[test]
fn an_overdue_hold_ended_while_it_is_released() {
    bounded(|| {
        let w = World::with_sources(3, 2);
        let (leader, h0, h1) = (2, 0, 1);
        w.set_state(leader, state::IDLE);
        for s in 0..2 {
            w.lead(s, leader);
        }
        let holds = [0, 1].map(|s| w.source(s).force_hold([h0, h1][s]));
        let late = spawn_release(&w, h0);
        let hold1 = holds[1];
        let other = {
            let w = w.clone();
            thread::spawn(move || w.token().release(1, hold1))
        };
        let ended = w.token().expire_hold(0, w.who(h1), holds[0]);
        late.join().unwrap();
        other.join().unwrap();
        for s in 0..2 {
            assert!(w.token().needs_watch(s), "source {s} still held");
        }
        assert!(w.bells.is_rung(leader), "the leader never learned");
        let _ = ended;
    });
}

/// A leader thought stuck runs again and claims its ready source while the member checking
/// on it takes the token from it. At most one of them holds the event; the token ends with
/// one of them; and if the checker took it from a leader that claimed nothing, the checker
/// watches (the source is free) and the old leader is skipped from then on.
#[test]
fn a_stuck_leader_resumes_while_its_token_is_taken() {
    bounded(|| {
        let w = World::with_sources(3, 2);
        let (stuck, checker) = (0, 1);
        for m in 0..3 {
            w.set_state(m, state::IDLE);
        }
        w.lead(0, stuck);
        // Source 1 is led by the checker meanwhile and untouched: the take-over of
        // source 0 must not move it.
        w.lead(1, checker);
        let resumed = {
            let w = w.clone();
            thread::spawn(move || {
                // `hand_one`: claims only while it still leads.
                w.leader() == stuck && w.token().claim(0, w.who(stuck)).is_some()
            })
        };
        let took = w.token().take_from_stuck(0, w.who(checker), w.who(stuck));
        let claimed = resumed.join().unwrap();
        let src = w.source(0);
        assert_eq!(w.source(1).leader().slot, checker);
        if took {
            assert_eq!(w.leader(), checker);
            assert_eq!(src.stuck(), stuck);
        } else {
            assert_eq!(w.leader(), stuck);
        }
        if !claimed {
            assert!(w.token().needs_watch(0));
        } else {
            assert_eq!(src.hold().slot, stuck);
        }
    });
}

/// Member `m` of `w` goes busy and passes the token of source 0 on, on another thread.
fn spawn_go_busy_and_pass(w: &Arc<World>, m: u32, to_back: bool) -> thread::JoinHandle<()> {
    let w = w.clone();
    thread::spawn(move || {
        w.set_state(m, state::BUSY);
        w.token().pass(0, w.who(m), to_back);
    })
}

/// `holder` releases its hold of source 0 of `w` on another thread.
fn spawn_release(w: &Arc<World>, holder: u32) -> thread::JoinHandle<()> {
    let hold = w.source(0).hold();
    assert_eq!(hold.slot, holder);
    let w = w.clone();
    thread::spawn(move || w.token().release(0, hold))
}

/// The leader goes busy while another member comes back to wait: the token ends with the
/// idle member, and that member knows it (it took it, or its bell rang).
#[test]
fn going_idle_while_the_leader_passes() {
    loom::model(|| {
        let w = World::new(2);
        w.set_state(0, state::IDLE);
        w.lead(0, 0);
        let a = spawn_go_busy_and_pass(&w, 0, true);
        let w2 = w.clone();
        let took = thread::spawn(move || {
            w2.set_state(1, state::IDLE);
            w2.token().take_if_due(0, w2.who(1))
        })
        .join()
        .unwrap();
        a.join().unwrap();
        assert_eq!(w.leader(), 1, "the only idle member must lead");
        assert!(took || w.bells.is_rung(1), "the new leader was never told");
    });
}

/// A holder releases its source while the leader passes the token on: whoever leads at
/// the end watches the source again (it saw it free, or its bell rang).
#[test]
fn release_while_the_token_moves() {
    loom::model(|| {
        let (holder, leader, next) = (0, 1, 2);
        let w = World::led_while_held(3, holder, leader);
        w.set_state(next, state::IDLE);
        let release = spawn_release(&w, holder);
        let pass = {
            let w = w.clone();
            thread::spawn(move || {
                w.set_state(leader, state::BUSY);
                w.token().pass(0, w.who(leader), false);
            })
        };
        let w3 = w.clone();
        let saw_free = thread::spawn(move || {
            // The next member's `match_poller`: it watches the source if it leads and it is free.
            w3.leader() == next && w3.token().needs_watch(0)
        })
        .join()
        .unwrap();
        release.join().unwrap();
        pass.join().unwrap();
        assert_eq!(w.leader(), next);
        assert!(w.token().needs_watch(0));
        assert!(
            saw_free || w.bells.is_rung(next),
            "a free source nobody watches"
        );
    });
}

/// A ring left unwritten because the bell is marked rung already (`wake`) is never lost:
/// the bell has been rung and marked, and two members each make a change and ring it while
/// its member drains it, clears the mark, reads the state and clears the mark again before
/// it sleeps. Each change is then seen by that read, or the bell is still rung (the member
/// wakes again). (Clearing the mark before the drain fails this model.)
#[test]
fn a_ring_skipped_for_a_marked_bell() {
    bounded(|| {
        let w = World::new(3);
        let m = 2;
        w.token().wake(m);
        let changes = Arc::new([
            loom::sync::atomic::AtomicBool::new(false),
            loom::sync::atomic::AtomicBool::new(false),
        ]);
        let ringers: Vec<_> = (0..2)
            .map(|i| {
                let (w, changes) = (w.clone(), changes.clone());
                thread::spawn(move || {
                    changes[i].store(true, SeqCst);
                    w.token().wake(m);
                })
            })
            .collect();
        // The member, woken by the first ring: `drain_bell`, its look at the state, and
        // the clear before its next kernel wait.
        w.token().drain_bell(m);
        let seen = [changes[0].load(SeqCst), changes[1].load(SeqCst)];
        w.shared.member(m).rung.swap(0, SeqCst);
        for r in ringers {
            r.join().unwrap();
        }
        for (i, seen) in seen.into_iter().enumerate() {
            assert!(
                seen || w.bells.is_rung(m),
                "change {i} unseen, and the bell silent"
            );
        }
    });
}

/// The token is passed to a member that is going busy at that moment: it does not stay
/// with a busy member (here nobody is idle, so nobody leads).
#[test]
fn passing_to_a_member_going_busy() {
    loom::model(|| {
        let w = World::new(2);
        w.set_state(0, state::IDLE);
        w.set_state(1, state::IDLE);
        w.lead(0, 0);
        let a = spawn_go_busy_and_pass(&w, 0, false);
        let b = {
            let w = w.clone();
            thread::spawn(move || {
                w.set_state(1, state::BUSY);
                if w.leader() == 1 {
                    w.token().pass(0, w.who(1), false);
                }
            })
        };
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(w.leader(), NONE, "the token stayed with a busy member");
    });
}

/// One step of `hand_one` for `me`, on source 0 holding one message (`queued`): `me` found
/// the source free after `seen` claims and saw the message, and claims it if it still
/// leads. Returns whether it kept the claim, and then reads the message (it must be there)
/// and releases.
fn claim_and_read(w: &World, me: u32, seen: u32, queued: &loom::sync::atomic::AtomicBool) -> bool {
    let token = w.token();
    if w.leader() != me {
        return false;
    }
    let Some(hold) = token.claim(0, w.who(me)) else {
        return false;
    };
    if !token.confirm_claim(0, hold, seen, || queued.load(SeqCst)) {
        return false;
    }
    assert!(
        queued.swap(false, SeqCst),
        "member {me} was handed an empty queue"
    );
    token.release(0, hold);
    true
}

/// The batch's take-back: member 1 leads and sees the one queued message, while member 0,
/// ahead of it in line, comes back to `wait`, takes the token back, claims and reads the
/// message. Member 1's claim, if it wins one after that, is given up: nobody is handed a
/// readiness another member consumed, and the message is read once.
#[test]
fn a_readiness_consumed_by_a_take_back() {
    loom::model(|| {
        let w = World::new(2);
        let (back, leader) = (0, 1);
        w.set_state(back, state::IDLE);
        w.set_state(leader, state::IDLE);
        w.lead(0, leader);
        let queued = Arc::new(loom::sync::atomic::AtomicBool::new(true));
        let first = {
            let (w, queued) = (w.clone(), queued.clone());
            thread::spawn(move || {
                // `match_poller`: the count, then the source found free; then the message seen.
                let seen = w.source(0).hold().count;
                let sees = w.token().needs_watch(0) && queued.load(SeqCst);
                sees && claim_and_read(&w, leader, seen, &queued)
            })
        };
        let took = w.token().take_if_due(0, w.who(back));
        let seen = w.source(0).hold().count;
        let sees = w.token().needs_watch(0) && queued.load(SeqCst);
        let second = took && sees && claim_and_read(&w, back, seen, &queued);
        let first = first.join().unwrap();
        assert!(first || second, "the message was never read");
        assert!(!queued.load(SeqCst));
    });
}

/// Two members see the source ready at once: exactly one claims it.
#[test]
fn one_claim_wins() {
    loom::model(|| {
        let w = World::new(2);
        let claims: Vec<_> = (0..2)
            .map(|m| {
                let w = w.clone();
                thread::spawn(move || w.token().claim(0, w.who(m)).is_some())
            })
            .collect();
        let won = claims
            .into_iter()
            .filter_map(|c| c.join().unwrap().then_some(()))
            .count();
        assert_eq!(won, 1);
    });
}

/// A hold expired while its holder releases and claims again: member 1 found the hold of
/// member 0 overdue and ends that hold, while member 0 releases it and claims the source
/// again. The new hold stands, whatever the interleaving: an expiry names the hold it found
/// overdue (its claim count), not only its member. (On the code before holds were counted,
/// the expiry ended the fresh hold, and another member was woken for the same message.)
#[test]
fn a_hold_expired_while_its_holder_releases_and_claims_again() {
    loom::model(|| {
        let w = World::new(2);
        let (holder, other) = (0, 1);
        let overdue = w.source(0).force_hold(holder);
        let h = {
            let w = w.clone();
            thread::spawn(move || {
                w.token().release(0, overdue);
                w.token().claim(0, w.who(holder))
            })
        };
        w.token().expire_hold(0, w.who(other), overdue);
        let again = h.join().unwrap().expect("nobody else claims");
        assert_eq!(
            w.source(0).hold(),
            again,
            "a fresh hold was ended as overdue"
        );
    });
}

/// A late reaper of a member that leads and holds a source, against a second reaper that
/// finishes first and a joiner that takes the slot and the token at once: the late reap does
/// nothing to the sources (it never began: the slot's byte is held by the finished reap or
/// the joiner), so the joiner keeps its registration, its claim and its token.
#[test]
fn a_late_reap_leaves_the_next_occupant_alone() {
    const DEAD_PID: u32 = 1;
    const REAPER_A: u32 = 2;
    const REAPER_B: u32 = 3;
    const JOINER: u32 = 4;
    bounded(|| {
        let w = World::empty(1);
        let members = w
            .token()
            .members()
            .publish(w.token().members().claim(DEAD_PID).unwrap());
        let dead = members.unwrap().member;
        assert_eq!(w.token().join_source(IDS[0], w.who(dead)).unwrap(), 0);
        w.lead(0, dead);
        w.source(0).force_hold(dead);
        w.live.kill(DEAD_PID);
        let seen = w
            .token()
            .members()
            .dead(dead, REAPER_A)
            .expect("found dead");
        let late = {
            let w = w.clone();
            thread::spawn(move || {
                let token = w.token();
                token.members().reap(dead, seen, REAPER_A, |slot, g| {
                    token.clear_out(Occupant::new(slot, g))
                })
            })
        };
        // The second reaper, then the joiner: registers, leads and claims.
        let token = w.token();
        if let Some(seen) = token.members().dead(dead, REAPER_B) {
            token.members().reap(dead, seen, REAPER_B, |slot, g| {
                token.clear_out(Occupant::new(slot, g))
            });
        }
        let joined = token
            .members()
            .claim(JOINER)
            .and_then(|c| token.members().publish(c));
        let mine = joined.ok().map(|me| {
            let who = w.who(me.member);
            w.set_state(me.member, state::IDLE);
            assert_eq!(token.join_source(IDS[0], who).unwrap(), 0);
            let took = token.take_if_due(0, who);
            let hold = token.claim(0, who);
            (who, took, hold)
        });
        late.join().unwrap();
        if let Some((who, took, hold)) = mine {
            let src = w.source(0);
            assert!(
                src.has_member(who.slot),
                "the joiner's registration was undone"
            );
            if took {
                assert_eq!(src.leader(), who, "the joiner's token was passed on");
            }
            if let Some(hold) = hold {
                assert_eq!(src.hold(), hold, "the joiner's claim was released");
            }
        }
    });
}
