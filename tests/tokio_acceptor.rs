//! The Tokio acceptor (feature `tokio`) across forked workers, against the naive nesting.
//!
//! Four forked workers, each with its own current-thread Tokio runtime, share one loopback
//! listener; the parent makes 400 connections 1 ms apart, one after the other, and reads each
//! one's reply (the index of the worker that served it). With `herdless::tokio::Acceptor`
//! every connection is served, the workers take turns, and the thread that waits on the
//! listener wakes about once per connection. The naive nesting (an epoll with the listener
//! `EPOLLEXCLUSIVE`, registered in each runtime through `AsyncFd`) is measured the same way and
//! herds: every worker's runtime thread is woken for every connection, because
//! `ep_poll_callback` counts an exclusive wake-up as taken only when a thread sleeps in that
//! epoll itself.
//!
//! What is counted, per worker: the voluntary context switches (`RUSAGE_THREAD`) of the thread
//! that waits on the listener (the acceptor thread; for the nesting, the runtime thread),
//! read by that thread; the runtime thread's own switches (with the acceptor, it is woken by
//! the hand-over); and the whole worker process's switches, read by the parent from `wait4`.

#![cfg(all(feature = "tokio", target_os = "linux"))]

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::Duration;

use herdless::{tokio::Acceptor, Backend, Group};
use herdless_fixtures::counters;
use herdless_fixtures::{Blocking, SharedCounters};
use tokio::io::unix::AsyncFd;

const WORKERS: usize = 4;
const CONNECTIONS: usize = 400;

/// Per worker, in shared memory.
const ACCEPTED: usize = 0;
const LISTENER_THREAD: usize = 1;
const RUNTIME_THREAD: usize = 2;
const SLOTS: usize = 3;

/// The tests of this file, one at a time: the forking ones measure per-run counts, and no
/// acceptor thread of another test should be running when they fork.
static FORKS: Mutex<()> = Mutex::new(());

#[derive(Clone, Copy, Debug, PartialEq)]
enum Setup {
    Acceptor(Backend),
    /// An epoll with the listener `EPOLLEXCLUSIVE`, registered in the runtime via `AsyncFd`.
    Nested,
}

#[derive(Debug)]
struct Outcome {
    served: usize,
    per_worker: Vec<u64>,
    accepted: Vec<u64>,
    listener_thread: Vec<u64>,
    runtime_thread: Vec<u64>,
    process: Vec<u64>,
}

impl Outcome {
    fn per_conn(v: &[u64]) -> f64 {
        v.iter().sum::<u64>() as f64 / CONNECTIONS as f64
    }
    fn report(&self, setup: Setup) {
        eprintln!(
            "{setup:?}: served {}/{CONNECTIONS}, per worker {:?}; kernel wake-ups per \
             connection: listener-waiting threads {:.2}, runtime threads {:.2}, whole worker \
             processes {:.2}",
            self.served,
            self.per_worker,
            Self::per_conn(&self.listener_thread),
            Self::per_conn(&self.runtime_thread),
            Self::per_conn(&self.process),
        );
    }
}

/// Counters in one anonymous shared mapping, made before `fork` and never unmapped, so that a
/// task may carry it.
#[derive(Clone, Copy)]
struct Shm(&'static SharedCounters);

impl Shm {
    fn new(n: usize) -> Shm {
        Shm(SharedCounters::leaked(n).expect("mmap"))
    }
    fn at(self, worker: usize, slot: usize) -> &'static AtomicU64 {
        assert!(worker < WORKERS && slot < SLOTS);
        self.0.get(worker * SLOTS + slot)
    }
}

fn pipe() -> (OwnedFd, OwnedFd) {
    herdless_fixtures::pipe(Blocking::Both).expect("pipe")
}

fn write_byte(fd: RawFd, b: u8) {
    // SAFETY: writes one byte from a live buffer.
    assert_eq!(unsafe { libc::write(fd, [b].as_ptr().cast(), 1) }, 1);
}

