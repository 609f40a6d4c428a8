//! `herd bare`: the kernel's exclusive waits with no herdless, as the least that strict turns
//! cost natively. W threads, each with an epoll instance of its own holding the shared
//! descriptor of the herd benchmark (a pipe's read end or a POSIX message queue, `EPOLLIN |
//! EPOLLEXCLUSIVE`), wait, read one message per wake-up (non-blocking: a read that finds
//! nothing is counted as `EAGAIN`), and with `--rotate-every N` delete and re-add the entry
//! after every N messages read, which moves it to the tail of the descriptor's wait queue
//! (nginx 1.21.6's cure, and herdless's native rotation). `N = 0` never rotates: the raw flag.
//! With `--wait uring` each thread waits on an io_uring of its own instead, in a one-shot
//! `POLL_ADD` of the descriptor with `EPOLLEXCLUSIVE`: the kernel takes the poll off the wait
//! queue as it fires, and the thread arms it again after its message, at the tail: a move to
//! the back of the line at every message with no delete and no add (`member_uring`).
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
    /// The kernel waits to compare, comma-separated: `epoll` (an epoll instance per thread,
    /// every `--rotate-every` given) or `uring` (an io_uring per thread, a one-shot exclusive
    /// poll armed again after each message: the rows of `--rotate-every 1` only).
    #[arg(long, value_delimiter = ',', default_value = "epoll")]
    wait: Vec<Wait>,
    /// Messages the producer writes per row.
    #[arg(long, default_value_t = 100_000)]
    messages: u64,
    /// The producer stops early after this many seconds of a row (the row reports what was
    /// read).
    #[arg(long, default_value_t = 20.0)]
    time_cap: f64,
}

/// The kernel wait a row's threads sleep in.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// `epoll_wait` on an epoll instance of the thread's own.
    Epoll,
    /// `io_uring_enter` on an io_uring of the thread's own.
    Uring,
    /// `epoll_wait` on an epoll instance holding the thread's io_uring.
    UringInEpoll,
}

impl Wait {
    fn name(self) -> &'static str {
        match self {
            Wait::Epoll => "epoll",
            Wait::Uring => "io_uring",
            Wait::UringInEpoll => "io_uring in epoll",
        }
    }
}

struct Row {
    wait: Wait,
    workload: Workload,
    waiters: usize,
    rotate_every: u64,
    messages: u64,
    seconds: f64,
    cpu_seconds: f64,
    switches: u64,
    eagain: u64,
    interrupted: u64,
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
    /// Waits interrupted.
    interrupted: AtomicU64,
}

