//! `herd stress`: nothing lost, nothing read twice. Pushes message ids through a shared pipe or
//! POSIX message queue into many waiters, through every herdless mode, and checks that every id
//! was read exactly once. Prints, per workload and mode, the messages lost and duplicated
//! (expected: 0 and 0) next to the time and the distribution. Exits with status 1 if any
//! message was lost or duplicated.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use herdless::{Backend, Events, Group, Interest};
use serde::Serialize;

use crate::fairness::{sketch, Distribution};
use crate::queue::{read_one, Channel, Read, Workload};

/// The default of the list flag of `Args`: every mode the table compares.
const DEFAULT_MODES: &str = "native-rr,native-exclusive,emulated-rr,emulated-exclusive";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Shared descriptors to push messages through.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "pipe,mq")]
    workloads: Vec<Workload>,
    /// Waiting threads (members of the group), 1 to herdless::MAX_MEMBERS_LIMIT (16 384).
    #[arg(long, default_value_t = 500)]
    waiters: usize,
    /// Message ids pushed through each workload and mode.
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// herdless modes to check, comma-separated (all by default).
    #[arg(long, value_enum, value_delimiter = ',', default_value = DEFAULT_MODES)]
    modes: Vec<Mode>,
    /// Stop producing after this many seconds per run (what was produced is still checked).
    #[arg(long, default_value_t = 300)]
    max_seconds: u64,
    /// Write the rows as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

/// The key of the stop descriptor (the queue's is 0).
const STOP_KEY: usize = 1;

/// A herdless configuration under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Native, EPOLLEXCLUSIVE with rotation after every event, one event per wait.
    NativeRr,
    /// Native, raw EPOLLEXCLUSIVE (no rotation).
    NativeExclusive,
    /// Emulated token passing, rotation after every event, one event per wait.
    EmulatedRr,
    /// Emulated token passing, no rotation.
    EmulatedExclusive,
}

