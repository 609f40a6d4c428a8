//! The herd benchmark (the experiment of the AIX POLLEXCL request): one producer, one shared
//! pipe or POSIX message queue, 1 versus
//! 500 waiters, in every mode side by side, named as the README names them: no flag (the
//! `polling` crate used plainly: the herd), the raw flag (`EPOLLEXCLUSIVE` alone: the monopoly),
//! herdless native and herdless emulated. Each row reports time, CPU of the waiters and
//! kernel-level wake-ups per message (voluntary context switches of the waiters), user-level
//! empty wake-ups, and who got what; the table is followed by a legend of the modes and the
//! run ends with a verdict computed from it.
//!
//! This file holds the command line and the order of the runs; `run.rs` runs one row and
//! `report.rs` prints the table and writes the JSON and SVG.

mod report;
mod run;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::exec::Spawn;
pub use crate::queue::Workload;
use report::{Outcome, Report};
pub use run::{exec_worker, ExecSpec};
use run::{Mode, Refusal, Rotate, RowSpec};

/// Messages per row in the default comparison (per waiter count and mode).
const DEFAULT_MESSAGES: u64 = 200_000;
/// The most messages the no-flag mode gets at `HERD_SIZE` waiters or more by default.
const DEFAULT_PLAIN_CAP: u64 = 20_000;
/// From this many waiters up, the no-flag herd makes every message cost hundreds of wake-ups.
const HERD_SIZE: usize = 100;

/// The default of the list flag of `Args`: every mode the table compares.
const DEFAULT_MODES: &str = "no-flag,raw-flag,herdless-native,herdless-emulated";

/// Flags of `herd pipe` and `herd mq`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Waiter counts to compare, comma-separated, each 1 to herdless::MAX_MEMBERS_LIMIT (16 384);
    /// the figures of each are set against the smallest. The default `1,500` is two counts: 1
    /// and 500 waiters.
    #[arg(long, value_delimiter = ',', default_value = "1,500")]
    waiters: Vec<usize>,
    /// Messages (8-byte ids) the producer writes per row.
    #[arg(long, default_value_t = DEFAULT_MESSAGES)]
    messages: u64,
    /// Most messages for the `no-flag` mode at 100 waiters or more, where each message wakes the
    /// whole herd (0: no cap). Its figures are per message, so they stay comparable; the table
    /// marks the row.
    #[arg(long, default_value_t = DEFAULT_PLAIN_CAP)]
    plain_cap: u64,
    /// Modes to run, comma-separated: no-flag (the `polling` crate, one Poller per waiter, no
    /// exclusivity), raw-flag (EPOLLEXCLUSIVE alone, no rotation), herdless-native (exclusive +
    /// one event round robin, turns as `--rotate-every` says), herdless-emulated (herdless
    /// token passing, likewise). The earlier names plain, native-exclusive, native-rr and
    /// emulated-rr are accepted too.
    #[arg(long, value_enum, value_delimiter = ',', default_value = DEFAULT_MODES)]
    modes: Vec<Mode>,
    /// Rotation settings of the herdless modes (herdless-native, herdless-emulated), each run
    /// as its own line side by side, comma-separated: `adaptive` (the library's default:
    /// strict turns while events come one at a time, batches of up to 16 under a backlog) or a
    /// number of events per turn (1: strict turns at any cost; 0: never rotate).
    #[arg(long, value_delimiter = ',', default_value = "adaptive,1")]
    rotate_every: Vec<Rotate>,
    /// Busy work per message, in microseconds, after the read (0: none).
    #[arg(long, default_value_t = 0)]
    work_us: u64,
    /// Waiters are forked processes (each joins the group in the child and reports its figures
    /// through a pipe) instead of threads.
    #[arg(long)]
    processes: bool,
    /// Waiters are processes started so, comma-separated, each a line of the table side by
    /// side (implies --processes): `fork` (what --processes alone does), `exec` (fork, then
    /// exec of the lab itself: the waiter opens the row's named group, and the message queue,
    /// by name, and inherits the pipe).
    #[arg(long, value_enum, value_delimiter = ',')]
    spawn: Vec<Spawn>,
    /// Repeat every row this many times (interleaved); the table shows mean (min–max).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// The producer stops early after this many seconds of a row (the row then reports the
    /// messages it did write); bounds every run.
    #[arg(long, default_value_t = 20.0)]
    time_cap: f64,
    /// Where to write every row as JSON (default: target/herd/herd-<workload>.json). Its
    /// directory must exist and the file be writable: checked before the first row runs.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Where to write the chart (default: target/herd/herd-<workload>.svg); checked likewise.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// As root, raise /proc/sys/fs/mqueue/msg_max for the moment the queue is created (and
    /// restore it at once) so the queue can be deeper than the default 10 messages. A brief
    /// machine-wide change, so off by default; the table says which depth was used.
    #[arg(long)]
    raise_mq_limit: bool,
    /// Print every column of the table (messages, seconds, msg/s, max−min too).
    #[arg(long)]
    wide: bool,
}