pub fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(&bad) = args.waiters.iter().find(|&&w| w == 0 || w > 16_384) {
        return Err(format!("--waiters {bad}: give 1 to 16384 threads").into());
    }
    if args.rotate_every.is_empty() || args.workload.is_empty() || args.wait.is_empty() {
        return Err("--rotate-every, --workload and --wait: give at least one each".into());
    }
    if args.wait.iter().any(|&w| w != Wait::Epoll) && !args.rotate_every.contains(&1) {
        return Err(
            "--wait uring re-arms its poll after every message (--rotate-every 1): give 1 \
             among --rotate-every"
                .into(),
        );
    }
    if args.messages == 0 || args.time_cap.is_nan() || args.time_cap <= 0.0 {
        return Err("--messages and --time-cap must be above 0".into());
    }
    // Per thread: its epoll instance, its own descriptors of the shared file and the stop
    // pipe, and in io_uring's rows its ring.
    let most = args.waiters.iter().copied().max().unwrap_or(1);
    let per_thread = 3 + u64::from(args.wait.iter().any(|&w| w != Wait::Epoll));
    crate::limits::open_files("--waiters", most, per_thread * most as u64 + 64)?;
    let mut rows = Vec::new();
    for &workload in &args.workload {
        for &waiters in &args.waiters {
            let runs = args.rotate_every.iter().flat_map(|&rotate_every| {
                let waits = args.wait.iter().copied();
                waits
                    .filter(move |&wait| wait == Wait::Epoll || rotate_every == 1)
                    .map(move |wait| (wait, rotate_every))
            });
            for (wait, rotate_every) in runs {
                eprint!(
                    "herd bare: {workload} W={waiters} {} rotate every {rotate_every} ... ",
                    wait.name()
                );
                let row = run_row(
                    wait,
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
    println!("## herd bare: the kernel's exclusive waits with no herdless (one per thread)");
    println!(
        "| workload | W | wait | rotate every | messages | µs/msg | CPU µs/msg \
         | kernel wake-ups/msg | EAGAIN/msg | Jain | EINTR/msg |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let per = |x: f64| x / r.messages as f64;
        let rotation = match (r.wait, r.rotate_every) {
            (_, 0) => "never (raw flag)".to_string(),
            (Wait::Uring | Wait::UringInEpoll, _) => "1 (re-armed)".to_string(),
            (Wait::Epoll, n) => n.to_string(),
        };
        println!(
            "| {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.3} | {:.4} | {:.3} |",
            r.workload,
            r.waiters,
            r.wait.name(),
            rotation,
            r.messages,
            per(r.seconds * 1e6),
            per(r.cpu_seconds * 1e6),
            per(r.switches as f64),
            per(r.eagain as f64),
            jain(&r.counts),
            per(r.interrupted as f64)
        );
    }
    println!(
        "µs/msg: wall time from the first write to the last read ÷ messages read. CPU: the \
         process's (threads and producer) over the same span. Kernel wake-ups: the threads' \
         voluntary context switches (sleeps) per message. EAGAIN: reads after a wake-up that \
         found nothing. io_uring: a one-shot EPOLLEXCLUSIVE poll, armed again after each \
         message (at the tail of the wait queue); in epoll: the ring's descriptor in the \
         thread's epoll instance, where the thread sleeps. EINTR: waits interrupted (the \
         ring's completion is delivered as task work, which interrupts a sleep in epoll_wait)."
    );
    Ok(())
}

/// One row: `waiters` threads on `workload`, rotating every `rotate_every` messages,
/// `messages` at most.
fn run_row(
    wait: Wait,
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
        interrupted: AtomicU64::new(0),
    });
    let mut handles = Vec::with_capacity(waiters);
    for _ in 0..waiters {
        // Each thread its own descriptors of the same open files: its epoll entry is one more
        // on the same wait queue.
        let read = channel.read.try_clone()?;
        let stop = channel.stop().try_clone_to_owned()?;
        let shared = shared.clone();
        let handle =
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || match wait {
                    Wait::Epoll => member(workload, &read, &stop, rotate_every, &shared),
                    Wait::Uring => member_uring(workload, &read, &stop, &shared, false),
                    Wait::UringInEpoll => member_uring(workload, &read, &stop, &shared, true),
                })?;
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
        wait,
        workload,
        waiters,
        rotate_every,
        messages: counts.iter().sum(),
        seconds,
        cpu_seconds,
        switches: shared.switches.load(SeqCst),
        eagain: shared.eagain.load(SeqCst),
        interrupted: shared.interrupted.load(SeqCst),
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
            Ok(0) => continue,
            Err(nix::errno::Errno::EINTR) => {
                shared.interrupted.fetch_add(1, SeqCst);
                continue;
            }
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        if events[0].data() == STOP {
            break;
        }
        match take_one(read_end, workload, shared)? {
            Some(true) => {
                read += 1;
                since_rotation += 1;
            }
            Some(false) => {}
            None => break,
        }
        if rotate_every > 0 && since_rotation >= rotate_every {
            since_rotation = 0;
            epoll.delete(read_end.as_fd())?;
            epoll.add(read_end.as_fd(), exclusive)?;
        }
    }
    shared.note_switches(before);
    Ok(read)
}

