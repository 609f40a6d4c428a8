//! `herd accept`: the rig of the accept-distribution experiment ("one worker took 497 of
//! 500"). W forked (or, with `--spawn exec`, forked and exec'd) workers wait on one shared
//! loopback listener, each with its own poll instance, registering in an order the parent
//! dictates; the parent makes C connections D ms apart and every worker counts its wake-ups,
//! accepts and empty wake-ups. Each setup is a row: the raw kernel behaviours of that experiment (no
//! flag: every worker is woken, and the experiment saw the last registrant win; `EPOLLEXCLUSIVE`: the
//! first registrant takes everything; half migrated; nginx's DEL + ADD every 16;
//! `SO_REUSEPORT`) next to herdless, native and emulated.
//! The table shows who got what, because that is what the flag silently gets wrong.
//!
//! With `--spawn exec` each worker is the lab binary re-executed (`crate::exec`): the herdless
//! setups use a named group of the run's own, which the worker opens by name; the listener,
//! the control and acknowledgement pipes and the counters (a memfd) are inherited descriptors.
//! Kernel wake-ups and CPU time are counted from the moment each worker is registered, for
//! forked and exec'd workers alike, so an exec'd worker's start-up is not charged to the run.

mod worker;

use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use herdless::{Backend, Group};
use serde::{Deserialize, Serialize};

use crate::exec::{self, Counters, RunGroup, Spawn};
use crate::fairness::{sketch, Distribution, Spread};
use crate::net;
use herdless_fixtures::{self as fixtures, Blocking, SharedCounters};
use worker::{Counter, Mode, RawMode, Worker, COUNTERS};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// How long any one step (a registration, a worker's exit, the last accepts) may take.
const STEP_LIMIT: Duration = Duration::from_secs(10);

/// The default of the list flag of `Args`: every setup the table compares.
const DEFAULT_SETUPS: &str =
    "no-flag,exclusive,reuseport,half-migrated,nginx-16,herdless-native,herdless-emulated";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Worker processes sharing the listener.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// How workers start, comma-separated (each setup runs once per value, side by side):
    /// `fork` (the child runs on; anonymous group), `exec` (fork, then exec of the lab itself;
    /// the worker opens a named group of the run by name and inherits the listener).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "fork")]
    spawn: Vec<Spawn>,
    /// Connections per run, made one at a time.
    #[arg(long, default_value_t = 500)]
    connections: usize,
    /// Milliseconds between two connections.
    #[arg(long, default_value_t = 2.0)]
    delay_ms: f64,
    /// Setups to run, each a row of the table.
    #[arg(long, value_enum, value_delimiter = ',', default_value = DEFAULT_SETUPS)]
    setups: Vec<Setup>,
    /// Runs per setup: figures are the mean with min–max; distributions are the last run's.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Fork order stays 0..W; registration order is reversed (the last-born registers first).
    #[arg(long)]
    reverse_registration: bool,
    /// SIGKILL the first registrant once this many connections were accepted; the table then
    /// shows how the survivors shared the connections made after the kill.
    #[arg(long)]
    kill_front_at: Option<usize>,
    /// Busy work per accepted connection, in milliseconds.
    #[arg(long, default_value_t = 0.0)]
    work_ms: f64,
    /// Also write one JSON row per run to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One way of sharing the listener: a row of the table.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Setup {
    /// Raw epoll per worker, `EPOLLIN`, no flag: the herd.
    NoFlag,
    /// Raw `EPOLLEXCLUSIVE`: the monopoly.
    Exclusive,
    /// One `SO_REUSEPORT` listener per worker on the same port.
    Reuseport,
    /// Even registration ranks exclusive, odd ones not.
    HalfMigrated,
    /// Raw exclusive with DEL + ADD every 16 accepts (nginx 1.21.6).
    #[value(name = "nginx-16")]
    #[serde(rename = "nginx-16")]
    Nginx16,
    /// herdless, `Backend::Native`, `rotate_every(1)`.
    HerdlessNative,
    /// herdless, `Backend::Emulated`, `rotate_every(1)`.
    HerdlessEmulated,
}

