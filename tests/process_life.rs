//! Real process life, on both backends: signals during waits (SIGALRM every millisecond, with
//! and without `SA_RESTART`), a shared registered descriptor closed, `dup2`'d over, closed and
//! its number added again, or closed and deleted, in one of several forked members while the
//! others serve, and members busy polling with zero timeouts. Nothing is lost or stranded,
//! nothing panics or spins, and every timeout holds within the scheduling noise the test
//! measures beside it (a plain `poll(2)` under the same signals), not an absolute bound.

// Linux only: forked members, setitimer, and tests/common uses pipe2, gettid and /proc.
#![cfg(any(target_os = "linux", target_os = "android"))]

mod common;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use common::*;
use herdless::{Backend, Events, Group, Interest, Waiter};
use herdless_fixtures::SharedCounters;

/// What every timing bound of this file allows beyond the noise it measures: the issue's
/// target (a 300 ms wait back within 300 ms + 20 ms).
const SLACK: Duration = Duration::from_millis(20);

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_alarm(_: libc::c_int) {}

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, SeqCst);
}

/// Installs `handler` for `signal`, with or without `SA_RESTART`.
fn install(signal: libc::c_int, handler: extern "C" fn(libc::c_int), restart: bool) {
    // SAFETY: a zeroed sigaction with a handler that only stores an atomic (or nothing).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as *const () as usize;
        action.sa_flags = if restart { libc::SA_RESTART } else { 0 };
        assert_eq!(libc::sigaction(signal, &action, std::ptr::null_mut()), 0);
    }
}

/// SIGALRM to this process every `every` (ITIMER_REAL); zero stops it.
fn alarm_every(every: Duration) {
    let tv = libc::timeval {
        tv_sec: every.as_secs() as libc::time_t,
        tv_usec: every.subsec_micros() as libc::suseconds_t,
    };
    let timer = libc::itimerval {
        it_interval: tv,
        it_value: tv,
    };
    // SAFETY: sets this process's real-time interval timer from a live struct.
    assert_eq!(
        unsafe { libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) },
        0
    );
}

/// How late a loop of waits ends after `total`, each wait given the time left to its
/// deadline: `wait_for(left)` waits at most `left`, and says whether it returned early (a
/// signal). Returns (lateness, early returns).
fn lateness(total: Duration, mut wait_for: impl FnMut(Duration) -> bool) -> (Duration, u64) {
    let start = Instant::now();
    let deadline = start + total;
    let mut early = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || !wait_for(left) {
            break;
        }
        early += 1;
    }
    (start.elapsed().saturating_sub(total), early)
}

/// A plain `poll(2)` of nothing for `left` (the control): did a signal end it early?
fn poll_nothing(left: Duration) -> bool {
    let ms = left.as_nanos().div_ceil(1_000_000) as libc::c_int;
    // SAFETY: polls no descriptor, only sleeps.
    unsafe { libc::poll(std::ptr::null_mut(), 0, ms) == -1 }
}

/// SIGALRM every millisecond while a member waits 300 ms on a pipe nobody writes: one `wait`
/// returns within 300 ms (early, `interrupted`), and a loop that waits again with the time left
/// ends within the noise of a plain `poll(2)` loop under the same signals + 20 ms. Run in a
/// forked child, so that the signals reach no other test.
fn timeouts_under_alarms(backend: Backend, restart: bool) {
    const TIMEOUT: Duration = Duration::from_millis(300);
    let _one = one_fork_at_a_time();
    // [one wait µs, loop lateness µs, control lateness µs, interruptions, control's]
    let figures = SharedCounters::new(5).unwrap();
    let child = fork_child(|| {
        install(libc::SIGALRM, on_alarm, restart);
        alarm_every(Duration::from_millis(1));
        let group = Group::builder().backend(backend).build().unwrap();
        let mut waiter = group.join().unwrap();
        let (rx, _tx) = pipe();
        waiter.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
        let mut events = Events::with_capacity(4);
        let start = Instant::now();
        assert_eq!(waiter.wait(&mut events, Some(TIMEOUT)).unwrap(), 0);
        figures
            .get(0)
            .store(start.elapsed().as_micros() as u64, SeqCst);
        let (late, early) = lateness(TIMEOUT, |left| {
            assert_eq!(waiter.wait(&mut events, Some(left)).unwrap(), 0);
            events.interrupted()
        });
        figures.get(1).store(late.as_micros() as u64, SeqCst);
        figures.get(3).store(early, SeqCst);
        let (late, early) = lateness(TIMEOUT, poll_nothing);
        figures.get(2).store(late.as_micros() as u64, SeqCst);
        figures.get(4).store(early, SeqCst);
        alarm_every(Duration::ZERO);
        0
    });
    assert_eq!(reap(child, WAIT_BOUND), 0, "the waiting child failed");
    let us = |i| Duration::from_micros(figures.get(i).load(SeqCst));
    let (one, late, noise) = (us(0), us(1), us(2));
    eprintln!(
        "{backend:?} SIGALRM every 1 ms (SA_RESTART {restart}): one wait({TIMEOUT:?}) {one:?}, \
         a loop with the time left {late:?} late after {} interruptions; plain poll(2) {noise:?} \
         late after {}",
        figures.get(3).load(SeqCst),
        figures.get(4).load(SeqCst)
    );
    let bound = SLACK + 2 * noise;
    assert!(one <= TIMEOUT + bound, "one wait took {one:?}");
    assert!(
        late <= bound,
        "the loop ended {late:?} late (noise {noise:?})"
    );
    // (Through `polling`'s poll(2) backend a signal ends no wait early: `polling` retries
    // with the time left, so only the bounds above hold there.)
    if !(backend == Backend::Emulated && cfg!(polling_test_poll_backend)) {
        assert!(figures.get(3).load(SeqCst) > 0, "no wait was interrupted");
    }
}

