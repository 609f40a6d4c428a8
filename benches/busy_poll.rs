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
//! --runs N --pace-us N --work-us N` change the shape, `--processes` makes the members forked
//! processes instead of threads, and `--no-yield` makes the pollers spin without yielding. A
//! program that prints figures, not a test: nothing is asserted but that every message is read
//! exactly once.

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
    use std::sync::atomic::Ordering::SeqCst;
    use std::time::{Duration, Instant};

    use herdless::{Backend, Events, Group, Interest, Waiter};
    use herdless_fixtures::{busy_for, Blocking, SharedCounters};

    /// The shape of a run.
    #[derive(Clone, Copy)]
    struct Shape {
        members: usize,
        messages: u64,
        pace: Duration,
        work: Duration,
        processes: bool,
        yields: bool,
    }

    pub fn main() {
        let mut members = 100;
        let mut messages = 5000u64;
        let mut runs = 3;
        let (mut pace, mut work) = (200, 20);
        let (mut processes, mut yields) = (false, true);
        let args: Vec<String> = std::env::args().collect();
        let mut i = 1;
        while i < args.len() {
            let value = || args.get(i + 1).and_then(|v| v.parse::<u64>().ok());
            match args[i].as_str() {
                "--members" => members = value().expect("--members N") as usize,
                "--messages" => messages = value().expect("--messages N"),
                "--runs" => runs = value().expect("--runs N") as usize,
                "--pace-us" => pace = value().expect("--pace-us N"),
                "--work-us" => work = value().expect("--work-us N"),
                "--processes" | "--no-yield" => {
                    processes |= args[i] == "--processes";
                    yields &= args[i] != "--no-yield";
                    i += 1;
                    continue;
                }
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
        let shape = Shape {
            members,
            messages,
            pace: Duration::from_micros(pace),
            work: Duration::from_micros(work),
            processes,
            yields,
        };
        println!(
            "busy_poll: {members} member {}, {messages} messages one every {:?}, {:?} of work \
             each, pollers {}; time from the first write to the last read, mean (min-max) of \
             {runs} warm runs",
            if processes { "processes" } else { "threads" },
            shape.pace,
            shape.work,
            if yields {
                "yield when a look finds nothing"
            } else {
                "never yield"
            },
        );
        let warm = Shape {
            messages: messages.min(500),
            ..shape
        };
        for backend in backends {
            let mut means = Vec::new();
            for busy in [false, true] {
                run(backend, warm, busy);
                let times: Vec<Duration> = (0..runs).map(|_| run(backend, shape, busy)).collect();
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
    fn run(backend: Backend, shape: Shape, busy: bool) -> Duration {
        let Shape {
            members, messages, ..
        } = shape;
        let group = Group::builder()
            .backend(backend)
            .max_members(members)
            .build()
            .unwrap();
        let (rx, tx) = herdless_fixtures::pipe(Blocking::WriteEnd).unwrap();
        // One counter per message (its reads), then the total read.
        let counts = SharedCounters::new(messages as usize + 1).unwrap();
        let mut children = Vec::new();
        let took = std::thread::scope(|s| {
            for _ in 0..members {
                if shape.processes {
                    // SAFETY: the child runs the member loop and leaves with _exit.
                    match unsafe { libc::fork() } {
                        -1 => panic!("fork failed"),
                        0 => {
                            // SAFETY: the child's copy of the write end, never used there.
                            unsafe { libc::close(tx.as_raw_fd()) };
                            let waiter = group.join().unwrap();
                            member(waiter, rx.as_raw_fd(), &counts, shape, busy);
                            // SAFETY: leaves the child without the parent's destructors.
                            unsafe { libc::_exit(0) };
                        }
                        pid => children.push(pid),
                    }
                } else {
                    let waiter = group.join().unwrap();
                    let (rx, counts) = (rx.as_raw_fd(), &counts);
                    s.spawn(move || member(waiter, rx, counts, shape, busy));
                }
            }
            let start = Instant::now();
            for id in 0..messages {
                let buf = id.to_ne_bytes();
                // SAFETY: writes from a live buffer to our pipe.
                unsafe { libc::write(tx.as_raw_fd(), buf.as_ptr().cast(), 8) };
                let due = start + shape.pace * (id as u32 + 1);
                while Instant::now() < due {
                    std::hint::spin_loop();
                }
            }
            while counts.get(messages as usize).load(SeqCst) < messages {
                std::thread::yield_now();
            }
            start.elapsed()
        });
        for pid in children {
            // SAFETY: reaps our own child.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        }
        assert!(
            (0..messages as usize).all(|i| counts.get(i).load(SeqCst) == 1),
            "lost or read twice"
        );
        took
    }

    /// One member's loop, until every message is read.
    fn member(mut waiter: Waiter, rx: RawFd, counts: &SharedCounters, shape: Shape, busy: bool) {
        let messages = shape.messages;
        let total = counts.get(messages as usize);
        let timeout = Some(if busy {
            Duration::ZERO
        } else {
            Duration::from_millis(100)
        });
        waiter
            .add(&unsafe_borrow(rx), 0, Interest::READABLE.exclusive())
            .unwrap();
        let mut events = Events::with_capacity(4);
        while total.load(SeqCst) < messages {
            if waiter.wait(&mut events, timeout).unwrap() == 0 {
                if busy && shape.yields {
                    std::thread::yield_now();
                }
                continue;
            }
            let id = read_msg(rx);
            waiter.consumed(0).unwrap();
            if let Some(id) = id {
                counts.get(id as usize).fetch_add(1, SeqCst);
                total.fetch_add(1, SeqCst);
                busy_for(shape.work);
            }
        }
    }

    fn unsafe_borrow(fd: RawFd) -> std::os::fd::BorrowedFd<'static> {
        // SAFETY: the pipe outlives every member (the run holds it until they are done).
        unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }
    }

    fn read_msg(fd: RawFd) -> Option<u64> {
        let mut buf = [0u8; 8];
        // SAFETY: reads into a live buffer from our non-blocking pipe.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), 8) };
        (n == 8).then(|| u64::from_ne_bytes(buf))
    }
}
