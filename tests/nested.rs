//! A waiter in another event loop (`Waiter::nest`): its descriptor watched by an epoll loop of
//! the test's own, as libevent, libuv or a middleware's loop would watch it, on both backends.
//!
//! - Eight members, each a forked process nested in an outer epoll of its own, on one shared
//!   pipe, 800 messages one at a time: each message wakes one member's loop, the members'
//!   kernel wake-ups per message (voluntary context switches of their loop and waiter threads
//!   together, from `wait4`) stay a small constant, the members take turns and every message is
//!   read once; the naive nesting (an epoll with the pipe `EPOLLEXCLUSIVE`, nested in each
//!   loop) wakes every loop for every message, in the kernel (the losers' `epoll_wait` sleeps
//!   again inside: their loops' returns stay one per message).
//! - A stream of 20 000 messages into four nested threads: none lost, none read twice.
//! - A hang-up of the shared descriptor reaches the loop, exclusive or not.
//! - The descriptor: close-on-exec; the same at a second `nest`; one whose number the loop
//!   reused by mistake is replaced by `nest`, and that number is never closed by herdless; a
//!   dropped waiter's thread ends and its pipe is closed (a copy of the descriptor reads the end).
//! - A forked child's copy of the waiter is the parent's: refused, and dropping it changes
//!   nothing for the parent's loop.
//! - Registrations changed while the thread waits, notifications, a blocking wait.
//! - In a Tokio runtime (feature `tokio`), through `AsyncFd`, edge-triggered.

#![cfg(target_os = "linux")]

mod common;

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use common::*;
use herdless::{Backend, Error, Events, Group, Interest, Waiter};
use herdless_fixtures::SharedCounters;

/// The shared queue's key, and the stop pipe's.
const QUEUE: usize = 0;
const STOP: usize = 1;

/// A host event loop: an epoll instance of its own with one descriptor in it, level-triggered
/// (as libevent's and libuv's) unless `flags` says otherwise.
struct Loop(OwnedFd);

impl Loop {
    fn new(fd: RawFd, flags: u32) -> Loop {
        // SAFETY: creates a new descriptor or fails.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        assert!(
            epoll >= 0,
            "epoll_create1: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: a fresh descriptor owned by nobody else.
        let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };
        Loop::add(&epoll, fd, flags, 0);
        Loop(epoll)
    }

    fn level(fd: RawFd) -> Loop {
        Loop::new(fd, libc::EPOLLIN as u32)
    }

    fn add(epoll: &OwnedFd, fd: RawFd, flags: u32, data: u64) {
        let mut ev = libc::epoll_event {
            events: flags,
            u64: data,
        };
        // SAFETY: our epoll, a descriptor the caller holds, a live event.
        let done = unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        assert_eq!(done, 0, "epoll_ctl: {}", std::io::Error::last_os_error());
    }

    /// Sleeps until a descriptor of the loop fires, at most `ms` (-1: no limit): the data of
    /// the one that fired.
    fn next(&self, ms: i32) -> Option<u64> {
        let mut ev = [libc::epoll_event { events: 0, u64: 0 }];
        loop {
            // SAFETY: a live buffer of one event.
            let n = unsafe { libc::epoll_wait(self.0.as_raw_fd(), ev.as_mut_ptr(), 1, ms) };
            match n {
                1 => return Some(ev[0].u64),
                0 => return None,
                _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
                _ => panic!("epoll_wait: {}", std::io::Error::last_os_error()),
            }
        }
    }

    fn fired(&self, ms: i32) -> bool {
        self.next(ms).is_some()
    }
}

/// `fd` borrowed, to register it.
fn borrowed(fd: RawFd) -> BorrowedFd<'static> {
    // SAFETY: every descriptor borrowed here stays open for the waiter's whole use of it.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// The loop's turn: takes what the waiter has (a zero-timeout wait, until it returns 0), each
/// event passed to `each` with the waiter; returns how many events there were.
fn take_all(waiter: &mut Waiter, mut each: impl FnMut(&mut Waiter, herdless::Event)) -> usize {
    let mut events = Events::with_capacity(1);
    let mut taken = 0;
    while waiter.wait(&mut events, Some(Duration::ZERO)).unwrap() > 0 {
        for event in events.iter() {
            taken += 1;
            each(waiter, event);
        }
    }
    taken
}