/// One thread on io_uring: waits for a one-shot `POLL_ADD` of the shared descriptor with
/// `EPOLLEXCLUSIVE` (the kernel takes it off the descriptor's wait queue as it fires), reads
/// one message, and arms the poll again (at the tail of the wait queue; the arm and the next
/// wait are one `io_uring_enter`), until the stop pipe's poll fires. Returns how many messages
/// it read.
fn member_uring(
    workload: Workload,
    read_end: &OwnedFd,
    stop: &OwnedFd,
    shared: &Shared,
    in_epoll: bool,
) -> std::io::Result<u64> {
    use io_uring::{opcode, types, IoUring};
    let mut ring = IoUring::new(4).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("io_uring unavailable here (io_uring_disabled, or a seccomp filter): {e}"),
        )
    })?;
    let flags = libc::POLLIN as u32 | libc::EPOLLEXCLUSIVE as u32;
    let poll = opcode::PollAdd::new(types::Fd(read_end.as_raw_fd()), flags)
        .build()
        .user_data(MESSAGES);
    let stop_poll = opcode::PollAdd::new(types::Fd(stop.as_raw_fd()), libc::POLLIN as u32)
        .build()
        .user_data(STOP);
    // SAFETY: both entries carry no buffer, and name descriptors this function borrows for as
    // long as the ring lives (a poll holds its own reference to its file, and the ring, dropped
    // before this function returns, cancels the polls still pending).
    unsafe {
        let mut queue = ring.submission();
        queue.push(&poll).map_err(std::io::Error::other)?;
        queue.push(&stop_poll).map_err(std::io::Error::other)?;
    }
    let epoll = if in_epoll {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        // SAFETY: the ring outlives this borrow of its descriptor (and the epoll instance,
        // declared after it, is dropped first).
        let ring_fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(ring.as_raw_fd()) };
        epoll.add(ring_fd, EpollEvent::new(EpollFlags::EPOLLIN, MESSAGES))?;
        Some(epoll)
    } else {
        None
    };
    let mut events = [EpollEvent::empty()];
    let before = counters::thread_voluntary_switches().unwrap_or(0);
    let mut read = 0;
    loop {
        let waited = match &epoll {
            // The arm goes in without a wait (one `io_uring_enter`), and the thread sleeps in
            // its epoll instance unless the arm completed at once.
            Some(epoll) => {
                let armed = if ring.submission().is_empty() {
                    Ok(0)
                } else {
                    ring.submit()
                };
                armed.and_then(|_| {
                    if ring.completion().is_empty() {
                        Ok(epoll.wait(&mut events, EpollTimeout::NONE)?)
                    } else {
                        Ok(0)
                    }
                })
            }
            None => ring.submit_and_wait(1),
        };
        match waited {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                shared.interrupted.fetch_add(1, SeqCst);
                continue;
            }
            Err(e) => return Err(e),
        }
        // Four entries at most in flight (two polls): the completions fit on the stack.
        let mut done = [(0u64, 0i32); 4];
        let mut n = 0;
        for c in ring.completion().take(done.len()) {
            done[n] = (c.user_data(), c.result());
            n += 1;
        }
        for &(data, result) in &done[..n] {
            if data == STOP {
                shared.note_switches(before);
                return Ok(read);
            }
            if result < 0 {
                return Err(std::io::Error::from_raw_os_error(-result));
            }
            match take_one(read_end, workload, shared)? {
                Some(true) => read += 1,
                Some(false) => {}
                None => {
                    shared.note_switches(before);
                    return Ok(read);
                }
            }
            // SAFETY: as above.
            unsafe { ring.submission().push(&poll) }.map_err(std::io::Error::other)?;
        }
    }
}

/// Reads one message after a wake-up: `Some(true)` read (and counted), `Some(false)` found
/// nothing (counted as `EAGAIN`), `None` the pipe's write end closed before the stop pipe was
/// seen (the run is over).
fn take_one(
    read_end: &OwnedFd,
    workload: Workload,
    shared: &Shared,
) -> std::io::Result<Option<bool>> {
    Ok(match read_one(read_end.as_raw_fd(), workload)? {
        Read::Message(_) => {
            let total = shared.read.fetch_add(1, SeqCst) + 1;
            if total == shared.written.load(SeqCst) {
                *shared.finished.lock().unwrap() = Some(Instant::now());
            }
            Some(true)
        }
        Read::Empty => {
            shared.eagain.fetch_add(1, SeqCst);
            Some(false)
        }
        Read::Stop => None,
    })
}

impl Shared {
    /// Adds the calling thread's voluntary context switches since `before` to the row's.
    fn note_switches(&self, before: u64) {
        let after = counters::thread_voluntary_switches().unwrap_or(0);
        self.switches
            .fetch_add(after.saturating_sub(before), SeqCst);
    }
}
