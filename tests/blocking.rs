//! A blocking descriptor registered `exclusive` is refused with `Error::BlockingDescriptor`, on
//! both backends: a pipe, a socket pair, a listening socket and (Linux) a POSIX message queue.
//! The refusal changes nothing (the waiter's other registration still delivers its message, a
//! `modify` to exclusive leaves the old registration working); the same descriptor, once set
//! non-blocking, is accepted and delivers its event. Without `exclusive` (one event round
//! robin alone included) a blocking descriptor is accepted: it may be a member's own. What the
//! kernel cannot watch at all keeps its own error, blocking or not.

// Unix only: pipes, fcntl and (on Linux) message queues; Windows cannot read a socket's mode.
#![cfg(unix)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use herdless::{Backend, Error, Events, Group, Interest, Waiter};
use herdless_fixtures::{every_backend, pipe, set_nonblocking, Blocking};

/// Waits (bounded) and returns the keys handed out.
fn keys(waiter: &mut Waiter) -> Vec<usize> {
    let mut events = Events::with_capacity(8);
    waiter
        .wait(&mut events, Some(Duration::from_secs(10)))
        .unwrap();
    events.iter().map(|e| e.key).collect()
}

/// Is `fd` non-blocking? (the test's own check of what it set up)
fn nonblocking(fd: RawFd) -> bool {
    // SAFETY: F_GETFL on a descriptor the caller holds open.
    unsafe { libc::fcntl(fd, libc::F_GETFL) & libc::O_NONBLOCK != 0 }
}

/// One blocking descriptor through every check. `ready` makes it readable (writes to it, or
/// connects to it), `tell` says what it is in the messages.
fn refused_then_accepted(
    backend: Backend,
    tell: &str,
    fd: BorrowedFd<'_>,
    ready: &mut dyn FnMut(),
) {
    assert!(!nonblocking(fd.as_raw_fd()), "{tell}: set up blocking");
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    // Another registration, with a message queued, that must not be disturbed.
    let (other_rx, other_tx) = pipe(Blocking::WriteEnd).unwrap();
    waiter
        .add(&other_rx, 9, Interest::READABLE.exclusive())
        .unwrap();
    for interest in [
        Interest::READABLE.exclusive(),
        Interest::READABLE.exclusive().one_event_round_robin(),
    ] {
        match waiter.add(&fd, 1, interest) {
            Err(Error::BlockingDescriptor { fd: named }) => {
                assert_eq!(
                    named,
                    fd.as_raw_fd(),
                    "{tell}: the error names the descriptor"
                );
            }
            other => panic!("{tell} {interest:?}: expected BlockingDescriptor, got {other:?}"),
        }
    }
    let text = waiter
        .add(&fd, 1, Interest::READABLE.exclusive())
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("set_nonblocking(true)") && text.contains("O_NONBLOCK"),
        "{tell}: the message names the fix: {text}"
    );
    eprintln!("{backend:?} {tell}: {text}");
    // Not exclusive: accepted (a member's own descriptor), one event round robin alone too;
    // then a change to exclusive is refused and leaves the registration as it was.
    waiter
        .add(&fd, 2, Interest::READABLE.one_event_round_robin())
        .unwrap();
    assert!(matches!(
        waiter.modify(&fd, 3, Interest::READABLE.exclusive()),
        Err(Error::BlockingDescriptor { .. })
    ));
    ready();
    herdless_fixtures::write_all(other_tx.as_raw_fd(), &7u64.to_ne_bytes()).unwrap();
    let mut seen = Vec::new();
    for _ in 0..8 {
        let more = keys(&mut waiter);
        assert!(!more.is_empty(), "{tell}: an event went missing");
        seen.extend(more);
        seen.sort_unstable();
        seen.dedup();
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(seen, [2, 9], "{tell}: both old registrations still deliver");
    waiter.delete(&fd).unwrap();
    // Non-blocking now: accepted, and it delivers (the readiness is still there).
    set_nonblocking(fd.as_raw_fd()).unwrap();
    waiter.add(&fd, 4, Interest::READABLE.exclusive()).unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.extend(keys(&mut waiter));
        if seen.contains(&4) {
            break;
        }
    }
    assert!(seen.contains(&4), "{tell}: accepted once non-blocking");
    waiter.delete(&fd).unwrap();
    waiter.delete(&other_rx).unwrap();
}