fn read_byte(fd: RawFd) -> u8 {
    let mut b = [0u8; 1];
    // SAFETY: reads one byte into a live buffer (blocking pipe end).
    assert_eq!(unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) }, 1);
    b[0]
}

fn run(setup: Setup) -> Option<Outcome> {
    let _one = FORKS.lock().unwrap_or_else(|e| e.into_inner());
    let group = match setup {
        Setup::Acceptor(backend) => match Group::builder()
            .backend(backend)
            .rotate_every(1)
            .max_members(WORKERS)
            .build()
        {
            Ok(g) => Some(g),
            Err(e) => {
                eprintln!("SKIPPED {setup:?}: {e}");
                return None;
            }
        },
        Setup::Nested => None,
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let shm = Shm::new(WORKERS * SLOTS);
    let (ready_r, ready_w) = pipe();
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let (stop_r, stop_w) = pipe();
        // SAFETY: the child runs only the worker below (std, Tokio, herdless, libc) and leaves
        // by _exit; it never returns into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                worker(w, setup, group.as_ref(), &listener, shm, &ready_w, stop_r)
            })) {
                Ok(()) => 0,
                Err(_) => 1,
            };
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(code) };
        }
        drop(stop_r);
        workers.push((pid, stop_w));
    }
    drop(ready_w);
    for _ in 0..WORKERS {
        read_byte(ready_r.as_raw_fd());
    }
    // The client: one connection at a time, 1 ms apart; the reply names the worker.
    let mut per_worker = vec![0u64; WORKERS];
    let mut served = 0;
    for _ in 0..CONNECTIONS {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut who = [0u8; 1];
        if stream.read_exact(&mut who).is_ok() && (who[0] as usize) < WORKERS {
            per_worker[who[0] as usize] += 1;
            served += 1;
        }
        drop(stream);
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut process = Vec::new();
    for (pid, stop_w) in &workers {
        write_byte(stop_w.as_raw_fd(), b's');
        let mut status = 0;
        // SAFETY: rusage is plain data.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: reaps our own child into live out-parameters.
        assert_eq!(
            unsafe { libc::wait4(*pid, &mut status, 0, &mut usage) },
            *pid
        );
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "worker {pid} failed: status {status}"
        );
        process.push(usage.ru_nvcsw as u64);
    }
    let column = |slot| (0..WORKERS).map(|w| shm.at(w, slot).load(SeqCst)).collect();
    Some(Outcome {
        served,
        per_worker,
        accepted: column(ACCEPTED),
        listener_thread: column(LISTENER_THREAD),
        runtime_thread: column(RUNTIME_THREAD),
        process,
    })
}

/// One forked worker: a current-thread runtime that accepts and answers with its index until
/// the parent's stop byte.
fn worker(
    w: usize,
    setup: Setup,
    group: Option<&Group>,
    listener: &TcpListener,
    shm: Shm,
    ready: &OwnedFd,
    stop: OwnedFd,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let listener = listener.try_clone().unwrap();
    let runtime_start = counters::thread_voluntary_switches().unwrap();
    rt.block_on(async {
        match (setup, group) {
            (Setup::Acceptor(_), Some(group)) => {
                let mut acceptor = Acceptor::new(group, listener).unwrap();
                write_byte(ready.as_raw_fd(), 1);
                tokio::spawn(async move {
                    loop {
                        let (stream, _) = acceptor.accept().await.unwrap();
                        answer(&stream, w).await;
                        let stats = acceptor.stats();
                        shm.at(w, ACCEPTED).store(stats.accepted, SeqCst);
                        shm.at(w, LISTENER_THREAD)
                            .store(stats.kernel_wakeups.unwrap(), SeqCst);
                    }
                });
            }
            _ => {
                let epoll = nested_epoll(&listener);
                write_byte(ready.as_raw_fd(), 1);
                tokio::spawn(async move {
                    // SAFETY: the AsyncFd owns the epoll descriptor, which stays open for its
                    // whole life.
                    let epoll = unsafe { AsyncFd::register(epoll) }.unwrap();
                    let mut accepted = 0;
                    loop {
                        let mut guard = epoll.readable().await.unwrap();
                        harvest(epoll.get_ref().as_raw_fd());
                        while let Ok((stream, _)) = listener.accept() {
                            accepted += 1;
                            stream.set_nonblocking(true).unwrap();
                            answer(&tokio::net::TcpStream::from_std(stream).unwrap(), w).await;
                        }
                        guard.clear_ready();
                        shm.at(w, ACCEPTED).store(accepted, SeqCst);
                    }
                });
            }
        }
        // The stop byte; the wake-up it costs is left out of the runtime thread's count.
        // SAFETY: the AsyncFd owns the pipe's read end, open for its whole life.
        let stop = unsafe { AsyncFd::register(stop) }.unwrap();
        let _ = stop.readable().await.unwrap();
        let now = counters::thread_voluntary_switches().unwrap();
        let runtime = now.saturating_sub(runtime_start + 1);
        shm.at(w, RUNTIME_THREAD).store(runtime, SeqCst);
        if setup == Setup::Nested {
            // The runtime thread is the one that waits on the listener.
            shm.at(w, LISTENER_THREAD).store(runtime, SeqCst);
        }
    });
    // Dropping the runtime drops the serving task and with it the acceptor, which wakes its
    // thread and joins it: the clean shutdown is part of the test.
    drop(rt);
}

