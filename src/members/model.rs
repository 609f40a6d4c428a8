//! The member table under the model checker: joins, leaves, reaps and a reaper's death, every
//! interleaving, on this very code. Each model is a piece of the table's specification. Run
//! with `RUSTFLAGS="--cfg loom" cargo test --release --lib model::` (CI does).

use super::*;
use loom::sync::Arc;
use loom::thread;

/// Processes of the model (pids); the liveness model knows which have died.
const DEAD_ONE: u32 = 1;
const REAPER: u32 = 2;
const JOINER: u32 = 3;

struct World {
    shared: SharedState,
    live: Liveness,
}

impl World {
    fn new(capacity: usize) -> Arc<World> {
        crate::sync::start_model_clock();
        Arc::new(World {
            shared: crate::inner::test_state_with(crate::Backend::Emulated, capacity, 1),
            live: Liveness::new(capacity).unwrap(),
        })
    }
    fn members(&self) -> Members<'_> {
        Members::new(&self.shared, &self.live)
    }
    /// A member of process `pid` joins, start to end.
    fn join(&self, pid: u32) -> Result<Membership> {
        let claim = self.members().claim(pid)?;
        self.members().publish(claim)
    }
    /// One sweep, as `GroupInner::reap_dead_members` does it (the native backend's reap:
    /// nothing to clear between begin and finish).
    fn sweep(&self, me: u32) {
        let members = self.members();
        for m in 0..self.shared.high() {
            if let Some(seen) = members.dead(m, me) {
                members.reap(m, seen, me, |_, _| {});
            }
        }
    }
    fn state(&self, m: u32) -> u32 {
        self.shared.member(m).life().state()
    }
}

/// A member joins while another process reaps: the joiner's slot is never reaped, it ends
/// joined, its own, with its byte held; the dead member's slot is reaped or taken over.
#[test]
fn join_against_reap() {
    loom::model(|| {
        let w = World::new(2);
        let dead = w.join(DEAD_ONE).unwrap();
        w.live.kill(DEAD_ONE);
        let reaper = {
            let w = w.clone();
            thread::spawn(move || w.sweep(REAPER))
        };
        let joined = w.join(JOINER);
        reaper.join().unwrap();
        let me = joined.expect("a free slot was there: no error");
        assert_eq!(
            w.state(me.member),
            state::BUSY,
            "the joiner's slot was touched"
        );
        assert_eq!(w.shared.member(me.member).pid.load(SeqCst), JOINER);
        assert!(w.members().is_alive(me.member, REAPER));
        if me.member != dead.member {
            assert_eq!(w.state(dead.member), state::DEAD);
        }
    });
}

/// A member of a live process leaves while another process sweeps: its slot ends LEFT,
/// never reaped, and the byte is dropped once it is LEFT.
#[test]
fn leave_against_reap() {
    loom::model(|| {
        let w = World::new(1);
        let me = w.join(JOINER).unwrap();
        let reaper = {
            let w = w.clone();
            thread::spawn(move || w.sweep(REAPER))
        };
        assert!(w.members().begin_leave(&me));
        w.members().finish_leave(&me);
        reaper.join().unwrap();
        assert_eq!(w.state(me.member), state::LEFT);
        assert!(!w.live.is_held_by_other(me.member, REAPER));
    });
}

/// A member dies while it leaves, and another process sweeps: the slot is reaped (DEAD),
/// or, if the sweep came first, found again by the next sweep.
#[test]
fn death_while_leaving() {
    loom::model(|| {
        let w = World::new(1);
        let me = w.join(DEAD_ONE).unwrap();
        let leaver = {
            let w = w.clone();
            thread::spawn(move || {
                assert!(w.members().begin_leave(&me));
                w.live.kill(DEAD_ONE);
            })
        };
        w.sweep(REAPER);
        leaver.join().unwrap();
        w.sweep(REAPER);
        assert_eq!(w.state(me.member), state::DEAD);
    });
}

/// A reaper dies in the middle of its reap while another process sweeps: the reap is
/// taken over and finished, and the slot can be joined again.
#[test]
fn reaper_dies_mid_reap() {
    loom::model(|| {
        let w = World::new(1);
        let dead = w.join(DEAD_ONE).unwrap();
        w.live.kill(DEAD_ONE);
        let first = {
            let w = w.clone();
            thread::spawn(move || {
                let members = w.members();
                if let Some(seen) = members.dead(dead.member, REAPER) {
                    let _stranded = members.begin_reap(dead.member, seen, REAPER);
                }
                w.live.kill(REAPER);
            })
        };
        w.sweep(JOINER);
        first.join().unwrap();
        w.sweep(JOINER);
        assert_eq!(w.state(dead.member), state::DEAD, "a stranded reap");
        let again = w.join(JOINER).unwrap();
        assert_eq!(again.member, dead.member);
    });
}

/// Two processes reap one dead slot and a third joins it as soon as it is free: a reap
/// that begins holds the slot's byte, so a late reaper (one whose reap was taken over and
/// finished, the slot joined again, before it took the byte) does nothing to the next
/// occupant; the slot ends joined by the joiner or reaped.
#[test]
fn two_reapers_and_a_joiner() {
    const OTHER_REAPER: u32 = 4;
    loom::model(|| {
        let w = World::new(1);
        let dead = w.join(DEAD_ONE).unwrap();
        w.live.kill(DEAD_ONE);
        let late = {
            let w = w.clone();
            thread::spawn(move || {
                let members = w.members();
                if let Some(seen) = members.dead(dead.member, REAPER) {
                    if let Some(reap) = members.begin_reap(dead.member, seen, REAPER) {
                        assert!(
                            w.live.is_held_by_other(dead.member, JOINER),
                            "a reap began without the slot's byte"
                        );
                        assert_ne!(w.state(dead.member), state::BUSY, "reaping a member");
                        members.finish_reap(reap);
                    }
                }
            })
        };
        w.sweep(OTHER_REAPER);
        let joined = w.join(JOINER);
        late.join().unwrap();
        if let Ok(me) = joined {
            assert_eq!(w.state(me.member), state::BUSY, "the joiner was reaped");
            assert!(w.members().is_alive(me.member, OTHER_REAPER));
        }
    });
}

/// Two joiners race for the last slot: one gets it, the other `GroupFull`, never an error
/// of another kind, and the winner's slot is its own.
#[test]
fn two_joiners_one_slot() {
    loom::model(|| {
        let w = World::new(1);
        let other = {
            let w = w.clone();
            thread::spawn(move || w.join(REAPER))
        };
        let mine = w.join(JOINER);
        let theirs = other.join().unwrap();
        let (won, lost) = match (mine, theirs) {
            (Ok(m), Err(e)) => ((m, JOINER), e),
            (Err(e), Ok(m)) => ((m, REAPER), e),
            other => panic!("not one winner: {other:?}"),
        };
        assert!(matches!(lost, Error::GroupFull { .. }), "{lost:?}");
        assert_eq!(w.shared.member(won.0.member).pid.load(SeqCst), won.1);
        assert_eq!(w.state(won.0.member), state::BUSY);
    });
}
