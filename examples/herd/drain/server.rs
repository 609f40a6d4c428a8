//! The servers of `herd drain`: one per architecture of the drain experiment, all draining every byte their
//! connections bring, on threads. Each worker counts the connections it accepted and the bytes it
//! read, so the table can show who did the work. The raw architectures make the experiment's system
//! calls directly; the herdless ones share only the listener through a group (exclusive, rotated
//! after every accept) and keep each accepted connection in the accepting worker's own waiter.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddrV4, TcpListener};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use herdless::{Backend, Events, Group, Interest};
use serde::{Deserialize, Serialize};

use crate::net::{self, accept_one, Epoll};

/// The epoll data (and herdless key) of the listener; connections use their descriptor.
const LISTENER: u64 = u64::MAX - 2;
/// How often an idle worker looks at the stop flag.
const TICK_MS: i32 = 20;
/// How long the workers may take to start waiting.
const STARTUP_LIMIT: Duration = Duration::from_secs(10);
/// Bytes one read may take.
const READ_BUF: usize = 64 * 1024;

/// An event-loop architecture: a row of the drain table.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arch {
    /// One thread, one epoll.
    SingleThread,
    /// One epoll shared by every worker, level-triggered.
    Shared,
    /// One shared epoll, edge-triggered.
    SharedEdge,
    /// One shared epoll, `EPOLLONESHOT`, re-armed after each drain.
    SharedOneshot,
    /// An epoll per worker, `EPOLLEXCLUSIVE` listener, accept until `EAGAIN`.
    Exclusive,
    /// An epoll and a `SO_REUSEPORT` listener per worker.
    PerWorker,
    /// herdless, native backend: shared listener, exclusive + rotation.
    HerdlessNative,
    /// herdless, emulated backend.
    HerdlessEmulated,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::SingleThread => "single-thread",
            Arch::Shared => "shared",
            Arch::SharedEdge => "shared-edge",
            Arch::SharedOneshot => "shared-oneshot",
            Arch::Exclusive => "exclusive",
            Arch::PerWorker => "per-worker",
            Arch::HerdlessNative => "herdless-native",
            Arch::HerdlessEmulated => "herdless-emulated",
        }
    }
}

/// What the workers count, read by the measuring thread.
pub struct Tally {
    pub conns: Vec<AtomicU64>,
    pub bytes: Vec<AtomicU64>,
    accepted: AtomicU64,
    drained: AtomicU64,
    target: u64,
    /// When the last byte was drained.
    done_at: Mutex<Option<Instant>>,
    stop: AtomicBool,
    /// The workers' thread ids, each pushed once its registrations are made.
    ready: Mutex<Vec<i32>>,
}

impl Tally {
    fn new(workers: usize, target: u64) -> Tally {
        Tally {
            conns: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            bytes: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            accepted: AtomicU64::new(0),
            drained: AtomicU64::new(0),
            target,
            done_at: Mutex::new(None),
            stop: AtomicBool::new(false),
            ready: Mutex::new(Vec::new()),
        }
    }

    fn accepted_by(&self, me: usize) {
        self.conns[me].fetch_add(1, SeqCst);
        self.accepted.fetch_add(1, SeqCst);
    }

    fn drained_by(&self, me: usize, n: u64) {
        self.bytes[me].fetch_add(n, SeqCst);
        let before = self.drained.fetch_add(n, SeqCst);
        if before < self.target && before + n >= self.target {
            *self.done_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        }
    }

    /// Called by a worker when it is registered and about to wait.
    fn ready(&self) {
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = unsafe { libc::gettid() };
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(tid);
    }

    /// Waits (bounded) until all `workers` are registered and asleep in their wait, so that
    /// the connect storm finds every worker waiting, as in a server that has been up a while.
    fn until_waiting(&self, workers: usize, limit: Duration) -> io::Result<()> {
        let count = || self.ready.lock().unwrap_or_else(|e| e.into_inner()).len();
        until(limit, || count() == workers)
            .map_err(|_| io::Error::other("the workers did not start"))?;
        let pid = std::process::id();
        let tasks: Vec<(u32, i32)> = self
            .ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|&t| (pid, t))
            .collect();
        herdless_fixtures::until_asleep(&tasks, limit)
    }

    fn stopping(&self) -> bool {
        self.stop.load(SeqCst)
    }

    /// Waits (bounded) until `n` connections were accepted.
    pub fn until_accepted(&self, n: u64, limit: Duration) -> io::Result<()> {
        until(limit, || self.accepted.load(SeqCst) >= n).map_err(|_| {
            io::Error::other(format!(
                "only {} of {n} accepted",
                self.accepted.load(SeqCst)
            ))
        })
    }

    /// Waits (bounded) until every byte was drained; returns when the last one was.
    pub fn until_drained(&self, limit: Duration) -> io::Result<Instant> {
        until(limit, || self.drained.load(SeqCst) >= self.target).map_err(|_| {
            io::Error::other(format!(
                "only {} of {} bytes drained",
                self.drained.load(SeqCst),
                self.target
            ))
        })?;
        let done = *self.done_at.lock().unwrap_or_else(|e| e.into_inner());
        Ok(done.unwrap_or_else(Instant::now))
    }
}

