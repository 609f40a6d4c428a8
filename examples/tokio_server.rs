//! A prefork HTTP/1.1 server on Tokio: N forked workers, each running its own current-thread
//! Tokio runtime, share one listening socket through `herdless::tokio::Acceptor` (a herdless
//! waiter in a thread of its own per worker, exclusive wake-ups, turns after every accept). It
//! is `prefork_server` for async code: when it stops (SIGINT/SIGTERM, `--seconds`, or
//! `--max-requests` answered in all) it prints how many connections and requests each worker
//! took, so an uneven distribution cannot hide. Needs the `tokio` feature.
//!
//! ```text
//! cargo run --release --features tokio --example tokio_server -- --workers 4 --port 8080 --seconds 20 &
//! wrk -t2 -c64 -d10s http://127.0.0.1:8080/
//! ```

#[cfg(target_os = "linux")]
fn main() {
    use clap::Parser;
    if let Err(e) = server::run(server::Args::parse()) {
        eprintln!("tokio_server: {e}");
        std::process::exit(1);
    }
}

/// The server is built on `fork` and the Linux backends of herdless; elsewhere it says so.
#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!(
        "tokio_server runs on Linux only (it forks its workers); {} is not supported",
        std::env::consts::OS
    );
    std::process::exit(2);
}

#[cfg(target_os = "linux")]
mod server {
    use std::io;
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
    use std::time::{Duration, Instant};

    use herdless::{tokio::Acceptor, Backend, Group};
    use herdless_fixtures::SharedCounters;
    use tokio::net::TcpStream;

    type Res<T> = Result<T, Box<dyn std::error::Error>>;

    const RESPONSE: &[u8] =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, herd!\n";
    /// How often a worker looks at the stop flag.
    const TICK: Duration = Duration::from_millis(100);

