//! Portable conformance (every system, Windows included): what the API answers alike on every
//! backend, on loopback sockets. A key is the caller's own data (any `usize`, one shared by two
//! registrations and consumed for both by one `consumed`), interests combine with `|`, an event
//! says readable and not closed for a datagram, and an exclusive event left unconsumed until
//! the next `wait` is counted in `MemberStats::unconsumed`.

#[path = "common/portable.rs"]
mod portable;

use std::time::Duration;

use herdless::{Backend, Events, Group, Interest};
use portable::*;

fn keys_are_the_callers(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, tx) = udp_pair();
    for key in [usize::MAX, usize::MAX - 1, 0] {
        waiter.add(&rx, key, Interest::SHARED).unwrap();
        send_msg(&tx, 1);
        assert_eq!(wait_keys(&mut waiter, 4), [key], "key {key:#x}");
        assert_eq!(recv_msg(&rx), Some(1));
        waiter.consumed(key).unwrap();
        waiter.delete(&rx).unwrap();
    }
    // Two sockets under one key, both ready: one `consumed` consumes every event it had.
    let (other, other_tx) = udp_pair();
    for socket in [&rx, &other] {
        waiter
            .add(socket, 5, Interest::READABLE | Interest::SHARED)
            .unwrap();
    }
    send_msg(&tx, 2);
    send_msg(&other_tx, 3);
    let mut events = Events::with_capacity(4);
    waiter.wait(&mut events, Some(WAIT_BOUND)).unwrap();
    assert!(!events.is_empty(), "a datagram was not handed out");
    for event in events.iter() {
        assert_eq!(event.key, 5);
        assert!(event.is_readable() && !event.is_writable(), "{event:?}");
        assert!(!event.is_read_closed() && !event.is_error(), "{event:?}");
    }
    waiter.consumed(5).unwrap();
    waiter.wait(&mut events, Some(Duration::ZERO)).unwrap();
    assert_eq!(waiter.stats().unconsumed, 0, "consumed(5) left one out");
    waiter.delete(&rx).unwrap();
    waiter.delete(&other).unwrap();
}

fn an_unconsumed_event_is_counted(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, tx) = udp_pair();
    waiter.add(&rx, 9, Interest::SHARED).unwrap();
    send_msg(&tx, 1);
    assert_eq!(wait_keys(&mut waiter, 4), [9]);
    assert_eq!(recv_msg(&rx), Some(1));
    // No consumed: the next wait consumes it, and counts it.
    waiter
        .wait(&mut Events::default(), Some(Duration::ZERO))
        .unwrap();
    assert_eq!(waiter.stats().unconsumed, 1);
    assert_eq!(group.stats()[0].unconsumed, 1);
    waiter.delete(&rx).unwrap();
}

every_backend!(keys_are_the_callers, an_unconsumed_event_is_counted);
