//! `herd rpc`: the request/response shape of a C middleware (issue 32). One client thread
//! makes its calls one at a time: each is a request on one shared POSIX message queue (the
//! service queue) that N server processes wait on, and a reply on the client's own reply
//! queue from whichever server took it. Every mode of the herd benchmark runs side by side,
//! alternating at each server count (no flag, the raw flag, herdless native and emulated under
//! `--rotate-every`), and each row reports the time per call (mean, min, median, p99), what the
//! servers paid for it (CPU, kernel wake-ups, empty wake-ups), who served what, and its ratio
//! to the raw flag's time in the same run; the run ends with a verdict against issue 32's
//! targets. Every call is checked to get exactly one reply.
//!
//! This file holds the command line and the order of the rows; `row.rs` runs one row (the
//! client and the checks), `server.rs` is a server process, `queues.rs` the two queues and
//! `report.rs` the table, JSON and verdict.

mod queues;
mod report;
mod row;
mod server;

use std::path::PathBuf;
use std::time::Duration;

pub use server::{exec_server, ServerSpec};

use crate::exec::Spawn;
use crate::herd_bench::{check_output, Mode, Refusal, Rotate, Setup};
use report::{Outcome, Report};

/// Flags of `herd rpc`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Server counts to compare, comma-separated, each 1 to herdless::MAX_MEMBERS_LIMIT
    /// (16 384).
    #[arg(long, value_delimiter = ',', default_value = "8,32")]
    servers: Vec<usize>,
    /// Calls the client makes per row, one at a time.
    #[arg(long, default_value_t = 20_000)]
    calls: u64,
    /// Modes to run, comma-separated, as `herd mq` names them: no-flag (a `polling` poller per
    /// server: the herd), raw-flag (EPOLLEXCLUSIVE alone: herdless native, rotate_every(0)),
    /// herdless-native, herdless-emulated (turns as `--rotate-every` says).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "no-flag,raw-flag,herdless-native,herdless-emulated"
    )]
    modes: Vec<Mode>,
    /// Rotation settings of the herdless modes, each its own row, comma-separated: `adaptive`
    /// (the library's default) or a number of events per turn (1: strict turns).
    #[arg(long, value_delimiter = ',', default_value = "adaptive")]
    rotate_every: Vec<Rotate>,
    /// How the servers start: `fork`, or `exec` (fork, then exec of the lab itself: the server
    /// opens the row's named group and both queues by name, as a middleware's servers do).
    #[arg(long, value_enum, default_value = "fork")]
    spawn: Spawn,
    /// Repeat every row this many times, interleaved; the verdict gives mean (min–max).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// The client stops a row early after this many seconds (the row reports the calls it
    /// made); with the bounds on every wait, it bounds the run.
    #[arg(long, default_value_t = 20.0)]
    time_cap: f64,
    /// Where to write every row as JSON (default: target/herd/herd-rpc.json). Its directory
    /// must exist and the file be writable: checked before the first row runs.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// `herd rpc`: every (run, servers, mode) row, the table, the JSON, the verdict. Fails if a
/// row failed (a call lost or answered twice among them).
pub fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    validate(&args)?;
    let out_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/herd");
    let json = check_output("--json", args.json.as_deref(), &out_dir, "herd-rpc.json")?;
    let specs = plan(&args);
    eprintln!(
        "herd rpc: {} rows ({} servers, {}ed, {} calls, {} run(s), time cap {} s per row)",
        specs.len(),
        args.servers
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(" and "),
        match args.spawn {
            Spawn::Fork => "fork",
            Spawn::Exec => "exec",
        },
        args.calls,
        args.runs,
        args.time_cap
    );
    let mut outcomes = Vec::with_capacity(specs.len());
    for (i, (run, spec)) in specs.into_iter().enumerate() {
        let started = std::time::Instant::now();
        let result = row::run(&spec);
        let outcome = Outcome { run, spec, result };
        eprint!(
            "herd rpc: [{}/{}] {} ... ",
            i + 1,
            outcomes.capacity(),
            report::label(&outcome)
        );
        match &outcome.result {
            Ok(m) => eprintln!(
                "{:.2} s, {:.2} µs/call",
                started.elapsed().as_secs_f64(),
                m.seconds * 1e6 / m.calls.max(1) as f64
            ),
            Err(Refusal::Unavailable(why)) => eprintln!("DID NOT RUN, not available: {why}"),
            Err(Refusal::Failed(why)) => eprintln!("FAILED: {why}"),
        }
        outcomes.push(outcome);
    }
    let report = Report { outcomes };
    report.print_table(args.calls);
    report.write_json(&json)?;
    report.print_verdict();
    let failures = report.failures();
    if !failures.is_empty() {
        return Err(format!("{} row(s) failed: {}", failures.len(), failures.join("; ")).into());
    }
    Ok(())
}

/// Refuses, before anything runs, settings that cannot give a table: one line naming the flag.
fn validate(args: &Args) -> Result<(), String> {
    if args.servers.is_empty() {
        return Err("--servers: give at least one server count".into());
    }
    for &n in &args.servers {
        crate::limits::members("--servers", n)?;
    }
    if args.calls == 0 {
        return Err("--calls 0: a row must make at least 1 call".into());
    }
    if args.modes.is_empty() {
        return Err("--modes: give at least one mode".into());
    }
    if args.rotate_every.is_empty() {
        return Err("--rotate-every: give at least one setting (adaptive, or a number)".into());
    }
    if args.time_cap.is_nan() || args.time_cap <= 0.0 {
        return Err(format!(
            "--time-cap {}: must be above 0 seconds",
            args.time_cap
        ));
    }
    let most = args.servers.iter().copied().max().unwrap_or(1);
    crate::limits::open_files(
        "--servers",
        most,
        crate::limits::descriptors_for_processes(most),
    )
}

/// The rows in the order they run: runs interleaved, and at each server count every mode in
/// turn, so a noisy moment of the shared machine hits them all alike.
fn plan(args: &Args) -> Vec<(u64, row::RowSpec)> {
    let mut specs = Vec::new();
    for run in 0..args.runs {
        for &servers in &args.servers {
            for &mode in &args.modes {
                let rotations: Vec<Option<Rotate>> = match mode.rotates() {
                    true => args.rotate_every.iter().copied().map(Some).collect(),
                    false => vec![None],
                };
                for rotate_every in rotations {
                    let setup = Setup {
                        mode,
                        rotate_every,
                        spawn: Some(args.spawn),
                    };
                    let spec = row::RowSpec {
                        setup,
                        servers,
                        calls: args.calls,
                        time_cap: Duration::from_secs_f64(args.time_cap),
                    };
                    specs.push((run, spec));
                }
            }
        }
    }
    specs
}
