//! Requests one at a time: a client thread that waits for each reply, four member threads on one
//! request pipe (exclusive, one event per wait), a reply pipe back. Every call is answered once,
//! by the member whose turn it is. Then the calls stop, all members but one leave, and the last
//! one's waits (each with a 1 ms timeout) cost about what a plain `poll(2)` with the same timeout
//! costs beside it. The emulation's leader looks for the next request awake for up to 50 µs
//! while requests come quickly (`src/emulated/quick_watch.rs`); once they stop, its waits that
//! time out end that within a few waits, where a look awake at every wait would cost each of
//! them those 50 µs of CPU.

// Linux only: getrusage(RUSAGE_THREAD).
#![cfg(any(target_os = "linux", target_os = "android"))]

mod common;

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::*;
use herdless::{Backend, Events, Group, Interest};

const MEMBERS: usize = 4;
const CALLS: u64 = 2_000;
/// How long the group stays quiet after the last call.
const QUIET: Duration = Duration::from_millis(300);
/// The members' wait timeout.
const TICK: Duration = Duration::from_millis(1);
const REQUEST: usize = 0;
const STOP: usize = 1;

/// CPU time (user + system) of the calling thread so far.
fn thread_cpu() -> Duration {
    herdless_fixtures::counters::thread_cpu_time().expect("getrusage(RUSAGE_THREAD)")
}

/// The quiet time is cut into windows this long, and a call's cost is its cost in the cheapest
/// window: a look awake costs its 50 µs in every window, a burst of load elsewhere on the
/// machine only in some.
const WINDOW: Duration = Duration::from_millis(30);

/// CPU time per call of a loop of calls, in the cheapest of its `WINDOW`s.
#[derive(Debug)]
struct CostPerCall {
    started: Instant,
    cpu: Duration,
    calls: u32,
    /// In the windows closed so far: all calls, and the cheapest window's cost per call.
    total_calls: u32,
    cheapest: Option<Duration>,
}

impl CostPerCall {
    /// From now, on the calling thread.
    fn start() -> CostPerCall {
        CostPerCall {
            started: Instant::now(),
            cpu: thread_cpu(),
            calls: 0,
            total_calls: 0,
            cheapest: None,
        }
    }

    /// One more call ended (on the thread that started it).
    fn call(&mut self) {
        self.calls += 1;
        if self.started.elapsed() >= WINDOW {
            let per_call = thread_cpu().saturating_sub(self.cpu) / self.calls;
            self.cheapest = Some(self.cheapest.map_or(per_call, |c| c.min(per_call)));
            self.total_calls += self.calls;
            (self.started, self.cpu, self.calls) = (Instant::now(), thread_cpu(), 0);
        }
    }
}

/// What one member did: calls served, and, for the member that stays, its waits and their CPU
/// time once the group was quiet.
#[derive(Debug, Default)]
struct Member {
    served: u64,
    quiet: Option<CostPerCall>,
}

/// `poll(2)` on a descriptor that never becomes ready, with the members' timeout, for `QUIET`:
/// the CPU time of one such call.
fn plain_poll_cost() -> CostPerCall {
    let (never, _writer) = pipe();
    let mut pfd = libc::pollfd {
        fd: never.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let (start, mut cost) = (Instant::now(), CostPerCall::start());
    while start.elapsed() < QUIET {
        // SAFETY: polls one live pollfd.
        unsafe { libc::poll(&mut pfd, 1, TICK.as_millis() as libc::c_int) };
        cost.call();
    }
    cost
}

fn calls_one_at_a_time_then_quiet(backend: Backend) {
    let group = Group::builder()
        .backend(backend)
        .max_members(MEMBERS)
        .build()
        .unwrap();
    let (requests_rx, requests_tx) = pipe();
    let (replies_rx, replies_tx) =
        herdless_fixtures::pipe(herdless_fixtures::Blocking::Both).unwrap();
    let (stop_rx, stop_tx) = pipe();
    let quiet = AtomicBool::new(false);
    let shared = Interest::READABLE.exclusive().one_event_round_robin();
    let (members, poll_cost) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..MEMBERS)
            .map(|i| {
                let mut waiter = group.join().unwrap();
                waiter.add(&requests_rx, REQUEST, shared).unwrap();
                waiter.add(&stop_rx, STOP, Interest::READABLE).unwrap();
                let (requests, replies, quiet) =
                    (requests_rx.as_raw_fd(), replies_tx.as_raw_fd(), &quiet);
                s.spawn(move || {
                    let mut me = Member::default();
                    let mut events = Events::with_capacity(2);

                    loop {
                        waiter.wait(&mut events, Some(TICK)).unwrap();
                        if quiet.load(SeqCst) {
                            if i != 0 {
                                break; // leaves: member 0 stays alone
                            }
                            match &mut me.quiet {
                                None => me.quiet = Some(CostPerCall::start()),
                                Some(cost) => cost.call(),
                            }
                        }
                        let keys: Vec<usize> = events.iter().map(|e| e.key).collect();
                        if keys.contains(&STOP) {
                            break;
                        }
                        if keys.contains(&REQUEST) {
                            match read_msg(requests) {
                                Some(Some(id)) => {
                                    waiter.consumed(REQUEST).unwrap();
                                    me.served += 1;
                                    write_msg(replies, id);
                                }
                                Some(None) => panic!("the request pipe closed"),
                                None => waiter.found_nothing(REQUEST).unwrap(),
                            }
                        }
                    }
                    me
                })
            })
            .collect();
        // The client: one call at a time, each reply the answer to its own request.
        let mut buf = [0u8; MSG];
        for id in 0..CALLS {
            write_msg(requests_tx.as_raw_fd(), id);
            read_exact(replies_rx.as_raw_fd(), &mut buf);
            assert_eq!(
                u64::from_ne_bytes(buf),
                id,
                "{backend:?}: the reply to another call"
            );
        }
        quiet.store(true, SeqCst);
        let poll_cost = plain_poll_cost();
        drop(stop_tx);
        let members: Vec<Member> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        eprintln!("{backend:?}: {members:?}; a plain poll(2) of 1 ms: {poll_cost:?}");
        (members, poll_cost)
    });
    let served: Vec<u64> = members.iter().map(|m| m.served).collect();
    assert_eq!(
        served.iter().sum::<u64>(),
        CALLS,
        "{backend:?}: calls served: {served:?}"
    );
    // In turn: every member serves at least a quarter of its share.
    let share = CALLS / MEMBERS as u64;
    assert!(
        served.iter().all(|&n| n * 4 >= share),
        "{backend:?}: a member served less than a quarter of its share: {served:?}"
    );
    // Quiet: the last member's waits time out every millisecond. A kernel wait that times out
    // costs a few microseconds of CPU, more in a debug build (herdless's own code) or on a
    // loaded machine (the plain poll's cost too); a look awake adds 50 µs to every wait.
    let last = members[0]
        .quiet
        .as_ref()
        .expect("member 0 stayed for the quiet time");
    assert!(
        last.total_calls >= 10,
        "{backend:?}: only {} waits in {QUIET:?} of 1 ms timeouts",
        last.total_calls
    );
    let (Some(per_wait), Some(poll_cost)) = (last.cheapest, poll_cost.cheapest) else {
        panic!("{backend:?}: no whole window of quiet waits: {last:?}, {poll_cost:?}");
    };
    assert!(
        per_wait < poll_cost * 2 + Duration::from_micros(25),
        "{backend:?}: {per_wait:?} of CPU per quiet wait, where a plain poll(2) costs \
         {poll_cost:?}: {last:?}"
    );
}

every_backend!(calls_one_at_a_time_then_quiet);
