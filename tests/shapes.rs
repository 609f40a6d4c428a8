//! The shapes real servers have, on both backends: several exclusive descriptors shared by
//! every member under a backlog (threads and forked processes), with `wait` keeping to its
//! timeout; the two ends of one pipe as a job queue; thousands of ready descriptors on one
//! waiter, every one served; a member that sleeps holding an event, or is stopped with
//! SIGSTOP, while the others keep reading; character devices refused at `add`.

// Linux only: forked members, SIGSTOP, and tests/common uses pipe2, gettid and /proc.
#![cfg(any(target_os = "linux", target_os = "android"))]

mod common;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use herdless::{Backend, Error, Events, Group, Interest, Waiter};

/// The timeout of every wait in these tests.
const TIMEOUT: Duration = Duration::from_millis(200);
/// How far past its timeout a wait may return on a quiet machine (`-- --nocapture` prints the
/// worst seen): the bound is `noisy_bound(OVERRUN_TARGET, noise)`, with the scheduling noise a
/// `NoiseProbe` measured beside the test.
const OVERRUN_TARGET: Duration = Duration::from_millis(50);
/// How long a member may go without an event, or the test without a result, before the test
/// calls it a stall: a hang detector, far above any noise (a loaded machine slows a shape down
/// but keeps it moving).
const RUN_BOUND: Duration = Duration::from_secs(60);
/// Messages queued in each pipe of a backlog run: enough for the emulation's early wake-up
/// to kick in (it did, and locked the group, with two sources and three thousand each).
const PER_PIPE: u64 = 3000;

/// Reads exactly `buf.len()` bytes from `fd` (blocking), failing the test if nothing comes
/// for `RUN_BOUND`: a member stuck inside `wait` fails the test instead of hanging it.
fn read_bounded(fd: RawFd, mut buf: &mut [u8]) {
    while !buf.is_empty() {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polls one live pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, RUN_BOUND.as_millis() as i32) };
        assert!(ready == 1, "the group stalled: nothing for {RUN_BOUND:?}");
        // SAFETY: reads into a live buffer.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        assert!(n > 0, "read: {n} {}", std::io::Error::last_os_error());
        buf = &mut buf[n as usize..];
    }
}

/// Ids of pipe `p` are `p * ID_STRIDE + i`.
const ID_STRIDE: u64 = 1 << 32;
/// How long the storm keeps the pipes readable after the backlog.
const STORM: Duration = Duration::from_millis(400);

/// `n` pipes, each with `PER_PIPE` messages queued: (read ends, write ends, non-blocking).
fn backlogged_pipes(n: usize) -> (Vec<OwnedFd>, Vec<OwnedFd>) {
    (0..n)
        .map(|p| {
            let (rx, tx) = pipe();
            set_nonblocking(tx.as_raw_fd());
            for i in 0..PER_PIPE {
                write_msg(tx.as_raw_fd(), p as u64 * ID_STRIDE + i);
            }
            (rx, tx)
        })
        .unzip()
}

/// Keeps the pipes readable for `STORM` (writing on while there is room), then hangs up.
/// Returns how many messages each pipe got in all.
fn storm(txs: Vec<OwnedFd>) -> thread::JoinHandle<Vec<u64>> {
    thread::spawn(move || {
        let mut written = vec![PER_PIPE; txs.len()];
        let start = Instant::now();
        while start.elapsed() < STORM {
            for (p, tx) in txs.iter().enumerate() {
                let buf = (p as u64 * ID_STRIDE + written[p]).to_ne_bytes();
                // SAFETY: writes from a live buffer to our non-blocking pipe.
                if unsafe { libc::write(tx.as_raw_fd(), buf.as_ptr().cast(), MSG) } == MSG as isize
                {
                    written[p] += 1;
                }
            }
            thread::yield_now();
        }
        written
    })
}

/// What one member of a backlog run did: message ids read, its slowest wait past the
/// timeout, and its empty reads.
struct Share {
    ids: Vec<u64>,
    worst_overrun: Duration,
    empty: u64,
}