/// Writes the worker's index and closes.
async fn answer(stream: &tokio::net::TcpStream, w: usize) {
    loop {
        stream.writable().await.unwrap();
        match stream.try_write(&[w as u8]) {
            Ok(_) => return,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => panic!("answer: {e}"),
        }
    }
}

/// The naive nesting: an epoll of the worker's own with the listener `EPOLLEXCLUSIVE`.
fn nested_epoll(listener: &TcpListener) -> OwnedFd {
    // SAFETY: creates a new descriptor or fails.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(fd >= 0);
    let mut ev = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32,
        u64: 0,
    };
    // SAFETY: our epoll, the listener we hold and a live event struct.
    let r = unsafe { libc::epoll_ctl(fd, libc::EPOLL_CTL_ADD, listener.as_raw_fd(), &mut ev) };
    assert_eq!(r, 0);
    // SAFETY: a fresh descriptor owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Takes the nested epoll's ready events without waiting.
fn harvest(epoll: RawFd) {
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
    // SAFETY: a live buffer of 4 events; timeout 0.
    unsafe { libc::epoll_wait(epoll, events.as_mut_ptr(), 4, 0) };
}

fn acceptor_takes_turns_without_the_herd(backend: Backend) {
    let Some(out) = run(Setup::Acceptor(backend)) else {
        return;
    };
    out.report(Setup::Acceptor(backend));
    assert_eq!(out.served, CONNECTIONS, "{out:?}");
    assert_eq!(
        out.accepted.iter().sum::<u64>(),
        CONNECTIONS as u64,
        "{out:?}"
    );
    let max = *out.per_worker.iter().max().unwrap();
    let min = *out.per_worker.iter().min().unwrap();
    assert!(max - min <= 2, "workers did not take turns: {out:?}");
    // Native: one wake-up per connection. Emulated: one more, when the token passes to the
    // next member's thread (its wake-up to take the lead), so about two.
    let bound = match backend {
        Backend::Emulated => 2.5,
        _ => 1.5,
    };
    let per_conn = Outcome::per_conn(&out.listener_thread);
    assert!(
        per_conn <= bound,
        "{per_conn:.2} kernel wake-ups of the acceptor threads per connection: {out:?}"
    );
}

#[test]
fn nested_exclusive_epoll_herds() {
    let out = run(Setup::Nested).unwrap();
    out.report(Setup::Nested);
    assert_eq!(out.served, CONNECTIONS, "{out:?}");
    let per_conn = Outcome::per_conn(&out.listener_thread);
    // Every one of the W runtime threads is woken for every connection; allow for a thread
    // that was still busy when a connection came.
    assert!(
        per_conn >= 0.75 * WORKERS as f64,
        "the nesting did not herd ({per_conn:.2} wake-ups per connection): {out:?}"
    );
}

