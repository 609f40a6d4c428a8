//! Portable conformance (every system, Windows included): turns. Four threads share one UDP
//! socket registered exclusive with one event per wait and `rotate_every(1)`: 400 messages, one
//! every millisecond after the last was read (and on Linux once every member sleeps), give each
//! member 100 ± 2, each read exactly once.
//! And one member with several ready sockets registered one-event-round-robin is served them
//! in turn: 1, 2, 3, 1, 2, 3, 1, with and without `exclusive`.

#[path = "common/portable.rs"]
mod portable;

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use herdless::{Backend, Events, Group, Interest};
use portable::*;

const MEMBERS: usize = 4;
const MESSAGES: u64 = 400;

/// This thread's kernel id, where `until_asleep` can use it.
fn thread_id() -> Option<i32> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    // SAFETY: gettid has no arguments and cannot fail.
    return Some(unsafe { libc::gettid() });
    #[allow(unreachable_code)]
    None
}

/// Linux: waits (bounded) until every member thread sleeps in the kernel. Elsewhere: nothing.
fn until_asleep(threads: &[Option<i32>]) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let threads: Vec<(u32, i32)> = threads
            .iter()
            .map(|t| (std::process::id(), t.unwrap()))
            .collect();
        herdless_fixtures::until_asleep(&threads, WAIT_BOUND).unwrap();
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = threads;
}

fn strict_turns_with_a_gap(backend: Backend) {
    let group = Group::builder()
        .backend(backend)
        .rotate_every(1)
        .max_members(MEMBERS)
        .build()
        .unwrap();
    let (rx, tx) = udp_pair();
    let rx = Arc::new(rx);
    let stop = Arc::new(AtomicBool::new(false));
    let (ack_tx, ack_rx) = mpsc::channel::<u64>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let interest = Interest::READABLE.exclusive().one_event_round_robin();
    let mut notifiers = Vec::new();
    let handles: Vec<_> = (0..MEMBERS)
        .map(|_| {
            // Joined and registered in order by this thread: the order of the turns.
            let mut waiter = group.join().unwrap();
            waiter.add(&*rx, 0, interest).unwrap();
            notifiers.push(waiter.notifier());
            let (rx, stop, ack_tx, ready_tx) =
                (rx.clone(), stop.clone(), ack_tx.clone(), ready_tx.clone());
            thread::spawn(move || {
                let mut events = Events::with_capacity(1);
                let (mut ids, mut empty) = (Vec::new(), 0u64);
                ready_tx.send(thread_id()).unwrap();
                while !stop.load(SeqCst) {
                    waiter.wait(&mut events, Some(WAIT_BOUND)).unwrap();
                    for event in events.iter() {
                        match recv_msg(&rx) {
                            Some(id) => {
                                ids.push(id);
                                waiter.consumed(event.key).unwrap();
                                ack_tx.send(id).unwrap();
                            }
                            None => empty += 1,
                        }
                    }
                }
                waiter.delete(&*rx).unwrap();
                (ids, empty)
            })
        })
        .collect();
    let threads: Vec<Option<i32>> = (0..MEMBERS).map(|_| ready_rx.recv().unwrap()).collect();
    // Let every member reach its kernel wait. Linux checks that in /proc before every message
    // (a member not back in its wait loses its turn, as the contract says, and a loaded
    // machine can keep one off the cores for longer than the gap); no other system offers
    // that, and there the sleeps below stand in for it.
    thread::sleep(Duration::from_millis(100));
    for i in 0..MESSAGES {
        until_asleep(&threads);
        send_msg(&tx, i);
        let got = ack_rx.recv_timeout(WAIT_BOUND).expect("the group stalled");
        assert_eq!(got, i);
        thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, SeqCst);
    for notifier in &notifiers {
        notifier.notify().unwrap();
    }
    let results: Vec<(Vec<u64>, u64)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let per_member: Vec<usize> = results.iter().map(|(ids, _)| ids.len()).collect();
    let empty: u64 = results.iter().map(|(_, e)| e).sum();
    eprintln!("{backend:?} 4 threads, rotate_every(1), 1 ms gap: per member {per_member:?}, empty reads {empty}");
    let mut ids: Vec<u64> = results.into_iter().flat_map(|(ids, _)| ids).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        (0..MESSAGES).collect::<Vec<_>>(),
        "messages lost or read twice"
    );
    for &c in &per_member {
        assert!((98..=102).contains(&c), "not 100 ± 2 each: {per_member:?}");
    }
    assert!(empty < 4, "empty wake-ups ≥ 1%: {empty}");
}

fn three_ready_sockets_in_turn(backend: Backend, interest: Interest) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let sockets: Vec<_> = (0..3).map(|_| udp_pair()).collect();
    for (i, (rx, tx)) in sockets.iter().enumerate() {
        send_msg(tx, i as u64); // all three readable, and they stay so
        waiter.add(rx, i + 1, interest).unwrap();
    }
    let mut served = Vec::new();
    for _ in 0..7 {
        let keys = wait_keys(&mut waiter, 16);
        assert_eq!(keys.len(), 1, "one event per wait");
        served.push(keys[0]);
    }
    assert_eq!(served, [1, 2, 3, 1, 2, 3, 1]);
    for (rx, _) in &sockets {
        waiter.delete(rx).unwrap();
    }
}

fn exclusive_sockets_in_turn(backend: Backend) {
    three_ready_sockets_in_turn(
        backend,
        Interest::READABLE.exclusive().one_event_round_robin(),
    );
}

fn plain_sockets_in_turn(backend: Backend) {
    three_ready_sockets_in_turn(backend, Interest::READABLE.one_event_round_robin());
}

every_backend!(
    strict_turns_with_a_gap,
    exclusive_sockets_in_turn,
    plain_sockets_in_turn,
);
