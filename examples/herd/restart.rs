//! `herd restart`: a rolling restart under load. W forked workers serve one loopback port while
//! an in-process client makes connections at a steady rate (each sends a request line and reads
//! the one-line reply), and the workers are restarted one after another: a replacement starts
//! and is ready, then the old worker gets SIGTERM and leaves gracefully (`--kill`: SIGKILL).
//! Each setup is a row: connections attempted, completed, refused, reset, timed out, the
//! slowest completion, and what every worker (old and new) served.
//!
//! Setups: `reuseport` (a socket per worker: a leaving worker closes its socket, and whatever
//! sits in that socket's accept queue is reset unless `net.ipv4.tcp_migrate_req` is on), and
//! one shared listener with `exclusive` (raw `EPOLLEXCLUSIVE`), `herdless-native`,
//! `herdless-emulated` and `tokio` (`herdless::tokio::Acceptor`, needs `--features tokio`).
//! A leaving worker (SIGTERM) stops taking connections at once: it finishes the one in hand and
//! takes no other. With `reuseport` it then closes its socket, and what is queued there goes
//! with it; on the shared listener it leaves the line (the Tokio acceptor: `close`, whose
//! thread hands over what it was woken for), and the queue stays with the listener and the
//! others. With `--kill`, whatever the worker holds dies with it, in every setup.
//!
//! Workers, old and new, are all forked before the client threads start (a fork from a
//! multi-threaded process is not safe); a replacement waits, dormant, until its turn.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering::SeqCst};
use std::time::{Duration, Instant};

use herdless::{Backend, Events, Group, Interest};
use serde::Serialize;

use crate::net::{self, accept_one, Epoll};
use herdless_fixtures::{self as fixtures, Blocking, SharedCounters};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// How long a start, an exit, a connect or a reply may take.
const STEP_LIMIT: Duration = Duration::from_secs(10);
/// The client's connect and read timeout: past it a connection counts as timed out.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST: &[u8] = b"GET /\n";
/// Keys (epoll data) of the listener and of the stop pipe in a worker's wait set.
const LISTENER: u64 = 0;
const STOP: u64 = 1;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Forked workers serving the port (each is restarted once).
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// New connections per second, steady.
    #[arg(long, default_value_t = 2000)]
    rate: u32,
    /// Seconds of load per setup; the restarts are spread over its middle 80 %.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Client threads (each makes its share of the connections, one at a time, on schedule).
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Time a worker takes per request before it replies, in milliseconds (a sleep: a call to a
    /// backend, not CPU), so that accept queues are not always empty.
    #[arg(long, default_value_t = 0.0)]
    work_ms: f64,
    /// Stop the old workers with SIGKILL instead of SIGTERM and a graceful exit.
    #[arg(long)]
    kill: bool,
    /// Setups to run, each a row of the table.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "reuseport,exclusive,herdless-native,herdless-emulated,tokio"
    )]
    setups: Vec<Setup>,
    /// Also write one JSON row per setup to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One way of serving the port: a row of the table.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Setup {
    /// A `SO_REUSEPORT` socket per worker, opened by the worker.
    Reuseport,
    /// One shared listener, raw `EPOLLEXCLUSIVE`, no rotation.
    Exclusive,
    /// One shared listener, herdless `Backend::Native`, `rotate_every(1)`.
    HerdlessNative,
    /// One shared listener, herdless `Backend::Emulated`, `rotate_every(1)`.
    HerdlessEmulated,
    /// One shared listener, a Tokio runtime per worker with `herdless::tokio::Acceptor`.
    Tokio,
}

impl Setup {
    fn name(self) -> &'static str {
        match self {
            Setup::Reuseport => "reuseport",
            Setup::Exclusive => "exclusive",
            Setup::HerdlessNative => "herdless-native",
            Setup::HerdlessEmulated => "herdless-emulated",
            Setup::Tokio => "tokio",
        }
    }

    fn backend(self) -> Option<Backend> {
        match self {
            Setup::HerdlessNative => Some(Backend::Native),
            Setup::HerdlessEmulated => Some(Backend::Emulated),
            Setup::Tokio => Some(Backend::Auto),
            _ => None,
        }
    }
}