impl Setup {
    fn name(self) -> &'static str {
        match self {
            Setup::NoFlag => "no-flag",
            Setup::Exclusive => "exclusive",
            Setup::Reuseport => "reuseport",
            Setup::HalfMigrated => "half-migrated",
            Setup::Nginx16 => "nginx-16",
            Setup::HerdlessNative => "herdless-native",
            Setup::HerdlessEmulated => "herdless-emulated",
        }
    }

    fn backend(self) -> Option<Backend> {
        match self {
            Setup::HerdlessNative => Some(Backend::Native),
            Setup::HerdlessEmulated => Some(Backend::Emulated),
            _ => None,
        }
    }

    /// The raw registration of the worker at registration `rank`.
    fn raw_mode(self, rank: usize) -> RawMode {
        let exclusive = match self {
            Setup::Exclusive | Setup::Nginx16 => true,
            Setup::HalfMigrated => rank % 2 == 0,
            _ => false,
        };
        let readd_every = (self == Setup::Nginx16).then_some(16);
        RawMode {
            exclusive,
            readd_every,
        }
    }
}

/// What one run of one setup measured.
#[derive(Debug, Clone, Serialize)]
struct RunRow {
    setup: Setup,
    spawn: Spawn,
    run: usize,
    workers: usize,
    connections: usize,
    delay_ms: f64,
    work_ms: f64,
    reverse_registration: bool,
    /// Wake-ups with an event for the listener, all workers.
    wakeups: u64,
    /// Wake-ups whose first accept found nothing.
    empty_wakeups: u64,
    /// Accepts per worker in registration order (after a kill: the survivors', after the kill).
    per_worker: Vec<u64>,
    /// Connections accepted in all.
    accepted: u64,
    /// Connections made but never accepted.
    lost: u64,
    /// Voluntary context switches of all workers from the moment each was registered to its
    /// exit: kernel-level wake-ups, seen or not.
    kernel_wakeups: u64,
    /// The same over the workers' whole lives (the kernel's figure at reaping): for an exec'd
    /// worker this includes its start-up.
    kernel_wakeups_whole_process: u64,
    /// User plus system CPU time of all workers, from registration to exit, milliseconds.
    worker_cpu_ms: f64,
    /// Accepts of the killed first registrant, if one was killed.
    killed_front_accepts: Option<u64>,
    max_share: f64,
    spread: u64,
    jain: f64,
}

pub fn run(args: Args) -> Res<()> {
    use crate::limits::{descriptors_for_processes as needed, members_and_files};
    members_and_files("--workers", args.workers, needed)?;
    if args.connections == 0 || args.runs == 0 {
        return Err("--connections and --runs must be at least 1".into());
    }
    if args.kill_front_at.is_some_and(|k| k >= args.connections) {
        return Err("--kill-front-at must be below --connections".into());
    }
    if args.kill_front_at.is_some() && args.workers < 2 {
        return Err("--kill-front-at needs at least 2 workers".into());
    }
    if args.spawn.is_empty() {
        return Err("--spawn: give fork, exec or both".into());
    }
    let mut spawns = args.spawn.clone();
    spawns.dedup();
    print_header(&args);
    let mut rows = Vec::new();
    for &setup in &args.setups {
        // Runs interleaved (fork, exec, fork, exec, ...), so a noisy moment hits both.
        let mut runs: Vec<Vec<RunRow>> = vec![Vec::new(); spawns.len()];
        for run in 0..args.runs {
            for (i, &spawn) in spawns.iter().enumerate() {
                runs[i].push(run_once(&args, setup, spawn, run)?);
            }
        }
        for runs in runs {
            print_row(&runs);
            rows.extend(runs);
        }
    }
    crate::json::write_rows(args.json.as_deref(), &rows)?;
    Ok(())
}

/// The listeners of one run: one shared, or one per worker (`SO_REUSEPORT`).
fn listeners(setup: Setup, workers: usize) -> Res<Vec<TcpListener>> {
    Ok(match setup {
        Setup::Reuseport => net::reuseport_group(workers)?,
        _ => vec![net::listener(
            SocketAddrV4::new([127, 0, 0, 1].into(), 0),
            false,
        )?],
    })
}

/// The workers of one run, by registration rank.
struct Crew {
    pids: Vec<i32>,
    controls: Vec<OwnedFd>,
}

/// Registration rank → fork index.
fn fork_index(args: &Args, rank: usize) -> usize {
    match args.reverse_registration {
        true => args.workers - 1 - rank,
        false => rank,
    }
}

/// The group of a herdless setup: anonymous for forked workers, named (its name removed when
/// the run ends) for exec'd ones.
enum RunsGroup {
    Anonymous(Group),
    Named(RunGroup),
}

