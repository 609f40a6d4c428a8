//! What an `Event` says, the same on both backends and for exclusive registrations as for
//! plain ones: data to read is readable and nothing else; a writer that left is readable (a
//! read returns 0) and read-closed, never an error; a reader that left makes a write end
//! writable, in error and write-closed; a registration is told readable or writable only for
//! what it asked; urgent TCP data is priority (registered readable too: polling's poll(2)
//! backend asks `POLLPRI` only with readability). So a loop can stop watching a FIFO whose
//! writer left instead of reading its end of file at every wait.

// Unix only: pipes, sockets' urgent data.
#![cfg(unix)]

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;

use herdless::{Backend, Event, Events, Group, Interest};
use herdless_fixtures::{every_backend, pipe, read_exact, write_all, Blocking, WAIT_BOUND};

/// The one event of a bounded wait.
fn one_event(waiter: &mut herdless::Waiter) -> Event {
    let mut events = Events::with_capacity(4);
    waiter.wait(&mut events, Some(WAIT_BOUND)).unwrap();
    let all: Vec<Event> = events.iter().collect();
    assert_eq!(all.len(), 1, "{all:?}");
    all[0]
}

/// (readable, writable, priority, read closed, write closed, error)
fn flags(e: &Event) -> [bool; 6] {
    [
        e.is_readable(),
        e.is_writable(),
        e.is_priority(),
        e.is_read_closed(),
        e.is_write_closed(),
        e.is_error(),
    ]
}

const F: bool = false;
const T: bool = true;

fn a_pipe_read_end(backend: Backend) {
    for interest in [Interest::READABLE, Interest::SHARED] {
        let group = Group::builder().backend(backend).build().unwrap();
        let mut waiter = group.join().unwrap();
        let (rx, tx) = pipe(Blocking::WriteEnd).unwrap();
        waiter.add(&rx, 1, interest).unwrap();
        write_all(tx.as_raw_fd(), b"x").unwrap();
        let data = one_event(&mut waiter);
        assert_eq!(
            flags(&data),
            [T, F, F, F, F, F],
            "data, {interest:?}: {data:?}"
        );
        read_exact(rx.as_raw_fd(), &mut [0u8; 1]).unwrap();
        waiter.consumed(1).unwrap();
        drop(tx); // the writer leaves
        let hangup = one_event(&mut waiter);
        assert_eq!(hangup.key, 1);
        assert_eq!(
            flags(&hangup),
            [T, F, F, T, T, F],
            "hang-up, {interest:?}: {hangup:?}"
        );
        waiter.consumed(1).unwrap();
        waiter.delete(&rx).unwrap();
    }
}

fn a_pipe_write_end(backend: Backend) {
    for interest in [
        Interest::WRITABLE,
        Interest::WRITABLE.exclusive().one_event_round_robin(),
    ] {
        let group = Group::builder().backend(backend).build().unwrap();
        let mut waiter = group.join().unwrap();
        let (rx, tx) = pipe(Blocking::Both).unwrap();
        herdless_fixtures::set_nonblocking(tx.as_raw_fd()).unwrap();
        waiter.add(&tx, 2, interest).unwrap();
        let room = one_event(&mut waiter);
        assert_eq!(
            flags(&room),
            [F, T, F, F, F, F],
            "room, {interest:?}: {room:?}"
        );
        waiter.consumed(2).unwrap();
        drop(rx); // the reader leaves
        let gone = one_event(&mut waiter);
        assert_eq!(
            flags(&gone),
            [F, T, F, F, T, T],
            "reader gone, {interest:?}: {gone:?}"
        );
        waiter.consumed(2).unwrap();
        waiter.delete(&tx).unwrap();
    }
}

fn a_socket_whose_peer_closed(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    waiter.add(&a, 3, Interest::READABLE).unwrap();
    drop(b);
    let closed = one_event(&mut waiter);
    assert_eq!(flags(&closed), [T, F, F, T, T, F], "{closed:?}");
    waiter.delete(&a).unwrap();
}

fn urgent_data_is_priority(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    server.set_nonblocking(true).unwrap();
    waiter
        .add(&server, 4, Interest::READABLE | Interest::PRIORITY)
        .unwrap();
    client.write_all(b"n").unwrap();
    // SAFETY: sends one byte from a live buffer on our own socket.
    let sent = unsafe { libc::send(client.as_raw_fd(), b"u".as_ptr().cast(), 1, libc::MSG_OOB) };
    assert_eq!(sent, 1, "{}", std::io::Error::last_os_error());
    let urgent = one_event(&mut waiter);
    assert_eq!(urgent.key, 4);
    assert!(
        urgent.is_priority() && urgent.is_readable() && !urgent.is_writable(),
        "{urgent:?}"
    );
    assert!(!urgent.is_read_closed() && !urgent.is_error(), "{urgent:?}");
    waiter.delete(&server).unwrap();
}

every_backend!(
    a_pipe_read_end,
    a_pipe_write_end,
    a_socket_whose_peer_closed,
    urgent_data_is_priority,
);
