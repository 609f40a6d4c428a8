//! nested_loops: the cost of a waiter in another event loop (`Waiter::nest`, C
//! `herdless_waiter_fd`) against the naive nesting, measured side by side in one run.
//!
//! N member processes (forked), each with an outer epoll loop of its own (as libevent's, libuv's
//! or a middleware's), share one pipe; the producer writes one message at a time, the next once
//! the member that read the last one is back asleep in its wait (idle members: the figures are
//! the mechanism's, not the machine's load). Setups:
//!
//! - `native`, `emulated`: a herdless waiter per member (the pipe `Interest::SHARED`), nested in
//!   the member's loop through its descriptor;
//! - `naive`: no herdless; an inner epoll per member with the pipe `EPOLLEXCLUSIVE`, nested in
//!   the member's loop (what a loop that takes an epoll descriptor gets).
//!
//! Printed per setup and member count: the messages each member read, Jain's index, the loops'
//! returns per message (user-level wake-ups) and the kernel wake-ups per message (voluntary
//! context switches of every thread of every member during the messages, from /proc).
//!
//! `cargo run --release --example nested_loops -- --members 2,8,32 --messages 2000 --runs 3`

#[cfg(target_os = "linux")]
fn main() {
    linux::main();
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("nested_loops: Linux only (epoll, /proc)");
}

#[cfg(target_os = "linux")]
mod linux {
    use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
    use std::sync::atomic::Ordering::SeqCst;
    use std::time::Duration;

    use clap::Parser;
    use herdless::{Backend, Events, Group, Interest};
    use herdless_fixtures::{counters, jain, read_exact, write_all, Blocking, SharedCounters};

    #[derive(Parser)]
    #[command(about = "Nested event loops: herdless's waiter descriptor against the naive nesting")]
    struct Args {
        /// Member counts, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "2,8,32")]
        members: Vec<usize>,
        /// Messages per run.
        #[arg(long, default_value_t = 2000)]
        messages: u64,
        /// Runs per setup and member count (mean and min–max reported).
        #[arg(long, default_value_t = 3)]
        runs: usize,
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Setup {
        Nested(Backend),
        Naive,
    }

    impl Setup {
        fn name(self) -> &'static str {
            match self {
                Setup::Nested(Backend::Native) => "herdless native",
                Setup::Nested(_) => "herdless emulated",
                Setup::Naive => "naive nested epoll",
            }
        }
    }

    struct Outcome {
        per_member: Vec<u64>,
        loop_returns: f64,
        kernel: f64,
    }

    const QUEUE: usize = 0;
    const STOP: usize = 1;

    pub fn main() {
        let args = Args::parse();
        if args.members.contains(&0) || args.messages == 0 || args.runs == 0 {
            eprintln!("nested_loops: --members, --messages and --runs must be at least 1");
            std::process::exit(2);
        }
        println!(
            "{} messages one at a time, {} run(s) each; kernel wake-ups: voluntary context \
             switches of all members' threads during the messages",
            args.messages, args.runs
        );
        println!(
            "| setup | members | per member (last run) | Jain | loop returns/msg | kernel \
             wake-ups/msg, mean (min–max) |"
        );
        println!("|---|---|---|---|---|---|");
        for &members in &args.members {
            for setup in [
                Setup::Nested(Backend::Native),
                Setup::Nested(Backend::Emulated),
                Setup::Naive,
            ] {
                let outcomes: Vec<Outcome> = (0..args.runs)
                    .map(|_| run(setup, members, args.messages))
                    .collect();
                let kernel: Vec<f64> = outcomes.iter().map(|o| o.kernel).collect();
                let mean = kernel.iter().sum::<f64>() / kernel.len() as f64;
                let min = kernel.iter().cloned().fold(f64::INFINITY, f64::min);
                let max = kernel.iter().cloned().fold(0.0, f64::max);
                let last = outcomes.last().expect("at least one run");
                let shown = if members <= 8 {
                    format!("{:?}", last.per_member)
                } else {
                    let (lo, hi) = (
                        last.per_member.iter().min().unwrap(),
                        last.per_member.iter().max().unwrap(),
                    );
                    format!("{lo}–{hi}")
                };
                println!(
                    "| {} | {members} | {shown} | {:.3} | {:.2} | {mean:.2} ({min:.2}–{max:.2}) |",
                    setup.name(),
                    jain(&last.per_member),
                    last.loop_returns,
                );
            }
        }
    }

