//! `herd ring`: what strict turns cost at the least, with no epoll and no herdless. W threads
//! take one message each from one pipe in a fixed order: the thread whose turn it is reads one
//! message (a blocking `read`, so nobody else is woken by the pipe), hands the turn to the next
//! thread (`Thread::unpark`, a futex wake) and sleeps until its turn comes back. Every message
//! is a hand-off to a thread that slept, which is what strict turns (`rotate_every(1)`) ask of
//! any implementation; the producer is the herd benchmark's (8-byte ids, blocking writes).
//!
//! Each W runs three ways: with the threads where the scheduler puts them; pinned, the ring's
//! threads to one CPU and the producer to another, so that each hand-off is a switch on the
//! same CPU instead of a wake-up of another; and woken ahead, each hand-off also waking the
//! thread after the next one, which spins (yielding its CPU) for its turn, up to `AHEAD_SPIN`,
//! instead of sleeping (as herdless's emulation wakes its deputy). Set beside `herd pipe
//! --rotate-every 1` (whose rows put the same hand-off on every message), the table shows how
//! much of what strict turns cost is the hand-off itself on this machine.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use herdless_fixtures::cpus::{allowed as allowed_cpus, pin_to, unpin};
use herdless_fixtures::{counters, jain, pipe, read_exact, write_all, Blocking};

/// Marks the producer's last message: its reader ends the ring.
const LAST: u64 = u64::MAX;
/// How long a thread woken ahead of its turn spins for it before it sleeps.
const AHEAD_SPIN: Duration = Duration::from_micros(200);
/// How long the ring's threads get to start and fall asleep before the clock starts.
const SETTLE: Duration = Duration::from_millis(300);

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Ring sizes (threads), comma-separated, each 1 to 16384.
    #[arg(long, value_delimiter = ',', default_value = "2,500")]
    waiters: Vec<usize>,
    /// Messages the producer writes per row.
    #[arg(long, default_value_t = 100_000)]
    messages: u64,
    /// The producer stops early after this many seconds of a row (the row reports what was
    /// read).
    #[arg(long, default_value_t = 20.0)]
    time_cap: f64,
}

/// Where a row's threads run, and how they wait for their turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Where the scheduler puts them, asleep until their turn.
    Free,
    /// The ring's threads on one CPU, the producer on another, asleep until their turn.
    Pinned { ring: usize, producer: usize },
    /// Where the scheduler puts them, the thread after the next one woken at each hand-off,
    /// spinning for its turn.
    Ahead,
}

struct Row {
    waiters: usize,
    placement: Placement,
    messages: u64,
    seconds: f64,
    cpu_seconds: f64,
    switches: u64,
    counts: Vec<u64>,
}

pub fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(&bad) = args.waiters.iter().find(|&&w| w == 0 || w > 16_384) {
        return Err(format!("--waiters {bad}: give 1 to 16384 threads").into());
    }
    if args.messages == 0 || args.time_cap.is_nan() || args.time_cap <= 0.0 {
        return Err("--messages and --time-cap must be above 0".into());
    }
    let cpus = allowed_cpus()?;
    let mut placements = vec![Placement::Free];
    match cpus.as_slice() {
        [producer, ring, ..] => placements.push(Placement::Pinned {
            ring: *ring,
            producer: *producer,
        }),
        _ => eprintln!("herd ring: SKIPPED the pinned rows: this process may run on one CPU only"),
    }
    placements.push(Placement::Ahead);
    let mut rows = Vec::new();
    for &waiters in &args.waiters {
        for &placement in &placements {
            eprint!("herd ring: W={waiters} {} ... ", placement_name(placement));
            let row = run_row(waiters, placement, args.messages, args.time_cap)?;
            eprintln!("{:.2} µs/message", row.seconds * 1e6 / row.messages as f64);
            rows.push(row);
        }
    }
    println!("## herd ring: strict turns by hand-off alone (a token ring of threads, no epoll)");
    println!(
        "| W | threads | messages | µs/msg | CPU µs/msg | ring's voluntary switches/msg | Jain |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        let per = |x: f64| x * 1e6 / r.messages as f64;
        println!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.4} |",
            r.waiters,
            placement_name(r.placement),
            r.messages,
            per(r.seconds),
            per(r.cpu_seconds),
            r.switches as f64 / r.messages as f64,
            jain(&r.counts)
        );
    }
    println!(
        "µs/msg: wall time from the first write to the last read ÷ messages read. CPU: the \
         process's (ring and producer) over the same span. Switches: the ring threads' \
         voluntary context switches (sleeps) per message."
    );
    Ok(())
}

fn placement_name(p: Placement) -> String {
    match p {
        Placement::Free => "where the scheduler puts them".into(),
        Placement::Ahead => "where the scheduler puts them, woken ahead, spinning".into(),
        Placement::Pinned { ring, producer } => {
            format!("ring pinned to CPU {ring}, producer to CPU {producer}")
        }
    }
}

