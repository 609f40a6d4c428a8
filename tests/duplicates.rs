//! A duplicate of a registered descriptor (a `dup`, `dup2` or `F_DUPFD` of it: the same open
//! file under another number) gets the same answer on both backends: refused with
//! `AlreadyRegistered`, naming the number the file is registered under, whenever either
//! registration is exclusive, and nothing changes (the registered descriptor's messages are
//! still read once each); without `exclusive` on either side the two are two registrations,
//! each with its events, as epoll has them. A pipe's two ends are two files, and so are two
//! eventfds (one anonymous inode for all of them).

// Unix only: pipes and dup.
#![cfg(unix)]

use std::os::fd::{AsRawFd, OwnedFd};

use herdless::{Backend, Error, Group, Interest};
use herdless_fixtures::{every_backend, pipe, read_exact, wait_keys, write_all, Blocking};

fn duplicate(fd: &OwnedFd) -> OwnedFd {
    fd.try_clone().expect("dup")
}

/// Checks that `refused` names `copy` as a duplicate of `registered`, in the error and in its
/// message.
fn refused_as_duplicate(refused: herdless::Result<()>, copy: &OwnedFd, registered: &OwnedFd) {
    let (copy, registered) = (copy.as_raw_fd(), registered.as_raw_fd());
    match refused {
        Err(e @ Error::AlreadyRegistered { .. }) => {
            let message = e.to_string();
            let named = match &e {
                Error::AlreadyRegistered { fd, registered } => (*fd, *registered),
                _ => unreachable!(),
            };
            assert_eq!(named, (copy, registered), "{e:?}");
            assert!(
                message.contains(&format!(
                    "descriptor {copy} is a duplicate of descriptor {registered}"
                )) && message.contains("modify"),
                "{message}"
            );
        }
        other => panic!("expected AlreadyRegistered, got {other:?}"),
    }
}

fn a_duplicate_of_an_exclusive_registration_is_refused(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, tx) = pipe(Blocking::WriteEnd).unwrap();
    waiter.add(&rx, 1, Interest::SHARED).unwrap();
    let copy = duplicate(&rx);
    for interest in [Interest::SHARED, Interest::READABLE] {
        refused_as_duplicate(waiter.add(&copy, 2, interest), &copy, &rx);
    }
    // Nothing changed: one message, one event, under the registered key.
    write_all(tx.as_raw_fd(), b"x").unwrap();
    assert_eq!(wait_keys(&mut waiter, 4), [1]);
    read_exact(rx.as_raw_fd(), &mut [0u8; 1]).unwrap();
    waiter.consumed(1).unwrap();
    // The same number again names itself.
    match waiter.add(&rx, 3, Interest::SHARED) {
        Err(Error::AlreadyRegistered { fd, registered }) => {
            assert_eq!((fd, registered), (rx.as_raw_fd(), rx.as_raw_fd()))
        }
        other => panic!("expected AlreadyRegistered, got {other:?}"),
    }
    // Once the original is deleted, the duplicate may take its place.
    waiter.delete(&rx).unwrap();
    waiter.add(&copy, 2, Interest::SHARED).unwrap();
    write_all(tx.as_raw_fd(), b"y").unwrap();
    assert_eq!(wait_keys(&mut waiter, 4), [2]);
    waiter.delete(&copy).unwrap();
}

fn an_exclusive_duplicate_of_a_plain_registration_is_refused(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, _tx) = pipe(Blocking::WriteEnd).unwrap();
    waiter.add(&rx, 1, Interest::READABLE).unwrap();
    let copy = duplicate(&rx);
    refused_as_duplicate(waiter.add(&copy, 2, Interest::SHARED), &copy, &rx);
    // A modify to exclusive of a plain duplicate is the same registration twice too.
    waiter.add(&copy, 2, Interest::READABLE).unwrap();
    refused_as_duplicate(waiter.modify(&copy, 2, Interest::SHARED), &copy, &rx);
    waiter.delete(&copy).unwrap();
    waiter.delete(&rx).unwrap();
}

fn plain_duplicates_are_two_registrations(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, tx) = pipe(Blocking::WriteEnd).unwrap();
    let copy = duplicate(&rx);
    waiter.add(&rx, 1, Interest::READABLE).unwrap();
    waiter.add(&copy, 2, Interest::READABLE).unwrap();
    write_all(tx.as_raw_fd(), b"x").unwrap();
    let mut keys = wait_keys(&mut waiter, 4);
    keys.sort_unstable();
    assert_eq!(keys, [1, 2], "each registration has its event, as in epoll");
    waiter.delete(&rx).unwrap();
    waiter.delete(&copy).unwrap();
}

fn the_two_ends_of_a_pipe_are_two_files(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, tx) = pipe(Blocking::Both).unwrap();
    for fd in [&rx, &tx] {
        herdless_fixtures::set_nonblocking(fd.as_raw_fd()).unwrap();
    }
    waiter.add(&rx, 1, Interest::SHARED).unwrap();
    waiter
        .add(
            &tx,
            2,
            Interest::WRITABLE.exclusive().one_event_round_robin(),
        )
        .unwrap();
    waiter.delete(&rx).unwrap();
    waiter.delete(&tx).unwrap();
}

every_backend!(
    a_duplicate_of_an_exclusive_registration_is_refused,
    an_exclusive_duplicate_of_a_plain_registration_is_refused,
    plain_duplicates_are_two_registrations,
    the_two_ends_of_a_pipe_are_two_files,
);

/// Native only (the emulation refuses an exclusive eventfd, which has no identity it can share
/// between members): eventfds share one anonymous inode, so only the kernel tells a duplicate
/// (refused) from another eventfd (accepted).
#[cfg(any(target_os = "linux", target_os = "android"))]
#[test]
fn eventfds_are_told_apart_by_the_kernel() {
    use std::os::fd::FromRawFd;
    let Some(backend) = herdless_fixtures::native_backend() else {
        return;
    };
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    // SAFETY: eventfd returns fresh descriptors that we own from here on.
    let (a, b) = unsafe {
        (
            OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_NONBLOCK)),
            OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_NONBLOCK)),
        )
    };
    waiter.add(&a, 1, Interest::SHARED).unwrap();
    waiter.add(&b, 2, Interest::SHARED).unwrap();
    let copy = duplicate(&a);
    refused_as_duplicate(waiter.add(&copy, 3, Interest::SHARED), &copy, &a);
}
