//! Groups that live for months, on both backends: a supervisor starts and retires services
//! one after another (a queue made, registered exclusive by every server, used, deleted and
//! closed, then the next one), and the group goes on as on its first day. Under the emulation
//! a descriptor no member has registered any more frees its place in the group's table, so
//! `TooManySources` means only that more descriptors are registered *at once* than the table
//! holds, and says how to raise it.
//!
//! `HERDLESS_LONG_LIFE_DESCRIPTORS` sets how many descriptors go through the group in turn
//! (default 10 000, the figure).

// Linux only: tests/common uses pipe2, gettid and /proc.
#![cfg(any(target_os = "linux", target_os = "android"))]

mod common;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering::SeqCst};
use std::sync::{Barrier, Mutex};
use std::time::Instant;

use common::*;
use herdless::{Backend, Error, Events, Group, Interest, Notifier};

fn descriptors() -> usize {
    std::env::var("HERDLESS_LONG_LIFE_DESCRIPTORS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// Two member threads; descriptors come and go one at a time, each registered exclusive by
/// both, one message written and read, then deleted by both and closed: 10 000 of them through
/// a group whose table holds 4. Every registration and deletion succeeds and every message is
/// read exactly once.
fn descriptors_in_turn_through_one_group(backend: Backend) {
    let rounds = descriptors();
    let group = Group::builder()
        .backend(backend)
        .max_members(2)
        .max_exclusive_descriptors(4)
        .build()
        .unwrap();
    let barrier = Barrier::new(3);
    let current = AtomicI32::new(-1);
    let over = AtomicU64::new(0);
    let errors = Mutex::new(Vec::new());
    let reads: Vec<AtomicU64> = (0..rounds).map(|_| AtomicU64::new(0)).collect();
    let notifiers: Mutex<Vec<Notifier>> = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..2 {
            let (group, barrier, current, over, errors, reads, notifiers) = (
                &group, &barrier, &current, &over, &errors, &reads, &notifiers,
            );
            s.spawn(move || {
                let mut waiter = group.join().unwrap();
                notifiers.lock().unwrap().push(waiter.notifier());
                let mut events = Events::with_capacity(1);
                for round in 0..rounds {
                    barrier.wait(); // the round's descriptor is open
                    let fd: RawFd = current.load(SeqCst);
                    let shared = Interest::READABLE.exclusive().one_event_round_robin();
                    if let Err(e) = waiter.add(&fd_of(fd), 0, shared) {
                        errors
                            .lock()
                            .unwrap()
                            .push(format!("round {round}: add: {e}"));
                    }
                    barrier.wait(); // both registered: the message is written
                    while over.load(SeqCst) <= round as u64 {
                        waiter.wait(&mut events, Some(WAIT_BOUND)).unwrap();
                        if events.iter().next().is_some() {
                            if let Some(Some(id)) = read_msg(fd) {
                                reads[id as usize].fetch_add(1, SeqCst);
                            }
                            waiter.consumed(0).unwrap();
                        }
                    }
                    if let Err(e) = waiter.delete(&fd_of(fd)) {
                        errors
                            .lock()
                            .unwrap()
                            .push(format!("round {round}: delete: {e}"));
                    }
                    barrier.wait(); // both deleted: the descriptor is closed
                }
            });
        }
        for (round, read) in reads.iter().enumerate() {
            let (rx, tx) = pipe();
            current.store(rx.as_raw_fd(), SeqCst);
            barrier.wait();
            barrier.wait();
            write_msg(tx.as_raw_fd(), round as u64);
            let written = Instant::now();
            while read.load(SeqCst) == 0 {
                assert!(
                    written.elapsed() < WAIT_BOUND,
                    "{backend:?}: the message of round {round} was never read ({:?})",
                    errors.lock().unwrap()
                );
                std::thread::yield_now();
            }
            over.store(round as u64 + 1, SeqCst);
            for n in notifiers.lock().unwrap().iter() {
                n.notify().unwrap();
            }
            barrier.wait();
            drop((rx, tx));
        }
    });
    let errors = errors.into_inner().unwrap();
    eprintln!(
        "{backend:?}: {rounds} descriptors in turn through one group in {:?}, {} errors",
        started.elapsed(),
        errors.len()
    );
    assert!(errors.is_empty(), "{backend:?}: {errors:?}");
    for (round, r) in reads.iter().enumerate() {
        assert_eq!(r.load(SeqCst), 1, "{backend:?}: round {round}'s message");
    }
}

