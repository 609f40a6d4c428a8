//! `herd bare`: `EPOLLEXCLUSIVE` and its rotation with no herdless, as the least that strict
//! turns cost natively. W threads, each with an epoll instance of its own holding the shared
//! descriptor of the herd benchmark (a pipe's read end or a POSIX message queue, `EPOLLIN |
//! EPOLLEXCLUSIVE`), wait, read one message per wake-up (non-blocking: a read that finds
//! nothing is counted as `EAGAIN`), and with `--rotate-every N` delete and re-add the entry
//! after every N messages read, which moves it to the tail of the descriptor's wait queue
//! (nginx 1.21.6's cure, and herdless's native rotation). `N = 0` never rotates: the raw flag.
//! The producer is the herd benchmark's (8-byte ids, blocking writes, `queue::Channel`).
//!
//! Set beside `herd pipe --rotate-every 1` (or `herd mq`), the table tells what the kernel's
//! side of strict turns costs on this machine (the entry's move, and the wake-up of a member
//! that slept) from what herdless adds to it (its claims, its shared line, its checks).

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use herdless_fixtures::{counters, jain};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};

use crate::queue::{read_one, Channel, Read, Workload};

/// How long the threads get to start and fall asleep before the clock starts.
const SETTLE: Duration = Duration::from_millis(300);
/// The entry's data for the shared descriptor, and for the stop pipe.
const MESSAGES: u64 = 0;
const STOP: u64 = 1;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The shared descriptors, comma-separated: pipe, mq.
    #[arg(long, value_delimiter = ',', default_value = "pipe")]
    workload: Vec<Workload>,
    /// Thread counts, comma-separated, each 1 to 16384.
    #[arg(long, value_delimiter = ',', default_value = "1,500")]
    waiters: Vec<usize>,
    /// Rotations to compare, comma-separated: a thread deletes and re-adds its entry after
    /// every N messages it read (0: never, the raw flag; 1: strict turns).
    #[arg(long, value_delimiter = ',', default_value = "0,1")]
    rotate_every: Vec<u64>,
    /// Messages the producer writes per row.
    #[arg(long, default_value_t = 100_000)]
    messages: u64,
    /// The producer stops early after this many seconds of a row (the row reports what was
    /// read).
    #[arg(long, default_value_t = 20.0)]
    time_cap: f64,
}

struct Row {
    workload: Workload,
    waiters: usize,
    rotate_every: u64,
    messages: u64,
    seconds: f64,
    cpu_seconds: f64,
    switches: u64,
    eagain: u64,
    counts: Vec<u64>,
}

/// What every thread of a row shares.
struct Shared {
    /// Messages read so far.
    read: AtomicU64,
    /// Messages the producer wrote, once it is done (`u64::MAX` until then).
    written: AtomicU64,
    /// When the last message was read.
    finished: Mutex<Option<Instant>>,
    /// Reads that found nothing.
    eagain: AtomicU64,
    /// The threads' voluntary context switches, from their first wait to their stop.
    switches: AtomicU64,
}

pub fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(&bad) = args.waiters.iter().find(|&&w| w == 0 || w > 16_384) {
        return Err(format!("--waiters {bad}: give 1 to 16384 threads").into());
    }
    if args.rotate_every.is_empty() || args.workload.is_empty() {
        return Err("--rotate-every and --workload: give at least one each".into());
    }
    if args.messages == 0 || args.time_cap.is_nan() || args.time_cap <= 0.0 {
        return Err("--messages and --time-cap must be above 0".into());
    }
    // Per thread: its epoll instance, and its own descriptors of the shared file and the stop
    // pipe.
    let most = args.waiters.iter().copied().max().unwrap_or(1);
    crate::limits::open_files("--waiters", most, 3 * most as u64 + 64)?;
    let mut rows = Vec::new();
    for &workload in &args.workload {
        for &waiters in &args.waiters {
            for &rotate_every in &args.rotate_every {
                eprint!("herd bare: {workload} W={waiters} rotate every {rotate_every} ... ");
                let row = run_row(
                    workload,
                    waiters,
                    rotate_every,
                    args.messages,
                    args.time_cap,
                )?;
                eprintln!("{:.2} µs/message", row.seconds * 1e6 / row.messages as f64);
                rows.push(row);
            }
        }
    }
    println!("## herd bare: EPOLLEXCLUSIVE and rotation with no herdless (one epoll per thread)");
    println!(
        "| workload | W | rotate every | messages | µs/msg | CPU µs/msg | kernel wake-ups/msg \
         | EAGAIN/msg | Jain |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let per = |x: f64| x / r.messages as f64;
        let rotation = match r.rotate_every {
            0 => "never (raw flag)".to_string(),
            n => n.to_string(),
        };
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.3} | {:.4} |",
            r.workload,
            r.waiters,
            rotation,
            r.messages,
            per(r.seconds * 1e6),
            per(r.cpu_seconds * 1e6),
            per(r.switches as f64),
            per(r.eagain as f64),
            jain(&r.counts)
        );
    }
    println!(
        "µs/msg: wall time from the first write to the last read ÷ messages read. CPU: the \
         process's (threads and producer) over the same span. Kernel wake-ups: the threads' \
         voluntary context switches (sleeps) per message. EAGAIN: reads after a wake-up that \
         found nothing."
    );
    Ok(())
}