impl RunsGroup {
    fn group(&self) -> &Group {
        match self {
            RunsGroup::Anonymous(g) => g,
            RunsGroup::Named(g) => &g.group,
        }
    }
}

fn run_once(args: &Args, setup: Setup, spawn: Spawn, run: usize) -> Res<RunRow> {
    let listeners = listeners(setup, args.workers)?;
    let addr = net::v4_addr(&listeners[0])?;
    let group = match setup.backend() {
        Some(backend) => {
            let builder = Group::builder()
                .backend(backend)
                .rotate_every(1)
                .max_members(args.workers.max(2));
            Some(match spawn {
                Spawn::Fork => RunsGroup::Anonymous(builder.build()?),
                Spawn::Exec => RunsGroup::Named(RunGroup::build("accept", builder)?),
            })
        }
        None => None,
    };
    let counters = Counters::new(args.workers * COUNTERS, spawn)?;
    let crew = match spawn {
        Spawn::Fork => spawn_crew(
            args,
            setup,
            &listeners,
            group.as_ref().map(RunsGroup::group),
            &counters.counters,
        )?,
        Spawn::Exec => exec_crew(args, setup, &listeners, group.as_ref(), &counters)?,
    };
    let counters = &counters.counters;
    // The workers hold the listeners now; the parent's copies would keep a dead worker's
    // SO_REUSEPORT queue alive.
    drop(listeners);
    let tasks: Vec<(u32, i32)> = crew.pids.iter().map(|&p| (p as u32, p)).collect();
    fixtures::until_asleep(&tasks, STEP_LIMIT)?;
    let outcome = connect_all(args, addr, &crew, counters);
    let usages = stop_crew(&crew, outcome.as_ref().ok().and_then(|o| o.killed));
    let outcome = outcome?;
    Ok(row(args, (setup, spawn), run, counters, &outcome, &usages?))
}

fn spawn_crew(
    args: &Args,
    setup: Setup,
    listeners: &[TcpListener],
    group: Option<&Group>,
    counters: &SharedCounters,
) -> Res<Crew> {
    let (ack_r, ack_w) = fixtures::pipe(Blocking::Both)?;
    let mut by_fork = Vec::new();
    for fork in 0..args.workers {
        let rank = (0..args.workers)
            .find(|&r| fork_index(args, r) == fork)
            .expect("a permutation");
        let (control_r, control_w) = fixtures::pipe(Blocking::Both)?;
        let worker = Worker {
            rank,
            listener: listeners[rank.min(listeners.len() - 1)].as_fd(),
            control: control_r,
            ack: ack_w.as_raw_fd(),
            counters,
            work: Duration::from_secs_f64(args.work_ms / 1e3),
            mode: match group {
                Some(g) => Mode::Herdless(g),
                None => Mode::Raw(setup.raw_mode(rank)),
            },
        };
        // SAFETY: the lab is single-threaded here; the child only runs the worker (std, libc,
        // herdless) and leaves with _exit, never returning into the parent's code.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        if pid == 0 {
            close_others(listeners, worker.listener.as_raw_fd());
            let code = match worker.run() {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("worker {rank}: {e}");
                    1
                }
            };
            // SAFETY: leaves the child at once, without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        by_fork.push((rank, pid, control_w));
    }
    drop(ack_w);
    register_in_order(by_fork, &ack_r)
}

/// Lets the workers register one at a time in rank order (one registers and acknowledges,
/// then the next), given (rank, pid, control pipe) in fork order.
fn register_in_order(mut by_fork: Vec<(usize, i32, OwnedFd)>, ack_r: &OwnedFd) -> Res<Crew> {
    by_fork.sort_by_key(|w| w.0);
    let (pids, controls): (Vec<i32>, Vec<OwnedFd>) =
        by_fork.into_iter().map(|(_, p, c)| (p, c)).unzip();
    for control in &controls {
        // Registration order is exact: one worker registers, acknowledges, then the next.
        fixtures::write_all(control.as_raw_fd(), b"g")?;
        read_with_limit(ack_r)?;
    }
    Ok(Crew { pids, controls })
}

/// What an exec'd accept worker is told (`crate::exec`): its rank, the numbers of the
/// descriptors it inherited, and how to wait.
#[derive(Serialize, Deserialize)]
pub struct ExecSpec {
    rank: usize,
    workers: usize,
    listener: RawFd,
    control: RawFd,
    ack: RawFd,
    counters: RawFd,
    work_ns: u64,
    /// A raw setup's registration, or the name of the herdless setup's group.
    raw: Option<RawMode>,
    group: Option<String>,
}