/// One member's loop over several exclusive pipes (key = pipe index): waits with `TIMEOUT`,
/// reads one message per event, deletes a pipe at EOF, stops when all are gone.
fn drain_shared_pipes(waiter: &mut Waiter, pipes: &[RawFd], interest: Interest) -> Share {
    for (key, &fd) in pipes.iter().enumerate() {
        // SAFETY: the pipes outlive this loop (the caller holds them).
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        waiter.add(&fd, key, interest).unwrap();
    }
    let mut open = pipes.len();
    let mut share = Share {
        ids: Vec::new(),
        worst_overrun: Duration::ZERO,
        empty: 0,
    };
    let mut events = Events::with_capacity(4);
    let mut last_event = Instant::now();
    while open > 0 {
        assert!(last_event.elapsed() < RUN_BOUND, "the group stalled");
        let before = Instant::now();
        waiter.wait(&mut events, Some(TIMEOUT)).unwrap();
        let overrun = before.elapsed().saturating_sub(TIMEOUT);
        share.worst_overrun = share.worst_overrun.max(overrun);
        if !events.is_empty() {
            last_event = Instant::now();
        }
        for event in events.iter() {
            let fd = pipes[event.key];
            match read_msg(fd) {
                Some(Some(id)) => share.ids.push(id),
                Some(None) => {
                    // SAFETY: as above.
                    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
                    waiter.delete(&fd).unwrap();
                    open -= 1;
                    continue;
                }
                None => share.empty += 1,
            }
            waiter.consumed(event.key).unwrap();
        }
    }
    share
}

/// Checks and reports a backlog run: every message read once, every member took part, no wait
/// overran its timeout by more than the scheduling `noise` allows.
fn check_shares(what: &str, shares: &[Share], written: &[u64], noise: Duration) {
    let mut ids: Vec<u64> = shares.iter().flat_map(|s| s.ids.iter().copied()).collect();
    ids.sort_unstable();
    let expected: Vec<u64> = (0..written.len() as u64)
        .flat_map(|p| (0..written[p as usize]).map(move |i| p * ID_STRIDE + i))
        .collect();
    assert!(ids == expected, "{what}: lost or read twice");
    let worst = shares.iter().map(|s| s.worst_overrun).max().unwrap();
    let per_member: Vec<usize> = shares.iter().map(|s| s.ids.len()).collect();
    let empty: u64 = shares.iter().map(|s| s.empty).sum();
    eprintln!(
        "{what}: per member {per_member:?}, empty reads {empty}, worst overrun {worst:?} \
         (noise {noise:?})"
    );
    let bound = noisy_bound(OVERRUN_TARGET, noise);
    assert!(
        worst <= bound,
        "{what}: wait({TIMEOUT:?}) returned {worst:?} late (noise {noise:?}, bound {bound:?})"
    );
}

/// Members that each register every one of `sources` pipes exclusive, as threads.
fn sources_shared_by_threads(backend: Backend, sources: usize) {
    for members in [2, 3, 4, 8] {
        for interest in [
            Interest::READABLE.exclusive().one_event_round_robin(),
            Interest::READABLE.exclusive(),
        ] {
            let group = Group::builder().backend(backend).build().unwrap();
            let probe = NoiseProbe::start();
            let (pipes, txs) = backlogged_pipes(sources);
            let pipes = Arc::new(pipes);
            let (done_tx, done_rx) = mpsc::channel();
            let handles: Vec<_> = (0..members)
                .map(|_| {
                    let mut waiter = group.join().unwrap();
                    let (pipes, done_tx) = (pipes.clone(), done_tx.clone());
                    thread::spawn(move || {
                        let fds: Vec<RawFd> = pipes.iter().map(|p| p.as_raw_fd()).collect();
                        let share = drain_shared_pipes(&mut waiter, &fds, interest);
                        let _ = done_tx.send(());
                        share
                    })
                })
                .collect();
            let written = storm(txs).join().unwrap();
            // A member stuck inside `wait` fails the test instead of hanging it.
            for _ in 0..members {
                done_rx
                    .recv_timeout(RUN_BOUND)
                    .expect("the group stalled: a member never finished");
            }
            let shares: Vec<Share> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            let what = format!("{backend:?} {sources} sources, {members} threads, {interest:?}");
            check_shares(&what, &shares, &written, probe.worst());
        }
    }
}