/// One row: a ring of `waiters` threads, `messages` messages at most.
fn run_row(
    waiters: usize,
    placement: Placement,
    messages: u64,
    time_cap: f64,
) -> Result<Row, Box<dyn std::error::Error>> {
    let (read_end, write_end) = pipe(Blocking::Both)?;
    let read_fd = read_end.as_raw_fd();
    let turn = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let switches = Arc::new(AtomicU64::new(0));
    let ring: Arc<OnceLock<Vec<std::thread::Thread>>> = Arc::new(OnceLock::new());
    let mut handles = Vec::with_capacity(waiters);
    for me in 0..waiters {
        let (turn, done, switches, ring) =
            (turn.clone(), done.clone(), switches.clone(), ring.clone());
        let handle = std::thread::Builder::new()
            .name(format!("ring-{me}"))
            .stack_size(64 * 1024)
            .spawn(move || -> std::io::Result<u64> {
                let threads = loop {
                    match ring.get() {
                        Some(threads) => break threads,
                        None => std::thread::park(),
                    }
                };
                let result = take_turns(me, placement, threads, &turn, &done, &switches, read_fd);
                if result.is_err() {
                    // The ring is broken: every thread is let go (the row then fails), and this
                    // one reads what is left up to the last message, so that a producer blocked
                    // on a full pipe gets to write it.
                    done.store(true, SeqCst);
                    threads.iter().for_each(std::thread::Thread::unpark);
                    let mut id = [0u8; 8];
                    while read_exact(read_fd, &mut id).is_ok() && u64::from_ne_bytes(id) != LAST {}
                }
                result
            })?;
        handles.push(handle);
    }
    let threads: Vec<_> = handles.iter().map(|h| h.thread().clone()).collect();
    let _ = ring.set(threads);
    handles.iter().for_each(|h| h.thread().unpark());
    if let Placement::Pinned { producer, .. } = placement {
        pin_to(producer)?;
    }
    std::thread::sleep(SETTLE);
    let cpu_before = crate::exec::self_usage().1;
    let start = Instant::now();
    let cap = Duration::from_secs_f64(time_cap);
    let mut written = 0;
    while written + 1 < messages && start.elapsed() < cap && !done.load(SeqCst) {
        write_all(write_end.as_raw_fd(), &written.to_ne_bytes())?;
        written += 1;
    }
    write_all(write_end.as_raw_fd(), &LAST.to_ne_bytes())?;
    let mut counts = Vec::with_capacity(waiters);
    for handle in handles {
        counts.push(handle.join().map_err(|_| "a ring thread panicked")??);
    }
    let seconds = start.elapsed().as_secs_f64();
    let cpu_seconds = crate::exec::self_usage().1.saturating_sub(cpu_before) as f64 / 1e6;
    if let Placement::Pinned { .. } = placement {
        unpin()?;
    }
    Ok(Row {
        waiters,
        placement,
        messages: counts.iter().sum(),
        seconds,
        cpu_seconds,
        switches: switches.load(SeqCst),
        counts,
    })
}

/// One thread of the ring: waits for its turn, reads one message, hands the turn on, until the
/// last message. Returns how many messages it read; an error if it read a message out of turn
/// (message `k` is thread `k mod W`'s).
fn take_turns(
    me: usize,
    placement: Placement,
    threads: &[std::thread::Thread],
    turn: &AtomicUsize,
    done: &AtomicBool,
    switches: &AtomicU64,
    read_fd: std::os::fd::RawFd,
) -> std::io::Result<u64> {
    if let Placement::Pinned { ring: cpu, .. } = placement {
        pin_to(cpu)?;
    }
    let before = counters::thread_voluntary_switches().unwrap_or(0);
    let mut read = 0;
    loop {
        let mut spin_until = None;
        while turn.load(SeqCst) != me && !done.load(SeqCst) {
            if placement == Placement::Ahead {
                // Woken ahead (or at its turn): spins for the turn before it sleeps again.
                let until = *spin_until.get_or_insert_with(|| Instant::now() + AHEAD_SPIN);
                if Instant::now() < until {
                    std::thread::yield_now();
                    continue;
                }
                spin_until = None;
            }
            std::thread::park();
        }
        if done.load(SeqCst) {
            break;
        }
        let mut id = [0u8; 8];
        read_exact(read_fd, &mut id)?;
        read += 1;
        if u64::from_ne_bytes(id) == LAST {
            done.store(true, SeqCst);
            threads.iter().for_each(std::thread::Thread::unpark);
            break;
        }
        let id = u64::from_ne_bytes(id);
        if id % threads.len() as u64 != me as u64 {
            return Err(std::io::Error::other(format!(
                "thread {me} of {} read message {id}: out of turn",
                threads.len()
            )));
        }
        let next = (me + 1) % threads.len();
        turn.store(next, SeqCst);
        threads[next].unpark();
        if placement == Placement::Ahead {
            threads[(me + 2) % threads.len()].unpark();
        }
    }
    let after = counters::thread_voluntary_switches().unwrap_or(0);
    switches.fetch_add(after.saturating_sub(before), SeqCst);
    Ok(read)
}