/// What the client saw, and what the workers served, in one run of one setup.
#[derive(Debug, Clone, Default, Serialize)]
struct Tally {
    attempted: u64,
    completed: u64,
    /// `ECONNREFUSED` on connect: no socket listened.
    refused: u64,
    /// Reset, or closed before the reply came.
    reset: u64,
    /// No connection or no reply within the client timeout.
    timed_out: u64,
    /// Any other error.
    other: u64,
    /// The slowest completed connection, connect to reply, milliseconds.
    slowest_ms: f64,
    /// The mean completed connection, milliseconds.
    mean_ms: f64,
    #[serde(skip)]
    total_ms: f64,
    /// The first few errors, as the client saw them.
    errors: Vec<String>,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.attempted += o.attempted;
        self.completed += o.completed;
        self.refused += o.refused;
        self.reset += o.reset;
        self.timed_out += o.timed_out;
        self.other += o.other;
        self.slowest_ms = self.slowest_ms.max(o.slowest_ms);
        self.total_ms += o.total_ms;
        for e in &o.errors {
            if self.errors.len() < 8 {
                self.errors.push(e.clone());
            }
        }
    }
}

#[derive(Debug, Clone, Serialize)]
struct Row {
    setup: Setup,
    kill: bool,
    workers: usize,
    rate: u32,
    seconds: f64,
    work_ms: f64,
    tcp_migrate_req: Option<String>,
    #[serde(flatten)]
    client: Tally,
    /// Connections served per worker slot: (old worker, its replacement).
    per_worker: Vec<(u64, u64)>,
    restarts: usize,
    /// Workers that exited other than as asked (a failure, or killed after the time limit).
    worker_failures: usize,
}

pub fn run(args: Args) -> Res<()> {
    if args.workers == 0 || args.rate == 0 || args.clients == 0 || args.seconds.is_nan() {
        return Err("--workers, --rate and --clients must be at least 1".into());
    }
    if !(0.0..=1000.0).contains(&args.work_ms) {
        return Err("--work-ms must be between 0 and 1000".into());
    }
    if !(0.5..=300.0).contains(&args.seconds) {
        return Err("--seconds must be between 0.5 and 300".into());
    }
    let migrate = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_migrate_req")
        .ok()
        .map(|s| s.trim().to_string());
    println!(
        "herd restart: {} forked workers, {} connections/s for {} s from {} client threads on \
         127.0.0.1, {} ms work per request; every worker restarted once ({}); \
         net.ipv4.tcp_migrate_req = {}\n",
        args.workers,
        args.rate,
        args.seconds,
        args.clients,
        args.work_ms,
        match args.kill {
            true => "SIGKILL",
            false => "SIGTERM, graceful exit",
        },
        migrate.as_deref().unwrap_or("unknown (not readable)")
    );
    println!(
        "| setup | attempted | completed | refused | reset | timed out | slowest ms | mean ms | \
         per worker (old+new) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    for &setup in &args.setups {
        if setup == Setup::Tokio && !cfg!(feature = "tokio") {
            println!("| tokio | SKIPPED: build the lab with `--features tokio` | | | | | | | |");
            continue;
        }
        let row = run_setup(&args, setup, migrate.clone())?;
        print_row(&row);
        rows.push(row);
    }
    crate::json::write_rows(args.json.as_deref(), &rows)?;
    Ok(())
}

fn print_row(r: &Row) {
    let per: Vec<String> = r
        .per_worker
        .iter()
        .map(|(a, b)| format!("{a}+{b}"))
        .collect();
    let c = &r.client;
    println!(
        "| {} | {} | {} | {} | {} | {} | {:.1} | {:.2} | {} |{}",
        r.setup.name(),
        c.attempted,
        c.completed,
        c.refused,
        c.reset,
        c.timed_out + c.other,
        c.slowest_ms,
        c.mean_ms,
        per.join(" "),
        match r.worker_failures {
            0 => String::new(),
            n => format!(" ({n} worker(s) failed)"),
        }
    );
    for e in &c.errors {
        println!("|   {}: {e} | | | | | | | | |", r.setup.name());
    }
}

/// What the listener of a worker is.
#[derive(Clone, Copy)]
enum Listen<'a> {
    /// The port the worker opens its own `SO_REUSEPORT` socket on.
    Own(SocketAddrV4),
    Shared(BorrowedFd<'a>),
}