/// As `sources_shared_by_threads`, with forked processes.
fn sources_shared_by_processes(backend: Backend, sources: usize) {
    let _one_at_a_time = one_fork_at_a_time();
    for members in [2, 3, 4, 8] {
        let interest = Interest::READABLE.exclusive().one_event_round_robin();
        let group = Group::builder().backend(backend).build().unwrap();
        let probe = NoiseProbe::start();
        let (pipes, txs) = backlogged_pipes(sources);
        let tx_fds: Vec<RawFd> = txs.iter().map(|t| t.as_raw_fd()).collect();
        let fds: Vec<RawFd> = pipes.iter().map(|p| p.as_raw_fd()).collect();
        // One result pipe per member: a record longer than PIPE_BUF is not written atomically.
        let results: Vec<(OwnedFd, OwnedFd)> = (0..members).map(|_| pipe()).collect();
        let mut pids = Vec::new();
        for res_w in results.iter().map(|r| &r.1) {
            // SAFETY: the child only uses this crate, raw system calls and _exit.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                for &tx in &tx_fds {
                    // SAFETY: the child's copies of the write ends: closed so that the
                    // parent's hang-up is the end of the stream.
                    unsafe { libc::close(tx) };
                }
                let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let mut waiter = group.join().unwrap();
                    let share = drain_shared_pipes(&mut waiter, &fds, interest);
                    let mut record = Vec::new();
                    for v in [
                        share.ids.len() as u64,
                        share.worst_overrun.as_micros() as u64,
                        share.empty,
                    ]
                    .into_iter()
                    .chain(share.ids)
                    {
                        record.extend_from_slice(&v.to_ne_bytes());
                    }
                    write_all(res_w.as_raw_fd(), &record);
                }));
                // SAFETY: leaves the child at once, without running the test harness's exit.
                unsafe { libc::_exit(i32::from(code.is_err())) };
            }
            pids.push(pid);
        }
        let mut on_failure = Children(pids.clone());
        let written = storm(txs).join().unwrap();
        let mut shares = Vec::new();
        for (res_r, res_w) in results {
            drop(res_w);
            let read_u64 = || {
                let mut buf = [0u8; 8];
                read_bounded(res_r.as_raw_fd(), &mut buf);
                u64::from_ne_bytes(buf)
            };
            let n = read_u64();
            let worst_overrun = Duration::from_micros(read_u64());
            let empty = read_u64();
            let ids = (0..n).map(|_| read_u64()).collect();
            shares.push(Share {
                ids,
                worst_overrun,
                empty,
            });
        }
        on_failure.wait_all();
        let what = format!("{backend:?} {sources} sources, {members} processes");
        check_shares(&what, &shares, &written, probe.worst());
    }
}

fn two_sources_threads(backend: Backend) {
    sources_shared_by_threads(backend, 2);
}

fn eight_sources_threads(backend: Backend) {
    sources_shared_by_threads(backend, 8);
}

fn two_sources_processes(backend: Backend) {
    sources_shared_by_processes(backend, 2);
}

fn eight_sources_processes(backend: Backend) {
    sources_shared_by_processes(backend, 8);
}

/// One waiter registers a pipe's read end and then its write end, both exclusive: two
/// registrations, not "already registered".
fn both_ends_in_one_waiter(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let (rx, tx) = pipe();
    set_nonblocking(tx.as_raw_fd()); // exclusive: a wake-up may find the pipe full again
    let mut waiter = group.join().unwrap();
    waiter.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
    waiter.add(&tx, 1, Interest::WRITABLE.exclusive()).unwrap();
    assert_eq!(wait_keys(&mut waiter, 4), vec![1], "the write end has room");
    waiter.consumed(1).unwrap();
    write_msg(tx.as_raw_fd(), 7);
    let keys = wait_keys(&mut waiter, 4);
    assert!(keys.contains(&0), "the read end has a message: {keys:?}");
}

