//! Faults: members killed with SIGKILL (idle, holding the token, handling an event, before
//! consuming what they read, again and again), signals delivered to waiting members, a descriptor closed while registered, every
//! member gone and a new one joining, the producer hanging up. Nothing is lost, nothing stalls.

// Linux only: forked members killed with SIGKILL, and tests/common uses pipe2, gettid and /proc.
#![cfg(any(target_os = "linux", target_os = "android"))]

mod common;

use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::*;
use herdless::{Backend, Events, Group, Interest};

/// Runs 800 messages through 8 processes with `faults`, checks that every message was read
/// exactly once and that every survivor took part.
fn survive(backend: Backend, what: &str, faults: &[Kill]) {
    let _one_at_a_time = one_fork_at_a_time();
    let (out, killed) = Turns::eight_members(backend).processes(faults);
    out.report(&format!("{backend:?} {what}, killed {killed:?}"));
    assert_eq!(killed.len(), faults.len());
    out.assert_exactly_once(800);
    for (i, &c) in out.per_member.iter().enumerate() {
        assert!(
            killed.contains(&i) || c > 0,
            "survivor {i} got nothing: {out:?}"
        );
    }
}

/// One member killed: the `victim` kind, when message `at` is read.
fn one_kill(backend: Backend, what: &str, at: u64, victim: Victim) {
    survive(backend, what, &[Kill { at, victim }]);
}

fn member_killed_while_idle(backend: Backend) {
    one_kill(backend, "idle member killed at 300", 300, Victim::Idle);
}

fn token_holder_killed(backend: Backend) {
    if backend == Backend::Native {
        eprintln!("SKIPPED for native: no token (the kernel's wait queue is the line)");
        return;
    }
    one_kill(
        backend,
        "token holder killed at 400",
        400,
        Victim::TokenHolder,
    );
}

fn member_killed_while_handling(backend: Backend) {
    one_kill(
        backend,
        "member killed handling message 200",
        200,
        Victim::Handling,
    );
}

fn member_killed_before_consuming(backend: Backend) {
    let what = "member killed between read and consumed";
    one_kill(backend, what, 500, Victim::Claimed);
}

fn members_killed_again_and_again(backend: Backend) {
    let victims = [
        Victim::Idle,
        Victim::Handling,
        Victim::Claimed,
        Victim::Handling,
    ];
    let mut faults: Vec<Kill> = (0..4u64)
        .map(|i| Kill {
            at: 100 + 150 * i,
            victim: victims[i as usize],
        })
        .collect();
    if backend == Backend::Emulated {
        faults.push(Kill {
            at: 720,
            victim: Victim::TokenHolder,
        });
    }
    survive(backend, "members killed again and again", &faults);
}

extern "C" fn ignore_signal(_: libc::c_int) {}

/// Signals interrupt the kernel wait (no SA_RESTART): `wait` returns early with no events and
/// `interrupted()`, never an error; a loop that waits again loses no event.
fn signals_do_not_break_a_wait(backend: Backend) {
    // SAFETY: installs a handler that does nothing, for SIGUSR1, without SA_RESTART.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = ignore_signal as *const () as usize;
        libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut());
    }
    let group = Group::builder().backend(backend).build().unwrap();
    let (rx, tx) = pipe();
    let (tid_tx, tid_rx) = mpsc::channel();
    let mut waiter = group.join().unwrap();
    waiter.add(&rx, 5, Interest::READABLE.exclusive()).unwrap();
    let handle = thread::spawn(move || {
        tid_tx.send(gettid()).unwrap();
        let mut events = Events::with_capacity(4);
        let mut interrupted = 0;
        let result = loop {
            match waiter.wait(&mut events, None) {
                Ok(0) if events.interrupted() => interrupted += 1,
                other => break other.map(|_| events.iter().next().map(|e| e.key)),
            }
        };
        (result, interrupted, waiter)
    });
    let tid = tid_rx.recv().unwrap();
    for _ in 0..20 {
        until_asleep(std::process::id(), &[tid]);
        // SAFETY: signals our own thread.
        unsafe { libc::syscall(libc::SYS_tgkill, std::process::id(), tid, libc::SIGUSR1) };
    }
    until_asleep(std::process::id(), &[tid]);
    write_msg(tx.as_raw_fd(), 1);
    let (result, interrupted, mut waiter) = handle.join().unwrap();
    assert_eq!(result.unwrap(), Some(5));
    // (Through `polling`'s poll(2) backend a signal ends no wait: `polling` retries.)
    let through_polling = backend == Backend::Emulated && cfg!(polling_test_poll_backend);
    let least = if through_polling { 0 } else { 1 };
    assert!(
        (least..=20).contains(&interrupted),
        "{interrupted} interrupted waits for 20 signals"
    );
    assert_eq!(read_msg(rx.as_raw_fd()), Some(Some(1)));
    waiter.delete(&rx).unwrap();
}

