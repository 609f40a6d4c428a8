//! A small prefork HTTP/1.1 server: N forked workers share one listening socket through herdless
//! (exclusive wake-ups, rotated after every accept), each answering requests with a fixed body,
//! keep-alive included. It exists to show the cure under a standard load tool: when it stops
//! (SIGINT/SIGTERM, `--seconds`, or `--max-requests` answered in all) it prints how many
//! connections and requests each worker took, so an uneven distribution cannot hide.
//!
//! ```text
//! cargo run --release --example prefork_server -- --workers 4 --port 8080 --seconds 14 &
//! wrk -t2 -c64 -d10s http://127.0.0.1:8080/
//! ```

#[cfg(target_os = "linux")]
fn main() {
    use clap::Parser;
    if let Err(e) = server::run(server::Args::parse()) {
        eprintln!("prefork_server: {e}");
        std::process::exit(1);
    }
}

/// The server is built on `fork` and the Linux backends of herdless; elsewhere it says so.
#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!(
        "prefork_server runs on Linux only; {} is not supported",
        std::env::consts::OS
    );
    std::process::exit(2);
}

#[cfg(target_os = "linux")]
mod server {
    use std::collections::HashMap;
    use std::io::{self, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::sync::atomic::Ordering::SeqCst;
    use std::time::Duration;

    use herdless::{Events, Group, Interest, Waiter};
    use herdless_fixtures::prefork::{self, Counts, ServerArgs, RESPONSE, STOP};

    type Res<T> = Result<T, Box<dyn std::error::Error>>;

    const LISTENER: usize = 0;
    /// How often a waiting worker looks at the stop flag.
    const TICK: Duration = Duration::from_millis(100);

    #[derive(clap::Parser, Debug)]
    #[command(
        about = "A prefork HTTP/1.1 server whose workers share one listener through herdless"
    )]
    pub struct Args {
        #[command(flatten)]
        server: ServerArgs,
    }

    pub fn run(args: Args) -> Res<()> {
        let args = args.server;
        let (group, listener) = args.start()?;
        let counts = Counts::new(args.workers)?;
        println!(
            "prefork_server: {} workers on http://{} ({:?} backend); Ctrl-C to stop",
            args.workers,
            listener.local_addr()?,
            group.backend()
        );
        let pids = prefork::fork_workers(args.workers, |w| work(w, &group, &listener, &counts))?;
        drop(listener);
        args.finish("prefork_server", &counts, &pids);
        Ok(())
    }

    /// One connection of a worker and the bytes of its unfinished request.
    struct Conn {
        stream: TcpStream,
        pending: Vec<u8>,
    }

    fn work(w: usize, group: &Group, listener: &TcpListener, counts: &Counts) -> Res<()> {
        let mut waiter = group.join()?;
        waiter.add(listener, LISTENER, Interest::READABLE.exclusive())?;
        let mut conns: HashMap<usize, Conn> = HashMap::new();
        let mut events = Events::with_capacity(64);
        while !STOP.load(SeqCst) {
            waiter.wait(&mut events, Some(TICK))?;
            for ev in events.iter() {
                if ev.key == LISTENER {
                    accept(w, &mut waiter, listener, &mut conns, counts)?;
                } else if let Some(conn) = conns.get_mut(&ev.key) {
                    if !serve(conn, w, counts) {
                        waiter.delete(&conn.stream)?;
                        conns.remove(&ev.key);
                    }
                }
            }
        }
        Ok(())
    }

    /// Takes one connection, then says so at once: the next one goes to the next worker.
    fn accept(
        w: usize,
        waiter: &mut Waiter,
        listener: &TcpListener,
        conns: &mut HashMap<usize, Conn>,
        counts: &Counts,
    ) -> Res<()> {
        let taken = listener.accept();
        waiter.consumed(LISTENER)?;
        let stream = match taken {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        let key = stream.as_raw_fd() as usize;
        waiter.add(&stream, key, Interest::READABLE)?;
        counts.conns(w).fetch_add(1, SeqCst);
        conns.insert(
            key,
            Conn {
                stream,
                pending: Vec::new(),
            },
        );
        Ok(())
    }

    /// Reads what is there and answers every complete request; false when the connection is
    /// done (closed by the peer, or an error).
    fn serve(conn: &mut Conn, w: usize, counts: &Counts) -> bool {
        let mut buf = [0u8; 4096];
        loop {
            match conn.stream.read(&mut buf) {
                Ok(0) => return false,
                Ok(n) => conn.pending.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
        let mut answers = 0;
        let mut keep_alive = true;
        while let Some(end) = find(&conn.pending, b"\r\n\r\n") {
            keep_alive = wants_keep_alive(&conn.pending[..end]);
            conn.pending.drain(..end + 4);
            answers += 1;
        }
        if answers == 0 {
            return true;
        }
        // Small answers fit the socket buffer; one that does not means a stuck client: drop it.
        if conn.stream.write_all(&RESPONSE.repeat(answers)).is_err() {
            return false;
        }
        counts.answered(w, answers as u64);
        keep_alive
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