/// One forked worker process, dormant until started.
struct Instance {
    pid: i32,
    control: OwnedFd,
    /// Reaped already (so its pid is no longer ours to signal).
    reaped: std::cell::Cell<bool>,
}

impl Drop for Instance {
    /// A run that failed half-way leaves no worker behind.
    fn drop(&mut self) {
        if !self.reaped.get() {
            // SAFETY: our own child, not reaped yet, so the pid is still its own.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            let mut status = 0;
            // SAFETY: reaps our own child.
            unsafe { libc::waitpid(self.pid, &mut status, 0) };
        }
    }
}

fn run_setup(args: &Args, setup: Setup, migrate: Option<String>) -> Res<Row> {
    let w = args.workers;
    // Inherited by the workers forked below.
    WORK_US.store((args.work_ms * 1e3) as u64, SeqCst);
    // The port: for reuseport, a socket bound (never listening) keeps it ours for the run.
    let (port_keeper, shared, addr) = match setup {
        Setup::Reuseport => {
            let keeper = bound_reuseport()?;
            let addr = net::v4_addr(&keeper)?;
            (Some(keeper), None, addr)
        }
        _ => {
            let l = net::listener(SocketAddrV4::new([127, 0, 0, 1].into(), 0), false)?;
            let addr = net::v4_addr(&l)?;
            (None, Some(l), addr)
        }
    };
    let group = match setup.backend() {
        Some(b) => Some(
            Group::builder()
                .backend(b)
                .rotate_every(1)
                .max_members(2 * w)
                .build()?,
        ),
        None => None,
    };
    let served = SharedCounters::new(2 * w)?;
    let (ack_r, ack_w) = fixtures::pipe(Blocking::Both)?;
    let listen = match &shared {
        Some(l) => Listen::Shared(l.as_fd()),
        None => Listen::Own(addr),
    };
    // Every worker, old and new, forked now, while this process has one thread.
    let mut instances = Vec::new();
    for i in 0..2 * w {
        instances.push(fork_instance(
            i,
            setup,
            listen,
            group.as_ref(),
            &served,
            ack_w.as_raw_fd(),
        )?);
    }
    drop(ack_w);
    let mut failures = 0;
    for inst in &instances[..w] {
        start(inst, &ack_r)?;
    }
    // The load, on its own threads; the restarts on this one.
    let total = (args.rate as f64 * args.seconds) as u64;
    let t0 = Instant::now() + Duration::from_millis(50);
    let clients: Vec<_> = (0..args.clients)
        .map(|k| {
            let (rate, n, threads) = (args.rate as f64, total, args.clients as u64);
            std::thread::spawn(move || client(k as u64, threads, n, rate, t0, addr))
        })
        .collect();
    for slot in 0..w {
        let at = t0 + Duration::from_secs_f64(args.seconds * (0.1 + 0.8 * slot as f64 / w as f64));
        sleep_until(at);
        start(&instances[w + slot], &ack_r)?;
        let old = &instances[slot];
        let sig = if args.kill {
            libc::SIGKILL
        } else {
            libc::SIGTERM
        };
        // SAFETY: signals our own child.
        unsafe { libc::kill(old.pid, sig) };
        if !reaped_as_asked(old, args.kill)? {
            failures += 1;
        }
    }
    let mut tally = Tally::default();
    for c in clients {
        tally.add(&c.join().map_err(|_| "a client thread panicked")?);
    }
    tally.mean_ms = tally.total_ms / tally.completed.max(1) as f64;
    for inst in &instances[w..] {
        // SAFETY: signals our own child.
        unsafe { libc::kill(inst.pid, libc::SIGTERM) };
        if !reaped_as_asked(inst, false)? {
            failures += 1;
        }
    }
    drop(port_keeper);
    let per_worker = (0..w)
        .map(|s| (served.get(s).load(SeqCst), served.get(w + s).load(SeqCst)))
        .collect();
    Ok(Row {
        setup,
        kill: args.kill,
        workers: w,
        rate: args.rate,
        seconds: args.seconds,
        work_ms: args.work_ms,
        tcp_migrate_req: migrate,
        client: tally,
        per_worker,
        restarts: w,
        worker_failures: failures,
    })
}