fn until(limit: Duration, cond: impl Fn() -> bool) -> Result<(), ()> {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > limit {
            return Err(());
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    Ok(())
}

/// A running server: its address, its workers and their tally.
pub struct Server {
    pub addr: SocketAddrV4,
    pub tally: Arc<Tally>,
    threads: Vec<JoinHandle<io::Result<()>>>,
}

impl Server {
    /// Starts `workers` worker threads of `arch` (one for `single-thread`) that drain
    /// `target` bytes in all.
    pub fn start(
        arch: Arch,
        workers: usize,
        target: u64,
    ) -> Result<Server, Box<dyn std::error::Error>> {
        let workers = if arch == Arch::SingleThread {
            1
        } else {
            workers
        };
        let tally = Arc::new(Tally::new(workers, target));
        let loopback = SocketAddrV4::new([127, 0, 0, 1].into(), 0);
        let listeners = match arch {
            Arch::PerWorker => net::reuseport_group(workers)?,
            _ => vec![net::listener(loopback, false)?],
        };
        let addr = net::v4_addr(&listeners[0])?;
        let threads = match arch {
            Arch::Shared | Arch::SharedEdge | Arch::SharedOneshot => spawn_shared(
                arch,
                listeners.into_iter().next().expect("one"),
                &tally,
                workers,
            )?,
            Arch::HerdlessNative | Arch::HerdlessEmulated => spawn_herdless(
                arch,
                listeners.into_iter().next().expect("one"),
                &tally,
                workers,
            )?,
            Arch::SingleThread | Arch::Exclusive | Arch::PerWorker => {
                spawn_own(arch, listeners, &tally, workers)
            }
        };
        let server = Server {
            addr,
            tally,
            threads,
        };
        if let Err(e) = server.tally.until_waiting(workers, STARTUP_LIMIT) {
            server.stop()?;
            return Err(e.into());
        }
        Ok(server)
    }

    /// Stops the workers and waits for them.
    pub fn stop(self) -> io::Result<Arc<Tally>> {
        self.tally.stop.store(true, SeqCst);
        for t in self.threads {
            t.join()
                .map_err(|_| io::Error::other("a worker panicked"))??;
        }
        Ok(self.tally)
    }
}

/// Reads `fd` until `EAGAIN`; returns false at end of file or on an error (the peer is gone).
fn drain(fd: RawFd, buf: &mut [u8], tally: &Tally, me: usize) -> bool {
    loop {
        // SAFETY: reads into a live buffer from a descriptor this worker holds open.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        match n {
            0 => return false,
            n if n > 0 => tally.drained_by(me, n as u64),
            _ => {
                let err = io::Error::last_os_error();
                match err.kind() {
                    io::ErrorKind::WouldBlock => return true,
                    io::ErrorKind::Interrupted => continue,
                    _ => return false,
                }
            }
        }
    }
}

