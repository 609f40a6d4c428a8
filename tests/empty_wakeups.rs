//! Empty wake-ups as the application saw them: a member whose read after an event found
//! nothing tells the group (`Waiter::found_nothing`), and `Group::stats`, `Waiter::stats` count
//! it, on both backends; `found_nothing` also does what `consumed` does (under the emulation,
//! the next event of the descriptor goes to another member at once, where without it the group
//! would wait for this member), and a member that reads something counts no empty wake-up.

// Unix only: pipes; the fixtures' pipe is a Unix one.
#![cfg(unix)]

use std::os::fd::AsRawFd;
use std::time::Duration;

use herdless::{Backend, Events, Group, Interest, Rotation};
use herdless_fixtures::{every_backend, pipe, read_exact, write_all, Blocking};

/// The keys one bounded wait hands out.
fn wait_for(waiter: &mut herdless::Waiter, timeout: Duration) -> Vec<usize> {
    let mut events = Events::with_capacity(4);
    waiter.wait(&mut events, Some(timeout)).unwrap();
    events.iter().map(|e| e.key).collect()
}

/// Reads one 8-byte message, or `None` on EAGAIN.
fn read_one(fd: i32) -> Option<u64> {
    let mut buf = [0u8; 8];
    // SAFETY: reads into a live buffer from a descriptor the test holds.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), 8) };
    match n {
        8 => Some(u64::from_ne_bytes(buf)),
        -1 if std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock => None,
        other => panic!("read: {other} ({})", std::io::Error::last_os_error()),
    }
}

/// A group of two members on `backend` under `rotation`, and the two members.
fn two_members(
    backend: Backend,
    rotation: Rotation,
) -> (Group, herdless::Waiter, herdless::Waiter) {
    let group = Group::builder()
        .backend(backend)
        .rotation(rotation)
        .max_members(2)
        .build()
        .unwrap();
    let a = group.join().unwrap();
    let b = group.join().unwrap();
    (group, a, b)
}

fn found_nothing_is_counted_and_consumes(backend: Backend) {
    let (group, mut a, mut b) = two_members(backend, Rotation::Every(1));
    let (rx, tx) = pipe(Blocking::WriteEnd).unwrap();
    let shared = Interest::READABLE.exclusive().one_event_round_robin();
    a.add(&rx, 0, shared).unwrap();
    b.add(&rx, 0, shared).unwrap();
    let bound = Duration::from_secs(10);
    // A message that `a` is handed and reads: no empty wake-up.
    write_all(tx.as_raw_fd(), &1u64.to_ne_bytes()).unwrap();
    assert_eq!(wait_for(&mut a, bound), [0]);
    assert_eq!(read_one(rx.as_raw_fd()), Some(1));
    a.consumed(0).unwrap();
    // A message `a` is handed, that someone else reads first: `a` finds nothing.
    write_all(tx.as_raw_fd(), &2u64.to_ne_bytes()).unwrap();
    assert_eq!(wait_for(&mut b, bound), [0], "strict turns: b's turn");
    b.consumed(0).unwrap(); // b lets go without reading (the message stays)
    assert_eq!(wait_for(&mut a, bound), [0]);
    let mut stolen = [0u8; 8];
    read_exact(rx.as_raw_fd(), &mut stolen).unwrap(); // the thief
    assert_eq!(read_one(rx.as_raw_fd()), None, "a finds nothing");
    a.found_nothing(0).unwrap();
    assert_eq!(a.stats().empty_wakeups, 1);
    assert_eq!(b.stats().empty_wakeups, 0);
    let by_member: Vec<(usize, u64)> = group
        .stats()
        .iter()
        .map(|s| (s.member, s.empty_wakeups))
        .collect();
    assert_eq!(by_member, [(a.member(), 1), (b.member(), 0)]);
    // found_nothing consumed the event: the next message goes to b at once (under the
    // emulation, without it the group would wait for a until a's next wait).
    write_all(tx.as_raw_fd(), &3u64.to_ne_bytes()).unwrap();
    assert_eq!(
        wait_for(&mut b, bound),
        [0],
        "handed on after found_nothing"
    );
    assert_eq!(read_one(rx.as_raw_fd()), Some(3));
    b.consumed(0).unwrap();
    // Each report counts once; a's stats agree with the group's from another handle.
    a.found_nothing(0).unwrap(); // no event outstanding: counted, otherwise ignored
    assert_eq!(a.stats().empty_wakeups, 2);
    assert_eq!(a.stats(), group.stats()[0]);
    assert_eq!(a.stats().events, 2);
    a.delete(&rx).unwrap();
    b.delete(&rx).unwrap();
}

/// A member holds an event of a shared descriptor that it has not read yet (natively: its
/// file's claim) while a second message waits behind the first: another member is handed the
/// descriptor all the same (natively once the claim's short wait has passed or the holder has
/// consumed, emulated once the holder has consumed), and each reads one message: nothing lost,
/// nothing read twice, no empty wake-up.
fn a_held_event_does_not_hide_a_backlog(backend: Backend) {
    let (_group, mut a, mut b) = two_members(backend, Rotation::Adaptive);
    let (rx, tx) = pipe(Blocking::WriteEnd).unwrap();
    let shared = Interest::READABLE.exclusive().one_event_round_robin();
    a.add(&rx, 0, shared).unwrap();
    let bound = Duration::from_secs(10);
    write_all(tx.as_raw_fd(), &1u64.to_ne_bytes()).unwrap();
    write_all(tx.as_raw_fd(), &2u64.to_ne_bytes()).unwrap();
    assert_eq!(wait_for(&mut a, bound), [0], "a holds the first event");
    // Added while the pipe is ready: natively its kernel wait reports the pipe at once, while
    // a holds it.
    b.add(&rx, 0, shared).unwrap();
    let fd = rx.as_raw_fd();
    let (by_b, by_a) = std::thread::scope(|s| {
        let taker = s.spawn(|| {
            assert_eq!(wait_for(&mut b, bound), [0], "b is handed the backlog");
            let got = read_one(fd);
            b.consumed(0).unwrap();
            got
        });
        // Not a synchronisation: every assertion holds in either order. The pause only makes
        // the contested path (b's kernel wait reports the pipe while a holds it) the usual one.
        std::thread::sleep(Duration::from_millis(20));
        let got = read_one(fd);
        a.consumed(0).unwrap();
        (taker.join().unwrap(), got)
    });
    let mut read = [by_a.expect("a read a message"), by_b.expect("b read one")];
    read.sort_unstable();
    assert_eq!(read, [1, 2], "each message read once");
    assert_eq!(read_one(fd), None, "nothing left");
    assert_eq!((a.stats().empty_wakeups, b.stats().empty_wakeups), (0, 0));
    a.delete(&rx).unwrap();
    b.delete(&rx).unwrap();
}

every_backend!(
    found_nothing_is_counted_and_consumes,
    a_held_event_does_not_hide_a_backlog
);