// ---- several members, each in a loop of its own ----

const MEMBERS: usize = 8;
const MESSAGES: u64 = 800;

/// What the forked members count, in one shared mapping: how often each message was read
/// (`MESSAGES` counters), then per member the messages it read and its loop's wake-ups.
fn board() -> SharedCounters {
    SharedCounters::new(MESSAGES as usize + 2 * MEMBERS).expect("mmap")
}

fn reads(m: usize) -> usize {
    MESSAGES as usize + 2 * m
}

fn loop_wakeups(m: usize) -> usize {
    MESSAGES as usize + 2 * m + 1
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Setup {
    /// herdless, the waiter nested through its descriptor.
    Nested(Backend),
    /// No herdless: an epoll with the pipe `EPOLLEXCLUSIVE`, nested in each loop.
    Naive,
}

#[derive(Debug)]
struct Run {
    per_member: Vec<u64>,
    loop_wakeups: u64,
    /// The member processes' voluntary context switches, all threads, from `wait4`.
    kernel_wakeups: u64,
}

impl Run {
    fn per_message(v: u64) -> f64 {
        v as f64 / MESSAGES as f64
    }
}

/// `MEMBERS` forked members on one pipe, each in its own loop; the parent writes message i + 1
/// once message i was read (an acknowledgement on a pipe of its own), then hangs up the stop
/// pipe, which every member watches without `exclusive`.
fn run(setup: Setup) -> Run {
    let _one = one_fork_at_a_time();
    let group = match setup {
        Setup::Nested(backend) => Some(
            Group::builder()
                .backend(backend)
                .max_members(MEMBERS)
                .build()
                .unwrap(),
        ),
        Setup::Naive => None,
    };
    let board = board();
    let (rx, tx) = pipe();
    let (stop_r, stop_w) = pipe();
    let (acks_r, acks_w) = herdless_fixtures::pipe(herdless_fixtures::Blocking::Both).unwrap();
    let mut pids = Vec::new();
    for m in 0..MEMBERS {
        // SAFETY: the child runs the member below (std, herdless, libc) and leaves by _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // The writers' ends are the parent's: the stop pipe hangs up when the parent drops
            // its end.
            for fd in [stop_w.as_raw_fd(), tx.as_raw_fd(), acks_r.as_raw_fd()] {
                // SAFETY: closes the child's copies; the child leaves by _exit, so their
                // OwnedFds are never dropped here.
                unsafe { libc::close(fd) };
            }
            let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let (rx, stop, acks) = (rx.as_raw_fd(), stop_r.as_raw_fd(), acks_w.as_raw_fd());
                match &group {
                    Some(group) => nested_member(group, rx, stop, acks, &board, m),
                    None => naive_member(rx, stop, acks, &board, m),
                }
            }));
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(i32::from(served.is_err())) };
        }
        pids.push(pid as u32);
    }
    drop((stop_r, acks_w));
    // Every thread of every member asleep in its wait before the first message, and the member
    // that read a message back in its wait before the next one (naive: every member, since each
    // message wakes them all): the turns and the counts are those of idle members, whatever the
    // machine's load.
    let tids: Vec<Vec<i32>> = pids
        .iter()
        .map(|&pid| until_all_asleep(pid, 2 - usize::from(setup == Setup::Naive)))
        .collect();
    for id in 0..MESSAGES {
        write_msg(tx.as_raw_fd(), id);
        let mut ack = [0u8; MSG];
        herdless_fixtures::read_exact(acks_r.as_raw_fd(), &mut ack).unwrap();
        let ack = u64::from_ne_bytes(ack);
        assert_eq!(ack & 0xffff_ffff, id);
        let m = (ack >> 32) as usize;
        match setup {
            Setup::Naive => {
                for (pid, tids) in pids.iter().zip(&tids) {
                    until_asleep(*pid, tids);
                }
            }
            Setup::Nested(_) => until_asleep(pids[m], &tids[m]),
        }
    }
    drop(stop_w);
    let mut kernel_wakeups = 0;
    for pid in pids {
        let mut status = 0;
        // SAFETY: rusage is plain data.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: reaps our own child into live out-parameters.
        let reaped = unsafe { libc::wait4(pid as i32, &mut status, 0, &mut usage) };
        assert_eq!(reaped, pid as i32);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "member {pid} failed: status {status:#x}"
        );
        kernel_wakeups += usage.ru_nvcsw as u64;
    }
    for id in 0..MESSAGES {
        assert_eq!(
            board.get(id as usize).load(SeqCst),
            1,
            "message {id} read other than once"
        );
    }
    let run = Run {
        per_member: (0..MEMBERS)
            .map(|m| board.get(reads(m)).load(SeqCst))
            .collect(),
        loop_wakeups: (0..MEMBERS)
            .map(|m| board.get(loop_wakeups(m)).load(SeqCst))
            .sum(),
        kernel_wakeups,
    };
    eprintln!(
        "{setup:?}: per member {:?}, loop wake-ups per message {:.2}, kernel wake-ups per \
         message {:.2} (all threads of all {MEMBERS} members)",
        run.per_member,
        Run::per_message(run.loop_wakeups),
        Run::per_message(run.kernel_wakeups)
    );
    run
}