fn timeouts_under_alarms_no_restart(backend: Backend) {
    timeouts_under_alarms(backend, false);
}

fn timeouts_under_alarms_restart(backend: Backend) {
    timeouts_under_alarms(backend, true);
}

/// 8 forked members wait with 200 ms timeouts under SIGALRM every millisecond; SIGUSR1's
/// handler sets a stop flag. Sent to all of them, every member stops within one timeout (plus
/// the noise of a control child doing the same with a plain `poll(2)`, plus 20 ms).
fn members_stop_on_a_flag(backend: Backend, restart: bool) {
    const MEMBERS: usize = 8;
    const TIMEOUT: Duration = Duration::from_millis(200);
    let _one = one_fork_at_a_time();
    let group = Group::builder().backend(backend).build().unwrap();
    let (rx, _tx) = pipe();
    let ready = SharedCounters::new(1).unwrap();
    let child = |member: bool| {
        let (group, rx, ready) = (&group, &rx, &ready);
        fork_child(move || {
            install(libc::SIGALRM, on_alarm, restart);
            install(libc::SIGUSR1, on_stop, restart);
            alarm_every(Duration::from_millis(1));
            let mut events = Events::with_capacity(4);
            let mut waiter = member.then(|| {
                let mut w = group.join().unwrap();
                w.add(rx, 0, Interest::READABLE.exclusive()).unwrap();
                w
            });
            ready.get(0).fetch_add(1, SeqCst);
            while !STOP.load(SeqCst) {
                match &mut waiter {
                    Some(w) => {
                        w.wait(&mut events, Some(TIMEOUT)).unwrap();
                    }
                    None => {
                        poll_nothing(TIMEOUT);
                    }
                }
            }
            0
        })
    };
    let control = child(false);
    let members: Vec<_> = (0..MEMBERS).map(|_| child(true)).collect();
    let start = Instant::now();
    while ready.get(0).load(SeqCst) < MEMBERS as u64 + 1 {
        assert!(start.elapsed() < WAIT_BOUND, "the members never started");
        std::thread::sleep(Duration::from_millis(1));
    }
    let stop = |pid| {
        // SAFETY: signals our own child.
        unsafe { libc::kill(pid, libc::SIGUSR1) };
        let start = Instant::now();
        let code = reap(pid, WAIT_BOUND);
        (code, start.elapsed())
    };
    let (code, noise) = stop(control);
    assert_eq!(code, 0, "the control child failed");
    for &pid in &members {
        // SAFETY: signals our own children, all of them before any is reaped.
        unsafe { libc::kill(pid, libc::SIGUSR1) };
    }
    let start = Instant::now();
    let mut slowest = Duration::ZERO;
    for pid in members {
        let code = reap(pid, WAIT_BOUND);
        assert_eq!(code, 0, "member {pid} did not stop cleanly ({code})");
        slowest = slowest.max(start.elapsed());
    }
    eprintln!(
        "{backend:?} 8 members, SIGALRM every 1 ms (SA_RESTART {restart}): all stopped within \
         {slowest:?} of SIGUSR1 (control: {noise:?})"
    );
    let bound = TIMEOUT + SLACK + 2 * noise;
    assert!(
        slowest <= bound,
        "stopping took {slowest:?} (bound {bound:?})"
    );
}

