//! one_event_round_robin: the seed example of the POLLONE proposal. Three pipes, all readable,
//! registered with one event per wait: successive waits return fd1, fd2, fd3, fd1, … — with and
//! without `exclusive`.

// Linux only: real pipes; the portable version is tests/portable_turns.rs, and tests/common uses pipe2, gettid and /proc.
#![cfg(any(target_os = "linux", target_os = "android"))]

mod common;

use std::os::fd::AsRawFd;

use common::*;
use herdless::{Backend, Group, Interest};

fn three_ready_pipes_in_turn(backend: Backend, interest: Interest) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let pipes: Vec<_> = (0..3).map(|_| pipe()).collect();
    for (i, (rx, tx)) in pipes.iter().enumerate() {
        write_msg(tx.as_raw_fd(), i as u64); // all three readable, and they stay so
        waiter.add(rx, i + 1, interest).unwrap();
    }
    let mut served = Vec::new();
    for _ in 0..7 {
        let keys = wait_keys(&mut waiter, 16);
        assert_eq!(keys.len(), 1, "one event per wait");
        served.push(keys[0]);
    }
    assert_eq!(served, [1, 2, 3, 1, 2, 3, 1]);
    for (rx, _) in &pipes {
        waiter.delete(rx).unwrap();
    }
}

fn exclusive_pipes_in_turn(backend: Backend) {
    three_ready_pipes_in_turn(
        backend,
        Interest::READABLE.exclusive().one_event_round_robin(),
    );
}

fn plain_pipes_in_turn(backend: Backend) {
    three_ready_pipes_in_turn(backend, Interest::READABLE.one_event_round_robin());
}

/// Without the flag a wait returns every ready descriptor at once.
fn without_the_flag_all_at_once(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let pipes: Vec<_> = (0..3).map(|_| pipe()).collect();
    for (i, (rx, tx)) in pipes.iter().enumerate() {
        write_msg(tx.as_raw_fd(), i as u64);
        waiter.add(rx, i + 1, Interest::READABLE).unwrap();
    }
    assert_eq!(wait_keys(&mut waiter, 16).len(), 3);
}

every_backend!(
    exclusive_pipes_in_turn,
    plain_pipes_in_turn,
    without_the_flag_all_at_once
);