/// Waits (bounded) until `threads` threads of process `pid` exist and all sleep in a wait:
/// their ids.
fn until_all_asleep(pid: u32, threads: usize) -> Vec<i32> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|dir| {
                dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        if tids.len() >= threads {
            until_asleep(pid, &tids);
            return tids;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "member {pid} has {} threads of {threads}",
            tids.len()
        );
        std::thread::yield_now();
    }
}

/// One nested member: joins, registers the queue (shared) and the stop pipe, nests, and until
/// the stop pipe hangs up sleeps in its loop and takes what the waiter has.
fn nested_member(
    group: &Group,
    rx: RawFd,
    stop: RawFd,
    acks: RawFd,
    board: &SharedCounters,
    m: usize,
) {
    let mut waiter = group.join().unwrap();
    waiter.add(&borrowed(rx), QUEUE, Interest::SHARED).unwrap();
    waiter
        .add(&borrowed(stop), STOP, Interest::READABLE)
        .unwrap();
    waiter.nest().unwrap();
    let lp = Loop::level(waiter.as_raw_fd());
    let mut stopped = false;
    while !stopped {
        assert!(lp.fired(-1));
        board.get(loop_wakeups(m)).fetch_add(1, SeqCst);
        take_all(&mut waiter, |waiter, event| {
            if event.key == STOP {
                stopped = true;
                return;
            }
            match read_msg(rx) {
                Some(Some(id)) => {
                    waiter.consumed(QUEUE).unwrap();
                    board.get(id as usize).fetch_add(1, SeqCst);
                    board.get(reads(m)).fetch_add(1, SeqCst);
                    write_msg(acks, (m as u64) << 32 | id);
                }
                Some(None) => panic!("the queue's writer stays open"),
                None => waiter.found_nothing(QUEUE).unwrap(),
            }
        });
    }
}