/// One row: `waiters` threads on `workload`, rotating every `rotate_every` messages,
/// `messages` at most.
fn run_row(
    workload: Workload,
    waiters: usize,
    rotate_every: u64,
    messages: u64,
    time_cap: f64,
) -> Result<Row, Box<dyn std::error::Error>> {
    let mut channel = Channel::open(workload, false)?;
    let shared = Arc::new(Shared {
        read: AtomicU64::new(0),
        written: AtomicU64::new(u64::MAX),
        finished: Mutex::new(None),
        eagain: AtomicU64::new(0),
        switches: AtomicU64::new(0),
    });
    let mut handles = Vec::with_capacity(waiters);
    for _ in 0..waiters {
        // Each thread its own descriptors of the same open files: its epoll entry is one more
        // on the same wait queue.
        let read = channel.read.try_clone()?;
        let stop = channel.stop().try_clone_to_owned()?;
        let shared = shared.clone();
        let handle = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || member(workload, &read, &stop, rotate_every, &shared))?;
        handles.push(handle);
    }
    std::thread::sleep(SETTLE);
    let cpu_before = crate::exec::self_usage().1;
    let start = Instant::now();
    let cap = Duration::from_secs_f64(time_cap);
    let mut written = 0;
    while written < messages && start.elapsed() < cap {
        channel.send(written)?;
        written += 1;
    }
    shared.written.store(written, SeqCst);
    // The last message may have been read before `written` was stored: its reader found the
    // count short of it, and the time is taken here.
    while shared.read.load(SeqCst) < written {
        std::thread::sleep(Duration::from_micros(50));
    }
    let end = shared.finished.lock().unwrap().unwrap_or_else(Instant::now);
    let seconds = end.duration_since(start).as_secs_f64();
    let cpu_seconds = crate::exec::self_usage().1.saturating_sub(cpu_before) as f64 / 1e6;
    channel.finish();
    let mut counts = Vec::with_capacity(waiters);
    for handle in handles {
        counts.push(handle.join().map_err(|_| "a thread panicked")??);
    }
    Ok(Row {
        workload,
        waiters,
        rotate_every,
        messages: counts.iter().sum(),
        seconds,
        cpu_seconds,
        switches: shared.switches.load(SeqCst),
        eagain: shared.eagain.load(SeqCst),
        counts,
    })
}

/// One thread: waits in its own epoll instance, reads one message per wake-up, rotates its
/// entry every `rotate_every` messages, until the stop pipe hangs up. Returns how many
/// messages it read.
fn member(
    workload: Workload,
    read_end: &OwnedFd,
    stop: &OwnedFd,
    rotate_every: u64,
    shared: &Shared,
) -> std::io::Result<u64> {
    let exclusive = EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLEXCLUSIVE, MESSAGES);
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
    epoll.add(read_end.as_fd(), exclusive)?;
    epoll.add(stop.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, STOP))?;
    let before = counters::thread_voluntary_switches().unwrap_or(0);
    let mut events = [EpollEvent::empty()];
    let (mut read, mut since_rotation) = (0, 0);
    loop {
        match epoll.wait(&mut events, EpollTimeout::NONE) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        if events[0].data() == STOP {
            break;
        }
        match read_one(read_end.as_raw_fd(), workload)? {
            Read::Message(_) => {
                read += 1;
                since_rotation += 1;
                let total = shared.read.fetch_add(1, SeqCst) + 1;
                if total == shared.written.load(SeqCst) {
                    *shared.finished.lock().unwrap() = Some(Instant::now());
                }
            }
            Read::Empty => {
                shared.eagain.fetch_add(1, SeqCst);
            }
            // The pipe's write end closed before the stop pipe was seen: the run is over.
            Read::Stop => break,
        }
        if rotate_every > 0 && since_rotation >= rotate_every {
            since_rotation = 0;
            epoll.delete(read_end.as_fd())?;
            epoll.add(read_end.as_fd(), exclusive)?;
        }
    }
    let after = counters::thread_voluntary_switches().unwrap_or(0);
    shared
        .switches
        .fetch_add(after.saturating_sub(before), SeqCst);
    Ok(read)
}