/// Starts the workers by fork + exec of the lab, fork order 0..W as `spawn_crew` does.
fn exec_crew(
    args: &Args,
    setup: Setup,
    listeners: &[TcpListener],
    group: Option<&RunsGroup>,
    counters: &Counters,
) -> Res<Crew> {
    let (ack_r, ack_w) = fixtures::pipe(Blocking::Both)?;
    let counters_fd = counters
        .fd()
        .ok_or("exec'd workers need file-backed counters")?;
    let mut by_fork = Vec::new();
    let mut started: Vec<i32> = Vec::new();
    let stop_started = |started: &[i32]| {
        for &pid in started {
            // SAFETY: signals and reaps our own children.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
    };
    for fork in 0..args.workers {
        let rank = (0..args.workers)
            .find(|&r| fork_index(args, r) == fork)
            .expect("a permutation");
        let (control_r, control_w) = fixtures::pipe(Blocking::Both)?;
        let listener = listeners[rank.min(listeners.len() - 1)].as_raw_fd();
        let spec = ExecSpec {
            rank,
            workers: args.workers,
            listener,
            control: control_r.as_raw_fd(),
            ack: ack_w.as_raw_fd(),
            counters: counters_fd,
            work_ns: (args.work_ms * 1e6) as u64,
            raw: setup.backend().is_none().then(|| setup.raw_mode(rank)),
            group: match group {
                Some(RunsGroup::Named(g)) => Some(g.name().to_owned()),
                _ => None,
            },
        };
        let inherit = [
            listener,
            control_r.as_raw_fd(),
            ack_w.as_raw_fd(),
            counters_fd,
        ];
        match exec::spawn(&exec::Job::Accept(spec), &inherit) {
            Ok(child) => {
                started.push(child.id() as i32);
                by_fork.push((rank, child.id() as i32, control_w));
            }
            Err(e) => {
                stop_started(&started);
                return Err(format!("starting an exec'd worker: {e}").into());
            }
        }
    }
    drop(ack_w);
    let crew = register_in_order(by_fork, &ack_r);
    if crew.is_err() {
        stop_started(&started);
    }
    crew
}

/// The exec'd worker: takes its inherited descriptors, opens the named group, runs as a forked
/// worker would. Returns the exit status.
pub fn exec_worker(spec: ExecSpec) -> i32 {
    let rank = spec.rank;
    match exec_worker_inner(spec) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("worker {rank} (exec'd): {e}");
            1
        }
    }
}

fn exec_worker_inner(spec: ExecSpec) -> Res<()> {
    // SAFETY: the parent left these open for this process alone; each is taken once.
    let (listener, control, ack, counters) = unsafe {
        (
            exec::inherited(spec.listener),
            exec::inherited(spec.control),
            exec::inherited(spec.ack),
            exec::inherited_counters(spec.counters, spec.workers * COUNTERS)?,
        )
    };
    let group = match &spec.group {
        Some(name) => Some(Group::open(name)?),
        None => None,
    };
    let mode = match (&group, spec.raw) {
        (Some(g), _) => Mode::Herdless(g),
        (None, Some(raw)) => Mode::Raw(raw),
        (None, None) => return Err("neither a raw mode nor a group".into()),
    };
    let worker = Worker {
        rank: spec.rank,
        listener: listener.as_fd(),
        control,
        ack: ack.as_raw_fd(),
        counters: &counters,
        work: Duration::from_nanos(spec.work_ns),
        mode,
    };
    worker.run()
}

/// In a child: closes the listeners that are not its own, so that a dead worker's
/// `SO_REUSEPORT` listener really closes.
fn close_others(listeners: &[TcpListener], mine: i32) {
    for l in listeners.iter().filter(|l| l.as_raw_fd() != mine) {
        // SAFETY: the child never uses these listeners again and leaves by _exit, so nothing
        // closes them a second time.
        unsafe { libc::close(l.as_raw_fd()) };
    }
}

/// Reads one byte, or fails after [`STEP_LIMIT`].
fn read_with_limit(fd: &OwnedFd) -> Res<()> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, STEP_LIMIT.as_millis() as i32) };
    if n != 1 {
        return Err("a worker did not acknowledge its registration".into());
    }
    let mut byte = [0u8; 1];
    fixtures::read_exact(fd.as_raw_fd(), &mut byte)?;
    Ok(())
}