/// One naive member: an epoll with the queue `EPOLLEXCLUSIVE`, nested in its loop beside the
/// stop pipe.
fn naive_member(rx: RawFd, stop: RawFd, acks: RawFd, board: &SharedCounters, m: usize) {
    let inner = Loop::new(rx, (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32);
    let lp = Loop::level(inner.0.as_raw_fd());
    Loop::add(&lp.0, stop, libc::EPOLLIN as u32, 1);
    loop {
        match lp.next(-1) {
            Some(1) => return,
            _ => board.get(loop_wakeups(m)).fetch_add(1, SeqCst),
        };
        inner.next(0);
        if let Some(Some(id)) = read_msg(rx) {
            board.get(id as usize).fetch_add(1, SeqCst);
            board.get(reads(m)).fetch_add(1, SeqCst);
            write_msg(acks, (m as u64) << 32 | id);
        }
    }
}

/// Each message wakes one member's loop, the kernel wake-ups per message stay a small constant
/// (native: the waiter thread's wake-up for the event and for going back to its wait, and the
/// loop's; emulated: the token's passes besides), the members take turns, and every message is
/// read once.
fn nested_loops_wake_one_member_per_message(backend: Backend) {
    let run = run(Setup::Nested(backend));
    let per_loop = Run::per_message(run.loop_wakeups - MEMBERS as u64); // less the stop
    assert!(
        per_loop <= 1.1,
        "{per_loop:.2} loop wake-ups per message: {run:?}"
    );
    // The herd's floor is one wake-up per member's loop per message; the waiter's own cost is
    // a constant (see above), well below it.
    let bound = (MEMBERS - 2) as f64;
    let per_kernel = Run::per_message(run.kernel_wakeups);
    assert!(
        per_kernel <= bound,
        "{per_kernel:.2} kernel wake-ups per message: {run:?}"
    );
    // Turns: a member whose thread is not back in its wait yet when the next message comes is
    // skipped (as a busy waiter is), so the shares are even, not equal.
    let share = jain(&run.per_member);
    let min = *run.per_member.iter().min().unwrap();
    assert!(
        share >= 0.95 && min >= MESSAGES / MEMBERS as u64 / 2,
        "no turns (Jain {share:.3}): {run:?}"
    );
}

/// The herd this avoids: an epoll with the queue `EPOLLEXCLUSIVE`, nested in each loop, wakes
/// every loop in the kernel.
#[test]
fn naive_nesting_wakes_every_loop() {
    let run = run(Setup::Naive);
    // The losers' loops wake in the kernel and, finding the inner epoll empty again, sleep
    // again inside `epoll_wait`: the herd is in the kernel wake-ups, not the loops' returns.
    let per_kernel = Run::per_message(run.kernel_wakeups);
    assert!(
        per_kernel >= 0.6 * MEMBERS as f64,
        "the nesting did not herd ({per_kernel:.2} kernel wake-ups per message): {run:?}"
    );
}

// ---- a stream ----

/// 20 000 messages as fast as the pipe takes them, four threads each nested in its own loop:
/// every message read exactly once.
fn a_stream_into_nested_threads_loses_nothing(backend: Backend) {
    const N: u64 = 20_000;
    let group = Group::builder().backend(backend).build().unwrap();
    let (rx, tx) = pipe();
    let (stop_r, stop_w) = pipe();
    let (ids_tx, ids_rx) = std::sync::mpsc::channel::<u64>();
    std::thread::scope(|s| {
        for _ in 0..4 {
            let mut waiter = group.join().unwrap();
            waiter.add(&rx, QUEUE, Interest::SHARED).unwrap();
            waiter.add(&stop_r, STOP, Interest::READABLE).unwrap();
            waiter.nest().unwrap();
            let (rx, ids_tx) = (rx.as_raw_fd(), ids_tx.clone());
            s.spawn(move || {
                let lp = Loop::level(waiter.as_raw_fd());
                let mut stopped = false;
                while !stopped {
                    assert!(lp.fired(WAIT_BOUND.as_millis() as i32), "the loop hung");
                    take_all(&mut waiter, |waiter, event| match event.key {
                        STOP => stopped = true,
                        _ => match read_msg(rx) {
                            Some(Some(id)) => {
                                waiter.consumed(QUEUE).unwrap();
                                ids_tx.send(id).unwrap();
                            }
                            Some(None) => panic!("the writer stays open"),
                            None => waiter.found_nothing(QUEUE).unwrap(),
                        },
                    });
                }
            });
        }
        for id in 0..N {
            write_msg(tx.as_raw_fd(), id);
        }
        let mut ids: Vec<u64> = (0..N)
            .map(|_| ids_rx.recv_timeout(WAIT_BOUND).expect("a message was lost"))
            .collect();
        drop(stop_w); // every message read: the members stop
        ids.sort_unstable();
        assert_eq!(ids, (0..N).collect::<Vec<_>>(), "lost or read twice");
    });
    assert!(ids_rx.try_recv().is_err(), "a message read twice");
}

// ---- hang-ups ----

/// The writer of an exclusive pipe leaves: the loop fires and the event says read-closed;
/// after `delete` nothing more fires. A pipe two nested members watch without `exclusive`:
/// both loops hear the hang-up.
fn a_hang_up_reaches_the_loop(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, tx) = pipe();
    waiter.add(&rx, QUEUE, Interest::SHARED).unwrap();
    waiter.nest().unwrap();
    let lp = Loop::level(waiter.as_raw_fd());
    drop(tx);
    assert!(
        lp.fired(WAIT_BOUND.as_millis() as i32),
        "the hang-up never fired"
    );
    // One look: a hang-up stays, and would be handed out at every wait until the delete.
    let mut events = Events::with_capacity(4);
    assert_eq!(waiter.wait(&mut events, Some(Duration::ZERO)).unwrap(), 1);
    let event = events.iter().next().unwrap();
    assert!(event.key == QUEUE && event.is_read_closed(), "{event:?}");
    waiter.consumed(QUEUE).unwrap();
    waiter.delete(&rx).unwrap();
    // The delete stopped the thread's wait: one wake-up with nothing to take, then none.
    settle(&lp, &mut waiter);
    assert!(!lp.fired(0));

    let (stop_r, stop_w) = pipe();
    let mut members: Vec<(Waiter, Loop)> = (0..2)
        .map(|_| {
            let mut w = group.join().unwrap();
            w.add(&stop_r, STOP, Interest::READABLE).unwrap();
            w.nest().unwrap();
            let lp = Loop::level(w.as_raw_fd());
            (w, lp)
        })
        .collect();
    drop(stop_w);
    for (w, lp) in &mut members {
        assert!(lp.fired(WAIT_BOUND.as_millis() as i32), "a loop missed it");
        assert_eq!(w.wait(&mut events, Some(Duration::ZERO)).unwrap(), 1);
        let event = events.iter().next().unwrap();
        assert!(event.key == STOP && event.is_read_closed(), "{event:?}");
    }
}