    #[derive(clap::Parser, Debug)]
    #[command(
        about = "A prefork HTTP/1.1 server on Tokio whose workers share one listener through herdless"
    )]
    pub struct Args {
        /// Forked workers.
        #[arg(long, default_value_t = 4)]
        workers: usize,
        /// Port on 127.0.0.1 (0: any free one, printed at start).
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// herdless backend: auto, native or emulated.
        #[arg(long, default_value = "auto")]
        backend: String,
        /// Stop after this many requests answered in all.
        #[arg(long)]
        max_requests: Option<u64>,
        /// Stop after this many seconds.
        #[arg(long)]
        seconds: Option<f64>,
    }

    /// Set by SIGINT/SIGTERM, in the parent and in each worker.
    static STOP: AtomicBool = AtomicBool::new(false);

    extern "C" fn on_signal(_: libc::c_int) {
        STOP.store(true, SeqCst);
    }

    fn catch_stop_signals() -> Res<()> {
        use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
        let action = SigAction::new(
            SigHandler::Handler(on_signal),
            SaFlags::empty(),
            SigSet::empty(),
        );
        for sig in [Signal::SIGINT, Signal::SIGTERM] {
            // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
            unsafe { sigaction(sig, &action) }?;
        }
        Ok(())
    }

    /// Per-worker figures and the total of answered requests, in memory shared across fork.
    struct Counts(SharedCounters);

    impl Counts {
        /// Slot 0: requests in all; then (connections, requests) per worker.
        fn new(workers: usize) -> Res<Counts> {
            Ok(Counts(SharedCounters::new(1 + 2 * workers)?))
        }

        fn at(&self, i: usize) -> &AtomicU64 {
            self.0.get(i)
        }
        fn total(&self) -> &AtomicU64 {
            self.at(0)
        }
        fn conns(&self, worker: usize) -> &AtomicU64 {
            self.at(1 + 2 * worker)
        }
        fn requests(&self, worker: usize) -> &AtomicU64 {
            self.at(2 + 2 * worker)
        }
    }

    fn backend(name: &str) -> Res<Backend> {
        Ok(match name {
            "auto" => Backend::Auto,
            "native" => Backend::Native,
            "emulated" => Backend::Emulated,
            other => return Err(format!("unknown backend {other}").into()),
        })
    }

    pub fn run(args: Args) -> Res<()> {
        if args.workers == 0 {
            return Err("--workers must be at least 1".into());
        }
        catch_stop_signals()?;
        let group = Group::builder()
            .backend(backend(&args.backend)?)
            .rotate_every(1)
            .max_members(args.workers.max(2))
            .build()?;
        let listener = TcpListener::bind(("127.0.0.1", args.port))?;
        listener.set_nonblocking(true)?;
        // Leaked: the workers' tasks hold it for the life of the process.
        let counts: &'static Counts = Box::leak(Box::new(Counts::new(args.workers)?));
        println!(
            "tokio_server: {} workers on http://{} ({:?} backend, a Tokio runtime each); Ctrl-C to stop",
            args.workers,
            listener.local_addr()?,
            group.backend()
        );
        let pids = (0..args.workers)
            .map(|w| fork_worker(w, &group, &listener, counts))
            .collect::<Res<Vec<i32>>>()?;
        drop(listener);
        supervise(&args, counts, &pids);
        report(&args, counts);
        Ok(())
    }

    fn fork_worker(
        w: usize,
        group: &Group,
        listener: &TcpListener,
        counts: &'static Counts,
    ) -> Res<i32> {
        // SAFETY: the parent is single-threaded; the child runs only the worker and leaves by
        // _exit without returning into the parent's code.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error().into());
        }
        if pid == 0 {
            let code = match work(w, group, listener, counts) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("worker {w}: {e}");
                    1
                }
            };
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(code) };
        }
        Ok(pid)
    }

    /// Waits for a stop reason, then stops the workers and reaps them.
    fn supervise(args: &Args, counts: &Counts, pids: &[i32]) {
        let start = Instant::now();
        let limit = args.seconds.map(Duration::from_secs_f64);
        while !STOP.load(SeqCst)
            && !limit.is_some_and(|l| start.elapsed() >= l)
            && !args
                .max_requests
                .is_some_and(|m| counts.total().load(SeqCst) >= m)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        for &pid in pids {
            // SAFETY: signals our own child.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        for &pid in pids {
            let mut status = 0;
            // SAFETY: reaps our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        }
    }

    fn report(args: &Args, counts: &Counts) {
        let conns: Vec<u64> = (0..args.workers)
            .map(|w| counts.conns(w).load(SeqCst))
            .collect();
        let requests: Vec<u64> = (0..args.workers)
            .map(|w| counts.requests(w).load(SeqCst))
            .collect();
        println!("tokio_server stopped.");
        for w in 0..args.workers {
            println!(
                "  worker {w}: accepted {} connections, answered {} requests",
                conns[w], requests[w]
            );
        }
        let total: u64 = conns.iter().sum();
        let max = conns.iter().copied().max().unwrap_or(0);
        let min = conns.iter().copied().min().unwrap_or(0);
        println!(
            "  accepted per worker {conns:?}: {total} in all, max − min {}, top share {:.3}",
            max - min,
            max as f64 / total.max(1) as f64
        );
    }

    /// One worker: a current-thread runtime, the acceptor, a task per connection. Once the
    /// stop flag is set, a small thread closes the acceptor: the connections it took are still
    /// served, later ones go to the other workers, and the worker ends.
    fn work(w: usize, group: &Group, listener: &TcpListener, counts: &'static Counts) -> Res<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        rt.block_on(async {
            let mut acceptor = Acceptor::new(group, listener.try_clone()?)?;
            let closer = acceptor.closer();
            // A signal handler may only set a flag; this thread turns it into a close.
            std::thread::spawn(move || {
                while !STOP.load(SeqCst) {
                    std::thread::sleep(TICK);
                }
                closer.close();
            });
            loop {
                let (stream, _) = match acceptor.accept().await {
                    Ok(conn) => conn,
                    Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(()),
                    Err(e) => return Err(e.into()),
                };
                counts.conns(w).fetch_add(1, SeqCst);
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve(stream, w, counts));
            }
        })
    }

    /// Reads requests and answers every complete one, until the peer closes or asks to.
    async fn serve(stream: TcpStream, w: usize, counts: &'static Counts) {
        let mut pending = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            if stream.readable().await.is_err() {
                return;
            }
            match stream.try_read(&mut buf) {
                Ok(0) => return,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(_) => return,
            }
            let mut answers = 0;
            let mut keep_alive = true;
            while let Some(end) = find(&pending, b"\r\n\r\n") {
                keep_alive = wants_keep_alive(&pending[..end]);
                pending.drain(..end + 4);
                answers += 1;
            }
            if answers == 0 {
                continue;
            }
            if write_all(&stream, &RESPONSE.repeat(answers)).await.is_err() {
                return;
            }
            counts.requests(w).fetch_add(answers as u64, SeqCst);
            counts.total().fetch_add(answers as u64, SeqCst);
            if !keep_alive {
                return;
            }
        }
    }

    async fn write_all(stream: &TcpStream, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            stream.writable().await?;
            match stream.try_write(buf) {
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// HTTP/1.1 keeps the connection unless told `Connection: close`; HTTP/1.0 closes it
    /// unless told `Connection: keep-alive`.
    fn wants_keep_alive(head: &[u8]) -> bool {
        let head = String::from_utf8_lossy(head).to_ascii_lowercase();
        match head.lines().next().is_some_and(|l| l.ends_with("http/1.0")) {
            true => head.contains("connection: keep-alive"),
            false => !head.contains("connection: close"),
        }
    }

    fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
        haystack.windows(needle.len()).position(|w| w == needle)
    }
}
