//! Portable conformance (every system, Windows included): exclusive wake-ups on loopback
//! sockets shared by threads. One connection on a shared listener, or one datagram on a shared
//! UDP socket, is handed to exactly one member; and a `Notifier` wakes its member at once.

#[path = "common/portable.rs"]
mod portable;

use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use herdless::{Backend, Events, Group, Interest};
use portable::*;

const MEMBERS: usize = 4;

/// What one member saw: (its index, events in its one wait, whether it got the message).
type Seen = (usize, usize, bool);

/// `MEMBERS` threads wait on `shared`, registered exclusive; `cause` makes it ready once and
/// `take` takes the one message. Returns what each member saw, the member that got the event
/// first.
fn one_event<S>(
    backend: Backend,
    shared: S,
    cause: impl FnOnce(),
    take: fn(&S) -> bool,
) -> Vec<Seen>
where
    S: herdless::AsSource + Send + Sync + 'static,
{
    let group = Group::builder()
        .backend(backend)
        .max_members(MEMBERS)
        .build()
        .unwrap();
    let shared = std::sync::Arc::new(shared);
    let (ready_tx, ready_rx) = mpsc::channel();
    let (seen_tx, seen_rx) = mpsc::channel::<Seen>();
    let mut notifiers = Vec::new();
    let mut handles = Vec::new();
    for i in 0..MEMBERS {
        let mut waiter = group.join().unwrap();
        waiter
            .add(&*shared, 7, Interest::READABLE.exclusive())
            .unwrap();
        notifiers.push(waiter.notifier());
        let (shared, ready_tx, seen_tx) = (shared.clone(), ready_tx.clone(), seen_tx.clone());
        handles.push(thread::spawn(move || {
            let mut events = Events::with_capacity(4);
            ready_tx.send(()).unwrap();
            let n = waiter.wait(&mut events, Some(WAIT_BOUND)).unwrap();
            let mut got = false;
            for event in events.iter() {
                assert_eq!(event.key, 7);
                got |= take(&shared);
                waiter.consumed(event.key).unwrap();
            }
            seen_tx.send((i, n, got)).unwrap();
            waiter.delete(&*shared).unwrap();
        }));
    }
    for _ in 0..MEMBERS {
        ready_rx.recv().unwrap();
    }
    cause();
    let first = seen_rx
        .recv_timeout(WAIT_BOUND)
        .expect("nobody got the event");
    // A window for a second (wrong) wake-up to show itself before the others are released; not
    // a synchronisation: a correct group never returns in it.
    thread::sleep(Duration::from_millis(50));
    for (i, notifier) in notifiers.iter().enumerate() {
        if i != first.0 {
            notifier.notify().unwrap();
        }
    }
    let mut seen = vec![first];
    for _ in 1..MEMBERS {
        seen.push(
            seen_rx
                .recv_timeout(WAIT_BOUND)
                .expect("a notified member stayed asleep"),
        );
    }
    for h in handles {
        h.join().unwrap();
    }
    seen
}

fn exactly_one(backend: Backend, what: &str, seen: &[Seen]) {
    eprintln!("{backend:?} {what}: (member, events, got it) = {seen:?}");
    assert_eq!(seen[0].1, 1, "the first member back had no event: {seen:?}");
    assert!(
        seen[0].2,
        "the first member back found nothing to take: {seen:?}"
    );
    for s in &seen[1..] {
        assert_eq!(
            s.1, 0,
            "a second member was woken by the same event: {seen:?}"
        );
    }
}

fn one_connection_wakes_one_member(backend: Backend) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let client = std::cell::Cell::new(None);
    let seen = one_event(
        backend,
        listener,
        || client.set(Some(TcpStream::connect(addr).unwrap())),
        |l| l.accept().is_ok(),
    );
    exactly_one(backend, "one connection, 4 members", &seen);
}

fn one_datagram_wakes_one_member(backend: Backend) {
    let (rx, tx) = udp_pair();
    let seen = one_event(
        backend,
        rx,
        || send_msg(&tx, 1),
        |rx| recv_msg(rx).is_some(),
    );
    exactly_one(backend, "one datagram, 4 members", &seen);
}

/// A notification sent before `wait` makes the next `wait` return at once with no event; one
/// sent from another thread wakes a member asleep in `wait`. The waits have no timeout: a
/// notification that does not arrive fails the test after `WAIT_BOUND` instead of passing as a
/// timed-out wait.
fn notifier_wakes_its_member(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, _tx) = udp_pair();
    waiter.add(&rx, 1, Interest::READABLE.exclusive()).unwrap();
    let notifier = waiter.notifier();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel();
    let member = thread::spawn(move || {
        let mut events = Events::with_capacity(4);
        for () in go_rx {
            let n = waiter.wait(&mut events, None).unwrap();
            done_tx.send(n).unwrap();
        }
        waiter
    });
    notifier.notify().unwrap();
    go_tx.send(()).unwrap();
    let n = done_rx.recv_timeout(WAIT_BOUND);
    assert_eq!(n, Ok(0), "a notification sent before wait was lost");
    go_tx.send(()).unwrap();
    notifier.notify().unwrap();
    let n = done_rx.recv_timeout(WAIT_BOUND);
    assert_eq!(n, Ok(0), "a notification did not wake its member");
    drop(go_tx);
    let mut waiter = member.join().unwrap();
    waiter.delete(&rx).unwrap();
}

every_backend!(
    one_connection_wakes_one_member,
    one_datagram_wakes_one_member,
    notifier_wakes_its_member,
);