/// Takes the wake-ups with nothing to take that a registration change leaves (`src/nest.rs`:
/// one for the wait the change paused, and one more when the change met a wait that had just
/// ended, whose notification ends the thread's next wait), until the waiter's thread sleeps in
/// the kernel with the loop's descriptor not readable; at most 2 are allowed.
fn settle(lp: &Loop, waiter: &mut Waiter) {
    let mut taken = 0;
    loop {
        while lp.fired(0) {
            assert_eq!(take_all(waiter, |_, e| panic!("unexpected {e:?}")), 0);
            taken += 1;
            assert!(
                taken <= 2,
                "{taken} wake-ups with nothing to take after one change"
            );
        }
        // Asleep, a thread has no notification left to end its wait: its wait would have
        // returned at once.
        nest_threads_asleep();
        if !lp.fired(0) {
            return;
        }
    }
}

/// Waits until every nested waiter's thread of this process (`herdless-nest`) sleeps: in its
/// kernel wait, or parked until its loop takes what it handed over.
fn nest_threads_asleep() {
    let state = |tid: &str| {
        let stat =
            std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
        // The state follows the command name, in parentheses.
        stat.rsplit(')')
            .next()
            .and_then(|s| s.split_whitespace().next())
            .map(str::to_owned)
    };
    let start = std::time::Instant::now();
    loop {
        let running = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|tid| {
                std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
                    .is_ok_and(|c| c.trim() == "herdless-nest")
            })
            .any(|tid| state(&tid).is_some_and(|s| s != "S"));
        if !running {
            return;
        }
        assert!(
            start.elapsed() < WAIT_BOUND,
            "a nested waiter's thread never slept"
        );
        std::thread::yield_now();
    }
}

// ---- the descriptor's life ----