/// `close` hands out what the acceptor had taken (and at most one connection more), then
/// `accept` says `NotConnected` and the `Stream` ends; what is still queued at the listener is
/// left to the next member: nothing is lost.
fn close_hands_over_then_ends(backend: Backend) {
    let _one = FORKS.lock().unwrap_or_else(|e| e.into_inner());
    // every_backend! skips the native backend, loudly, where there is none.
    let group = Group::builder().backend(backend).build().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let mut acceptor = Acceptor::with_backlog(&group, listener.try_clone().unwrap(), 1).unwrap();
    // Three connections, queued before the close; the backlog of 1 keeps most at the listener.
    let clients: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let taken = rt.block_on(async {
        let first = acceptor.accept().await.unwrap();
        acceptor.close();
        let mut taken = vec![first];
        while let Some(conn) = std::future::poll_fn(|cx| {
            futures_core::Stream::poll_next(std::pin::Pin::new(&mut acceptor), cx)
        })
        .await
        {
            taken.push(conn.unwrap());
        }
        let after = acceptor.accept().await.unwrap_err();
        assert_eq!(after.kind(), std::io::ErrorKind::NotConnected);
        taken
    });
    assert!((1..=3).contains(&taken.len()), "{}", taken.len());
    assert_eq!(acceptor.stats().accepted as usize, taken.len());
    drop(acceptor);
    // The member left the group when its thread ended.
    assert!(
        group.stats().iter().all(|m| !m.alive),
        "{:?}",
        group.stats()
    );
    // The rest is still queued at the listener, for the next member.
    let mut next = Acceptor::new(&group, listener).unwrap();
    let rest = rt.block_on(async {
        for _ in taken.len()..clients.len() {
            next.accept().await.unwrap();
        }
        clients.len() - taken.len()
    });
    assert_eq!(taken.len() + rest, clients.len());
    assert_eq!(next.stats().accepted as usize, rest);
}

