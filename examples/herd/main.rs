//! herd: the lab of herdless. Reproduces the thundering herd and the EPOLLEXCLUSIVE monopoly
//! of the project's specification experiments and shows, side by side in one run, what herdless does natively and
//! emulated. Every table reports who got what, not only how fast.
//!
//! `cargo run --release --example herd` runs the default comparison (pipe and message queue,
//! 1 versus 500 waiters, every mode), sized to finish in about a minute. Subcommands run each
//! experiment with its own flags; `--help` explains them.

#[cfg(target_os = "linux")]
mod accept;
#[cfg(target_os = "linux")]
mod bare;
#[cfg(target_os = "linux")]
mod drain;
#[cfg(target_os = "linux")]
mod exec;
#[cfg(target_os = "linux")]
mod fairness;
#[cfg(target_os = "linux")]
mod herd_bench;
#[cfg(target_os = "linux")]
mod json;
#[cfg(target_os = "linux")]
mod limits;
#[cfg(target_os = "linux")]
mod net;
#[cfg(target_os = "linux")]
mod queue;
#[cfg(target_os = "linux")]
mod restart;
#[cfg(target_os = "linux")]
mod ring;
#[cfg(target_os = "linux")]
mod rpc;
#[cfg(target_os = "linux")]
mod soak;
#[cfg(target_os = "linux")]
mod stress;

#[cfg(target_os = "linux")]
use clap::{Parser, Subcommand};

#[cfg(target_os = "linux")]
#[derive(Parser)]
#[command(
    name = "herd",
    about = "The herdless lab: thundering herd, monopoly and their cures, measured"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// With no subcommand: print every column of the table.
    #[arg(long)]
    wide: bool,
    /// With no subcommand: where to write every row as JSON (default: target/herd/herd.json).
    /// Its directory must exist; checked before the first row runs.
    #[arg(long, value_name = "FILE")]
    json: Option<std::path::PathBuf>,
    /// With no subcommand: where to write the chart (default: target/herd/herd.svg); checked
    /// likewise.
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
}

#[cfg(target_os = "linux")]
#[derive(Subcommand)]
enum Command {
    /// Pipe workload: one producer, W waiters, one message read per wake-up.
    Pipe(herd_bench::Args),
    /// POSIX message-queue workload: as `pipe`, on an mq_open queue.
    Mq(herd_bench::Args),
    /// Accept distribution over W worker processes (forked, or exec'd: --spawn) sharing one
    /// listener (the accept-distribution experiment).
    Accept(accept::Args),
    /// Drain throughput of event-loop architectures over loopback (the drain experiment).
    Drain(drain::Args),
    /// Nothing lost: every message id read exactly once, through every herdless mode.
    Stress(stress::Args),
    /// Rolling restart under load: what each setup drops while every worker is restarted.
    Restart(restart::Args),
    /// Request/response: one client thread calling N server processes through a shared POSIX
    /// service queue and its own reply queue, one call at a time, every mode side by side.
    Rpc(rpc::Args),
    /// Strict turns by hand-off alone: a token ring of threads taking one message each from a
    /// pipe (no epoll), where the scheduler puts them, pinned, and woken a turn ahead; what
    /// `--rotate-every 1` costs at the least.
    Ring(ring::Args),
    /// EPOLLEXCLUSIVE and its rotation with no herdless: threads with an epoll instance each on
    /// a pipe or a message queue, one message read per wake-up, the entry deleted and re-added
    /// every N messages; what herdless's native strict turns cost at the least.
    Bare(bare::Args),
    /// Soak: exec'd servers on a named group and churning POSIX queues, killed, stopped and
    /// restarted every second, loaded and quiet; every request's fate counted.
    #[command(after_help = soak::DEFINITIONS)]
    Soak(soak::Args),
}

#[cfg(target_os = "linux")]
fn main() {
    // An exec'd worker of `--spawn exec` (its spec in the environment), not a command line.
    if let Some(code) = exec::worker_main() {
        std::process::exit(code);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        None => herd_bench::default_comparison(cli.wide, cli.json, cli.svg),
        Some(Command::Pipe(args)) => herd_bench::run(herd_bench::Workload::Pipe, args),
        Some(Command::Mq(args)) => herd_bench::run(herd_bench::Workload::Mq, args),
        Some(Command::Accept(args)) => accept::run(args),
        Some(Command::Drain(args)) => drain::run(args),
        Some(Command::Stress(args)) => stress::run(args),
        Some(Command::Restart(args)) => restart::run(args),
        Some(Command::Rpc(args)) => rpc::run(args),
        Some(Command::Ring(args)) => ring::run(args),
        Some(Command::Bare(args)) => bare::run(args),
        Some(Command::Soak(args)) => soak::run(args),
    };
    if let Err(e) = result {
        eprintln!("herd: {e}");
        std::process::exit(1);
    }
}

/// The lab's workloads use Linux pipes, POSIX message queues, epoll and /proc; elsewhere it
/// says so instead of measuring something else.
#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!(
        "herd: the lab runs on Linux only (it compares the native epoll backend with the \
         emulation); {} is not supported",
        std::env::consts::OS
    );
    std::process::exit(2);
}