/// What the connection loop saw.
struct Connected {
    made: u64,
    /// The killed first registrant: its pid and the accepts per rank at the kill.
    killed: Option<i32>,
    at_kill: Option<Vec<u64>>,
}

fn accepts(counters: &SharedCounters, workers: usize) -> Vec<u64> {
    (0..workers)
        .map(|r| {
            counters
                .get(r * COUNTERS + Counter::Accepts as usize)
                .load(SeqCst)
        })
        .collect()
}

/// Waits until `target` connections were accepted in all, or no accept happened for
/// [`STEP_LIMIT`]; returns the accepts per rank.
fn until_accepted(counters: &SharedCounters, workers: usize, target: u64) -> Vec<u64> {
    let mut last = accepts(counters, workers);
    let mut progress = Instant::now();
    while last.iter().sum::<u64>() < target && progress.elapsed() < STEP_LIMIT {
        std::thread::sleep(Duration::from_micros(200));
        let now = accepts(counters, workers);
        if now != last {
            progress = Instant::now();
            last = now;
        }
    }
    last
}

fn connect_all(
    args: &Args,
    addr: SocketAddrV4,
    crew: &Crew,
    counters: &SharedCounters,
) -> Res<Connected> {
    let mut out = Connected {
        made: 0,
        killed: None,
        at_kill: None,
    };
    let start = Instant::now();
    let gap = Duration::from_secs_f64(args.delay_ms / 1e3);
    for i in 0..args.connections {
        if args.kill_front_at == Some(i) {
            let at_kill = until_accepted(counters, args.workers, out.made);
            // SAFETY: signals our own child.
            unsafe { libc::kill(crew.pids[0], libc::SIGKILL) };
            out.killed = Some(crew.pids[0]);
            out.at_kill = Some(at_kill);
        }
        if let Some(wait) = (start + gap * i as u32).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let target = std::net::SocketAddr::V4(addr);
        if TcpStream::connect_timeout(&target, Duration::from_secs(1)).is_ok() {
            out.made += 1;
        }
    }
    until_accepted(counters, args.workers, out.made);
    Ok(out)
}

/// Stops every worker (the stop byte; SIGKILL after [`STEP_LIMIT`]) and returns each one's
/// resource usage, by rank, as the kernel reports it when reaping the child.
fn stop_crew(crew: &Crew, killed: Option<i32>) -> Res<Vec<libc::rusage>> {
    for (pid, control) in crew.pids.iter().zip(&crew.controls) {
        if Some(*pid) != killed {
            // A worker that died already cannot read it; reaping says so below.
            let _ = fixtures::write_all(control.as_raw_fd(), b"s");
        }
    }
    let deadline = Instant::now() + STEP_LIMIT;
    let mut usages = Vec::new();
    let mut failed = 0;
    for &pid in &crew.pids {
        let (status, usage) = reap(pid, deadline)?;
        let clean = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        if !clean && Some(pid) != killed {
            failed += 1;
        }
        usages.push(usage);
    }
    if failed > 0 {
        return Err(format!("{failed} worker(s) failed or had to be killed").into());
    }
    Ok(usages)
}

/// Reaps `pid`, killing it if it is still there at `deadline`.
fn reap(pid: i32, deadline: Instant) -> Res<(i32, libc::rusage)> {
    let mut status = 0;
    // SAFETY: rusage is plain data; zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: reaps our own child into live out-parameters.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            return Ok((status, usage));
        }
        if r < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        if Instant::now() > deadline {
            // SAFETY: signals our own, overdue child; the next wait4 reaps it.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn sum_counter(counters: &SharedCounters, workers: usize, c: Counter) -> u64 {
    (0..workers)
        .map(|r| counters.get(r * COUNTERS + c as usize).load(SeqCst))
        .sum()
}

