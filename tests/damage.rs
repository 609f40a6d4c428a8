//! A damaged named group gives errors, never panics, on both backends. A process allowed to
//! write a named group's shared-memory object can overwrite it under its live members: with
//! random bytes, or with zeroes. The members' next calls say `Error::CorruptGroup` (nothing
//! panics, nothing hangs, the host program's stderr stays as it was), a member can leave, and
//! once every handle is gone the name can be removed and the group made again.
//! (Truncation is another matter: a mapping cut short under its users faults with SIGBUS,
//! which no library can turn into an error; see docs/internals.md.)

// Named groups live in POSIX shared memory, at /dev/shm on Linux.
#![cfg(target_os = "linux")]

mod common;

use std::io::{Seek, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::*;
use herdless::{Backend, Error, Events, Group, Interest};

/// What the object is overwritten with.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// Random bytes throughout.
    Garbage,
    /// Zeroes throughout.
    Zeroes,
    /// Random bytes after the preamble (its magic word stays): the member table and the
    /// backend's region are garbage, so the members meet values no group holds.
    GarbageBehindThePreamble,
}

/// The preamble's bytes (its magic word, version and settings), kept by
/// `GarbageBehindThePreamble`.
const PREAMBLE: usize = 64;

fn object_path(name: &str) -> String {
    format!("/dev/shm/herdless.{name}")
}

/// Bytes that look like nothing: a fixed-seed xorshift, so a failure can be replayed.
fn garbage(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

/// Overwrites the whole object in place (no truncation: the members' mappings stay whole).
fn overwrite(name: &str, damage: Damage) {
    let path = object_path(name);
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    let (from, bytes) = match damage {
        Damage::Garbage => (0, garbage(len, 0x9e37_79b9_7f4a_7c15)),
        Damage::Zeroes => (0, vec![0; len]),
        Damage::GarbageBehindThePreamble => (PREAMBLE, garbage(len - PREAMBLE, 0x2545_f491)),
    };
    let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.seek(std::io::SeekFrom::Start(from as u64)).unwrap();
    file.write_all(&bytes).unwrap();
}

/// Two member threads serve a pipe of a named group; the object is overwritten under them.
/// Each member's next call fails with `CorruptGroup` (never a panic), each leaves (its
/// `Waiter` dropped), and once every handle is gone the name is removed and a new group of
/// that name serves again.
fn damaged_under_live_members(backend: Backend, damage: Damage) {
    let name = format!("test.damage.{}.{}", std::process::id(), damage as u8);
    let _ = Group::remove(&name);
    let group = Group::builder()
        .name(&name)
        .backend(backend)
        .max_members(4)
        .build()
        .unwrap();
    let (rx, tx) = pipe();
    let served = AtomicBool::new(false);
    let damaged = AtomicBool::new(false);
    let ready = std::sync::Barrier::new(3);
    let outcomes = std::thread::scope(|s| {
        let members: Vec<_> = (0..2)
            .map(|_| {
                let (group, rx, served, damaged, ready) = (&group, &rx, &served, &damaged, &ready);
                s.spawn(move || {
                    let mut waiter = group.join().unwrap();
                    waiter.add(rx, 0, Interest::READABLE.exclusive()).unwrap();
                    ready.wait();
                    let mut events = Events::with_capacity(2);
                    let started = Instant::now();
                    loop {
                        match waiter.wait(&mut events, Some(Duration::from_millis(20))) {
                            Ok(_) => {
                                for event in events.iter().collect::<Vec<_>>() {
                                    if read_msg(rx.as_raw_fd()).is_some() {
                                        served.store(true, SeqCst);
                                    }
                                    // After the damage this may fail too: the loop's next
                                    // wait says why.
                                    let _ = waiter.consumed(event.key);
                                }
                            }
                            Err(e) => return (damaged.load(SeqCst), e),
                        }
                        assert!(started.elapsed() < WAIT_BOUND, "never told of the damage");
                    }
                })
            })
            .collect();
        ready.wait(); // both members joined and registered
        write_msg(tx.as_raw_fd(), 1);
        let start = Instant::now();
        while !served.load(SeqCst) {
            assert!(start.elapsed() < WAIT_BOUND, "the message was never read");
            std::thread::yield_now();
        }
        damaged.store(true, SeqCst);
        overwrite(&name, damage);
        members
            .into_iter()
            .map(|m| m.join().expect("a member panicked"))
            .collect::<Vec<_>>()
    });
    for (after_damage, e) in &outcomes {
        assert!(
            after_damage,
            "{backend:?} {damage:?}: failed before the damage: {e}"
        );
        assert!(
            matches!(e, Error::CorruptGroup { .. }),
            "{backend:?} {damage:?}: expected CorruptGroup, got {e:?}"
        );
    }
    eprintln!(
        "{backend:?} {damage:?}: each member was told: {}",
        outcomes[0].1
    );
    // A new member cannot join the damaged group either.
    assert!(matches!(group.join(), Err(Error::CorruptGroup { .. })));
    drop(group);
    // Every handle gone: the damaged object is refused, or (zeroes: never set up) made anew.
    let reopened = Group::builder()
        .name(&name)
        .backend(backend)
        .max_members(4)
        .build();
    match damage {
        Damage::Garbage => {
            assert!(
                matches!(reopened, Err(Error::CorruptGroup { .. })),
                "{reopened:?}"
            );
            Group::remove(&name).unwrap();
        }
        // Its preamble says a group of these settings: opened (its members are all gone, so a
        // creator makes it afresh).
        Damage::GarbageBehindThePreamble => drop(reopened.unwrap()),
        Damage::Zeroes => drop(reopened.unwrap()),
    }
    let _ = Group::remove(&name);
    let group = Group::builder()
        .name(&name)
        .backend(backend)
        .max_members(4)
        .build()
        .unwrap();
    let mut waiter = group.join().unwrap();
    waiter.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
    write_msg(tx.as_raw_fd(), 2);
    let mut events = Events::with_capacity(1);
    assert_eq!(waiter.wait(&mut events, Some(WAIT_BOUND)).unwrap(), 1);
    assert_eq!(read_msg(rx.as_raw_fd()), Some(Some(2)));
    drop(waiter);
    drop(group);
    Group::remove(&name).unwrap();
}

fn garbage_under_live_members(backend: Backend) {
    damaged_under_live_members(backend, Damage::Garbage);
}

fn zeroes_under_live_members(backend: Backend) {
    damaged_under_live_members(backend, Damage::Zeroes);
}

fn garbage_behind_the_preamble(backend: Backend) {
    damaged_under_live_members(backend, Damage::GarbageBehindThePreamble);
}

every_backend!(
    garbage_under_live_members,
    zeroes_under_live_members,
    garbage_behind_the_preamble,
);
