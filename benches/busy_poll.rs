//! Busy polling against blocking waits, on every backend: `MEMBERS` member threads share one
//! pipe registered exclusive; a producer writes `MESSAGES` messages, one every `PACE` (a steady
//! load well within the group's reach); each member reads one message per event, says
//! `consumed`, and works `WORK` on it (a spin, as a busy server does). Blocking members loop on
//! `wait(Some(100 ms))`; busy-polling members loop on `wait(Some(Duration::ZERO))` and yield
//! the CPU when a look finds nothing. Printed per backend and mode: the time from the first
//! write to the last read (mean, min–max over `RUNS` runs, warm: each mode runs once before
//! it is timed), and busy ÷ blocking. Issue 22's target: busy polling at most 2× blocking.
//!
//! `cargo bench --bench busy_poll` (the figures in docs/lab.md); `-- --members N --messages N
//! --runs N` change the shape. A program that prints figures, not a test: nothing is asserted
//! but that every message is read exactly once.

#[cfg(unix)]
fn main() {
    unix::main();
}

#[cfg(not(unix))]
fn main() {
    println!("SKIPPED: busy_poll uses pipes (Unix only)");
}

#[cfg(unix)]
mod unix {
    use std::os::fd::{AsRawFd, RawFd};
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    use std::time::{Duration, Instant};

    use herdless::{Backend, Events, Group, Interest};
    use herdless_fixtures::{busy_for, Blocking};

    const WORK: Duration = Duration::from_micros(20);
    const PACE: Duration = Duration::from_micros(200);

    pub fn main() {
        let mut members = 100;
        let mut messages = 5000u64;
        let mut runs = 3;
        let args: Vec<String> = std::env::args().collect();
        let mut i = 1;
        while i < args.len() {
            let value = || args.get(i + 1).and_then(|v| v.parse::<u64>().ok());
            match args[i].as_str() {
                "--members" => members = value().expect("--members N") as usize,
                "--messages" => messages = value().expect("--messages N"),
                "--runs" => runs = value().expect("--runs N") as usize,
                _ => {
                    i += 1; // cargo bench's own flags (--bench)
                    continue;
                }
            }
            i += 2;
        }
        let mut backends = vec![Backend::Emulated];
        if Group::builder().backend(Backend::Native).build().is_ok() {
            backends.insert(0, Backend::Native);
        }
        println!(
            "busy_poll: {members} members, {messages} messages one every {PACE:?}, {WORK:?} of \
             work each; time from the first write to the last read, mean (min-max) of {runs} \
             warm runs"
        );
        for backend in backends {
            let mut means = Vec::new();
            for busy in [false, true] {
                run(backend, members, messages.min(500), busy); // warm-up
                let times: Vec<Duration> = (0..runs)
                    .map(|_| run(backend, members, messages, busy))
                    .collect();
                let mean = times.iter().sum::<Duration>() / runs as u32;
                let (min, max) = (times.iter().min().unwrap(), times.iter().max().unwrap());
                let mode = if busy { "busy polling" } else { "blocking" };
                println!("{backend:?} {mode}: {mean:.2?} ({min:.2?}-{max:.2?})");
                means.push(mean);
            }
            println!(
                "{backend:?} busy polling / blocking: {:.2}",
                means[1].as_secs_f64() / means[0].as_secs_f64()
            );
        }
    }

    /// One run: the time from the first write to the last read.
    fn run(backend: Backend, members: usize, messages: u64, busy: bool) -> Duration {
        let group = Group::builder()
            .backend(backend)
            .max_members(members)
            .build()
            .unwrap();
        let (rx, tx) = herdless_fixtures::pipe(Blocking::WriteEnd).unwrap();
        let read = AtomicU64::new(0);
        let seen: Vec<AtomicU64> = (0..messages).map(|_| AtomicU64::new(0)).collect();
        let timeout = Some(if busy {
            Duration::ZERO
        } else {
            Duration::from_millis(100)
        });
        let took = std::thread::scope(|s| {
            for _ in 0..members {
                let mut waiter = group.join().unwrap();
                waiter.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
                let (rx, read, seen) = (rx.as_raw_fd(), &read, &seen);
                s.spawn(move || {
                    let mut events = Events::with_capacity(4);
                    while read.load(SeqCst) < messages {
                        if waiter.wait(&mut events, timeout).unwrap() == 0 {
                            if busy {
                                std::thread::yield_now();
                            }
                            continue;
                        }
                        let id = read_msg(rx);
                        waiter.consumed(0).unwrap();
                        if let Some(id) = id {
                            seen[id as usize].fetch_add(1, SeqCst);
                            read.fetch_add(1, SeqCst);
                            busy_for(WORK);
                        }
                    }
                });
            }
            let start = Instant::now();
            for id in 0..messages {
                let buf = id.to_ne_bytes();
                // SAFETY: writes from a live buffer to our pipe.
                unsafe { libc::write(tx.as_raw_fd(), buf.as_ptr().cast(), 8) };
                let due = start + PACE * (id as u32 + 1);
                while Instant::now() < due {
                    std::hint::spin_loop();
                }
            }
            while read.load(SeqCst) < messages {
                std::thread::yield_now();
            }
            start.elapsed()
        });
        assert!(
            seen.iter().all(|n| n.load(SeqCst) == 1),
            "lost or read twice"
        );
        took
    }

    fn read_msg(fd: RawFd) -> Option<u64> {
        let mut buf = [0u8; 8];
        // SAFETY: reads into a live buffer from our non-blocking pipe.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), 8) };
        (n == 8).then(|| u64::from_ne_bytes(buf))
    }
}
