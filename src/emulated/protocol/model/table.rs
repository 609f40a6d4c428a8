//! The source table under the model checker: a slot given back by the reap of its last member
//! and taken for another file meanwhile (`Protocol::join_source` against `clear_out`).

use super::*;

/// Processes of the model (pids); the liveness model knows which have died. The registering
/// member is of this very process (`join_source` reaps by the caller's own pid).
const DEAD_PID: u32 = 1;
const REAPER: u32 = 2;

/// Files A, B and C (their identities: non-zero).
const FILES: [u64; 3] = [2, 3, 4];

/// A slot taken for another file while its last member is reaped. Member 0 (process `DEAD`)
/// was the only member of source 0 (file A) and held its last event, and died in the middle of
/// a registration, holding the source table's lock; source 1 is member 1's (file B), and the
/// table has no third slot. A member of another process reaps member 0 (the reap gives the lock
/// back, releases the hold and clears the member's bits) while member 1 registers file C: it
/// waits for the lock (or, finding its holder dead and nobody reaping it yet, reaps it itself),
/// then takes the slot no member has registered for C, comes back to `wait`, takes C's token
/// and claims it. Whatever the interleaving: the registration is not refused (the slot of the
/// dead member's file is free by the time the lock is), it lands on source 0, reset for C
/// (nobody else's bit, nobody's hold or token of file A left), and the reap, early or late,
/// never touches C's registration, token or claim.
///
/// (A reap that gives the lock back before it clears the dead member's bits fails this model:
/// "file C refused: Err(TooManySources { max: 2 })": the member waiting for the lock gets it
/// while source 0 is still file A's.)
#[test]
fn a_slot_taken_for_another_file_while_its_last_member_is_reaped() {
    loom::model(|| {
        let w = World::empty(2);
        let tk = w.token();
        let table = tk.members();
        let dead = table
            .publish(table.claim(DEAD_PID).unwrap())
            .unwrap()
            .member;
        let me = table.claim(std::process::id()).unwrap();
        let me = table.publish(me).unwrap().member;
        let (who_dead, who_me) = (w.who(dead), w.who(me));
        assert_eq!(tk.join_source(FILES[0], who_dead).unwrap(), 0);
        assert_eq!(tk.join_source(FILES[1], who_me).unwrap(), 1);
        tk.claim(0, who_dead).expect("a free source");
        tk.sources.force_lock(who_dead);
        w.live.kill(DEAD_PID);
        let reaper = {
            let w = w.clone();
            thread::spawn(move || {
                let tk = w.token();
                let table = tk.members();
                if let Some(seen) = table.dead(dead, REAPER) {
                    table.reap(dead, seen, REAPER, |slot, g| {
                        tk.clear_out(Occupant::new(slot, g))
                    });
                }
            })
        };
        let joined = tk.join_source(FILES[2], who_me);
        let mine = joined.as_ref().ok().map(|&s| {
            w.set_state(me, state::IDLE);
            (s, tk.take_if_due(s, who_me), tk.claim(s, who_me))
        });
        reaper.join().unwrap();
        let Some((s, took, hold)) = mine else {
            panic!("file C refused: {joined:?}");
        };
        let src = w.source(s);
        assert_eq!(s, 0, "file C landed on file B's slot");
        assert!(src.is_for(FILES[2]), "source 0 is not file C's");
        assert!(src.has_member(me), "member 1's registration was undone");
        assert!(
            !src.has_member(dead),
            "file C's source has the dead member's bit"
        );
        assert!(
            took,
            "nobody led file C's source, yet member 1 did not take it"
        );
        assert_eq!(src.leader(), who_me, "member 1's token was moved");
        let hold = hold.expect("nobody held file C's source, yet member 1's claim lost");
        assert_eq!(src.hold(), hold, "member 1's claim was released");
    });
}
