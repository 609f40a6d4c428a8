//! `herd soak`: the long life of real middleware, compressed. A supervisor (this process) makes
//! a named group and service queues, fork + execs server processes that open the group by name
//! and each poll two POSIX queues (neighbouring servers share one), sends requests with
//! deadlines, and every second SIGKILLs a server and execs a replacement, SIGSTOPs another for
//! 100 ms, and makes a queue and retires one, through load phases (with a 1 ms SIGALRM in every
//! server) and quiet ones. Every request's fate is counted where it happens, in a table all the
//! processes map (`ledger`); the report says what was lost, duplicated, late, how long requests
//! waited, what the servers cost while quiet, and whether descriptors, memory or shared objects
//! grew. Exit status 1 when anything was lost or duplicated, or a backend's run failed.
//!
//! The parts: `plan` (timetable and which servers serve which queues), `supervisor` (one
//! backend's run), `fleet` (the exec'd servers as the supervisor sees them), `server` (the
//! server process), `traffic` (the client), `queues`, `ledger`, `probe` (/proc and /dev/shm),
//! `wakeups` (the per-second accounting), `report`, `guard` (Ctrl-C, the watchdog, cleanup).

mod fleet;
mod guard;
mod ledger;
mod plan;
mod probe;
mod queues;
mod report;
mod server;
mod supervisor;
mod traffic;
mod wakeups;

use std::path::PathBuf;
use std::time::Duration;

use herdless::Backend;
use serde::{Deserialize, Serialize};

pub use server::{exec_server, ServerSpec};

/// The definitions, shown by `herd soak --help` (and in docs/lab.md).
pub const DEFINITIONS: &str = "\
Timetable: --minutes M in ceil(2M) cycles (1 to 6), each 2/3 load, 1/3 quiet (M = 1: 20 s load, \
10 s quiet, twice). Every second, loaded or quiet (loaded only, with --quiet-churn false): a \
random server SIGKILLed and a replacement exec'd, another SIGSTOPped for 100 ms, a queue made \
(with a new home of servers) and the oldest active one retired (no more traffic; unlinked once \
its servers emptied it, or after 2 s with the supervisor taking what is left). While loaded: \
the client sends --rate requests per second in turn to the active queues (non-blocking; a full \
queue refuses), and every server has a 1 ms SIGALRM interval timer.

Servers: home h serves queues h and h+1; --queues + 1 homes are live, sharing --servers \
servers. Each server opens the group by name, joins, registers its two queues with \
READABLE.exclusive().one_event_round_robin() and loops: wait(50 ms), mq_receive, the read \
counted in the shared ledger, consumed (found_nothing on EAGAIN), then a check of its order to \
leave.

Fates of the requests that entered a queue:
  read        counted by a server right after mq_receive;
  duplicated  every read of a request beyond its first;
  late        read after its deadline (sent + --deadline-ms);
  stranded    found in its queue after the 2 s drain while servers of that queue were alive: lost;
  vanished    never read and in no queue: a server SIGKILLed with its receiving mark set (set \
just before mq_receive, cleared once the read is counted) took it (taken by a killed server, \
one per such death on that queue, not counted against the library); the rest are lost;
  lost        stranded + vanished beyond what killed servers explain;
  refused     the queue was full when the client sent (never entered a queue; not lost).
Arrival to read: from the client's stamp just before mq_send to the server's right after \
mq_receive.