impl Mode {
    fn backend(self) -> Backend {
        match self {
            Mode::NativeRr | Mode::NativeExclusive => Backend::Native,
            Mode::EmulatedRr | Mode::EmulatedExclusive => Backend::Emulated,
        }
    }
    fn rotate_every(self) -> u32 {
        match self {
            Mode::NativeRr | Mode::EmulatedRr => 1,
            Mode::NativeExclusive | Mode::EmulatedExclusive => 0,
        }
    }
    fn interest(self) -> Interest {
        match self {
            Mode::NativeRr | Mode::EmulatedRr => {
                Interest::READABLE.exclusive().one_event_round_robin()
            }
            Mode::NativeExclusive | Mode::EmulatedExclusive => Interest::READABLE.exclusive(),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Mode::NativeRr => "native-rr",
            Mode::NativeExclusive => "native-exclusive",
            Mode::EmulatedRr => "emulated-rr",
            Mode::EmulatedExclusive => "emulated-exclusive",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One checked run.
#[derive(Debug, Serialize)]
struct Row {
    workload: Workload,
    mode: Mode,
    waiters: usize,
    messages: u64,
    lost: u64,
    duplicated: u64,
    seconds: f64,
    empty_wakeups: u64,
    per_waiter: Vec<u64>,
    distribution: Distribution,
}

/// Refuses settings that would make a run that checks nothing, or cannot start.
fn validate(args: &Args) -> Result<(), String> {
    crate::limits::members("--waiters", args.waiters)?;
    if args.messages == 0 {
        return Err("--messages 0: a run must push at least 1 message id".into());
    }
    if args.max_seconds == 0 {
        return Err("--max-seconds 0: a run must be allowed at least 1 second".into());
    }
    crate::limits::open_files(
        "--waiters",
        args.waiters,
        crate::limits::descriptors_for_threads(args.waiters),
    )
}

pub fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    validate(&args)?;
    let mut rows = Vec::new();
    let mut not_run = 0;
    println!(
        "herd stress: {} waiters, {} message ids per run; every id must be read exactly once",
        args.waiters, args.messages
    );
    println!(
        "{:<5} {:<19} {:>9} {:>5} {:>10} {:>8} {:>7}  per waiter",
        "queue", "mode", "messages", "lost", "duplicated", "seconds", "Jain"
    );
    for &workload in &args.workloads {
        for &mode in &args.modes {
            let row = match check(workload, mode, &args) {
                Ok(row) => row,
                Err(e) => {
                    println!(
                        "{:<5} {:<19} DID NOT RUN: {e}",
                        workload.name(),
                        mode.name()
                    );
                    not_run += 1;
                    continue;
                }
            };
            println!(
                "{:<5} {:<19} {:>9} {:>5} {:>10} {:>8.2} {:>7.4}  {}",
                workload.to_string(),
                mode.name(),
                row.messages,
                row.lost,
                row.duplicated,
                row.seconds,
                row.distribution.jain,
                sketch(&row.per_waiter)
            );
            rows.push(row);
        }
    }
    if let Some(path) = args.json.as_ref().filter(|_| !rows.is_empty()) {
        std::fs::write(
            path,
            serde_json::to_string_pretty(&serde_json::json!({ "rows": rows }))?,
        )?;
        println!("rows written to {}", path.display());
    }
    let bad: u64 = rows.iter().map(|r| r.lost + r.duplicated).sum();
    if bad > 0 {
        return Err(format!("{bad} messages lost or duplicated").into());
    }
    if not_run > 0 {
        return Err(format!(
            "{not_run} of {} runs did not run (see above): nothing is proven for them",
            not_run + rows.len()
        )
        .into());
    }
    println!("0 lost, 0 duplicated in every run");
    Ok(())
}

/// Runs one workload through one mode and counts how often each id was read.
fn check(workload: Workload, mode: Mode, args: &Args) -> Result<Row, Box<dyn std::error::Error>> {
    let group = Group::builder()
        .backend(mode.backend())
        .rotate_every(mode.rotate_every())
        .max_members(args.waiters)
        .build()?;
    let mut channel = Channel::open(workload, false)?;
    if let Some(depth) = channel.mq_depth {
        eprintln!("  {workload} / {mode}: message queue depth {depth}");
    }
    let reads: Vec<AtomicU8> = (0..args.messages).map(|_| AtomicU8::new(0)).collect();
    let out_of_range = AtomicUsize::new(0);
    let read_total = AtomicU64::new(0);
    let start = Instant::now();
    let (per_waiter, empty, produced) = std::thread::scope(|scope| {
        let fd = channel.read.as_raw_fd();
        // SAFETY: the stop descriptor lives in `channel`, which outlives every waiter thread.
        let stop = unsafe { BorrowedFd::borrow_raw(channel.stop_fd()) };
        let mut handles = Vec::new();
        for _ in 0..args.waiters {
            let mut waiter = group.join()?;
            waiter.add(&channel.read, 0, mode.interest())?;
            waiter.add(&stop, STOP_KEY, Interest::READABLE)?;
            let (reads, out_of_range, read_total) = (&reads, &out_of_range, &read_total);
            handles.push(scope.spawn(move || -> std::io::Result<(u64, u64)> {
                let mut events = Events::with_capacity(1);
                let (mut count, mut empty) = (0, 0);
                loop {
                    waiter.wait(&mut events, None)?;
                    match events.iter().next().map(|e| e.key) {
                        None => continue,
                        Some(STOP_KEY) => return Ok((count, empty)),
                        Some(_) => {}
                    }
                    match read_one(fd, workload)? {
                        Read::Message(id) => {
                            waiter.consumed(0)?;
                            count += 1;
                            read_total.fetch_add(1, Relaxed);
                            match reads.get(id as usize) {
                                Some(r) => r.fetch_add(1, Relaxed),
                                None => out_of_range.fetch_add(1, Relaxed) as u8,
                            };
                        }
                        Read::Empty => empty += 1,
                        Read::Stop => return Ok((count, empty)),
                    }
                }
            }));
        }
        let produced = produce(
            &channel,
            args.messages,
            Duration::from_secs(args.max_seconds),
        )?;
        // Stop once every message was read, or after a grace period (what is missing then is
        // reported as lost).
        let grace = Instant::now();
        while read_total.load(Relaxed) < produced && grace.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(1));
        }
        channel.finish();
        let mut per_waiter = Vec::new();
        let mut empty = 0;
        for h in handles {
            let (count, e) = h.join().expect("waiter panicked")?;
            per_waiter.push(count);
            empty += e;
        }
        Ok::<_, Box<dyn std::error::Error>>((per_waiter, empty, produced))
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let lost = reads[..produced as usize]
        .iter()
        .filter(|r| r.load(Relaxed) == 0)
        .count() as u64;
    let duplicated = reads
        .iter()
        .map(|r| u64::from(r.load(Relaxed).saturating_sub(1)))
        .sum::<u64>()
        + out_of_range.load(Relaxed) as u64;
    Ok(Row {
        workload,
        mode,
        waiters: args.waiters,
        messages: produced,
        lost,
        duplicated,
        seconds,
        empty_wakeups: empty,
        distribution: Distribution::of(&per_waiter),
        per_waiter,
    })
}

/// Sends ids 0.. as fast as the queue takes them, for at most `limit`; returns how many.
fn produce(queue: &Channel, messages: u64, limit: Duration) -> std::io::Result<u64> {
    let start = Instant::now();
    let mut last_report = start;
    for id in 0..messages {
        queue.send(id)?;
        if id % 4096 == 0 {
            let now = Instant::now();
            if now - start > limit {
                eprintln!("  time limit reached after {id} messages");
                return Ok(id);
            }
            if now - last_report > Duration::from_secs(3) {
                eprintln!(
                    "  … {id} of {messages} sent ({:.0} s)",
                    (now - start).as_secs_f64()
                );
                last_report = now;
            }
        }
    }
    Ok(messages)
}