fn a_blocking_pipe(backend: Backend) {
    let (rx, tx) = pipe(Blocking::Both).unwrap();
    refused_then_accepted(backend, "pipe", rx.as_fd(), &mut || {
        herdless_fixtures::write_all(tx.as_raw_fd(), b"x").unwrap();
    });
}

fn a_blocking_socket_pair(backend: Backend) {
    let (mut tx, rx) = UnixStream::pair().unwrap();
    refused_then_accepted(backend, "socket pair", rx.as_fd(), &mut || {
        tx.write_all(b"x").unwrap();
    });
}

fn a_blocking_listener(backend: Backend) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut client = None;
    refused_then_accepted(backend, "listener", listener.as_fd(), &mut || {
        client = Some(std::net::TcpStream::connect(addr).unwrap());
    });
    assert!(client.is_some());
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn a_blocking_message_queue(backend: Backend) {
    use nix::mqueue::{mq_open, mq_send, mq_unlink, MQ_OFlag, MqAttr};
    use nix::sys::stat::Mode;
    let name = format!("/herdless-blocking-{}-{backend:?}", std::process::id());
    let _ = mq_unlink(name.as_str());
    let attr = MqAttr::new(0, 4, 8, 0);
    let mode = Mode::S_IRUSR | Mode::S_IWUSR;
    let mq = match mq_open(
        name.as_str(),
        MQ_OFlag::O_CREAT | MQ_OFlag::O_RDWR,
        mode,
        Some(&attr),
    ) {
        Ok(mq) => mq,
        Err(e) => {
            eprintln!("SKIPPED: no POSIX message queue on this system (mq_open: {e})");
            println!("SKIPPED: no POSIX message queue on this system (mq_open: {e})");
            return;
        }
    };
    mq_unlink(name.as_str()).unwrap();
    refused_then_accepted(backend, "message queue", mq.as_fd(), &mut || {
        mq_send(&mq, &1u64.to_ne_bytes(), 0).unwrap();
    });
    // mq_setattr's O_NONBLOCK is the descriptor's file flag: fcntl sees it, so does herdless.
    let blocking = mq_open(
        name.as_str(),
        MQ_OFlag::O_CREAT | MQ_OFlag::O_RDWR,
        mode,
        Some(&attr),
    )
    .unwrap();
    mq_unlink(name.as_str()).unwrap();
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let exclusive = Interest::READABLE.exclusive();
    assert!(matches!(
        waiter.add(&blocking, 0, exclusive),
        Err(Error::BlockingDescriptor { .. })
    ));
    nix::mqueue::mq_set_nonblock(&blocking).unwrap();
    assert!(
        nonblocking(blocking.as_fd().as_raw_fd()),
        "mq_setattr sets O_NONBLOCK"
    );
    waiter.add(&blocking, 0, exclusive).unwrap();
    waiter.delete(&blocking).unwrap();
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn a_blocking_message_queue(_backend: Backend) {
    eprintln!("SKIPPED: POSIX message queues are descriptors on Linux only");
    println!("SKIPPED: POSIX message queues are descriptors on Linux only");
}

/// What no poller takes keeps its own error, even blocking: a regular file, /dev/null.
fn unwatchable_stays_unwatchable(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let file = tempfile_in_target();
    let null: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
    for (tell, fd) in [("regular file", file.as_fd()), ("/dev/null", null.as_fd())] {
        assert!(!nonblocking(fd.as_raw_fd()));
        match waiter.add(&fd, 0, Interest::READABLE.exclusive()) {
            Err(Error::UnwatchableDescriptor { .. }) => {}
            // kqueue watches regular files and devices, and so does poll(2) (polling's poll
            // backend, which CI runs on Linux too): then the emulation takes it.
            Ok(()) if !cfg!(target_os = "linux") || cfg!(polling_test_poll_backend) => {
                waiter.delete(&fd).unwrap()
            }
            other => panic!("{backend:?} {tell}: expected UnwatchableDescriptor, got {other:?}"),
        }
    }
}

/// A regular file of this test's own (removed at once; the descriptor keeps it), named apart
/// from the one the same test makes at once on the other backend.
fn tempfile_in_target() -> OwnedFd {
    static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = MADE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let path = std::env::temp_dir().join(format!("herdless-blocking-{}-{n}", std::process::id()));
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(b"x").unwrap();
    let file = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let mut check = [0u8; 1];
    (&file).read_exact(&mut check).unwrap();
    file.into()
}

every_backend!(
    a_blocking_pipe,
    a_blocking_socket_pair,
    a_blocking_listener,
    a_blocking_message_queue,
    unwatchable_stays_unwatchable,
);