/// Close-on-exec; the same descriptor at a second `nest`; a number the loop reused by mistake
/// (`dup2` of another file over it) is replaced at the next `nest`, the waiter goes on, and the
/// reused number is never closed by herdless; dropping the waiter ends its thread and closes
/// its pipe (a copy of the descriptor reads the hang-up).
fn the_descriptors_life(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    assert!(!waiter.is_nested());
    let (rx, tx) = pipe();
    waiter.add(&rx, QUEUE, Interest::SHARED).unwrap();
    waiter.nest().unwrap();
    assert!(waiter.is_nested());
    let fd = waiter.as_raw_fd();
    // SAFETY: F_GETFD on a live descriptor.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    assert!(
        flags != -1 && flags & libc::FD_CLOEXEC != 0,
        "not close-on-exec"
    );
    waiter.nest().unwrap();
    assert_eq!(
        waiter.as_raw_fd(),
        fd,
        "a second nest changed the descriptor"
    );

    // The loop reuses the number for another file (as a close and an open would).
    let (other, _other_w) = pipe();
    // SAFETY: replaces the waiter's descriptor, as a loop that closed it by mistake and opened
    // another file would; herdless must neither close nor use that number again.
    assert_eq!(unsafe { libc::dup2(other.as_raw_fd(), fd) }, fd);
    let other_file = file_of(other.as_raw_fd());
    write_msg(tx.as_raw_fd(), 7);
    waiter.nest().unwrap();
    let given = waiter.as_raw_fd();
    assert_ne!(given, fd, "nest kept a number that names another file");
    let lp = Loop::level(given);
    assert!(
        lp.fired(WAIT_BOUND.as_millis() as i32),
        "the new descriptor never fired"
    );
    let got = take_all(&mut waiter, |waiter, event| {
        assert_eq!(read_msg(rx.as_raw_fd()), Some(Some(7)));
        waiter.consumed(event.key).unwrap();
    });
    assert_eq!(got, 1);

    // Dropped: the thread ends, the pipe's write end is closed with it.
    // SAFETY: F_DUPFD_CLOEXEC of a live descriptor returns a new one, ours.
    let copy = unsafe { OwnedFd::from_raw_fd(libc::fcntl(given, libc::F_DUPFD_CLOEXEC, 0)) };
    drop(waiter);
    let mut pfd = libc::pollfd {
        fd: copy.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, WAIT_BOUND.as_millis() as i32) };
    assert!(
        n == 1 && pfd.revents & libc::POLLHUP != 0,
        "{n} {:#x}",
        pfd.revents
    );
    assert!(
        group.stats().iter().all(|m| !m.alive),
        "{:?}",
        group.stats()
    );
    assert_eq!(
        file_of(fd),
        other_file,
        "herdless closed a number it no longer owned"
    );
    // SAFETY: the number is our dup2 of `other`, closed once here.
    unsafe { libc::close(fd) };
}

/// The device and inode a number names.
fn file_of(fd: RawFd) -> (u64, u64) {
    // SAFETY: stat is plain data, filled by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat of a number into a live struct.
    assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0, "{fd} is not open");
    (st.st_dev, st.st_ino)
}

/// A forked child's copy of a nested waiter is the parent's: every call is refused with
/// `ForkedWaiter`, and dropping it leaves the parent's waiter, thread and loop working.
fn a_forked_childs_copy_is_the_parents(backend: Backend) {
    let _one = one_fork_at_a_time();
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, tx) = pipe();
    waiter.add(&rx, QUEUE, Interest::SHARED).unwrap();
    waiter.nest().unwrap();
    let lp = Loop::level(waiter.as_raw_fd());
    // SAFETY: the child runs the checks below (herdless, libc) and leaves by _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut copy = waiter;
            let mut events = Events::with_capacity(1);
            let refused = |r: herdless::Result<()>| matches!(r, Err(Error::ForkedWaiter { .. }));
            refused(copy.wait(&mut events, Some(Duration::ZERO)).map(drop))
                && refused(copy.nest())
                && refused(copy.consumed(QUEUE))
                && refused(copy.delete(&rx))
                && copy.is_nested()
        }));
        // SAFETY: leaves the child at once.
        unsafe { libc::_exit(i32::from(!matches!(ok, Ok(true)))) };
    }
    let mut status = 0;
    // SAFETY: reaps our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child's checks failed: {status:#x}"
    );
    write_msg(tx.as_raw_fd(), 9);
    assert!(
        lp.fired(WAIT_BOUND.as_millis() as i32),
        "the parent's loop stopped"
    );
    let got = take_all(&mut waiter, |waiter, event| {
        assert_eq!(read_msg(rx.as_raw_fd()), Some(Some(9)));
        waiter.consumed(event.key).unwrap();
    });
    assert_eq!(got, 1);
}