/// `herd pipe` / `herd mq`: one workload with the given flags.
pub fn run(workload: Workload, mut args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let name = format!("herd-{}", workload.name());
    args.spawn.dedup();
    if !args.spawn.is_empty() {
        args.processes = true;
    } else if args.processes {
        args.spawn = vec![Spawn::Fork];
    }
    compare(&[workload], &args, &name)
}

/// `herd` with no subcommand: both workloads, 1 and 500 waiters, every mode, threads, sized to
/// take about a minute on a 2-core machine.
pub fn default_comparison(
    wide: bool,
    json: Option<PathBuf>,
    svg: Option<PathBuf>,
) -> Result<(), Box<dyn std::error::Error>> {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Defaults {
        #[command(flatten)]
        args: Args,
    }
    let mut defaults = Defaults::parse_from(["herd"]).args;
    defaults.wide = wide;
    defaults.json = json;
    defaults.svg = svg;
    compare(&[Workload::Pipe, Workload::Mq], &defaults, "herd")
}

/// Runs every (run, workload, waiters, mode) row, prints the table, writes JSON and SVG.
fn compare(
    workloads: &[Workload],
    args: &Args,
    name: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    validate(args)?;
    let out_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/herd");
    let json = check_output(
        "--json",
        args.json.as_deref(),
        &out_dir,
        &format!("{name}.json"),
    )?;
    let svg = check_output(
        "--svg",
        args.svg.as_deref(),
        &out_dir,
        &format!("{name}.svg"),
    )?;
    let specs = plan(workloads, args);
    eprintln!(
        "herd: {} rows ({} waiters as {}, {} run(s), time cap {} s per row); warm: each row \
         follows the previous one in this process",
        specs.len(),
        in_words(&args.waiters),
        match (args.processes, args.spawn.as_slice()) {
            (false, _) => "threads",
            (true, [Spawn::Exec]) => "exec'd processes",
            (true, [Spawn::Fork]) => "forked processes",
            (true, _) => "forked and exec'd processes",
        },
        args.runs,
        args.time_cap
    );
    let started = Instant::now();
    let mut outcomes = Vec::with_capacity(specs.len());
    for (i, (run, spec)) in specs.iter().enumerate() {
        eprint!("herd: [{}/{}] {} ... ", i + 1, specs.len(), spec.label);
        let row_start = Instant::now();
        let result = run::run_row(spec);
        match &result {
            Ok(m) => eprintln!(
                "{:.2} s, {:.2} kernel wake-ups/message",
                row_start.elapsed().as_secs_f64(),
                m.kernel_wakeups as f64 / m.messages as f64
            ),
            Err(Refusal::Unavailable(why)) => eprintln!("DID NOT RUN, not available: {why}"),
            Err(Refusal::Failed(why)) => eprintln!("FAILED: {why}"),
        }
        outcomes.push(Outcome {
            run: *run,
            spec: spec.clone(),
            result,
        });
    }
    eprintln!(
        "herd: all rows took {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let report = Report::new(
        outcomes,
        args.messages,
        args.processes,
        args.work_us,
        args.wide,
    );
    if report.measured_rows() == 0 {
        return Err(format!(
            "none of the {} rows ran (see above): nothing measured, no table, JSON or chart written",
            specs.len()
        )
        .into());
    }
    report.print_table();
    report.write_json(&json)?;
    report.write_svg(&svg)?;
    println!(
        "\nFull results: {} (JSON), {} (chart)",
        json.display(),
        svg.display()
    );
    report.print_verdict();
    let missing = report.missing_rows();
    if missing > 0 {
        return Err(format!(
            "{missing} of {} rows did not run (see the table): the comparison is incomplete",
            specs.len()
        )
        .into());
    }
    Ok(())
}

