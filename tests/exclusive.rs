//! exclusive: W waiters on one pipe, one message → exactly one waiter returns, and the others
//! stay asleep: their kernel counters show no wake-up but the one we cause afterwards.

// Linux only: kernel wake-up counters and /proc; the portable checks are tests/portable_exclusive.rs, and tests/common uses pipe2, gettid and /proc.
#![cfg(any(target_os = "linux", target_os = "android"))]

mod common;

use std::sync::mpsc;
use std::thread;

use common::*;
use herdless::{Backend, Events, Group, Interest};

const WAITERS: usize = 8;

/// Per waiter: (events received, voluntary context switches during its one wait that the
/// emulation's token passing does not explain: its door-bell wake-ups are counted apart). A
/// loser's switches are read from `/proc` while it sleeps before the message and again once
/// every waiter has settled, before the test wakes it: what the message did to it, not what its
/// way into the kernel or our own wake-up cost. A loser that slept through counts 1, its sleep.
fn one_message(backend: Backend, interest: Interest) -> Vec<(usize, u64)> {
    let group = Group::builder().backend(backend).build().unwrap();
    let (rx, tx) = pipe();
    let (ready_tx, ready_rx) = mpsc::channel();
    let (result_tx, result_rx) = mpsc::channel();
    let (release_tx, release_rx) = (0..WAITERS)
        .map(|_| mpsc::channel::<()>())
        .unzip::<_, _, Vec<_>, Vec<_>>();
    let mut handles = Vec::new();
    for (i, release) in release_rx.into_iter().enumerate() {
        let group = group.clone();
        let rx = rx.try_clone().unwrap();
        let ready_tx = ready_tx.clone();
        let result_tx = result_tx.clone();
        handles.push(thread::spawn(move || {
            let mut waiter = group.join().unwrap();
            waiter.add(&rx, 0, interest).unwrap();
            ready_tx.send((i, gettid(), waiter.notifier())).unwrap();
            let mut events = Events::with_capacity(4);
            let before = vcsw();
            let n = waiter.wait(&mut events, None).unwrap();
            let switches = vcsw() - before;
            if n > 0 {
                read_msg(std::os::fd::AsRawFd::as_raw_fd(&rx));
            }
            result_tx.send((i, n, switches, waiter.member())).unwrap();
            // Stay joined (and keep the event unconsumed) until everyone has reported.
            release.recv().unwrap();
            waiter.delete(&rx).unwrap();
        }));
    }
    let mut joined: Vec<_> = (0..WAITERS).map(|_| ready_rx.recv().unwrap()).collect();
    joined.sort_by_key(|(i, _, _)| *i);
    let tids: Vec<i32> = joined.iter().map(|(_, t, _)| *t).collect();
    until_asleep(std::process::id(), &tids);
    let switches_of = |tid: i32| {
        herdless_fixtures::counters::voluntary_switches_of(std::process::id(), tid)
            .expect("/proc/<pid>/task/<tid>/status")
    };
    let asleep: Vec<u64> = tids.iter().map(|&t| switches_of(t)).collect();

    write_msg(std::os::fd::AsRawFd::as_raw_fd(&tx), 1);
    // The first waiter to report is one that woke for the message.
    let mut results = vec![(0usize, 0u64); WAITERS];
    let mut members = [0usize; WAITERS];
    let mut reported = vec![false; WAITERS];
    let mut record = |(i, n, s, m): (usize, usize, u64, usize), reported: &mut Vec<bool>| {
        results[i] = (n, s);
        members[i] = m;
        reported[i] = true;
    };
    record(result_rx.recv().unwrap(), &mut reported);
    // Let every waiter the message woke run: each has either returned it or gone back to
    // sleep in the kernel (one more voluntary switch) before we wake the rest ourselves.
    let start = std::time::Instant::now();
    loop {
        while let Ok(report) = result_rx.try_recv() {
            record(report, &mut reported);
        }
        let pending: Vec<i32> = (0..WAITERS)
            .filter(|&j| !reported[j])
            .map(|j| tids[j])
            .collect();
        if pending
            .iter()
            .all(|&t| herdless_fixtures::counters::asleep_in_wait(std::process::id(), t))
        {
            break;
        }
        assert!(start.elapsed().as_secs() < 20, "waiters never settled");
        thread::yield_now();
    }
    let settled: Vec<Option<u64>> = (0..WAITERS)
        .map(|j| (!reported[j]).then(|| switches_of(tids[j]) - asleep[j]))
        .collect();
    for (j, _, notifier) in &joined {
        if !reported[*j] {
            notifier.notify().unwrap();
        }
    }
    while reported.iter().any(|r| !r) {
        record(result_rx.recv().unwrap(), &mut reported);
    }
    for (i, settled) in settled.iter().enumerate() {
        if let Some(asleep) = settled {
            // Its sleep before the message, and one more for every time the message woke it
            // and it went back to sleep.
            results[i].1 = 1 + *asleep;
        }
    }
    for r in release_tx {
        r.send(()).unwrap();
    }
    for h in handles {
        h.join().unwrap();
    }
    let stats = group.stats();
    for (i, (_, switches)) in results.iter_mut().enumerate() {
        let token_wakeups = stats
            .iter()
            .find(|m| m.member == members[i])
            .unwrap()
            .token_wakeups;
        // A door bell rung before the waiter slept costs no switch: explain at most that many.
        *switches = switches.saturating_sub(token_wakeups);
    }
    results
}

fn one_message_wakes_one_waiter(backend: Backend) {
    let results = one_message(backend, Interest::READABLE.exclusive());
    let winners = results.iter().filter(|(n, _)| *n > 0).count();
    assert_eq!(
        winners, 1,
        "exactly one waiter gets the message: {results:?}"
    );
    for (n, switches) in &results {
        if *n == 0 {
            // Asleep once, woken once: by our notification, not by the message.
            assert!(
                *switches <= 1,
                "a loser was woken by the message: {results:?}"
            );
        }
    }
}

/// The control: without `exclusive` the same measurement sees the herd, so the test above
/// could fail.
fn without_exclusive_the_herd_wakes(backend: Backend) {
    let results = one_message(backend, Interest::READABLE);
    let woken_by_message: u64 = results
        .iter()
        .map(|(n, s)| if *n > 0 { 1 } else { s.saturating_sub(1) })
        .sum();
    assert!(
        woken_by_message > 1,
        "without exclusive, one message should wake several waiters: {results:?}"
    );
}

every_backend!(
    one_message_wakes_one_waiter,
    without_exclusive_the_herd_wakes
);