// ---- calls while nested ----

/// Registrations added, modified and deleted while the thread waits; a notification fires the
/// loop and the next wait returns 0; one sent just before a registration change is not lost;
/// a blocking wait sleeps until the event and returns it.
fn calls_while_nested(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    waiter.nest().unwrap();
    let lp = Loop::level(waiter.as_raw_fd());
    let bound = WAIT_BOUND.as_millis() as i32;
    let (rx, tx) = pipe();
    waiter.add(&rx, 3, Interest::SHARED).unwrap();
    settle(&lp, &mut waiter);
    write_msg(tx.as_raw_fd(), 1);
    assert!(lp.fired(bound), "the added descriptor never fired");
    let mut keys = Vec::new();
    take_all(&mut waiter, |waiter, event| {
        assert_eq!(read_msg(rx.as_raw_fd()), Some(Some(1)));
        keys.push(event.key);
        waiter.consumed(event.key).unwrap();
    });
    assert_eq!(keys, [3]);
    waiter
        .modify(&rx, 4, Interest::READABLE.exclusive())
        .unwrap();
    settle(&lp, &mut waiter);
    write_msg(tx.as_raw_fd(), 2);
    assert!(lp.fired(bound));
    let mut keys = Vec::new();
    take_all(&mut waiter, |waiter, event| {
        assert_eq!(read_msg(rx.as_raw_fd()), Some(Some(2)));
        keys.push(event.key);
        waiter.consumed(event.key).unwrap();
    });
    assert_eq!(keys, [4]);
    waiter.delete(&rx).unwrap();
    settle(&lp, &mut waiter);
    write_msg(tx.as_raw_fd(), 3);
    assert!(!lp.fired(0), "a deleted descriptor fired the loop");
    assert_eq!(read_msg(rx.as_raw_fd()), Some(Some(3)));

    // A notification: the loop fires, the next wait returns 0, then nothing.
    waiter.notifier().notify().unwrap();
    assert!(lp.fired(bound), "the notification never fired");
    assert_eq!(take_all(&mut waiter, |_, e| panic!("{e:?}")), 0);
    assert!(!lp.fired(0));
    // One sent just before a registration change that stops the thread's wait.
    waiter.notifier().notify().unwrap();
    waiter.add(&rx, 5, Interest::READABLE).unwrap();
    assert!(lp.fired(bound), "the notification was lost");
    settle(&lp, &mut waiter);

    // A blocking wait sleeps until there is something, and takes it.
    write_msg(tx.as_raw_fd(), 4);
    let mut events = Events::with_capacity(4);
    assert_eq!(waiter.wait(&mut events, Some(WAIT_BOUND)).unwrap(), 1);
    assert_eq!(events.iter().next().map(|e| e.key), Some(5));
    assert_eq!(read_msg(rx.as_raw_fd()), Some(Some(4)));
    waiter.consumed(5).unwrap();
    assert_eq!(
        waiter
            .wait(&mut events, Some(Duration::from_millis(20)))
            .unwrap(),
        0
    );
}

every_backend!(
    nested_loops_wake_one_member_per_message,
    a_stream_into_nested_threads_loses_nothing,
    a_hang_up_reaches_the_loop,
    the_descriptors_life,
    a_forked_childs_copy_is_the_parents,
    calls_while_nested,
);

/// A waiter in a Tokio runtime through `AsyncFd` (edge-triggered), in each of two threads: every
/// message taken once, in turns.
#[cfg(feature = "tokio")]
mod in_tokio {
    use super::*;
    use tokio::io::unix::AsyncFd;