/// `close` on a listener that three other members keep busy (acceptors in threads of their own,
/// 1 ms of work per connection, a client keeping about 40 connections queued): the acceptor
/// hands out at most one connection after the close (its turn in progress, or a wake-up that
/// came with the close) and ends, however many wait at the listener; every connection is served
/// by someone. Accepting until `WouldBlock`, as `close` did, took the queue.
fn close_on_a_busy_listener_stops_within_one_accept(backend: Backend) {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let _one = FORKS.lock().unwrap_or_else(|e| e.into_inner());
    // every_backend! skips the native backend, loudly, where there is none.
    let group = Group::builder().backend(backend).build().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(AtomicU64::new(0));
    let connected = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap()
    };
    // The three other members: serve until closed, 1 ms of work each.
    let (closers_tx, closers_rx) = std::sync::mpsc::channel();
    let others: Vec<_> = (0..3)
        .map(|_| {
            let (group, listener) = (group.clone(), listener.try_clone().unwrap());
            let (served, closers_tx) = (served.clone(), closers_tx.clone());
            std::thread::spawn(move || {
                // Backlog 1: each takes a connection only when it is ready for one, so the
                // queue stays at the listener.
                let mut acceptor = Acceptor::with_backlog(&group, listener, 1).unwrap();
                closers_tx.send(acceptor.closer()).unwrap();
                runtime().block_on(async {
                    while let Ok((stream, _)) = acceptor.accept().await {
                        drop(stream);
                        served.fetch_add(1, SeqCst);
                        std::thread::sleep(Duration::from_millis(1));
                    }
                });
            })
        })
        .collect();
    let closers: Vec<_> = closers_rx.iter().take(3).collect();
    // The client: about 40 connections waiting at the listener at any time.
    let client = {
        let (served, connected, stop) = (served.clone(), connected.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut open = Vec::new();
            while !stop.load(SeqCst) {
                if connected.load(SeqCst) < served.load(SeqCst) + 40 {
                    open.push(TcpStream::connect(addr).unwrap());
                    connected.fetch_add(1, SeqCst);
                    if open.len() > 256 {
                        open.drain(..128);
                    }
                } else {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        })
    };
    let rt = runtime();
    let mut acceptor = Acceptor::with_backlog(&group, listener.try_clone().unwrap(), 1).unwrap();
    let (before, after) = rt.block_on(async {
        // In the line like the others for a few connections.
        for _ in 0..5 {
            acceptor.accept().await.unwrap();
            served.fetch_add(1, SeqCst);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while connected.load(SeqCst) < served.load(SeqCst) + 20 {
            assert!(
                std::time::Instant::now() < deadline,
                "the listener never got busy"
            );
            tokio::task::yield_now().await;
            std::thread::sleep(Duration::from_millis(1));
        }
        let before = acceptor.stats().accepted;
        acceptor.close();
        while let Ok((stream, _)) = acceptor.accept().await {
            drop(stream);
            served.fetch_add(1, SeqCst);
        }
        (before, acceptor.stats().accepted)
    });
    let queued = connected.load(SeqCst) - served.load(SeqCst);
    stop.store(true, SeqCst);
    client.join().unwrap();
    for closer in &closers {
        closer.close();
    }
    for other in others {
        other.join().unwrap();
    }
    // What the closed members left at the listener: every connection is accounted for.
    listener.set_nonblocking(true).unwrap();
    let mut left = 0;
    while listener.accept().is_ok() {
        left += 1;
    }
    println!(
        "{backend:?}: {} accept(s) after close, {queued} connections queued then; {} connected, \
         {} served, {left} left at the listener",
        after - before,
        connected.load(SeqCst),
        served.load(SeqCst)
    );
    assert!(
        after - before <= 1,
        "{} accepts after close",
        after - before
    );
    assert_eq!(connected.load(SeqCst), served.load(SeqCst) + left);
}

#[test]
fn a_zero_backlog_is_refused() {
    let _one = FORKS.lock().unwrap_or_else(|e| e.into_inner());
    let group = Group::builder().backend(Backend::Emulated).build().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let err = Acceptor::with_backlog(&group, listener, 0).unwrap_err();
    assert!(
        matches!(err, herdless::Error::InvalidSetting { .. }),
        "{err:?}"
    );
    assert!(
        group.stats().is_empty(),
        "nothing joined: {:?}",
        group.stats()
    );
}

/// Dropping the acceptor wakes its thread (asleep in its wait, or waiting for room in a full
/// channel), joins it, and the member leaves the group; the connections it had taken are
/// closed, and a later connection goes to the group's other member.
fn drop_wakes_and_joins(backend: Backend) {
    let _one = FORKS.lock().unwrap_or_else(|e| e.into_inner());
    // every_backend! skips the native backend, loudly, where there is none.
    let group = Group::builder().backend(backend).build().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // Asleep in its wait: nothing ever connects.
    let idle = Acceptor::new(&group, listener.try_clone().unwrap()).unwrap();
    drop(idle);
    // Blocked on a full channel: backlog 1, two connections, nobody accepts.
    let full = Acceptor::with_backlog(&group, listener.try_clone().unwrap(), 1).unwrap();
    let mut clients: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while full.stats().accepted < 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(full.stats().accepted, 1, "{:?}", full.stats());
    drop(full);
    assert!(
        group.stats().iter().all(|m| !m.alive),
        "{:?}",
        group.stats()
    );
    // The connection it had handed over is closed: its client reads the end.
    clients[0]
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut byte = [0u8; 1];
    assert!(matches!(clients[0].read(&mut byte), Ok(0) | Err(_)));
    // The one it never took is still queued at the listener, for the next member.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let mut next = Acceptor::new(&group, listener).unwrap();
    let taken = rt.block_on(next.accept());
    assert!(taken.is_ok(), "{taken:?}");
    clients.clear();
}

herdless_fixtures::every_backend!(
    acceptor_takes_turns_without_the_herd,
    close_hands_over_then_ends,
    close_on_a_busy_listener_stops_within_one_accept,
    drop_wakes_and_joins,
);