/// A bounded job queue on one pipe: producers wait for room on the write end, consumers for
/// jobs on the read end, all exclusive, in one group (and one member does both). Every job is
/// consumed once, and the queue never stops.
fn pipe_as_job_queue(backend: Backend) {
    const JOBS: u64 = 20_000;
    let group = Group::builder().backend(backend).build().unwrap();
    let probe = NoiseProbe::start();
    let (rx, tx) = pipe();
    set_nonblocking(tx.as_raw_fd());
    let (rx, tx) = (Arc::new(rx), Arc::new(tx));
    let next_job = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    // (produces, consumes) per member.
    let roles = [
        (true, false),
        (true, false),
        (false, true),
        (false, true),
        (true, true),
    ];
    let handles: Vec<_> = roles
        .iter()
        .map(|&(produces, consumes)| {
            let mut waiter = group.join().unwrap();
            if consumes {
                waiter.add(&*rx, 0, Interest::READABLE.exclusive()).unwrap();
            }
            if produces {
                waiter.add(&*tx, 1, Interest::WRITABLE.exclusive()).unwrap();
            }
            let (rx, tx) = (rx.clone(), tx.clone());
            let (next_job, done) = (next_job.clone(), done.clone());
            thread::spawn(move || {
                let mut events = Events::with_capacity(2);
                let mut unsent: Option<u64> = None;
                let mut consumed = Vec::new();
                let mut worst = Duration::ZERO;
                let (mut progress, mut progress_at) = (0, Instant::now());
                while done.load(SeqCst) < JOBS {
                    if done.load(SeqCst) != progress {
                        (progress, progress_at) = (done.load(SeqCst), Instant::now());
                    }
                    assert!(
                        progress_at.elapsed() < RUN_BOUND,
                        "the job queue stopped at {progress} of {JOBS}"
                    );
                    let before = Instant::now();
                    waiter.wait(&mut events, Some(TIMEOUT)).unwrap();
                    let overrun = before.elapsed().saturating_sub(TIMEOUT);
                    worst = worst.max(overrun);
                    for event in events.iter() {
                        if event.key == 0 {
                            if let Some(Some(id)) = read_msg(rx.as_raw_fd()) {
                                consumed.push(id);
                                done.fetch_add(1, SeqCst);
                            }
                        } else {
                            let job = unsent.take().or_else(|| {
                                let j = next_job.fetch_add(1, SeqCst);
                                (j < JOBS).then_some(j)
                            });
                            if let Some(job) = job {
                                let buf = job.to_ne_bytes();
                                // SAFETY: writes from a live buffer to our non-blocking pipe.
                                let n = unsafe {
                                    libc::write(tx.as_raw_fd(), buf.as_ptr().cast(), MSG)
                                };
                                if n != MSG as isize {
                                    unsent = Some(job); // full: try again on the next event
                                }
                            } else if produces && !consumes {
                                // Every job is written: this producer is done.
                                waiter.delete(&*tx).unwrap();
                            }
                        }
                        waiter.consumed(event.key).unwrap();
                    }
                    if produces && !consumes && next_job.load(SeqCst) >= JOBS && unsent.is_none() {
                        return (consumed, worst);
                    }
                }
                (consumed, worst)
            })
        })
        .collect();
    let results: Vec<(Vec<u64>, Duration)> =
        handles.into_iter().map(|h| h.join().unwrap()).collect();
    let mut ids: Vec<u64> = results.iter().flat_map(|r| r.0.iter().copied()).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        (0..JOBS).collect::<Vec<_>>(),
        "jobs lost or done twice"
    );
    let worst = results.iter().map(|r| r.1).max().unwrap();
    let per_member: Vec<usize> = results.iter().map(|r| r.0.len()).collect();
    let noise = probe.worst();
    eprintln!(
        "{backend:?} job queue: consumed per member {per_member:?}, worst overrun {worst:?} \
         (noise {noise:?})"
    );
    let bound = noisy_bound(OVERRUN_TARGET, noise);
    assert!(
        worst <= bound,
        "wait returned {worst:?} late (bound {bound:?})"
    );
}

/// Raises the soft limit on open descriptors to at least `wanted`; false if the hard limit
/// does not allow it.
fn raise_nofile(wanted: u64) -> bool {
    // SAFETY: rlimit is plain data, filled by getrlimit.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: getrlimit writes the live struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return false;
    }
    if lim.rlim_cur >= wanted {
        return true;
    }
    if lim.rlim_max < wanted {
        return false;
    }
    lim.rlim_cur = wanted;
    // SAFETY: setrlimit reads the live struct.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 }
}