Quiet wake-ups: voluntary context switches of every thread of a server (/proc/<pid>/task/*/\
status), read once a second, summed over the servers ready for at least 1 s, not stopped, \
killed or leaving in the interval, from 0.5 s into a quiet phase, divided by server-seconds. \
Unless --quiet-churn false, the churn goes on while quiet, so this includes what another member's \
death, join or leave costs; 'beyond' takes away the loop's own 50 ms timeouts (and signals).

Per process, at the start (the first servers, before traffic) and at the end (the servers live \
after the final drain; also after the first cycle): descriptors (/proc/<pid>/fd), memory (VmRSS \
less RssShmem: the shared ledger and group object left out), /dev/shm objects mapped; the \
supervisor's own; /dev/shm objects (this run's group, herdless.*, all) before, at start, at \
end, after cleanup; queue names of the run left after it (probed by name). Growth: an end \
figure above both the start's and the one after the first cycle (servers' descriptors by more \
than 1 on average, memory by more than a quarter and 1 MiB, the rest by any; a one-cycle run: \
its /dev/shm objects only), and whatever the cleanup left.

Exit status 1 if any backend lost or duplicated a request, or its run failed (a server that \
could not start or serve, e.g. Error::TooManySources, the client, a time bound, Ctrl-C); a \
failed run is reported with the counts so far and the next backend still runs.";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Backends to soak, one after the other.
    #[arg(long, value_enum, default_value = "both")]
    backend: Which,
    /// Minutes per backend (fractions allowed, at least 0.05).
    #[arg(long, default_value_t = 1.0)]
    minutes: f64,
    /// Live servers (exec'd processes), at least --queues + 1.
    #[arg(long, default_value_t = 10)]
    servers: usize,
    /// Active service queues at any time (1 to 32).
    #[arg(long, default_value_t = 4)]
    queues: usize,
    /// Requests per second while loaded (1 to 20000).
    #[arg(long, default_value_t = 200)]
    rate: u32,
    /// A request's deadline after it is sent, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    deadline_ms: u64,
    /// Whether the churn (kills, stops, queues made and retired) goes on while quiet; with
    /// `false` the quiet phases are calm, and their wake-ups are the library's idle cost alone.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    quiet_churn: bool,
    /// Seed of the churn's random choices (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Make the first request read lose or count twice, on purpose (to check the exit status).
    #[arg(long, value_enum)]
    inject: Option<Fault>,
    /// Also write one JSON row per backend to this file (its directory must exist).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Native,
    Emulated,
    Both,
}

/// A fault injected on purpose in the first request a server reads (`--inject`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fault {
    /// Receive one request and not count it.
    Lose,
    /// Count one request twice.
    Duplicate,
}

impl Fault {
    fn describe(self) -> &'static str {
        match self {
            Fault::Lose => "--inject lose: the first request read was not counted",
            Fault::Duplicate => "--inject duplicate: the first request read was counted twice",
        }
    }
}

/// Refuses settings that cannot run, before anything runs: one line naming the flag.
fn validate(args: &Args) -> Result<(), String> {
    if !args.minutes.is_finite() || !(0.05..=1440.0).contains(&args.minutes) {
        return Err(format!(
            "--minutes {} is out of range: 0.05 to 1440",
            args.minutes
        ));
    }
    if !(1..=32).contains(&args.queues) {
        return Err(format!("--queues {} is out of range: 1 to 32", args.queues));
    }
    if args.servers < args.queues + 1 || args.servers > 512 {
        return Err(format!(
            "--servers {} is out of range: --queues + 1 ({}) to 512 (every home needs a server)",
            args.servers,
            args.queues + 1
        ));
    }
    if !(1..=20_000).contains(&args.rate) {
        return Err(format!("--rate {} is out of range: 1 to 20000", args.rate));
    }
    if !(1..=600_000).contains(&args.deadline_ms) {
        return Err(format!(
            "--deadline-ms {} is out of range: 1 to 600000",
            args.deadline_ms
        ));
    }
    if let Some(path) = &args.json {
        crate::herd_bench::check_output("--json", Some(path), std::path::Path::new("."), "")?;
    }
    // The servers' descriptors are their own; the supervisor holds its queues and children.
    crate::limits::open_files("--servers", args.servers, 4 * args.servers as u64 + 256)
}

pub fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    validate(&args)?;
    let seed = args
        .seed
        .unwrap_or_else(|| ledger::now_ns() ^ u64::from(std::process::id()));
    let settings = supervisor::Settings {
        minutes: args.minutes,
        layout: plan::Layout {
            queues: args.queues,
            servers: args.servers,
        },
        plan: plan::Plan::new(args.minutes),
        rate: args.rate,
        deadline: Duration::from_millis(args.deadline_ms),
        seed,
        inject: args.inject,
        quiet_churn: args.quiet_churn,
    };
    let backends: Vec<(Backend, &'static str)> = match args.backend {
        Which::Native => vec![(Backend::Native, "native")],
        Which::Emulated => vec![(Backend::Emulated, "emulated")],
        Which::Both => vec![(Backend::Native, "native"), (Backend::Emulated, "emulated")],
    };
    guard::catch_stop_signals()?;
    println!(
        "herd soak: {} min per backend ({}); {} servers (fork + exec) over {} homes, {} active \
         queues, {} requests/s while loaded, deadline {} ms; {}; every second a SIGKILL and a \
         replacement, a SIGSTOP for 100 ms, a queue made and one retired; SIGALRM every 1 ms in \
         every server while loaded; churn while quiet: {}; seed {seed}",
        args.minutes,
        backends.iter().map(|b| b.1).collect::<Vec<_>>().join(", "),
        args.servers,
        args.queues + 1,
        args.queues,
        args.rate,
        args.deadline_ms,
        settings.plan.describe(),
        match args.quiet_churn {
            true => "on",
            false => "off",
        }
    );
    if let Some(fault) = args.inject {
        println!("INJECTED FAULT: {}", fault.describe());
    }
    let mut rows = Vec::new();
    for (backend, tag) in backends {
        if guard::must_stop() {
            println!("{tag}: not run: {}", guard::why());
            continue;
        }
        println!();
        let mut row = supervisor::run(&settings, backend, tag);
        if guard::must_stop() && row.failure.is_none() {
            row.failure = Some(guard::why().into());
        }
        row.print_details();
        rows.push(row);
    }
    crate::json::write_rows(args.json.as_deref(), &rows)?;
    println!();
    for row in &rows {
        println!("{}", row.final_line());
    }
    let failed: Vec<&str> = rows
        .iter()
        .filter(|r| !r.passed())
        .map(|r| r.backend)
        .collect();
    if !failed.is_empty() || rows.is_empty() {
        return Err(format!(
            "soak: failed on {} (see above)",
            match failed.is_empty() {
                true => "every backend (none ran)".to_string(),
                false => failed.join(" and "),
            }
        )
        .into());
    }
    Ok(())
}
