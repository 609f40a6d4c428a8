//! modify: an exclusive registration can change its key and its interest (the kernel refuses
//! EPOLL_CTL_MOD of an exclusive entry; herdless deletes and re-adds), and a refused change
//! leaves the registration as it was.

// Linux only: real pipes through tests/common, and tests/common uses pipe2, gettid and /proc.
#![cfg(any(target_os = "linux", target_os = "android"))]

mod common;

use std::os::fd::AsRawFd;

use common::*;
use herdless::{Backend, Error, Group, Interest};

fn next_key(waiter: &mut herdless::Waiter) -> Option<usize> {
    wait_keys(waiter, 4).first().copied()
}

fn modify_exclusive_registration(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, tx) = pipe();
    write_msg(tx.as_raw_fd(), 0); // stays readable throughout
    waiter.add(&rx, 1, Interest::READABLE.exclusive()).unwrap();
    assert_eq!(next_key(&mut waiter), Some(1));
    waiter
        .modify(&rx, 2, Interest::READABLE.exclusive())
        .unwrap();
    assert_eq!(next_key(&mut waiter), Some(2));
    waiter.modify(&rx, 3, Interest::READABLE).unwrap();
    assert_eq!(next_key(&mut waiter), Some(3));
    waiter
        .modify(
            &rx,
            4,
            Interest::READABLE.exclusive().one_event_round_robin(),
        )
        .unwrap();
    assert_eq!(next_key(&mut waiter), Some(4));
    waiter.delete(&rx).unwrap();
}

fn refused_modify_keeps_the_registration(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, tx) = pipe();
    write_msg(tx.as_raw_fd(), 0);
    waiter.add(&rx, 1, Interest::READABLE.exclusive()).unwrap();
    let refused = waiter.modify(&rx, 2, Interest::PRIORITY.exclusive());
    assert!(
        matches!(refused, Err(Error::InvalidInterest { .. })),
        "{refused:?}"
    );
    assert_eq!(
        next_key(&mut waiter),
        Some(1),
        "the old registration still works"
    );
    let (other, _keep) = pipe();
    let unknown = waiter.modify(&other, 1, Interest::READABLE);
    assert!(
        matches!(unknown, Err(Error::NotRegistered { .. })),
        "{unknown:?}"
    );
    waiter.delete(&rx).unwrap();
}

every_backend!(
    modify_exclusive_registration,
    refused_modify_keeps_the_registration
);