/// 4 000 pipes, all readable, on one waiter with one event per wait: every one is served, in
/// turn (twice each in 8 000 waits), and a wait costs about the same as with a few.
fn four_thousand_ready_descriptors(backend: Backend) {
    const PIPES: usize = 4000;
    if !raise_nofile(PIPES as u64 + 512) {
        let msg =
            "SKIPPED: four_thousand_ready_descriptors: RLIMIT_NOFILE's hard limit is below 4 512";
        eprintln!("{msg}");
        println!("{msg}");
        return;
    }
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let pipes: Vec<OwnedFd> = (0..PIPES)
        .map(|i| {
            let (rx, tx) = pipe();
            write_msg(tx.as_raw_fd(), i as u64);
            rx // the write end closes here: the pipe stays readable
        })
        .collect();
    for (key, rx) in pipes.iter().enumerate() {
        waiter
            .add(rx, key, Interest::READABLE.one_event_round_robin())
            .unwrap();
    }
    let mut served = vec![0u32; PIPES];
    let mut events = Events::with_capacity(1);
    let start = Instant::now();
    for _ in 0..2 * PIPES {
        assert_eq!(waiter.wait(&mut events, Some(WAIT_BOUND)).unwrap(), 1);
        served[events.iter().next().unwrap().key] += 1;
    }
    let per_wait = start.elapsed() / (2 * PIPES) as u32;
    let never = served.iter().filter(|&&n| n == 0).count();
    let (min, max) = (served.iter().min().unwrap(), served.iter().max().unwrap());
    eprintln!(
        "{backend:?} {PIPES} ready descriptors: served min {min} max {max}, never {never}, \
         {per_wait:?} per wait"
    );
    assert_eq!(never, 0, "{never} descriptors never served");
    assert!(*min >= 1 && *max <= 3, "not in turn: min {min}, max {max}");
}

/// A member fault while the others read a paced stream of messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The member reads a message and sleeps 2 s before it says `consumed`.
    SleepsHolding,
    /// The member's process is stopped with SIGSTOP for 2 s (processes only: a stop stops
    /// every thread of a process), once while it leads and once while it does not.
    Stopped,
}

const MEMBERS: usize = 4;
const PAUSE: Duration = Duration::from_secs(2);
/// The longest gap in the group's reads while one member is paused, on a quiet machine (the
/// tests print what they measure): the bound is `noisy_bound(GAP_TARGET, noise)`. A bound that
/// reaches the pause itself could not tell a stall from the noise: then the gap is only
/// reported, loudly.
const GAP_TARGET: Duration = Duration::from_millis(150);
/// One message every this long.
const PACE: Duration = Duration::from_millis(1);

/// The longest time between two consecutive reads.
fn longest_gap(mut reads: Vec<Instant>) -> Duration {
    reads.sort_unstable();
    reads
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default()
}

/// Writes `count` messages, one every `PACE` (pacing, not synchronisation), then hangs up.
fn paced_producer(tx: OwnedFd, count: u64) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let start = Instant::now();
        for i in 0..count {
            write_msg(tx.as_raw_fd(), i);
            let due = start + PACE * (i as u32 + 1);
            if let Some(left) = due.checked_duration_since(Instant::now()) {
                thread::sleep(left);
            }
        }
    })
}

/// Threads: member 0 sleeps `PAUSE` holding its 50th message; the others keep reading.
fn member_sleeps_holding_threads(backend: Backend) {
    let messages = (PAUSE.as_millis() as u64 * 3 / 2) / PACE.as_millis() as u64 + 500;
    let group = Group::builder().backend(backend).build().unwrap();
    let probe = NoiseProbe::start();
    let (rx, tx) = pipe();
    let rx = Arc::new(rx);
    let (read_tx, read_rx) = mpsc::channel::<(u64, Instant)>();
    let paused = Arc::new(AtomicBool::new(false));
    let interest = Interest::READABLE.exclusive().one_event_round_robin();
    let handles: Vec<_> = (0..MEMBERS)
        .map(|m| {
            let mut waiter = group.join().unwrap();
            waiter.add(&*rx, 0, interest).unwrap();
            let (rx, read_tx, paused) = (rx.clone(), read_tx.clone(), paused.clone());
            thread::spawn(move || {
                let mut events = Events::with_capacity(1);
                let mut mine = 0;
                loop {
                    waiter.wait(&mut events, Some(WAIT_BOUND)).unwrap();
                    if events.is_empty() {
                        continue;
                    }
                    match read_msg(rx.as_raw_fd()) {
                        Some(Some(id)) => {
                            read_tx.send((id, Instant::now())).unwrap();
                            mine += 1;
                            if m == 0 && mine == 50 && !paused.swap(true, SeqCst) {
                                thread::sleep(PAUSE); // holding: consumed comes after
                            }
                        }
                        Some(None) => return,
                        None => {}
                    }
                    waiter.consumed(0).unwrap();
                }
            })
        })
        .collect();
    drop(read_tx);
    let producer = paced_producer(tx, messages);
    let reads: Vec<(u64, Instant)> = read_rx.iter().collect();
    producer.join().unwrap();
    for h in handles {
        h.join().unwrap();
    }
    check_paced(
        backend,
        "a thread sleeps holding an event",
        reads,
        messages,
        true,
        probe.worst(),
    );
}

