//! Bad input: every refusal is a typed error that names the problem, never a panic, and the
//! waiter keeps working afterwards (the next valid operation succeeds, no message is lost).

// Linux only: pipes and /proc; the portable bad-input checks are tests/portable_bad_input.rs, and tests/common uses pipe2, gettid and /proc.
#![cfg(any(target_os = "linux", target_os = "android"))]

mod common;

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd};
use std::time::Duration;

use common::*;
use herdless::{Backend, Error, Events, Group, Interest};

/// A waiter with one working registration (key 0) and one message queued on it.
fn working_waiter(backend: Backend) -> (Group, herdless::Waiter, [std::os::fd::OwnedFd; 2]) {
    let group = Group::builder()
        .backend(backend)
        .max_members(2)
        .build()
        .unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, tx) = pipe();
    waiter.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
    write_msg(tx.as_raw_fd(), 42);
    (group, waiter, [rx, tx])
}

/// The waiter still works and the queued message is still there.
fn still_works(waiter: &mut herdless::Waiter, rx: &std::os::fd::OwnedFd) {
    assert_eq!(wait_keys(waiter, 4).len(), 1);
    assert_eq!(
        read_msg(rx.as_raw_fd()),
        Some(Some(42)),
        "the queued message was lost"
    );
}

fn refusals_are_typed_and_harmless(backend: Backend) {
    let (group, mut waiter, [rx, _tx]) = working_waiter(backend);
    let check = |what: &str, res: herdless::Result<()>, ok: fn(&Error) -> bool| {
        let err = res.expect_err(what);
        assert!(ok(&err), "{what}: unexpected {err:?}");
        let text = err.to_string();
        assert!(!text.is_empty());
        let io: std::io::Error = err.into();
        assert!(!io.to_string().is_empty());
        eprintln!("{backend:?} {what}: {text}");
    };
    // A descriptor number that was open and is closed now. Moved high first: other tests of
    // this process open descriptors meanwhile, and they get the lowest free numbers.
    let closed = {
        let (r, _w) = pipe();
        // SAFETY: rlimit is plain data, filled by getrlimit.
        let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
        // SAFETY: a valid resource and a pointer to a live rlimit.
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
            0
        );
        let near_top = limit.rlim_cur.min(1 << 20).saturating_sub(16) as libc::c_int;
        // SAFETY: duplicates our own open descriptor; the copy is closed right away below.
        let high = unsafe { libc::fcntl(r.as_raw_fd(), libc::F_DUPFD_CLOEXEC, near_top) };
        assert!(high >= 0, "F_DUPFD: {}", std::io::Error::last_os_error());
        // SAFETY: closes the copy we just made and nothing else holds.
        unsafe { libc::close(high) };
        high
    };
    // SAFETY: deliberately names a closed descriptor; herdless must refuse it.
    let closed = unsafe { BorrowedFd::borrow_raw(closed) };
    check(
        "closed fd",
        waiter.add(&closed, 1, Interest::READABLE),
        |e| matches!(e, Error::BadDescriptor { .. }),
    );
    // SAFETY: as above, a number far beyond any open descriptor.
    let never = unsafe { BorrowedFd::borrow_raw(1_000_000) };
    check(
        "never-opened fd",
        waiter.add(&never, 1, Interest::READABLE),
        |e| matches!(e, Error::BadDescriptor { .. }),
    );
    let file = std::fs::File::open("/proc/self/exe").unwrap();
    check(
        "regular file",
        waiter.add(&file, 1, Interest::READABLE),
        |e| matches!(e, Error::UnwatchableDescriptor { .. }),
    );
    let dir = std::fs::File::open("/").unwrap();
    check(
        "directory",
        waiter.add(&dir, 1, Interest::READABLE.exclusive()),
        |e| matches!(e, Error::UnwatchableDescriptor { .. }),
    );
    check("added twice", waiter.add(&rx, 1, Interest::READABLE), |e| {
        matches!(e, Error::AlreadyRegistered { .. })
    });
    let (other, _keep) = pipe();
    check(
        "modify never added",
        waiter.modify(&other, 1, Interest::READABLE),
        |e| matches!(e, Error::NotRegistered { .. }),
    );
    check("delete never added", waiter.delete(&other), |e| {
        matches!(e, Error::NotRegistered { .. })
    });
    check(
        "refused combination",
        waiter.add(&other, 1, Interest::PRIORITY.exclusive()),
        |e| matches!(e, Error::InvalidInterest { .. }),
    );
    let zero = waiter.wait(&mut Events::with_capacity(0), None).map(drop);
    check("Events of capacity 0", zero, |e| {
        matches!(e, Error::ZeroCapacity)
    });
    let second = group.join().unwrap();
    check(
        "more members than the group allows",
        group.join().map(drop),
        |e| matches!(e, Error::GroupFull { max: 2 }),
    );
    drop(second);
    still_works(&mut waiter, &rx);
    waiter.delete(&rx).unwrap();
}

fn builder_settings_are_checked(backend: Backend) {
    for bad in [0, herdless::MAX_MEMBERS_LIMIT + 1] {
        let res = Group::builder().backend(backend).max_members(bad).build();
        assert!(matches!(res, Err(Error::InvalidSetting { .. })), "{res:?}");
    }
}

