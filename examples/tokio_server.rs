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
    use std::sync::atomic::Ordering::SeqCst;
    use std::time::Duration;

    use herdless::{tokio::Acceptor, Group};
    use herdless_fixtures::prefork::{self, Counts, ServerArgs, RESPONSE, STOP};
    use tokio::net::TcpStream;

    type Res<T> = Result<T, Box<dyn std::error::Error>>;

    /// How often a worker looks at the stop flag.
    const TICK: Duration = Duration::from_millis(100);

    #[derive(clap::Parser, Debug)]
    #[command(
        about = "A prefork HTTP/1.1 server on Tokio whose workers share one listener through herdless"
    )]
    pub struct Args {
        #[command(flatten)]
        server: ServerArgs,
    }

    pub fn run(args: Args) -> Res<()> {
        let args = args.server;
        let (group, listener) = args.start()?;
        // Leaked: the workers' tasks hold it for the life of the process.
        let counts: &'static Counts = Box::leak(Box::new(Counts::new(args.workers)?));
        println!(
            "tokio_server: {} workers on http://{} ({:?} backend, a Tokio runtime each); Ctrl-C to stop",
            args.workers,
            listener.local_addr()?,
            group.backend()
        );
        let pids = prefork::fork_workers(args.workers, |w| work(w, &group, &listener, counts))?;
        drop(listener);
        args.finish("tokio_server", counts, &pids);
        Ok(())
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
            counts.answered(w, answers as u64);
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