/// A borrowed view of `fd` to register (the test keeps it open for the round).
fn fd_of(fd: RawFd) -> std::os::fd::BorrowedFd<'static> {
    // SAFETY: the round's descriptor stays open until both members deleted it.
    unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }
}

/// The table's limit is a limit on what is registered at once: an emulated group built for 8
/// takes 8 distinct exclusive descriptors, refuses a 9th with `TooManySources` (its message
/// names the setting to raise), changes nothing on refusal, and takes the 9th once one of the
/// 8 is deleted. A second member registering the same 8 uses their places. The native backend
/// keeps no such table.
fn the_limit_is_on_what_is_registered_at_once(backend: Backend) {
    const LIMIT: usize = 8;
    let group = Group::builder()
        .backend(backend)
        .max_exclusive_descriptors(LIMIT)
        .build()
        .unwrap();
    let pipes: Vec<(OwnedFd, OwnedFd)> = (0..=LIMIT).map(|_| pipe()).collect();
    let shared = Interest::READABLE.exclusive();
    let mut first = group.join().unwrap();
    let mut second = group.join().unwrap();
    for (i, (rx, _)) in pipes.iter().take(LIMIT).enumerate() {
        first.add(rx, i, shared).unwrap();
        second.add(rx, i, shared).unwrap();
    }
    let ninth = &pipes[LIMIT].0;
    match backend {
        Backend::Emulated => {
            assert_eq!(group.max_exclusive_descriptors(), Some(LIMIT));
            let refused = first.add(ninth, LIMIT, shared);
            match &refused {
                Err(e @ Error::TooManySources { max }) => {
                    assert_eq!(*max, LIMIT);
                    let text = e.to_string();
                    assert!(text.contains("at once"), "{text}");
                    assert!(text.contains("max_exclusive_descriptors"), "{text}");
                }
                other => panic!("expected TooManySources, got {other:?}"),
            }
            // Nothing changed: the 8 are still registered, the 9th is not.
            assert!(matches!(
                first.delete(ninth),
                Err(Error::NotRegistered { .. })
            ));
            first.delete(&pipes[0].0).unwrap();
            // Still registered by the second member: its place is not free yet.
            assert!(matches!(
                first.add(ninth, LIMIT, shared),
                Err(Error::TooManySources { .. })
            ));
            second.delete(&pipes[0].0).unwrap();
            first.add(ninth, LIMIT, shared).unwrap();
            second.add(ninth, LIMIT, shared).unwrap();
        }
        _ => {
            assert_eq!(group.max_exclusive_descriptors(), None);
            first.add(ninth, LIMIT, shared).unwrap();
        }
    }
    // The group still serves: a message on the 9th descriptor is read.
    write_msg(pipes[LIMIT].1.as_raw_fd(), 9);
    let mut events = Events::with_capacity(4);
    let mut read = false;
    for waiter in [&mut first, &mut second] {
        if read {
            break;
        }
        waiter
            .wait(&mut events, Some(std::time::Duration::from_millis(200)))
            .unwrap();
        for event in events.iter().collect::<Vec<_>>() {
            if event.key == LIMIT {
                read |= matches!(read_msg(ninth.as_raw_fd()), Some(Some(9)));
                waiter.consumed(event.key).unwrap();
            }
        }
    }
    assert!(
        read,
        "{backend:?}: the 9th descriptor's message was not read"
    );
}

every_backend!(
    descriptors_in_turn_through_one_group,
    the_limit_is_on_what_is_registered_at_once,
);