/// Where an output goes: `given`, or `default_name` in the lab's own directory (made if it is
/// missing). Checked before the first row runs, so a run of minutes is not lost at the end: the
/// directory of a given path must exist (it is not created) and the file must be writable
/// (opened without truncating it, or created and removed again). The error names the flag and
/// the path.
pub fn check_output(
    flag: &str,
    given: Option<&Path>,
    default_dir: &Path,
    default_name: &str,
) -> Result<PathBuf, String> {
    let path = match given {
        Some(path) => path.to_path_buf(),
        None => {
            std::fs::create_dir_all(default_dir)
                .map_err(|e| format!("{flag}: cannot make {}: {e}", default_dir.display()))?;
            default_dir.join(default_name)
        }
    };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if dir.exists() && !dir.is_dir() {
        return Err(format!(
            "{flag} {}: {} is not a directory",
            path.display(),
            dir.display()
        ));
    }
    if !dir.is_dir() {
        return Err(format!(
            "{flag} {}: directory {} does not exist (make it first; the lab does not)",
            path.display(),
            dir.display()
        ));
    }
    let cannot = |e: std::io::Error| format!("{flag} {}: cannot be written: {e}", path.display());
    if path.is_dir() {
        return Err(format!("{flag} {}: is a directory", path.display()));
    }
    if path.exists() {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(cannot)?;
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(cannot)?;
        std::fs::remove_file(&path).map_err(cannot)?;
    }
    Ok(path)
}

/// Refuses, before anything runs, settings that cannot give a full table: one line naming the
/// flag and the limit.
fn validate(args: &Args) -> Result<(), String> {
    if args.waiters.is_empty() {
        return Err("--waiters: give at least one waiter count".into());
    }
    for &w in &args.waiters {
        crate::limits::members("--waiters", w)?;
    }
    if args.messages == 0 {
        return Err("--messages 0: a row must write at least 1 message".into());
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
    let most = args.waiters.iter().copied().max().unwrap_or(1);
    let needed = match args.processes {
        true => crate::limits::descriptors_for_processes(most),
        false => crate::limits::descriptors_for_threads(most),
    };
    crate::limits::open_files("--waiters", most, needed)
}

/// The rows in the order they run: repeats interleaved, so a noisy moment hits every mode.
fn plan(workloads: &[Workload], args: &Args) -> Vec<(u64, RowSpec)> {
    let mut specs = Vec::new();
    for run in 0..args.runs {
        for &workload in workloads {
            for &waiters in &args.waiters {
                let setups = args.modes.iter().flat_map(|&mode| {
                    let rotations: Vec<Option<Rotate>> = match mode.rotates() {
                        true => args.rotate_every.iter().copied().map(Some).collect(),
                        false => vec![None],
                    };
                    rotations.into_iter().map(move |r| (mode, r))
                });
                let spawns: Vec<Spawn> = match args.processes {
                    true => args.spawn.clone(),
                    false => vec![Spawn::Fork],
                };
                let setups: Vec<_> = setups
                    .flat_map(|s| spawns.iter().map(move |&spawn| (s, spawn)))
                    .collect();
                for ((mode, rotate_every), spawn) in setups {
                    let setup = run::Setup {
                        mode,
                        rotate_every,
                        spawn: args.processes.then_some(spawn),
                    };
                    let capped = mode == Mode::Plain && waiters >= HERD_SIZE && args.plain_cap > 0;
                    let messages = if capped {
                        args.messages.min(args.plain_cap)
                    } else {
                        args.messages
                    };
                    let label = format!(
                        "{} {} W={waiters}{}",
                        workload.name(),
                        setup.name(),
                        if args.runs > 1 {
                            format!(" run {}", run + 1)
                        } else {
                            String::new()
                        }
                    );
                    specs.push((
                        run,
                        RowSpec {
                            workload,
                            mode,
                            rotate_every,
                            waiters,
                            messages,
                            work: Duration::from_micros(args.work_us),
                            processes: args.processes,
                            spawn,
                            time_cap: Duration::from_secs_f64(args.time_cap.max(0.1)),
                            label,
                            raise_mq_limit: args.raise_mq_limit,
                        },
                    ));
                }
            }
        }
    }
    specs
}

/// `[1, 500]` as "1 and 500", `[8, 64, 500]` as "8, 64 and 500".
fn in_words(values: &[usize]) -> String {
    let words: Vec<String> = values.iter().map(ToString::to_string).collect();
    match words.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}
