//! Portable conformance (every system, Windows included): bad input. A closed socket, a number
//! never opened, an open handle that is no socket (a regular file) and a socket added twice are
//! refused with their typed errors, and the waiter keeps working. A socket closed while
//! registered, without `delete`, does not hang the next `wait`.

#[path = "common/portable.rs"]
mod portable;

use std::net::UdpSocket;
use std::sync::mpsc;
use std::time::Duration;

use herdless::{Backend, Error, Events, Group, Interest};
use portable::*;

/// The waiter still works: the datagram queued on `rx` (key 0) is reported and still there.
fn still_works(waiter: &mut herdless::Waiter, rx: &UdpSocket) {
    assert_eq!(wait_keys(waiter, 4), [0]);
    assert_eq!(recv_msg(rx), Some(42), "the queued message was lost");
}

fn refusals_are_typed_and_harmless(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, tx) = udp_pair();
    waiter.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
    let check = |what: &str, res: herdless::Result<()>, ok: fn(&Error) -> bool| {
        let err = res.expect_err(what);
        assert!(ok(&err), "{what}: unexpected {err:?}");
        eprintln!("{backend:?} {what}: {err}");
    };
    let (file, file_number) = regular_file();
    for interest in [Interest::READABLE, Interest::READABLE.exclusive()] {
        // SAFETY: deliberately names a closed socket; herdless must refuse it.
        let closed = unsafe { borrow(closed_socket()) };
        check("closed socket", waiter.add(&closed, 1, interest), |e| {
            matches!(e, Error::BadDescriptor { .. })
        });
        // SAFETY: a number far beyond any open descriptor or handle.
        let never = unsafe { borrow(never_opened()) };
        check(
            "never-opened number",
            waiter.add(&never, 1, interest),
            |e| matches!(e, Error::BadDescriptor { .. }),
        );
        // SAFETY: the file stays open until the end of this test.
        let not_a_socket = unsafe { borrow(file_number) };
        check(
            "a regular file",
            waiter.add(&not_a_socket, 1, interest),
            |e| matches!(e, Error::UnwatchableDescriptor { .. }),
        );
        check("the same socket again", waiter.add(&rx, 1, interest), |e| {
            matches!(e, Error::AlreadyRegistered { .. })
        });
    }
    drop(file);
    send_msg(&tx, 42);
    still_works(&mut waiter, &rx);
    waiter.delete(&rx).unwrap();
}

/// Registers a socket, lets the member watch it, closes it without `delete`: the next `wait`
/// with a timeout must return (on Windows, polling 3.11's IOCP backend deadlocked there).
fn closed_while_registered(backend: Backend, interest: Interest) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (gone, _gone_tx) = udp_pair();
    waiter.add(&gone, 1, interest).unwrap();
    let mut events = Events::with_capacity(4);
    assert_eq!(waiter.wait(&mut events, Some(Duration::ZERO)).unwrap(), 0);
    drop(gone); // closed, never deleted
    let (done_tx, done_rx) = mpsc::channel();
    let member = std::thread::spawn(move || {
        let mut events = Events::with_capacity(4);
        let result = waiter.wait(&mut events, Some(Duration::from_millis(200)));
        done_tx.send(result.map(|n| n > 0)).unwrap();
        waiter
    });
    let result = done_rx
        .recv_timeout(WAIT_BOUND)
        .expect("wait hung after a registered socket was closed");
    eprintln!("{backend:?} {interest:?}: wait after the close returned {result:?}");
    result.expect("wait failed after a registered socket was closed");
    let mut waiter = member.join().unwrap();
    let (rx, tx) = udp_pair();
    waiter.add(&rx, 0, interest).unwrap();
    send_msg(&tx, 42);
    // Where the poller is poll(2), the closed descriptor is still reported (POLLNVAL) until it
    // is deleted, which only its number could do now; epoll, kqueue and herdless on Windows
    // forgot it. So: the new socket's event is there, whatever else is.
    assert!(
        wait_keys(&mut waiter, 4).contains(&0),
        "the waiter stopped working"
    );
    assert_eq!(recv_msg(&rx), Some(42), "the queued message was lost");
    waiter.delete(&rx).unwrap();
}

fn closed_plain_socket_does_not_hang(backend: Backend) {
    closed_while_registered(backend, Interest::READABLE);
}

fn closed_exclusive_socket_does_not_hang(backend: Backend) {
    closed_while_registered(backend, Interest::READABLE.exclusive());
}

every_backend!(
    refusals_are_typed_and_harmless,
    closed_plain_socket_does_not_hang,
    closed_exclusive_socket_does_not_hang,
);