/// A socket bound to a free loopback port with `SO_REUSEPORT`, not listening: it keeps the
/// port for the run and takes no connections.
fn bound_reuseport() -> io::Result<TcpListener> {
    use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn};
    let fd = socket::socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    socket::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    socket::setsockopt(&fd, sockopt::ReusePort, &true)?;
    let any = SocketAddrV4::new([127, 0, 0, 1].into(), 0);
    socket::bind(fd.as_raw_fd(), &SockaddrIn::from(any))?;
    Ok(TcpListener::from(fd))
}

fn sleep_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

/// Tells a dormant instance to start, and waits (bounded) for its ready byte.
fn start(inst: &Instance, ack: &OwnedFd) -> Res<()> {
    fixtures::write_all(inst.control.as_raw_fd(), b"g")?;
    let mut pfd = libc::pollfd {
        fd: ack.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    if unsafe { libc::poll(&mut pfd, 1, STEP_LIMIT.as_millis() as i32) } != 1 {
        return Err(format!("worker {} did not start", inst.pid).into());
    }
    let mut byte = [0u8; 1];
    fixtures::read_exact(ack.as_raw_fd(), &mut byte)?;
    Ok(())
}

/// Reaps `pid` (killing it after [`STEP_LIMIT`]); true if it ended as asked: exit 0, or
/// killed by the SIGKILL we sent.
fn reaped_as_asked(inst: &Instance, killed: bool) -> Res<bool> {
    let pid = inst.pid;
    let deadline = Instant::now() + STEP_LIMIT;
    let mut overdue = false;
    loop {
        let mut status = 0;
        // SAFETY: reaps our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            inst.reaped.set(true);
            let ok = match killed {
                true => libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
                false => libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            };
            return Ok(ok && !overdue);
        }
        if r < 0 {
            return Err(io::Error::last_os_error().into());
        }
        if Instant::now() > deadline && !overdue {
            overdue = true;
            // SAFETY: our own child, overdue.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

// ---------------------------------------------------------------------------------------------
// The client.

/// Client thread `k` of `threads`: connections k, k + threads, ... of `total`, each at its
/// place in the schedule (`rate` per second from `t0`), one at a time.
fn client(k: u64, threads: u64, total: u64, rate: f64, t0: Instant, addr: SocketAddrV4) -> Tally {
    let mut t = Tally::default();
    let mut i = k;
    while i < total {
        sleep_until(t0 + Duration::from_secs_f64(i as f64 / rate));
        t.attempted += 1;
        let began = Instant::now();
        match one_connection(addr) {
            Ok(()) => {
                let ms = began.elapsed().as_secs_f64() * 1e3;
                t.completed += 1;
                t.total_ms += ms;
                t.slowest_ms = t.slowest_ms.max(ms);
            }
            Err(e) => {
                if t.errors.len() < 8 {
                    let at = (began - t0).as_secs_f64();
                    t.errors.push(format!("{e} (connection {i}, at {at:.3} s)"));
                }
                match e.kind() {
                    io::ErrorKind::ConnectionRefused => t.refused += 1,
                    io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::UnexpectedEof => t.reset += 1,
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => t.timed_out += 1,
                    _ => t.other += 1,
                }
            }
        }
        i += threads;
    }
    t
}

/// Connects, sends the request line, reads the reply line. Closes with an abortive close
/// (linger 0) after a complete reply, so that 20 000 connections leave no TIME_WAIT on the
/// client's side of the loopback.
fn one_connection(addr: SocketAddrV4) -> io::Result<()> {
    let mut s = TcpStream::connect_timeout(&SocketAddr::V4(addr), CLIENT_TIMEOUT)?;
    s.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    s.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    s.write_all(REQUEST)?;
    let mut buf = [0u8; 64];
    let mut got = 0;
    while !buf[..got].contains(&b'\n') {
        if got == buf.len() {
            return Err(io::Error::other("reply too long"));
        }
        match s.read(&mut buf[got..])? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => got += n,
        }
    }
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a live linger struct of the size given, on our own socket.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The workers.

/// A worker's time per request (`--work-ms`), in microseconds.
static WORK_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn work() -> Duration {
    Duration::from_micros(WORK_US.load(SeqCst))
}

/// The write end of a worker's stop pipe, for its SIGTERM handler.
static STOP_PIPE: AtomicI32 = AtomicI32::new(-1);

/// Set by SIGTERM: a worker looks at it before every accept.
static STOPPING: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigterm(_: libc::c_int) {
    STOPPING.store(true, SeqCst);
    let fd = STOP_PIPE.load(SeqCst);
    // SAFETY: write(2) is async-signal-safe; one byte from a static buffer.
    unsafe { libc::write(fd, b"s".as_ptr().cast(), 1) };
}

fn fork_instance(
    i: usize,
    setup: Setup,
    listen: Listen<'_>,
    group: Option<&Group>,
    served: &SharedCounters,
    ack: RawFd,
) -> Res<Instance> {
    let (control_r, control_w) = fixtures::pipe(Blocking::Both)?;
    // SAFETY: this process is single-threaded here; the child runs only the worker (std,
    // libc, herdless, Tokio) and leaves by _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error().into());
    }
    if pid == 0 {
        drop(control_w);
        let code = match worker(i, setup, listen, group, served, control_r, ack) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("restart worker {i}: {e}");
                1
            }
        };
        // SAFETY: leaves the child at once.
        unsafe { libc::_exit(code) };
    }
    Ok(Instance {
        pid,
        control: control_w,
        reaped: std::cell::Cell::new(false),
    })
}