/// A timeout too long to add to the clock is no deadline, not a panic.
fn endless_timeout_is_no_deadline(backend: Backend) {
    let (_group, mut waiter, [rx, _tx]) = working_waiter(backend);
    let mut events = Events::with_capacity(4);
    assert_eq!(waiter.wait(&mut events, Some(Duration::MAX)).unwrap(), 1);
    assert_eq!(read_msg(rx.as_raw_fd()), Some(Some(42)));
}

/// A notifier of a member that left does not wake the member that took its slot:
/// nobody is woken and `notify` returns `Ok` (a shutdown goes on past a worker that ended).
fn stale_notifier_stays_quiet(backend: Backend) {
    let group = Group::builder()
        .backend(backend)
        .max_members(1)
        .build()
        .unwrap();
    let old = group.join().unwrap();
    let notifier = old.notifier();
    drop(old);
    notifier.notify().unwrap(); // nobody to wake: not an error
    let mut new = group.join().unwrap();
    notifier.notify().unwrap();
    let mut events = Events::with_capacity(1);
    let timeout = Duration::from_millis(20);
    let start = std::time::Instant::now();
    assert_eq!(new.wait(&mut events, Some(timeout)).unwrap(), 0);
    assert!(
        start.elapsed() >= timeout,
        "the old notifier ended the new member's wait early"
    );
    let stats = group.stats();
    assert_eq!(
        stats[0].wakeups, 0,
        "the old notifier woke the new member: {stats:?}"
    );
    // The new member's own notifier still works.
    new.notifier().notify().unwrap();
    assert_eq!(new.wait(&mut events, Some(WAIT_BOUND)).unwrap(), 0);
}

/// Notifiers of members that left, notified without pause by two threads, while members join
/// the group's one slot, wait 10 ms and leave, round after round: a notifier that checked its
/// member just before it left must not mark or ring the member that joins next. A wait with a
/// timeout that returns 0 before its deadline, not interrupted, was notified (a loaded machine
/// only makes waits late): none may, nor may its kernel wait return at all (it watches
/// nothing); and no notify of a left member may report success.
fn stale_notifiers_never_wake_the_next_occupant(backend: Backend) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
    use std::sync::{Arc, Mutex};
    const ROUNDS: usize = 300;
    let group = Group::builder()
        .backend(backend)
        .max_members(1)
        .build()
        .unwrap();
    let stale: Arc<Mutex<Vec<herdless::Notifier>>> = Arc::default(); // of left members
    let stop = Arc::new(AtomicBool::new(false));
    let notified = Arc::new(AtomicU64::new(0));
    let hammers: Vec<_> = (0..2)
        .map(|_| {
            let (stale, stop) = (stale.clone(), stop.clone());
            let notified = notified.clone();
            std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    // The member that left last: the one whose slot is being joined now.
                    let Some(last) = stale.lock().unwrap().last().cloned() else {
                        std::thread::yield_now();
                        continue;
                    };
                    for _ in 0..256 {
                        last.notify()
                            .expect("a notify of a left member is not an error");
                    }
                    notified.fetch_add(256, SeqCst);
                }
            })
        })
        .collect();
    let timeout = Duration::from_millis(10);
    let (mut early, mut woken) = (0, 0);
    let mut events = Events::with_capacity(1);
    for _ in 0..ROUNDS {
        let mut member = group.join().unwrap();
        let start = std::time::Instant::now();
        let n = member.wait(&mut events, Some(timeout)).unwrap();
        if n == 0 && !events.interrupted() && start.elapsed() < timeout {
            early += 1;
        }
        // It watches nothing: any return of its kernel wait was a ring meant for another.
        woken += group.stats()[0].wakeups;
        let notifier = member.notifier();
        drop(member);
        stale.lock().unwrap().push(notifier);
    }
    stop.store(true, SeqCst);
    for h in hammers {
        h.join().unwrap();
    }
    let notified = notified.load(SeqCst);
    println!(
        "{backend:?}: {ROUNDS} rounds, {early} waits ended early, {woken} kernel wake-ups, \
         {notified} notifies of left members"
    );
    assert!(notified > 0, "the notifiers never ran");
    assert_eq!(early, 0, "a notifier of a left member woke the next one");
    assert_eq!(
        woken, 0,
        "a ring of a left member's notifier reached the next one"
    );
}

/// What only the emulation refuses, because it shares one token per open file across
/// members: an anonymous-inode descriptor (an eventfd) as exclusive. (A duplicate of a
/// registered descriptor is refused alike on both backends: `tests/duplicates.rs`.)
fn anonymous_descriptors_exclusive(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    // SAFETY: eventfd returns a fresh descriptor that we own from here on.
    let efd = unsafe { std::os::fd::OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_NONBLOCK)) };
    let anonymous = waiter.add(&efd, 1, Interest::READABLE.exclusive());
    if backend == Backend::Emulated {
        assert!(
            matches!(anonymous, Err(Error::UnwatchableDescriptor { .. })),
            "{anonymous:?}"
        );
        // Not exclusive, an eventfd is fine.
        waiter.add(&efd, 1, Interest::READABLE).unwrap();
    } else {
        // The kernel keys exclusive entries by open file: fine natively.
        anonymous.unwrap();
    }
}

every_backend!(
    refusals_are_typed_and_harmless,
    builder_settings_are_checked,
    endless_timeout_is_no_deadline,
    stale_notifier_stays_quiet,
    stale_notifiers_never_wake_the_next_occupant,
    anonymous_descriptors_exclusive,
);
