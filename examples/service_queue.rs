//! The service-queue shape of the AIX POLLEXCL request: a supervisor starts N server
//! executables by fork + exec, the servers share one POSIX message queue, and clients send
//! requests to it. Every server opens the named group and the queue **by name** (nothing is
//! inherited but its stop and report pipes), joins, and waits with
//! `Interest::SHARED` (exclusive, one event per wait): each request wakes one server, and
//! the servers take turns. When the clients are done and the queue is empty, the supervisor
//! hangs up the stop pipe; each server reports the ids it served, and the supervisor prints
//! per-server counts, lost and duplicated requests (must be 0) and Jain's fairness index.
//!
//! ```text
//! cargo run --release --example service_queue -- --servers 8 --requests 4000
//! cargo run --release --example service_queue -- --servers 8 --backend emulated
//! ```
//!
//! Here the servers are this same binary re-executed (a supervisor would exec its server
//! programs): the environment variable `HERDLESS_SERVICE_SERVER` makes it a server.

#[cfg(target_os = "linux")]
fn main() {
    use clap::Parser;
    if let Some(code) = service::server_main() {
        std::process::exit(code);
    }
    match service::supervise(service::Args::parse()) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("service_queue: {e}");
            std::process::exit(1);
        }
    }
}

/// POSIX message queues are pollable descriptors on Linux only; elsewhere it says so.
#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!(
        "service_queue runs on Linux only (POSIX message queues are descriptors there); {} is \
         not supported",
        std::env::consts::OS
    );
    std::process::exit(2);
}

#[cfg(target_os = "linux")]
mod service {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use herdless::{Backend, Events, Group, Interest};
    use herdless_fixtures::{busy_for, jain, pipe, read_exact, until_asleep, write_all, Blocking};
    use nix::mqueue::{
        mq_getattr, mq_open, mq_receive, mq_send, mq_unlink, MQ_OFlag, MqAttr, MqdT,
    };
    use nix::sys::stat::Mode;

    type Res<T> = Result<T, Box<dyn std::error::Error>>;

    /// Makes this binary a server: `<group name> <queue name> <stop fd> <report fd>`.
    const SERVER_ENV: &str = "HERDLESS_SERVICE_SERVER";
    /// A request: the client's number in the high half, its sequence number in the low half.
    const REQUEST_BYTES: usize = 8;
    /// How long the supervisor waits for any one step (servers ready, the queue drained, a
    /// report) before it stops everything.
    const STEP_LIMIT: Duration = Duration::from_secs(30);
    /// The keys of the queue and of the stop pipe in a server's waiter.
    const QUEUE: usize = 0;
    const STOP: usize = 1;

    #[derive(clap::Parser, Debug)]
    #[command(about = "A supervisor, N exec'd servers on one POSIX message queue, and clients")]
    pub struct Args {
        /// Server processes (fork + exec), each a member of the named group.
        #[arg(long, default_value_t = 8)]
        servers: usize,
        /// Requests in all, split between the clients.
        #[arg(long, default_value_t = 2000)]
        requests: u64,
        /// Client threads of the supervisor, each sending its share of the requests.
        #[arg(long, default_value_t = 2)]
        clients: u64,
        /// Microseconds a client waits between two requests (0: as fast as the queue takes
        /// them; a queue kept full is a backlog, where native turns are loose by design).
        #[arg(long, default_value_t = 200)]
        gap_us: u64,
        /// Microseconds of busy work per request in a server.
        #[arg(long, default_value_t = 50)]
        work_us: u64,
        /// The group's backend: auto, native or emulated.
        #[arg(long, default_value = "auto", value_parser = ["auto", "native", "emulated"])]
        backend: String,
    }

    /// What one server reports: counts, then the ids it served.
    struct Report {
        served: Vec<u64>,
        empty: u64,
        switches: u64,
    }

    /// Removes the group's name and the queue when the supervisor is done, however it ends.
    struct Names {
        group: String,
        queue: String,
    }

    impl Drop for Names {
        fn drop(&mut self) {
            // By force: a supervisor that failed half-way may leave servers behind.
            let _ = Group::remove_forced(&self.group);
            let _ = mq_unlink(self.queue.as_str());
        }
    }