    fn pipe(blocking: Blocking) -> (OwnedFd, OwnedFd) {
        herdless_fixtures::pipe(blocking).expect("pipe")
    }

    fn fail(what: &str) -> ! {
        panic!("{what}: {}", std::io::Error::last_os_error())
    }

    /// An epoll instance with `fd` in it (data 0), with `flags`.
    fn epoll_with(fd: RawFd, flags: u32) -> OwnedFd {
        // SAFETY: creates a new descriptor or fails.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            fail("epoll_create1");
        }
        // SAFETY: a fresh descriptor owned by nobody else.
        let ep = unsafe { OwnedFd::from_raw_fd(ep) };
        epoll_add(&ep, fd, flags, 0);
        ep
    }

    fn epoll_add(ep: &OwnedFd, fd: RawFd, flags: u32, data: u64) {
        let mut ev = libc::epoll_event {
            events: flags,
            u64: data,
        };
        // SAFETY: our epoll, a live descriptor, a live event.
        if unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
            fail("epoll_ctl");
        }
    }

    /// The data of the next descriptor of `ep` that fires (no timeout).
    fn next(ep: &OwnedFd) -> u64 {
        let mut ev = [libc::epoll_event { events: 0, u64: 0 }];
        loop {
            // SAFETY: a live buffer of one event.
            match unsafe { libc::epoll_wait(ep.as_raw_fd(), ev.as_mut_ptr(), 1, -1) } {
                1 => return ev[0].u64,
                _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
                _ => fail("epoll_wait"),
            }
        }
    }

    /// One message from the non-blocking pipe, or None (another member took it).
    fn read_msg(fd: RawFd) -> Option<u64> {
        let mut buf = [0u8; 8];
        // SAFETY: reads into a live buffer.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), 8) };
        (n == 8).then(|| u64::from_ne_bytes(buf))
    }

    fn tids(pid: u32) -> Vec<i32> {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn switches(pid: u32, tids: &[i32]) -> u64 {
        tids.iter()
            .filter_map(|&t| counters::voluntary_switches_of(pid, t))
            .sum()
    }

    fn run(setup: Setup, members: usize, messages: u64) -> Outcome {
        let group = match setup {
            Setup::Nested(backend) => Some(
                Group::builder()
                    .backend(backend)
                    .max_members(members)
                    .build()
                    .expect("group"),
            ),
            Setup::Naive => None,
        };
        // Per member: messages read, loop returns.
        let board = SharedCounters::new(2 * members).expect("mmap");
        let (rx, tx) = pipe(Blocking::WriteEnd);
        let (stop_r, stop_w) = pipe(Blocking::WriteEnd);
        let (acks_r, acks_w) = pipe(Blocking::Both);
        let mut pids = Vec::new();
        for m in 0..members {
            // SAFETY: the child runs the member below and leaves by _exit.
            let pid = unsafe { libc::fork() };
            if pid < 0 {
                fail("fork");
            }
            if pid == 0 {
                for fd in [tx.as_raw_fd(), stop_w.as_raw_fd(), acks_r.as_raw_fd()] {
                    // SAFETY: the child's copies of the parent's ends; never dropped here.
                    unsafe { libc::close(fd) };
                }
                let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    member(
                        group.as_ref(),
                        rx.as_raw_fd(),
                        stop_r.as_raw_fd(),
                        acks_w.as_raw_fd(),
                        &board,
                        m,
                    )
                }));
                // SAFETY: leaves the child at once.
                unsafe { libc::_exit(i32::from(ok.is_err())) };
            }
            pids.push(pid as u32);
        }
        drop((stop_r, acks_w));
        let threads = if setup == Setup::Naive { 1 } else { 2 };
        let all: Vec<Vec<i32>> = pids
            .iter()
            .map(|&pid| loop {
                let t = tids(pid);
                if t.len() >= threads {
                    asleep(pid, &t);
                    break t;
                }
                std::thread::yield_now();
            })
            .collect();
        let total =
            |all: &[Vec<i32>]| -> u64 { pids.iter().zip(all).map(|(&p, t)| switches(p, t)).sum() };
        let before = total(&all);
        for id in 0..messages {
            write_all(tx.as_raw_fd(), &id.to_ne_bytes()).expect("write");
            let mut ack = [0u8; 8];
            read_exact(acks_r.as_raw_fd(), &mut ack).expect("ack");
            let m = (u64::from_ne_bytes(ack) >> 32) as usize;
            asleep(pids[m], &all[m]);
        }
        let after = total(&all);
        let returns: u64 = (0..members)
            .map(|m| board.get(2 * m + 1).load(SeqCst))
            .sum();
        drop(stop_w);
        for pid in pids {
            let mut status = 0;
            // SAFETY: reaps our own child.
            unsafe { libc::waitpid(pid as i32, &mut status, 0) };
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "a member failed"
            );
        }
        let per_member: Vec<u64> = (0..members)
            .map(|m| board.get(2 * m).load(SeqCst))
            .collect();
        assert_eq!(
            per_member.iter().sum::<u64>(),
            messages,
            "lost or read twice"
        );
        Outcome {
            per_member,
            loop_returns: returns as f64 / messages as f64,
            kernel: (after - before) as f64 / messages as f64,
        }
    }

    fn asleep(pid: u32, tids: &[i32]) {
        let threads: Vec<(u32, i32)> = tids.iter().map(|&t| (pid, t)).collect();
        herdless_fixtures::until_asleep(&threads, Duration::from_secs(20)).expect("asleep");
    }

    /// A member: its loop (an epoll of its own) watches the waiter's descriptor (herdless) or
    /// an inner epoll with the pipe EPOLLEXCLUSIVE (naive), and the stop pipe.
    fn member(
        group: Option<&Group>,
        rx: RawFd,
        stop: RawFd,
        acks: RawFd,
        board: &SharedCounters,
        m: usize,
    ) {
        // SAFETY: both stay open for the child's whole life.
        let (rx_b, stop_b) = unsafe { (BorrowedFd::borrow_raw(rx), BorrowedFd::borrow_raw(stop)) };
        let read = |id: u64| {
            board.get(2 * m).fetch_add(1, SeqCst);
            write_all(acks, &((m as u64) << 32 | id).to_ne_bytes()).expect("ack");
        };
        match group {
            Some(group) => {
                let mut waiter = group.join().expect("join");
                waiter.add(&rx_b, QUEUE, Interest::SHARED).expect("add");
                waiter.add(&stop_b, STOP, Interest::READABLE).expect("add");
                waiter.nest().expect("nest");
                let lp = epoll_with(waiter.as_raw_fd(), libc::EPOLLIN as u32);
                let mut events = Events::with_capacity(1);
                loop {
                    next(&lp);
                    board.get(2 * m + 1).fetch_add(1, SeqCst);
                    while waiter
                        .wait(&mut events, Some(Duration::ZERO))
                        .expect("wait")
                        > 0
                    {
                        let event = events.iter().next().expect("one event");
                        if event.key == STOP {
                            return;
                        }
                        match read_msg(rx) {
                            Some(id) => {
                                waiter.consumed(QUEUE).expect("consumed");
                                read(id);
                            }
                            None => waiter.found_nothing(QUEUE).expect("found_nothing"),
                        }
                    }
                }
            }
            None => {
                let inner = epoll_with(rx, (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32);
                let lp = epoll_with(inner.as_raw_fd(), libc::EPOLLIN as u32);
                epoll_add(&lp, stop, libc::EPOLLIN as u32, 1);
                loop {
                    if next(&lp) == 1 {
                        return;
                    }
                    board.get(2 * m + 1).fetch_add(1, SeqCst);
                    let mut ev = [libc::epoll_event { events: 0, u64: 0 }];
                    // SAFETY: a live buffer of one event; timeout 0.
                    unsafe { libc::epoll_wait(inner.as_raw_fd(), ev.as_mut_ptr(), 1, 0) };
                    if let Some(id) = read_msg(rx) {
                        read(id);
                    }
                }
            }
        }
    }
}