/// A descriptor closed while registered is forgotten, and its number can be added again.
fn closed_while_registered(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, old_tx) = pipe();
    waiter.add(&rx, 1, Interest::READABLE.exclusive()).unwrap();
    // Close the registered pipe and reuse its number for a new pipe in one step (dup2), so no
    // other thread of the test binary can take the number in between.
    let (fresh, tx) = pipe();
    // SAFETY: dup2 onto our own descriptor: closes the registered file, puts the new one there.
    assert_eq!(
        unsafe { libc::dup2(fresh.as_raw_fd(), rx.as_raw_fd()) },
        rx.as_raw_fd()
    );
    drop((fresh, old_tx));
    let mut events = Events::with_capacity(4);
    waiter
        .wait(&mut events, Some(Duration::from_millis(20)))
        .unwrap();
    waiter.add(&rx, 2, Interest::READABLE.exclusive()).unwrap();
    write_msg(tx.as_raw_fd(), 9);
    assert_eq!(wait_keys(&mut waiter, 4), [2]);
    waiter.delete(&rx).unwrap();
}

/// A pipe's write end `dup2`'d over the number of its registered read end while a duplicate
/// keeps the read end open (its kernel entries may live on): the number no longer names the
/// registered file, though `fstat` sees the same pipe (one inode for both ends). The read end's
/// readiness is never reported under that number, its message stays for the duplicate, and the
/// number can be registered again for what it names now. Exclusive and plain registrations.
fn other_end_dup2d_over_a_registration(backend: Backend) {
    for interest in [Interest::READABLE.exclusive(), Interest::READABLE] {
        let group = Group::builder().backend(backend).build().unwrap();
        let mut waiter = group.join().unwrap();
        let (rx, tx) = pipe();
        let read_end = rx.try_clone().expect("dup");
        waiter.add(&rx, 1, interest).unwrap();
        // Watched and served once: the member's entry for it is in place.
        write_msg(tx.as_raw_fd(), 1);
        assert_eq!(wait_keys(&mut waiter, 4), [1], "{interest:?}");
        assert_eq!(read_msg(rx.as_raw_fd()), Some(Some(1)));
        waiter.consumed(1).unwrap();
        let write_end = tx.try_clone().expect("dup");
        // SAFETY: dup2 onto our own descriptor: closes the registered read end's number (the
        // duplicate keeps the file open) and puts a write end there.
        assert_eq!(
            unsafe { libc::dup2(write_end.as_raw_fd(), rx.as_raw_fd()) },
            rx.as_raw_fd()
        );
        write_msg(tx.as_raw_fd(), 2);
        let mut events = Events::with_capacity(4);
        waiter
            .wait(&mut events, Some(Duration::from_millis(50)))
            .unwrap();
        assert_eq!(
            events.iter().map(|e| e.key).collect::<Vec<_>>(),
            Vec::<usize>::new(),
            "{interest:?}: the read end's readiness reported under a number that names the \
             write end"
        );
        assert_eq!(read_msg(read_end.as_raw_fd()), Some(Some(2)));
        // The number names a write end now: registered again, its events are the write end's.
        waiter.add(&rx, 3, Interest::WRITABLE).unwrap();
        assert_eq!(wait_keys(&mut waiter, 4), [3], "{interest:?}");
        waiter.delete(&rx).unwrap();
    }
}