/// Every message read once; the longest gap between reads within bound.
fn check_paced(
    backend: Backend,
    what: &str,
    reads: Vec<(u64, Instant)>,
    messages: u64,
    paused: bool,
    noise: Duration,
) {
    let mut ids: Vec<u64> = reads.iter().map(|r| r.0).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..messages).collect::<Vec<_>>(), "lost or read twice");
    let gap = longest_gap(reads.into_iter().map(|r| r.1).collect());
    eprintln!("{backend:?} {what}: longest gap between reads {gap:?} (noise {noise:?})");
    let bound = noisy_bound(GAP_TARGET, noise);
    if paused && bound >= PAUSE {
        let msg = format!("INCONCLUSIVE: {what}: noise {noise:?} too high to tell a stall");
        eprintln!("{msg}");
        println!("{msg}");
    } else if paused {
        assert!(
            gap < bound,
            "{what}: the group stalled {gap:?} (bound {bound:?})"
        );
    }
}

/// Processes: one member sleeps holding an event, or is stopped (twice: while it leads,
/// and while it does not); the others keep reading.
fn member_paused_processes(backend: Backend, fault: Fault) {
    let _one_at_a_time = one_fork_at_a_time();
    let pauses = if fault == Fault::Stopped { 2 } else { 1 };
    let messages = (PAUSE.as_millis() as u64 * (pauses + 1)) / PACE.as_millis() as u64 + 500;
    let group = Group::builder().backend(backend).build().unwrap();
    let probe = NoiseProbe::start();
    let (rx, tx) = pipe();
    let (ack_r, ack_w) = pipe();
    // SAFETY: fcntl on our own descriptor: the parent reads it blocking.
    unsafe { libc::fcntl(ack_r.as_raw_fd(), libc::F_SETFL, 0) };
    let mut pids = Vec::new();
    for m in 0..MEMBERS {
        // SAFETY: the child only uses this crate, raw system calls and _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            drop(tx);
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut waiter = group.join().unwrap();
                let interest = Interest::READABLE.exclusive().one_event_round_robin();
                waiter.add(&rx, 0, interest).unwrap();
                let mut events = Events::with_capacity(1);
                let mut mine = 0;
                loop {
                    waiter.wait(&mut events, Some(WAIT_BOUND)).unwrap();
                    if events.is_empty() {
                        continue;
                    }
                    match read_msg(rx.as_raw_fd()) {
                        Some(Some(id)) => {
                            write_all(ack_w.as_raw_fd(), &id.to_ne_bytes());
                            mine += 1;
                            if fault == Fault::SleepsHolding && m == 0 && mine == 50 {
                                thread::sleep(PAUSE);
                            }
                        }
                        Some(None) => return,
                        None => {}
                    }
                    waiter.consumed(0).unwrap();
                }
            }));
            // SAFETY: leaves the child at once, without running the test harness's exit.
            unsafe { libc::_exit(i32::from(code.is_err())) };
        }
        pids.push(pid);
    }
    drop((rx, ack_w));
    let mut on_failure = Children(pids.clone());
    let producer = paced_producer(tx, messages);
    let stopper = (fault == Fault::Stopped).then(|| {
        let (group, pids) = (group.clone(), pids.clone());
        thread::spawn(move || {
            for wants_leader in [true, false] {
                thread::sleep(PAUSE / 4);
                let stats = group.stats();
                let pick = stats
                    .iter()
                    .find(|s| s.alive && s.leader == wants_leader)
                    .and_then(|s| pids.iter().position(|&p| p as u32 == s.pid))
                    .unwrap_or(0);
                // SAFETY: kill(2) on our own child.
                unsafe { libc::kill(pids[pick], libc::SIGSTOP) };
                thread::sleep(PAUSE);
                // SAFETY: as above.
                unsafe { libc::kill(pids[pick], libc::SIGCONT) };
            }
        })
    });
    let mut reads = Vec::new();
    for _ in 0..messages {
        let mut buf = [0u8; 8];
        read_bounded(ack_r.as_raw_fd(), &mut buf);
        reads.push((u64::from_ne_bytes(buf), Instant::now()));
    }
    producer.join().unwrap();
    if let Some(s) = stopper {
        s.join().unwrap();
    }
    on_failure.wait_all();
    let what = match fault {
        Fault::SleepsHolding => "a process sleeps holding an event",
        Fault::Stopped => "a process stopped (leading, then not)",
    };
    check_paced(backend, what, reads, messages, true, probe.worst());
}