/// A worker: dormant until its go byte, then sets up, says it is ready and serves until
/// SIGTERM.
fn worker(
    i: usize,
    setup: Setup,
    listen: Listen<'_>,
    group: Option<&Group>,
    served: &SharedCounters,
    control: OwnedFd,
    ack: RawFd,
) -> Res<()> {
    let mut go = [0u8; 1];
    fixtures::read_exact(control.as_raw_fd(), &mut go)?;
    let (stop_r, stop_w) = fixtures::pipe(Blocking::Both)?;
    STOP_PIPE.store(stop_w.as_raw_fd(), SeqCst);
    install_sigterm()?;
    let count = || {
        served.get(i).fetch_add(1, SeqCst);
    };
    match (setup, listen, group) {
        (Setup::Reuseport, Listen::Own(addr), _) => {
            let listener = net::listener(addr, true)?;
            let epoll = Epoll::new()?;
            epoll.add(listener.as_raw_fd(), libc::EPOLLIN as u32, LISTENER)?;
            epoll.add(stop_r.as_raw_fd(), libc::EPOLLIN as u32, STOP)?;
            fixtures::write_all(ack, b"r")?;
            serve_raw(&epoll, listener.as_raw_fd(), &count)?;
            // Leaving: the socket closes, and with it its accept queue.
            drop(listener);
        }
        (Setup::Exclusive, Listen::Shared(l), _) => {
            let epoll = Epoll::new()?;
            let flags = (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32;
            epoll.add(l.as_raw_fd(), flags, LISTENER)?;
            epoll.add(stop_r.as_raw_fd(), libc::EPOLLIN as u32, STOP)?;
            fixtures::write_all(ack, b"r")?;
            serve_raw(&epoll, l.as_raw_fd(), &count)?;
            // Leaving: out of the line; the queue stays with the listener and the others.
            epoll.delete(l.as_raw_fd())?;
        }
        (Setup::HerdlessNative | Setup::HerdlessEmulated, Listen::Shared(l), Some(g)) => {
            let mut waiter = g.join()?;
            waiter.add(
                &l,
                LISTENER as usize,
                Interest::READABLE.exclusive().one_event_round_robin(),
            )?;
            waiter.add(&stop_r, STOP as usize, Interest::READABLE)?;
            fixtures::write_all(ack, b"r")?;
            let mut events = Events::with_capacity(1);
            loop {
                waiter.wait(&mut events, None)?;
                let Some(ev) = events.iter().next() else {
                    continue;
                };
                if ev.key == STOP as usize || STOPPING.load(SeqCst) {
                    break;
                }
                let conn = accept_one(l.as_raw_fd())?;
                waiter.consumed(LISTENER as usize)?;
                if let Some(conn) = conn {
                    answer(conn, &count);
                }
            }
            // Leaving: out of the line; the queue stays with the listener and the others.
            waiter.delete(&l)?;
            drop(waiter);
        }
        #[cfg(feature = "tokio")]
        (Setup::Tokio, Listen::Shared(l), Some(g)) => tokio_worker(l, g, stop_r, ack, &count)?,
        _ => return Err(format!("{} cannot run here", setup.name()).into()),
    }
    Ok(())
}

fn install_sigterm() -> Res<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_sigterm),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    // SAFETY: the handler only writes one byte to a pipe, which is async-signal-safe.
    unsafe { sigaction(Signal::SIGTERM, &action) }?;
    Ok(())
}