fn row(
    args: &Args,
    (setup, spawn): (Setup, Spawn),
    run: usize,
    counters: &SharedCounters,
    connected: &Connected,
    usages: &[libc::rusage],
) -> RunRow {
    let all = accepts(counters, args.workers);
    let accepted: u64 = all.iter().sum();
    let per_worker = match &connected.at_kill {
        // The survivors, and only what they accepted after the kill.
        Some(at_kill) => all
            .iter()
            .zip(at_kill)
            .skip(1)
            .map(|(a, b)| a - b)
            .collect(),
        None => all.clone(),
    };
    let dist = Distribution::of(&per_worker);
    // From registration on: the kernel's figure at reaping less the worker's at registration.
    let at_ready =
        |rank: usize, c: Counter| counters.get(rank * COUNTERS + c as usize).load(SeqCst);
    let kernel_wakeups = usages
        .iter()
        .enumerate()
        .map(|(rank, u)| (u.ru_nvcsw as u64).saturating_sub(at_ready(rank, Counter::ReadySwitches)))
        .sum();
    let cpu_us: u64 = usages
        .iter()
        .enumerate()
        .map(|(rank, u)| exec::cpu_us(u).saturating_sub(at_ready(rank, Counter::ReadyCpuUs)))
        .sum();
    RunRow {
        setup,
        spawn,
        run,
        workers: args.workers,
        connections: args.connections,
        delay_ms: args.delay_ms,
        work_ms: args.work_ms,
        reverse_registration: args.reverse_registration,
        wakeups: sum_counter(counters, args.workers, Counter::Wakeups),
        empty_wakeups: sum_counter(counters, args.workers, Counter::Empty),
        per_worker,
        accepted,
        lost: connected.made.saturating_sub(accepted) + (args.connections as u64 - connected.made),
        kernel_wakeups,
        kernel_wakeups_whole_process: usages.iter().map(|u| u.ru_nvcsw as u64).sum(),
        worker_cpu_ms: cpu_us as f64 / 1e3,
        killed_front_accepts: connected.killed.map(|_| all[0]),
        max_share: dist.max_share,
        spread: dist.spread,
        jain: dist.jain,
    }
}

fn print_header(args: &Args) {
    let order = match args.reverse_registration {
        true => "reversed (fork order 0..W, the last-born registers first)",
        false => "= fork order",
    };
    let spawn: Vec<&str> = args
        .spawn
        .iter()
        .map(|s| match s {
            Spawn::Fork => "forked",
            Spawn::Exec => "exec'd",
        })
        .collect();
    println!(
        "herd accept: {} {} workers, {} connections {} ms apart, {} ms work each, \
         {} run(s) per setup; registration order {order}",
        args.workers,
        spawn.join(" or "),
        args.connections,
        args.delay_ms,
        args.work_ms,
        args.runs
    );
    if let Some(k) = args.kill_front_at {
        println!(
            "the first registrant is SIGKILLed after {k} accepts; `per worker` is the \
             survivors' accepts after the kill"
        );
    }
    println!(
        "figures: mean (min–max) over runs; `per worker` in registration order, last run; \
         kernel wake-ups = voluntary context switches of the workers, and CPU time, from \
         registration to exit (an exec'd worker's start-up not included)\n"
    );
    println!(
        "| setup | wake-ups | empty | wake-ups/conn | kernel wake-ups/conn | worker CPU ms | \
         per worker | top share | max−min | Jain | lost |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
}

fn print_row(runs: &[RunRow]) {
    let of = |f: &dyn Fn(&RunRow) -> f64| Spread::of(&runs.iter().map(f).collect::<Vec<_>>());
    let conns = |r: &RunRow| r.accepted.max(1) as f64;
    let last = runs.last().expect("at least one run");
    let killed = match last.killed_front_accepts {
        Some(k) => format!(" (killed front: {k})"),
        None => String::new(),
    };
    let spawn = match last.spawn {
        Spawn::Fork => "",
        Spawn::Exec => " (exec)",
    };
    println!(
        "| {}{spawn} | {} | {} | {} | {} | {} | {}{killed} | {} | {} | {} | {} |",
        last.setup.name(),
        whole(of(&|r| r.wakeups as f64)),
        whole(of(&|r| r.empty_wakeups as f64)),
        of(&|r| r.wakeups as f64 / conns(r)),
        of(&|r| r.kernel_wakeups as f64 / conns(r)),
        whole(of(&|r| r.worker_cpu_ms)),
        sketch(&last.per_worker),
        of(&|r| r.max_share),
        whole(of(&|r| r.spread as f64)),
        of(&|r| r.jain),
        whole(of(&|r| r.lost as f64)),
    );
}

/// A spread of counts, without decimals.
fn whole(s: Spread) -> String {
    if s.min == s.max {
        format!("{:.0}", s.mean)
    } else {
        format!("{:.0} ({:.0}–{:.0})", s.mean, s.min, s.max)
    }
}
