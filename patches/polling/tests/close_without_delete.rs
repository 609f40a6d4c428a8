//! A socket closed while registered, without `delete` first: the next `wait` must still return.
//!
//! On Windows the IOCP backend sees the close as an AFD `LOCAL_CLOSE` event and deletes the
//! socket itself; it used to do so while holding the socket's lock, which `begin_delete` takes
//! again, so the waiting thread deadlocked on its own lock and `wait` never returned.

use std::net::{TcpListener, UdpSocket};
use std::sync::mpsc;
use std::time::Duration;

use polling::{Event, Events, Poller};

/// One `wait` that returns at once: the backend starts watching what was added (on Windows,
/// an AFD poll is submitted for the socket only now).
fn arm(poller: &Poller) {
    let mut events = Events::new();
    poller.wait(&mut events, Some(Duration::ZERO)).unwrap();
}

/// Runs one `wait` with a short timeout in another thread; fails if it does not come back.
fn wait_returns(poller: Poller) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut events = Events::new();
        let result = poller.wait(&mut events, Some(Duration::from_millis(100)));
        tx.send(result.map(|_| events.len())).unwrap();
    });
    let result = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("wait did not return after a registered socket was closed");
    result.expect("wait failed");
}

#[test]
fn closed_udp_socket() {
    let poller = Poller::new().unwrap();
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    // SAFETY: the socket is closed without being deleted on purpose: that is the case tested.
    unsafe { poller.add(&socket, Event::readable(1)).unwrap() };
    arm(&poller);
    drop(socket);
    wait_returns(poller);
}

#[test]
fn closed_tcp_listener() {
    let poller = Poller::new().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    // SAFETY: as above.
    unsafe { poller.add(&listener, Event::readable(1)).unwrap() };
    arm(&poller);
    drop(listener);
    wait_returns(poller);
}