/// Forked members, killed if the test fails halfway.
struct Children(Vec<i32>);

impl Children {
    /// Reaps every child (they exit at EOF) and checks they exited cleanly.
    fn wait_all(&mut self) {
        for pid in std::mem::take(&mut self.0) {
            let mut status = 0;
            // SAFETY: reaps our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "a member failed (status {status})"
            );
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for &pid in &self.0 {
            // SAFETY: kill(2) and waitpid(2) on our own children.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

fn member_sleeps_holding_processes(backend: Backend) {
    member_paused_processes(backend, Fault::SleepsHolding);
}

fn member_stopped_processes(backend: Backend) {
    member_paused_processes(backend, Fault::Stopped);
}

/// Character devices the poller cannot watch are refused at `add`, exclusive or not, with a
/// message that says what they are; nothing is registered.
fn character_devices_refused(backend: Backend) {
    if backend == Backend::Emulated && cfg!(polling_test_poll_backend) {
        // poll(2) calls /dev/null always ready, as a regular file, and refuses nothing: there is
        // no poller to ask. (epoll, kqueue and IOCP refuse.)
        let msg = "SKIPPED: character_devices_refused: polling's poll(2) backend refuses nothing";
        eprintln!("{msg}");
        println!("{msg}");
        return;
    }
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    for path in ["/dev/null", "/dev/zero", "/dev/full"] {
        let Ok(dev) = std::fs::File::open(path) else {
            eprintln!("SKIPPED: {path} cannot be opened here");
            continue;
        };
        for interest in [Interest::READABLE, Interest::READABLE.exclusive()] {
            match waiter.add(&dev, 0, interest) {
                Err(e @ Error::UnwatchableDescriptor { .. }) => {
                    let text = e.to_string();
                    assert!(text.contains("character device"), "{path}: {text}");
                }
                other => panic!("{path} {interest:?}: {other:?}"),
            }
            assert!(matches!(
                waiter.delete(&dev),
                Err(Error::NotRegistered { .. })
            ));
        }
    }
    // The group still works.
    let (rx, tx) = pipe();
    waiter.add(&rx, 1, Interest::READABLE.exclusive()).unwrap();
    write_msg(tx.as_raw_fd(), 1);
    assert_eq!(wait_keys(&mut waiter, 4), vec![1]);
}

/// A buffer of any capacity is made without a panic, and a wait with it works.
fn huge_events_capacity(backend: Backend) {
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiter = group.join().unwrap();
    let (rx, tx) = pipe();
    waiter.add(&rx, 3, Interest::READABLE.exclusive()).unwrap();
    write_msg(tx.as_raw_fd(), 1);
    let mut events = Events::with_capacity(usize::MAX / 8);
    assert_eq!(events.capacity(), usize::MAX / 8);
    assert_eq!(waiter.wait(&mut events, Some(WAIT_BOUND)).unwrap(), 1);
    assert_eq!(events.iter().next().unwrap().key, 3);
}

every_backend!(
    huge_events_capacity,
    two_sources_threads,
    eight_sources_threads,
    two_sources_processes,
    eight_sources_processes,
    both_ends_in_one_waiter,
    pipe_as_job_queue,
    four_thousand_ready_descriptors,
    member_sleeps_holding_threads,
    member_sleeps_holding_processes,
    member_stopped_processes,
    character_devices_refused,
);