    /// The supervisor. Returns whether every request was served exactly once.
    pub fn supervise(args: Args) -> Res<bool> {
        if args.servers == 0 || args.servers > herdless::MAX_MEMBERS_LIMIT {
            return Err(format!(
                "--servers {} is out of range: 1 to {}",
                args.servers,
                herdless::MAX_MEMBERS_LIMIT
            )
            .into());
        }
        if args.clients == 0 || args.requests < args.clients {
            return Err("--clients must be at least 1 and at most --requests".into());
        }
        let backend = match args.backend.as_str() {
            "native" => Backend::Native,
            "emulated" => Backend::Emulated,
            _ => Backend::Auto,
        };
        let pid = std::process::id();
        let names = Names {
            group: format!("example.service.{pid}"),
            queue: format!("/herdless-service-{pid}"),
        };
        // The service's two names: the group and the queue.
        let group = Group::builder()
            .name(&names.group)
            .backend(backend)
            .max_members(args.servers)
            .build()?;
        let attr = MqAttr::new(0, 10, REQUEST_BYTES as _, 0);
        let flags = MQ_OFlag::O_CREAT | MQ_OFlag::O_EXCL | MQ_OFlag::O_WRONLY;
        let queue = mq_open(
            names.queue.as_str(),
            flags,
            Mode::S_IRUSR | Mode::S_IWUSR,
            Some(&attr),
        )?;
        println!(
            "service_queue: {} servers (fork + exec), group {:?} ({:?}), queue {} (depth {}), \
             {} requests from {} clients {} µs apart, {} µs work each",
            args.servers,
            names.group,
            group.backend(),
            names.queue,
            mq_getattr(&queue)?.maxmsg(),
            args.requests,
            args.clients,
            args.gap_us,
            args.work_us
        );
        let (stop_r, stop_w) = pipe(Blocking::Both)?;
        let (ready_r, ready_w) = pipe(Blocking::Both)?;
        let mut servers = Vec::new();
        let mut reports = Vec::new();
        for _ in 0..args.servers {
            let (report_r, report_w) = pipe(Blocking::Both)?;
            let child = start_server(
                &names,
                &args,
                [
                    stop_r.as_raw_fd(),
                    ready_w.as_raw_fd(),
                    report_w.as_raw_fd(),
                ],
            );
            match child {
                Ok(c) => servers.push(c),
                Err(e) => {
                    stop_all(&mut servers);
                    return Err(e.into());
                }
            }
            reports.push(report_r);
        }
        drop((stop_r, ready_w));
        let watchdog = Watchdog::start(&args, &servers);
        let outcome = serve(&args, &names, &queue, &ready_r, stop_w, &reports, &servers);
        if outcome.is_err() {
            stop_all(&mut servers);
        }
        let mut failed = 0;
        for server in &mut servers {
            if !server.wait()?.success() {
                failed += 1;
            }
        }
        watchdog.stop();
        let reports = outcome?;
        Ok(print_reports(&args, &reports) && failed == 0)
    }

