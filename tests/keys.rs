//! A key is the caller's own data, as epoll's `data`: any `usize` (none reserved: `usize::MAX`
//! and its neighbours too, on `add` and `modify`), carried by every event of its registration,
//! and shared by several registrations if the caller wants: then `consumed(key)` consumes
//! every outstanding event with that key (none is left for the next `wait` to consume). On
//! both backends; interests combine with `|`.

// Unix only: pipes.
#![cfg(unix)]

use std::os::fd::AsRawFd;
use std::time::Duration;

use herdless::{Backend, Events, Group, Interest};
use herdless_fixtures::{every_backend, pipe, read_exact, wait_keys, write_all, Blocking};

fn any_key_is_the_callers(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, tx) = pipe(Blocking::WriteEnd).unwrap();
    write_all(tx.as_raw_fd(), b"x").unwrap();
    for (key, interest) in [
        (usize::MAX, Interest::SHARED),
        (usize::MAX - 1, Interest::READABLE | Interest::WRITABLE),
        (usize::MAX - 2, Interest::READABLE),
        (0, Interest::SHARED),
    ] {
        waiter.add(&rx, key, interest).unwrap();
        assert_eq!(wait_keys(&mut waiter, 4), [key], "add, key {key:#x}");
        waiter.consumed(key).unwrap();
        waiter.delete(&rx).unwrap();
    }
    waiter.add(&rx, 7, Interest::SHARED).unwrap();
    waiter.modify(&rx, usize::MAX, Interest::READABLE).unwrap();
    assert_eq!(wait_keys(&mut waiter, 4), [usize::MAX], "modify");
    waiter.delete(&rx).unwrap();
}

fn one_key_for_several_registrations(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (a, a_tx) = pipe(Blocking::WriteEnd).unwrap();
    let (b, b_tx) = pipe(Blocking::WriteEnd).unwrap();
    let shared = Interest::READABLE.exclusive(); // several events per wait
    waiter.add(&a, 5, shared).unwrap();
    waiter.add(&b, 5, shared).unwrap();
    write_all(a_tx.as_raw_fd(), b"x").unwrap();
    write_all(b_tx.as_raw_fd(), b"y").unwrap();
    let mut events = Events::with_capacity(4);
    waiter
        .wait(&mut events, Some(Duration::from_secs(10)))
        .unwrap();
    let keys: Vec<usize> = events.iter().map(|e| e.key).collect();
    assert_eq!(keys, [5, 5], "both descriptors, one key");
    for fd in [&a, &b] {
        read_exact(fd.as_raw_fd(), &mut [0u8; 1]).unwrap();
    }
    waiter.consumed(5).unwrap(); // every outstanding event with key 5
    waiter.wait(&mut events, Some(Duration::ZERO)).unwrap();
    assert_eq!(
        waiter.stats().unconsumed,
        0,
        "consumed(5) consumed both descriptors' events"
    );
    waiter.delete(&a).unwrap();
    waiter.delete(&b).unwrap();
}

every_backend!(any_key_is_the_callers, one_key_for_several_registrations);