/// Every member leaves; a new one joins (in a reused slot) and gets the queued messages.
fn everyone_gone_then_a_new_member(backend: Backend) {
    let group = Group::builder()
        .backend(backend)
        .max_members(2)
        .build()
        .unwrap();
    let (rx, tx) = pipe();
    for _ in 0..2 {
        let mut a = group.join().unwrap();
        let mut b = group.join().unwrap();
        a.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
        b.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
    }
    write_msg(tx.as_raw_fd(), 3);
    let mut late = group.join().unwrap();
    late.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
    assert_eq!(wait_keys(&mut late, 4).len(), 1);
    assert_eq!(read_msg(rx.as_raw_fd()), Some(Some(3)));
    let stats = group.stats();
    assert_eq!(stats.iter().filter(|m| m.alive).count(), 1, "{stats:?}");
}

/// The producer closes its end: every waiter sees the hang-up and stops.
fn producer_hangup_stops_everyone(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let (rx, tx) = pipe();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let mut waiter = group.join().unwrap();
            waiter.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
            let fd = rx.as_raw_fd();
            thread::spawn(move || {
                let mut events = Events::with_capacity(1);
                loop {
                    waiter.wait(&mut events, None).unwrap();
                    if !events.is_empty() && read_msg(fd) == Some(None) {
                        return; // end of file: stop (leaving passes the watch on)
                    }
                }
            })
        })
        .collect();
    drop(tx);
    for h in handles {
        h.join().unwrap();
    }
}

/// In a quick stream to threads of one process, the thread handed message `HANG_AT` reads it
/// and hangs with it (it neither says it consumed it nor comes back to `wait`), in the middle of
/// a turn it keeps the token for: the other threads take every other message, each exactly
/// once, and the group never waits on the hung one for long (its hold is ended as overdue; the
/// member that checks on a leader is, between threads, often an earlier passer whose look is
/// due). A stall is `WAIT_BOUND` with no message read, far above the bounds involved (tens of
/// milliseconds).
fn a_thread_hanging_mid_stream_with_its_event(backend: Backend) {
    const MEMBERS: usize = 8;
    const MESSAGES: u64 = 20_000; // more than a pipe holds: the producer keeps writing
    const HANG_AT: u64 = 5_000;
    let group = Group::builder().backend(backend).build().unwrap();
    let (rx, tx) = pipe();
    let (read_tx, read_rx) = mpsc::channel::<(usize, u64)>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = std::sync::Arc::new(std::sync::Mutex::new(release_rx));
    let handles: Vec<_> = (0..MEMBERS)
        .map(|i| {
            let mut waiter = group.join().unwrap();
            waiter.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
            let (fd, read_tx, release_rx) = (rx.as_raw_fd(), read_tx.clone(), release_rx.clone());
            thread::spawn(move || {
                let mut events = Events::with_capacity(1);
                loop {
                    waiter.wait(&mut events, Some(WAIT_BOUND)).unwrap();
                    if events.is_empty() {
                        continue;
                    }
                    match read_msg(fd) {
                        Some(Some(id)) => {
                            let _ = read_tx.send((i, id));
                            if id == HANG_AT {
                                // Hangs with its event until the test ends.
                                let _ = release_rx.lock().unwrap().recv();
                                return;
                            }
                        }
                        Some(None) => return, // end of file
                        None => waiter.found_nothing(0).unwrap(),
                    }
                }
            })
        })
        .collect();
    drop(read_tx);
    let writer = tx.as_raw_fd();
    let producer = thread::spawn(move || {
        for id in 0..MESSAGES {
            write_msg(writer, id);
        }
        tx // closed once every message was read
    });
    let mut seen = vec![0u32; MESSAGES as usize];
    let mut per_member = [0u64; MEMBERS];
    let mut hung = None;
    let (mut last, mut longest) = (std::time::Instant::now(), Duration::ZERO);
    for _ in 0..MESSAGES {
        let (member, id) = read_rx
            .recv_timeout(WAIT_BOUND)
            .unwrap_or_else(|_| panic!("{backend:?}: the group stalled; read {per_member:?}"));
        longest = longest.max(last.elapsed());
        last = std::time::Instant::now();
        seen[id as usize] += 1;
        per_member[member] += 1;
        if id == HANG_AT {
            hung = Some(member);
        }
    }
    eprintln!(
        "{backend:?}: read per member {per_member:?}, member {hung:?} hung at {HANG_AT}, \
         longest pause between reads {longest:?}"
    );
    assert!(
        seen.iter().all(|&n| n == 1),
        "{backend:?}: a message lost or read twice"
    );
    drop(producer.join().unwrap()); // end of file for the others
    drop(release_tx);
    for h in handles {
        h.join().unwrap();
    }
}