fn members_stop_no_restart(backend: Backend) {
    members_stop_on_a_flag(backend, false);
}

fn members_stop_restart(backend: Backend) {
    members_stop_on_a_flag(backend, true);
}

/// What one member does to its copy of the shared descriptor, between reading a message and
/// saying `consumed` (where the native backend's rotation used to panic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// `close` it; the member goes on waiting.
    Close,
    /// `dup2` an always-readable pipe of its own over its number.
    Dup2,
    /// `close` it, put a new pipe of its own under the same number, and `add` that (key 2).
    CloseThenAdd,
    /// `close` it, then `delete` it (which succeeds).
    CloseThenDelete,
}

/// Shared counters of one run: one per message id (its reads), then these.
const FIGURES: usize = 6;
/// Messages read so far (all members).
const READ: usize = 0;
/// Events of the changed descriptor reported to the changing member after its change.
const STALE_EVENTS: usize = 1;
/// The changing member's waits after its change (a spin would make millions).
const WAITS_AFTER: usize = 2;
/// Events of its new pipe (`CloseThenAdd`) the changing member saw.
const NEW_EVENTS: usize = 3;
/// Whether the change was made.
const CHANGED: usize = 4;
/// Empty reads (wake-ups that found nothing), all members.
const EMPTY: usize = 5;

/// 4 forked members share a pipe registered exclusive (and a stop pipe); the producer writes
/// 200 messages one at a time, each once the last was read. At message 20 one member (the
/// first to read one from there on) makes `change` to its copy. Every message is read exactly
/// once, none waits for more than
/// `WAIT_BOUND` (a stranded one would), the changing member is never reported the changed
/// descriptor again and does not spin, and no member fails.
fn shared_descriptor_changed(backend: Backend, change: Change) {
    const MEMBERS: usize = 4;
    const MESSAGES: u64 = 200;
    const AT: u64 = 20;
    let _one = one_fork_at_a_time();
    let group = Group::builder().backend(backend).build().unwrap();
    let (rx, tx) = pipe();
    let (stop_rx, stop_tx) = pipe();
    let counts = SharedCounters::new(MESSAGES as usize + FIGURES).unwrap();
    let figure = |i: usize| counts.get(MESSAGES as usize + i);
    let parents_ends = [tx.as_raw_fd(), stop_tx.as_raw_fd()];
    let members: Vec<_> = (0..MEMBERS)
        .map(|_| {
            let (group, rx, stop_rx, counts) = (&group, &rx, &stop_rx, &counts);
            fork_child(move || {
                for fd in parents_ends {
                    // SAFETY: the child's copies of the parent's write ends, which the child
                    // never uses (its `OwnedFd`s are never dropped: it leaves with _exit).
                    unsafe { libc::close(fd) };
                }
                let mut waiter = group.join().unwrap();
                waiter.add(rx, 0, Interest::READABLE.exclusive()).unwrap();
                waiter.add(stop_rx, 1, Interest::READABLE).unwrap();
                let mut events = Events::with_capacity(4);
                let mut changed = false;
                let mut keep: Vec<OwnedFd> = Vec::new();
                let figure = |i: usize| counts.get(MESSAGES as usize + i);
                loop {
                    waiter
                        .wait(&mut events, Some(Duration::from_millis(100)))
                        .unwrap();
                    if changed {
                        figure(WAITS_AFTER).fetch_add(1, SeqCst);
                    }
                    for event in events.iter().collect::<Vec<_>>() {
                        match event.key {
                            1 => return 0,
                            0 if changed => {
                                figure(STALE_EVENTS).fetch_add(1, SeqCst);
                                waiter.consumed(0).unwrap();
                            }
                            0 => {
                                let read = read_msg(rx.as_raw_fd());
                                // The first member to read at or past message AT makes the
                                // change (any member: under load one may be skipped for long).
                                let act = !changed
                                    && figure(READ).load(SeqCst) >= AT
                                    && figure(CHANGED)
                                        .compare_exchange(0, 1, SeqCst, SeqCst)
                                        .is_ok();
                                if act {
                                    make_change(&mut waiter, rx.as_raw_fd(), change, &mut keep);
                                    changed = true;
                                }
                                waiter.consumed(0).unwrap();
                                match read {
                                    Some(Some(id)) => {
                                        counts.get(id as usize).fetch_add(1, SeqCst);
                                        figure(READ).fetch_add(1, SeqCst);
                                    }
                                    Some(None) => {}
                                    None => {
                                        figure(EMPTY).fetch_add(1, SeqCst);
                                    }
                                }
                            }
                            2 => {
                                figure(NEW_EVENTS).fetch_add(1, SeqCst);
                                let _ = read_msg(rx.as_raw_fd());
                                waiter.consumed(2).unwrap();
                            }
                            other => panic!("an event of key {other}"),
                        }
                    }
                }
            })
        })
        .collect();
    drop(rx);
    let start = Instant::now();
    for id in 0..MESSAGES {
        write_msg(tx.as_raw_fd(), id);
        let written = Instant::now();
        while figure(READ).load(SeqCst) <= id {
            assert!(
                written.elapsed() < WAIT_BOUND,
                "{backend:?} {change:?}: message {id} stranded"
            );
            std::thread::yield_now();
        }
    }
    let took = start.elapsed();
    drop(stop_tx); // the hang-up stops every member
    for pid in members {
        assert_eq!(
            reap(pid, WAIT_BOUND),
            0,
            "{backend:?} {change:?}: a member failed"
        );
    }
    let per_id: Vec<u64> = (0..MESSAGES as usize)
        .map(|i| counts.get(i).load(SeqCst))
        .collect();
    eprintln!(
        "{backend:?} {change:?}: {MESSAGES} messages in {took:?}; the changer: {} stale events, \
         {} waits after, {} events of its new pipe; {} empty reads",
        figure(STALE_EVENTS).load(SeqCst),
        figure(WAITS_AFTER).load(SeqCst),
        figure(NEW_EVENTS).load(SeqCst),
        figure(EMPTY).load(SeqCst),
    );
    assert_eq!(figure(CHANGED).load(SeqCst), 1, "the change was never made");
    assert!(
        per_id.iter().all(|&n| n == 1),
        "lost or read twice: {per_id:?}"
    );
    assert_eq!(
        figure(STALE_EVENTS).load(SeqCst),
        0,
        "events of a changed descriptor"
    );
    // Waits of 100 ms: a spin would make thousands.
    let bound = 20 + 20 * (took.as_millis() as u64 / 100 + 1);
    assert!(
        figure(WAITS_AFTER).load(SeqCst) <= bound,
        "the changing member spun: {} waits",
        figure(WAITS_AFTER).load(SeqCst)
    );
    if change == Change::CloseThenAdd {
        assert!(
            figure(NEW_EVENTS).load(SeqCst) >= 1,
            "the new pipe was never reported"
        );
    }
}