    /// Starts one server: this binary again, with the stop, ready and report pipes left open
    /// across exec (every other descriptor of the supervisor is close-on-exec).
    fn start_server(names: &Names, args: &Args, fds: [RawFd; 3]) -> io::Result<Child> {
        let spec = format!(
            "{} {} {} {} {} {}",
            names.group, names.queue, fds[0], fds[1], fds[2], args.work_us
        );
        let mut command = Command::new(std::env::current_exe()?);
        command.env(SERVER_ENV, spec).stdin(Stdio::null());
        // SAFETY: the hook runs between fork and exec and calls fcntl only (async-signal-safe).
        unsafe {
            command.pre_exec(move || {
                for fd in fds {
                    if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        command.spawn()
    }

    /// Bounds the whole run: if it overruns, kills the servers (the supervisor's reads then fail).
    struct Watchdog {
        cancel: std::sync::mpsc::Sender<()>,
        thread: std::thread::JoinHandle<()>,
    }

    impl Watchdog {
        fn start(args: &Args, servers: &[Child]) -> Watchdog {
            let per_request = Duration::from_micros(args.gap_us + args.work_us);
            let bound = STEP_LIMIT * 2 + per_request * (4 * args.requests as u32);
            let pids: Vec<i32> = servers.iter().map(|c| c.id() as i32).collect();
            let (cancel, cancelled) = std::sync::mpsc::channel::<()>();
            let thread = std::thread::spawn(move || {
                if cancelled.recv_timeout(bound).is_err() {
                    eprintln!(
                        "service_queue: overran {:.0} s; stopping the servers",
                        bound.as_secs_f64()
                    );
                    for pid in pids {
                        // SAFETY: our own children, not reaped yet (reaping comes after `stop`).
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                    }
                }
            });
            Watchdog { cancel, thread }
        }

        fn stop(self) {
            let _ = self.cancel.send(());
            let _ = self.thread.join();
        }
    }

    fn stop_all(servers: &mut [Child]) {
        for server in servers {
            let _ = server.kill();
        }
    }

    /// Waits until every server sleeps in its wait, runs the clients, waits until the queue is
    /// empty, hangs up the stop pipe and collects the reports.
    fn serve(
        args: &Args,
        names: &Names,
        queue: &MqdT,
        ready_r: &OwnedFd,
        stop_w: OwnedFd,
        reports: &[OwnedFd],
        servers: &[Child],
    ) -> Res<Vec<Report>> {
        let mut tids = Vec::new();
        for _ in 0..args.servers {
            let mut pid = [0u8; 4];
            read_exact(ready_r.as_raw_fd(), &mut pid)?;
            tids.push(i32::from_ne_bytes(pid));
        }
        let asleep: Vec<(u32, i32)> = tids.iter().map(|&t| (t as u32, t)).collect();
        until_asleep(&asleep, STEP_LIMIT)?;
        let started = Instant::now();
        std::thread::scope(|s| -> Res<()> {
            let per_client = args.requests / args.clients;
            let clients: Vec<_> = (0..args.clients)
                .map(|c| {
                    let n = if c + 1 == args.clients {
                        args.requests - per_client * (args.clients - 1)
                    } else {
                        per_client
                    };
                    let queue_name = names.queue.as_str();
                    s.spawn(move || client(queue_name, c, n, Duration::from_micros(args.gap_us)))
                })
                .collect();
            for c in clients {
                c.join().map_err(|_| "a client panicked")??;
            }
            Ok(())
        })?;
        // Everything is sent; once the queue is empty, the servers may stop.
        let drained = Instant::now();
        while mq_getattr(queue)?.curmsgs() > 0 {
            if drained.elapsed() > STEP_LIMIT {
                return Err("the servers stopped taking requests".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let elapsed = started.elapsed();
        drop(stop_w);
        let mut out = Vec::new();
        for (report, server) in reports.iter().zip(servers) {
            out.push(read_report(report).map_err(|e| format!("server {}: {e}", server.id()))?);
        }
        println!(
            "served in {:.2} s ({:.0} requests/s)\n",
            elapsed.as_secs_f64(),
            args.requests as f64 / elapsed.as_secs_f64()
        );
        Ok(out)
    }

    /// One client: sends `n` requests, blocking while the queue is full.
    fn client(queue: &str, c: u64, n: u64, gap: Duration) -> nix::Result<()> {
        let queue = mq_open(queue, MQ_OFlag::O_WRONLY, Mode::empty(), None)?;
        for i in 0..n {
            mq_send(&queue, &((c << 32) | i).to_ne_bytes(), 0)?;
            if !gap.is_zero() {
                std::thread::sleep(gap);
            }
        }
        Ok(())
    }

    fn read_u64(fd: RawFd) -> io::Result<u64> {
        let mut bytes = [0u8; 8];
        read_exact(fd, &mut bytes)?;
        Ok(u64::from_ne_bytes(bytes))
    }

    fn read_report(fd: &OwnedFd) -> io::Result<Report> {
        let fd = fd.as_raw_fd();
        let (count, empty, switches) = (read_u64(fd)?, read_u64(fd)?, read_u64(fd)?);
        let served = (0..count)
            .map(|_| read_u64(fd))
            .collect::<io::Result<_>>()?;
        Ok(Report {
            served,
            empty,
            switches,
        })
    }

    /// Prints the table; returns whether nothing was lost or duplicated.
    fn print_reports(args: &Args, reports: &[Report]) -> bool {
        println!("| server | served | empty wake-ups | kernel wake-ups/request |");
        println!("|---|---|---|---|");
        for (i, r) in reports.iter().enumerate() {
            println!(
                "| {i} | {} | {} | {:.2} |",
                r.served.len(),
                r.empty,
                r.switches as f64 / r.served.len().max(1) as f64
            );
        }
        let counts: Vec<u64> = reports.iter().map(|r| r.served.len() as u64).collect();
        let mut ids: Vec<u64> = reports
            .iter()
            .flat_map(|r| r.served.iter().copied())
            .collect();
        let total = ids.len() as u64;
        ids.sort_unstable();
        ids.dedup();
        let distinct = ids.len() as u64;
        let (duplicated, lost) = (total - distinct, args.requests.saturating_sub(distinct));
        let switches: u64 = reports.iter().map(|r| r.switches).sum();
        let empty: u64 = reports.iter().map(|r| r.empty).sum();
        let (max, min) = (
            counts.iter().max().unwrap_or(&0),
            counts.iter().min().unwrap_or(&0),
        );
        println!(
            "\nper server {counts:?}; max−min {}; Jain {:.3}; lost {lost}; duplicated \
             {duplicated}; kernel wake-ups per request {:.2}; empty wake-ups {empty}",
            max - min,
            jain(&counts),
            switches as f64 / total.max(1) as f64
        );
        lost == 0 && duplicated == 0
    }

    /// If this process is a server (its spec in the environment), runs it; returns the exit
    /// status.
    pub fn server_main() -> Option<i32> {
        let spec = std::env::var(SERVER_ENV).ok()?;
        Some(match server(&spec) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("service_queue server {}: {e}", std::process::id());
                1
            }
        })
    }

    /// A server: opens the group and the queue by name, joins, serves one request per wake-up
    /// until the stop pipe hangs up, then takes what is left and reports.
    fn server(spec: &str) -> Res<()> {
        let parts: Vec<&str> = spec.split(' ').collect();
        let [group_name, queue_name, stop, ready, report, work_us] = parts[..] else {
            return Err(format!("bad {SERVER_ENV}: {spec:?}").into());
        };
        let fd = |s: &str| -> Res<OwnedFd> {
            let fd: RawFd = s.parse()?;
            // SAFETY: the supervisor left this descriptor open for this process alone; each
            // number is taken once.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        };
        let (stop, ready, report) = (fd(stop)?, fd(ready)?, fd(report)?);
        let work = Duration::from_micros(work_us.parse()?);
        let group = Group::open(group_name)?;
        let flags = MQ_OFlag::O_RDONLY | MQ_OFlag::O_NONBLOCK | MQ_OFlag::O_CLOEXEC;
        let queue = mq_open(queue_name, flags, Mode::empty(), None)?;
        let mut waiter = group.join()?;
        waiter.add(&queue, QUEUE, Interest::SHARED)?;
        waiter.add(&stop, STOP, Interest::READABLE)?;
        let start = herdless_fixtures::counters::thread_voluntary_switches().unwrap_or(0);
        // SAFETY: gettid has no arguments and cannot fail.
        write_all(ready.as_raw_fd(), &unsafe { libc::gettid() }.to_ne_bytes())?;
        drop(ready);
        let (mut served, mut empty) = (Vec::new(), 0u64);
        let mut events = Events::with_capacity(1);
        let mut buf = [0u8; REQUEST_BYTES];
        'serve: loop {
            waiter.wait(&mut events, None)?;
            for event in events.iter() {
                if event.key == STOP {
                    break 'serve;
                }
                match mq_receive(&queue, &mut buf, &mut 0) {
                    Ok(_) => {
                        waiter.consumed(QUEUE)?; // before the work
                        served.push(u64::from_ne_bytes(buf));
                        busy_for(work);
                    }
                    Err(nix::errno::Errno::EAGAIN) => {
                        waiter.found_nothing(QUEUE)?; // counted in stats(), and consumed
                        empty += 1;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let switches =
            herdless_fixtures::counters::thread_voluntary_switches().unwrap_or(0) - start;
        // The supervisor hangs up once the queue is empty; take anything left all the same.
        while mq_receive(&queue, &mut buf, &mut 0).is_ok() {
            served.push(u64::from_ne_bytes(buf));
        }
        let mut out = Vec::with_capacity(8 * (served.len() + 3));
        for v in [served.len() as u64, empty, switches].iter().chain(&served) {
            out.extend_from_slice(&v.to_ne_bytes());
        }
        write_all(report.as_raw_fd(), &out)?;
        Ok(())
    }
}