/// A raw worker: waits, accepts until `EAGAIN`, answers; returns at the stop byte.
fn serve_raw(epoll: &Epoll, listener: RawFd, count: &dyn Fn()) -> Res<()> {
    let mut events = net::event_buffer(4);
    loop {
        let n = epoll.wait(&mut events, -1)?;
        if STOPPING.load(SeqCst) || events[..n].iter().any(|e| e.u64 == STOP) {
            return Ok(());
        }
        if n > 0 {
            drain(listener, count)?;
        }
    }
}

/// Accepts and answers until nothing is queued, or until SIGTERM.
fn drain(listener: RawFd, count: &dyn Fn()) -> Res<()> {
    while !STOPPING.load(SeqCst) {
        match accept_one(listener)? {
            Some(conn) => answer(conn, count),
            None => break,
        }
    }
    Ok(())
}

/// Reads the request line and writes the reply; a client that fails is its own loss.
fn answer(conn: OwnedFd, count: &dyn Fn()) {
    let mut s = TcpStream::from(conn);
    let ok = s.set_nonblocking(false).is_ok()
        && s.set_read_timeout(Some(CLIENT_TIMEOUT)).is_ok()
        && read_line(&mut s).is_ok()
        && {
            std::thread::sleep(work());
            s.write_all(b"OK\n").is_ok()
        };
    if ok {
        count();
    }
}

fn read_line(s: &mut TcpStream) -> io::Result<()> {
    let mut buf = [0u8; 64];
    let mut got = 0;
    while !buf[..got].contains(&b'\n') && got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            // SIGTERM: a socket read with a timeout is not restarted (signal(7)).
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The Tokio setup: a current-thread runtime with `herdless::tokio::Acceptor`; SIGTERM closes
/// the acceptor (from a plain thread that waits on the stop pipe), the connections it took are
/// served, then the worker ends.
#[cfg(feature = "tokio")]
fn tokio_worker(
    listener: BorrowedFd<'_>,
    group: &Group,
    stop: OwnedFd,
    ack: RawFd,
    count: &dyn Fn(),
) -> Res<()> {
    let listener = TcpListener::from(listener.try_clone_to_owned()?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    rt.block_on(async {
        let mut acceptor = herdless::tokio::Acceptor::new(group, listener)?;
        let closer = acceptor.closer();
        std::thread::spawn(move || {
            let mut byte = [0u8; 1];
            let _ = fixtures::read_exact(stop.as_raw_fd(), &mut byte);
            closer.close();
        });
        fixtures::write_all(ack, b"r")?;
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            match acceptor.accept().await {
                Ok((stream, _)) => {
                    tasks.spawn(answer_async(stream));
                }
                Err(e) if e.kind() == io::ErrorKind::NotConnected => break,
                Err(e) => return Err(e.into()),
            }
            while let Some(done) = tasks.try_join_next() {
                if done.unwrap_or(false) {
                    count();
                }
            }
        }
        while let Some(done) = tasks.join_next().await {
            if done.unwrap_or(false) {
                count();
            }
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}

/// Reads the request line and writes the reply; true when answered.
#[cfg(feature = "tokio")]
async fn answer_async(s: tokio::net::TcpStream) -> bool {
    let mut buf = [0u8; 64];
    let mut got = 0;
    while !buf[..got].contains(&b'\n') && got < buf.len() {
        if s.readable().await.is_err() {
            return false;
        }
        match s.try_read(&mut buf[got..]) {
            Ok(0) => return false,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return false,
        }
    }
    let work = work();
    if !work.is_zero()
        && tokio::task::spawn_blocking(move || std::thread::sleep(work))
            .await
            .is_err()
    {
        return false;
    }
    let mut reply: &[u8] = b"OK\n";
    while !reply.is_empty() {
        if s.writable().await.is_err() {
            return false;
        }
        match s.try_write(reply) {
            Ok(n) => reply = &reply[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return false,
        }
    }
    true
}