/// Member `m == 0`'s change to its copy of the shared descriptor `fd`; what must stay open goes
/// into `keep`.
fn make_change(waiter: &mut Waiter, fd: RawFd, change: Change, keep: &mut Vec<OwnedFd>) {
    let (own_rx, own_tx) = pipe();
    match change {
        Change::Close | Change::CloseThenDelete => {
            // SAFETY: closes this process's copy of the shared descriptor, which nothing uses
            // after this but the waiter (which must cope).
            assert_eq!(unsafe { libc::close(fd) }, 0);
            if change == Change::CloseThenDelete {
                waiter.delete(&number(fd)).unwrap();
            }
        }
        Change::Dup2 | Change::CloseThenAdd => {
            // A pipe of its own under the shared descriptor's number: always readable for Dup2
            // (never registered, never to be reported); written after its `add` otherwise.
            if change == Change::Dup2 {
                write_msg(own_tx.as_raw_fd(), 99);
            }
            // SAFETY: closes the copy of the shared descriptor and puts our pipe there.
            assert_eq!(unsafe { libc::dup2(own_rx.as_raw_fd(), fd) }, fd);
            if change == Change::CloseThenAdd {
                // SAFETY: `fd` is open (our pipe, just put there) for the call's length.
                let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
                waiter
                    .add(&borrowed, 2, Interest::READABLE.exclusive())
                    .unwrap();
                write_msg(own_tx.as_raw_fd(), 7);
            }
        }
    }
    keep.push(own_rx);
    keep.push(own_tx);
}

fn shared_descriptor_closed(backend: Backend) {
    shared_descriptor_changed(backend, Change::Close);
}

fn shared_descriptor_dup2_over(backend: Backend) {
    shared_descriptor_changed(backend, Change::Dup2);
}

fn shared_descriptor_closed_then_added(backend: Backend) {
    shared_descriptor_changed(backend, Change::CloseThenAdd);
}

fn shared_descriptor_closed_then_deleted(backend: Backend) {
    shared_descriptor_changed(backend, Change::CloseThenDelete);
}

/// A descriptor number, closed or not, as `delete` takes it: only the number is used.
fn number(fd: RawFd) -> std::os::fd::BorrowedFd<'static> {
    // SAFETY: herdless only passes the number to the kernel, which answers EBADF for a closed
    // one; nothing reads or writes through it.
    unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }
}