/// Architectures where every worker has its own epoll and keeps the connections it accepts:
/// `single-thread`, `exclusive` (shared listener, `EPOLLEXCLUSIVE`) and `per-worker` (own
/// `SO_REUSEPORT` listener).
fn spawn_own(
    arch: Arch,
    listeners: Vec<TcpListener>,
    tally: &Arc<Tally>,
    workers: usize,
) -> Vec<JoinHandle<io::Result<()>>> {
    let shared = Arc::new(listeners);
    (0..workers)
        .map(|me| {
            let (listeners, tally) = (shared.clone(), tally.clone());
            std::thread::spawn(move || {
                let listener = &listeners[me.min(listeners.len() - 1)];
                let flags = match arch {
                    Arch::Exclusive => (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32,
                    _ => libc::EPOLLIN as u32,
                };
                own_loop(listener.as_raw_fd(), flags, &tally, me)
            })
        })
        .collect()
}

fn own_loop(listener: RawFd, listener_flags: u32, tally: &Tally, me: usize) -> io::Result<()> {
    let epoll = Epoll::new()?;
    epoll.add(listener, listener_flags, LISTENER)?;
    let mut conns: HashMap<RawFd, OwnedFd> = HashMap::new();
    let mut events = net::event_buffer(64);
    let mut buf = vec![0u8; READ_BUF];
    tally.ready();
    while !tally.stopping() {
        let n = epoll.wait(&mut events, TICK_MS)?;
        for ev in &events[..n] {
            if ev.u64 == LISTENER {
                while let Some(conn) = accept_one(listener)? {
                    epoll.add(
                        conn.as_raw_fd(),
                        libc::EPOLLIN as u32,
                        conn.as_raw_fd() as u64,
                    )?;
                    tally.accepted_by(me);
                    conns.insert(conn.as_raw_fd(), conn);
                }
            } else if !drain(ev.u64 as RawFd, &mut buf, tally, me) {
                epoll.delete(ev.u64 as RawFd)?;
                conns.remove(&(ev.u64 as RawFd));
            }
        }
    }
    Ok(())
}

/// One epoll shared by every worker: level, edge or one-shot.
fn spawn_shared(
    arch: Arch,
    listener: TcpListener,
    tally: &Arc<Tally>,
    workers: usize,
) -> io::Result<Vec<JoinHandle<io::Result<()>>>> {
    let trigger = match arch {
        Arch::SharedEdge => libc::EPOLLET as u32,
        Arch::SharedOneshot => libc::EPOLLONESHOT as u32,
        _ => 0,
    };
    let epoll = Epoll::new()?;
    epoll.add(
        listener.as_raw_fd(),
        libc::EPOLLIN as u32 | trigger,
        LISTENER,
    )?;
    let state = Arc::new(SharedLoop {
        epoll,
        listener,
        flags: libc::EPOLLIN as u32 | trigger,
        rearm: arch == Arch::SharedOneshot,
        // Closed only when the server stops: no descriptor number is reused under a worker
        // that still reads the old one.
        conns: Mutex::new(Vec::new()),
    });
    Ok((0..workers)
        .map(|me| {
            let (state, tally) = (state.clone(), tally.clone());
            std::thread::spawn(move || state.run(&tally, me))
        })
        .collect())
}

struct SharedLoop {
    epoll: Epoll,
    listener: TcpListener,
    /// The registration flags of every descriptor.
    flags: u32,
    /// One-shot: re-arm a descriptor after handling it.
    rearm: bool,
    conns: Mutex<Vec<OwnedFd>>,
}

impl SharedLoop {
    fn run(&self, tally: &Tally, me: usize) -> io::Result<()> {
        let mut events = net::event_buffer(16);
        let mut buf = vec![0u8; READ_BUF];
        tally.ready();
        while !tally.stopping() {
            let n = self.epoll.wait(&mut events, TICK_MS)?;
            for ev in &events[..n] {
                if ev.u64 == LISTENER {
                    self.accept_all(tally, me)?;
                    continue;
                }
                let fd = ev.u64 as RawFd;
                if !drain(fd, &mut buf, tally, me) {
                    // Another worker may have deleted it already.
                    let _ = self.epoll.delete(fd);
                } else if self.rearm {
                    self.epoll.modify(fd, self.flags, fd as u64)?;
                }
            }
        }
        Ok(())
    }

    fn accept_all(&self, tally: &Tally, me: usize) -> io::Result<()> {
        let listener = self.listener.as_raw_fd();
        while let Some(conn) = accept_one(listener)? {
            self.epoll
                .add(conn.as_raw_fd(), self.flags, conn.as_raw_fd() as u64)?;
            tally.accepted_by(me);
            self.conns
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(conn);
        }
        if self.rearm {
            self.epoll.modify(listener, self.flags, LISTENER)?;
        }
        Ok(())
    }
}

/// herdless: the listener shared through a group (exclusive, rotated after every accept), each
/// accepted connection in the accepting worker's own waiter, not exclusive.
fn spawn_herdless(
    arch: Arch,
    listener: TcpListener,
    tally: &Arc<Tally>,
    workers: usize,
) -> Result<Vec<JoinHandle<io::Result<()>>>, herdless::Error> {
    let backend = match arch {
        Arch::HerdlessEmulated => Backend::Emulated,
        _ => Backend::Native,
    };
    let group = Group::builder()
        .backend(backend)
        .rotate_every(1)
        .max_members(workers.max(2))
        .build()?;
    let listener = Arc::new(listener);
    Ok((0..workers)
        .map(|me| {
            let (group, listener, tally) = (group.clone(), listener.clone(), tally.clone());
            std::thread::spawn(move || {
                herdless_loop(&group, &listener, &tally, me).map_err(io::Error::other)
            })
        })
        .collect())
}

fn herdless_loop(
    group: &Group,
    listener: &TcpListener,
    tally: &Tally,
    me: usize,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut waiter = group.join()?;
    waiter.add(listener, LISTENER as usize, Interest::READABLE.exclusive())?;
    let mut conns: HashMap<usize, OwnedFd> = HashMap::new();
    let mut events = Events::with_capacity(64);
    let mut buf = vec![0u8; READ_BUF];
    tally.ready();
    while !tally.stopping() {
        waiter.wait(&mut events, Some(Duration::from_millis(TICK_MS as u64)))?;
        for ev in events.iter() {
            if ev.key == LISTENER as usize {
                // One connection per wake-up, then to the back of the line.
                let conn = accept_one(listener.as_raw_fd())?;
                waiter.consumed(ev.key)?;
                if let Some(conn) = conn {
                    waiter.add(&conn, conn.as_raw_fd() as usize, Interest::READABLE)?;
                    tally.accepted_by(me);
                    conns.insert(conn.as_raw_fd() as usize, conn);
                }
            } else if !drain(ev.key as RawFd, &mut buf, tally, me) {
                if let Some(conn) = conns.remove(&ev.key) {
                    waiter.delete(&conn)?;
                }
            }
        }
    }
    Ok(())
}