    /// Waits until every herdless nest thread of this process (each waiter's sleeper, named
    /// `herdless-nest`) sleeps in a kernel wait: every member in line. Up to `patience`, so
    /// that another test's waiter holding an event for a while (its sleeper parked) costs this
    /// test time, never a failure.
    fn nest_threads_asleep(patience: Duration) {
        let start = std::time::Instant::now();
        let pid = std::process::id();
        loop {
            let all = std::fs::read_dir("/proc/self/task")
                .unwrap()
                .flatten()
                .all(|task| {
                    let comm =
                        std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
                    let tid = task.file_name().to_string_lossy().parse().unwrap_or(0);
                    comm.trim() != "herdless-nest"
                        || herdless_fixtures::counters::asleep_in_wait(pid, tid)
                });
            if all || start.elapsed() > patience {
                return;
            }
            std::thread::yield_now();
        }
    }

    fn a_waiter_in_a_tokio_runtime(backend: Backend) {
        const N: u64 = 200;
        let group = Group::builder().backend(backend).build().unwrap();
        let (rx, tx) = pipe();
        let (stop_r, stop_w) = pipe();
        let (acks_tx, acks_rx) = std::sync::mpsc::channel::<u64>();
        let (tids_tx, tids_rx) = std::sync::mpsc::channel::<i32>();
        let members: Vec<_> = (0..2)
            .map(|_| {
                let mut waiter = group.join().unwrap();
                waiter.add(&rx, QUEUE, Interest::SHARED).unwrap();
                waiter.add(&stop_r, STOP, Interest::READABLE).unwrap();
                waiter.nest().unwrap();
                let (rx, acks_tx, tids_tx) = (rx.as_raw_fd(), acks_tx.clone(), tids_tx.clone());
                std::thread::spawn(move || {
                    tids_tx.send(gettid()).unwrap();
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_io()
                        .build()
                        .unwrap();
                    rt.block_on(async move {
                        // SAFETY: the waiter's descriptor stays open and the same while the
                        // AsyncFd owns it: nothing here closes it or calls `nest` again.
                        let mut waiter = unsafe { AsyncFd::register(waiter) }.unwrap();
                        let mut events = Events::with_capacity(1);
                        let mut mine = 0u64;
                        loop {
                            let mut guard = waiter.readable_mut().await.unwrap();
                            let w = guard.get_inner_mut();
                            if w.wait(&mut events, Some(Duration::ZERO)).unwrap() == 0 {
                                guard.clear_ready(); // taken all: wait for the next edge
                                continue;
                            }
                            let event = events.iter().next().unwrap();
                            if event.key == STOP {
                                return mine;
                            }
                            match read_msg(rx) {
                                Some(Some(id)) => {
                                    w.consumed(QUEUE).unwrap();
                                    mine += 1;
                                    acks_tx.send(id).unwrap();
                                }
                                _ => w.found_nothing(QUEUE).unwrap(),
                            }
                        }
                    })
                })
            })
            .collect();
        let tids: Vec<i32> = (0..2).map(|_| tids_rx.recv().unwrap()).collect();
        for id in 0..N {
            // Each message comes when both runtimes sleep in their epoll and both waiters'
            // sleepers in their waits: the turn is then the one thing that decides who takes
            // it, however the machine schedules the threads. (A member whose sleeper is not
            // back in its wait when a message comes is skipped, as a busy member; written the
            // moment the last one is acknowledged, the messages went to one member in runs of
            // up to ~90 on both backends, on a quiet machine too: docs/lab.md, nested loops.)
            until_asleep(std::process::id(), &tids);
            nest_threads_asleep(Duration::from_millis(50));
            write_msg(tx.as_raw_fd(), id);
            assert_eq!(acks_rx.recv_timeout(WAIT_BOUND), Ok(id), "message {id}");
        }
        drop(stop_w);
        let counts: Vec<u64> = members.into_iter().map(|m| m.join().unwrap()).collect();
        assert_eq!(counts.iter().sum::<u64>(), N, "{counts:?}");
        eprintln!("{backend:?}: per member {counts:?}");
        assert!(
            counts.iter().all(|&c| c >= N * 2 / 5),
            "no turns: {counts:?}"
        );
    }

    herdless_fixtures::every_backend!(a_waiter_in_a_tokio_runtime);
}