/// `delete` of a closed descriptor succeeds, and a second `delete` says it is not registered.
fn delete_after_close(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, _tx) = pipe();
    let fd = rx.as_raw_fd();
    waiter.add(&rx, 1, Interest::READABLE.exclusive()).unwrap();
    // Keep the file open (as a forked member would), close the registered number.
    // SAFETY: dup of our own open descriptor.
    let other = unsafe { libc::dup(fd) };
    assert!(other >= 0);
    drop(rx);
    waiter.delete(&number(fd)).unwrap();
    assert!(matches!(
        waiter.delete(&number(fd)),
        Err(herdless::Error::NotRegistered { .. })
    ));
    // SAFETY: closes the dup made above.
    unsafe { libc::close(other) };
}

/// Busy polling: 8 members read 2 000 messages with `wait(Some(Duration::ZERO))` in a loop,
/// each exactly once. Emulated, a member that waits while they poll is handed every message:
/// a poll takes no token and disturbs no holder.
fn busy_polling_members(backend: Backend) {
    const POLLERS: usize = 8;
    const MESSAGES: u64 = 2000;
    let group = Group::builder().backend(backend).build().unwrap();
    let (rx, tx) = pipe();
    let counts = SharedCounters::new(MESSAGES as usize + 1).unwrap();
    let total = counts.get(MESSAGES as usize);
    std::thread::scope(|s| {
        for _ in 0..POLLERS {
            let mut waiter = group.join().unwrap();
            waiter.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
            let (rx, counts) = (&rx, &counts);
            s.spawn(move || {
                let mut events = Events::with_capacity(4);
                while total.load(SeqCst) < MESSAGES {
                    if waiter.wait(&mut events, Some(Duration::ZERO)).unwrap() == 0 {
                        std::thread::yield_now();
                        continue;
                    }
                    let read = read_msg(rx.as_raw_fd());
                    waiter.consumed(0).unwrap();
                    if let Some(Some(id)) = read {
                        counts.get(id as usize).fetch_add(1, SeqCst);
                        total.fetch_add(1, SeqCst);
                    }
                }
            });
        }
        for id in 0..MESSAGES {
            write_msg(tx.as_raw_fd(), id);
        }
    });
    let per_id: Vec<u64> = (0..MESSAGES as usize)
        .map(|i| counts.get(i).load(SeqCst))
        .collect();
    assert!(per_id.iter().all(|&n| n == 1), "lost or read twice");
    if backend != Backend::Emulated {
        return;
    }
    // A member waiting (blocking) and another polling: the waiting one, asleep in its wait,
    // leads, so every message written then is its own; the poller takes none and never
    // disturbs the holder.
    let mut waiting = group.join().unwrap();
    let mut polling = group.join().unwrap();
    waiting.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
    polling.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
    let stop = AtomicBool::new(false);
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (read_tx, read_rx) = std::sync::mpsc::channel();
    let polled = std::thread::scope(|s| {
        let poller = s.spawn(|| {
            let mut events = Events::with_capacity(4);
            let mut got = 0;
            while !stop.load(SeqCst) {
                got += polling.wait(&mut events, Some(Duration::ZERO)).unwrap();
                std::thread::yield_now();
            }
            got
        });
        let rx = &rx;
        s.spawn(move || {
            tid_tx.send(gettid()).unwrap();
            let mut events = Events::with_capacity(4);
            for _ in 0..100 {
                while waiting.wait(&mut events, Some(WAIT_BOUND)).unwrap() == 0 {}
                let read = read_msg(rx.as_raw_fd());
                waiting.consumed(0).unwrap();
                read_tx.send(read).unwrap();
            }
        });
        let tid = tid_rx.recv().unwrap();
        for id in 0..100 {
            until_asleep(std::process::id(), &[tid]);
            write_msg(tx.as_raw_fd(), id);
            let read = read_rx
                .recv_timeout(WAIT_BOUND)
                .expect("the waiting member got nothing");
            assert_eq!(read, Some(Some(id)));
        }
        stop.store(true, SeqCst);
        poller.join().unwrap()
    });
    assert_eq!(polled, 0, "a busy poller took events from a waiting leader");
}

every_backend!(
    timeouts_under_alarms_no_restart,
    timeouts_under_alarms_restart,
    members_stop_no_restart,
    members_stop_restart,
    shared_descriptor_closed,
    shared_descriptor_dup2_over,
    shared_descriptor_closed_then_added,
    shared_descriptor_closed_then_deleted,
    delete_after_close,
    busy_polling_members,
);
