//! Events never consumed are counted: an event of an exclusive descriptor that the caller did
//! not report with `consumed` (or `found_nothing`) before its next `wait` is consumed by that
//! wait and counted in `MemberStats::unconsumed`, the same on both backends and under every
//! rotation; events consumed in time, and events of plain (not exclusive) registrations, which
//! need no `consumed`, count nothing. So a loop that forgot `consumed` (nothing lost, but the
//! group waits for the member) shows it in `Group::stats`.

// Unix only: pipes.
#![cfg(unix)]

use std::os::fd::AsRawFd;

use herdless::{Backend, Group, Interest, Rotation};
use herdless_fixtures::{every_backend, pipe, read_exact, wait_keys, write_all, Blocking};

fn one_message(backend: Backend, rotation: Rotation, interest: Interest, end: End) -> u64 {
    let group = Group::builder()
        .backend(backend)
        .rotation(rotation)
        .build()
        .unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, tx) = pipe(Blocking::WriteEnd).unwrap();
    waiter.add(&rx, 9, interest).unwrap();
    write_all(tx.as_raw_fd(), b"x").unwrap();
    assert_eq!(wait_keys(&mut waiter, 4), [9]);
    read_exact(rx.as_raw_fd(), &mut [0u8; 1]).unwrap();
    match end {
        End::Consumed => waiter.consumed(9).unwrap(),
        End::FoundNothing => waiter.found_nothing(9).unwrap(),
        End::Forgotten => {}
    }
    write_all(tx.as_raw_fd(), b"y").unwrap();
    assert_eq!(wait_keys(&mut waiter, 4), [9], "the next event still comes");
    let counted = waiter.stats().unconsumed;
    assert_eq!(
        group.stats()[0].unconsumed,
        counted,
        "Group::stats says the same"
    );
    waiter.delete(&rx).unwrap();
    counted
}

#[derive(Clone, Copy, Debug)]
enum End {
    Consumed,
    FoundNothing,
    Forgotten,
}

fn a_forgotten_consumed_is_counted(backend: Backend) {
    for rotation in [Rotation::Adaptive, Rotation::Every(1), Rotation::Every(0)] {
        let shared = Interest::SHARED;
        let plain = Interest::READABLE;
        for (interest, end, want) in [
            (shared, End::Forgotten, 1),
            (shared, End::Consumed, 0),
            (shared, End::FoundNothing, 0),
            (plain, End::Forgotten, 0),
        ] {
            assert_eq!(
                one_message(backend, rotation, interest, end),
                want,
                "{rotation:?}, {interest:?}, {end:?}"
            );
        }
    }
}

every_backend!(a_forgotten_consumed_is_counted);