/// All `Group` handles dropped: the members keep the group alive and keep working.
fn waiter_outlives_its_group_handle(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    drop(group);
    let (rx, tx) = pipe();
    waiter.add(&rx, 4, Interest::READABLE.exclusive()).unwrap();
    write_msg(tx.as_raw_fd(), 1);
    assert_eq!(wait_keys(&mut waiter, 4).len(), 1);
}

/// A Waiter carried into a forked child is refused there (it belongs to the parent's member),
/// and the parent's member is untouched.
fn waiter_in_a_forked_child_is_refused(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, tx) = pipe();
    waiter.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
    // SAFETY: the child only uses this crate and _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut events = Events::with_capacity(1);
        let refused = matches!(
            waiter.wait(&mut events, None),
            Err(herdless::Error::ForkedWaiter { .. })
        ) && matches!(
            waiter.add(&tx, 1, Interest::READABLE),
            Err(herdless::Error::ForkedWaiter { .. })
        );
        // Dropping it must not make the parent's member leave.
        drop(waiter);
        // SAFETY: leaves the child at once.
        unsafe { libc::_exit(if refused { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: reaps our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child was not refused"
    );
    assert!(group.stats()[0].alive);
    write_msg(tx.as_raw_fd(), 1);
    assert_eq!(wait_keys(&mut waiter, 4).len(), 1);
}

every_backend!(
    member_killed_while_idle,
    token_holder_killed,
    member_killed_while_handling,
    member_killed_before_consuming,
    members_killed_again_and_again,
    signals_do_not_break_a_wait,
    closed_while_registered,
    other_end_dup2d_over_a_registration,
    everyone_gone_then_a_new_member,
    producer_hangup_stops_everyone,
    a_thread_hanging_mid_stream_with_its_event,
    waiter_outlives_its_group_handle,
    waiter_in_a_forked_child_is_refused,
    dead_members_slots_are_reused,
);

/// A member killed without leaving frees its slot for the next to join: a prefork server that
/// respawns workers does not run out of slots.
fn dead_members_slots_are_reused(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    let group = Group::builder()
        .backend(backend)
        .max_members(2)
        .build()
        .unwrap();
    for _ in 0..3 {
        let (ready_r, ready_w) = pipe();
        // SAFETY: the child only uses this crate, raw system calls and _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let _member = group.join().unwrap();
            write_msg(ready_w.as_raw_fd(), 1);
            loop {
                // SAFETY: pause(2) until the parent kills us.
                unsafe { libc::pause() };
            }
        }
        let start = std::time::Instant::now();
        while read_msg(ready_r.as_raw_fd()).is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the child never joined"
            );
            thread::yield_now();
        }
        // SAFETY: kill(2) and waitpid(2) on our own child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
    // Three members joined and died; two slots: both must be usable again.
    let a = group.join().unwrap();
    let b = group.join().unwrap();
    let stats = group.stats();
    assert_eq!(stats.iter().filter(|m| m.alive).count(), 2, "{stats:?}");
    drop((a, b));
}
