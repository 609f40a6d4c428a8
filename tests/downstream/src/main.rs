//! herdless as its users get it (issue 25): two members of one group, threads A and B, wait on
//! sockets S and T; S is closed while they wait; then 5 messages (UDP datagrams, or TCP
//! connections) arrive on T. Every one must be received, each member may see at most one error
//! for S, and both must return when told to stop. A hang fails the case after a bound instead of
//! hanging the run.
//!
//! How S goes away (the table):
//! - `other-drops`: a third thread (this one) drops S while A and B wait;
//! - `member-drops`: A drops S between two of its waits, B still has it registered;
//! - `member-deletes`: A deletes S from its waiter, then drops it, B still has it registered.
//!
//! Each for UDP and TCP, S and T registered plain and exclusive, on every backend this system
//! has (a missing one is skipped loudly). `--only VARIANT`, `--proto udp|tcp` and `--interest
//! plain|exclusive` pick cases (`under-wine.sh` runs one case per process, so that a crash of
//! Wine's server costs one case); `--runs N` repeats every case; `--bound-secs S` is the time a
//! case may take before it counts as hung (default 20 s: a passing case takes well under a
//! second, so only a hang reaches it). Exit status 1 if any case failed.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use herdless::{Backend, Events, Group, Interest, Waiter};

const S_KEY: usize = 1;
const T_KEY: usize = 2;
const MESSAGES: usize = 5;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Proto {
    Udp,
    Tcp,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Variant {
    OtherDrops,
    MemberDrops,
    MemberDeletes,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::OtherDrops => "other-drops",
            Variant::MemberDrops => "member-drops",
            Variant::MemberDeletes => "member-deletes",
        }
    }
}

/// A socket of either kind: a bound UDP socket, or a TCP listener.
enum Socket {
    Udp(UdpSocket),
    Tcp(TcpListener),
}

impl Socket {
    fn new(proto: Proto) -> Socket {
        let s = match proto {
            Proto::Udp => Socket::Udp(UdpSocket::bind("127.0.0.1:0").unwrap()),
            Proto::Tcp => Socket::Tcp(TcpListener::bind("127.0.0.1:0").unwrap()),
        };
        match &s {
            Socket::Udp(u) => u.set_nonblocking(true).unwrap(),
            Socket::Tcp(l) => l.set_nonblocking(true).unwrap(),
        }
        s
    }

    fn addr(&self) -> SocketAddr {
        match self {
            Socket::Udp(u) => u.local_addr().unwrap(),
            Socket::Tcp(l) => l.local_addr().unwrap(),
        }
    }

    fn add(&self, w: &mut Waiter, key: usize, interest: Interest) -> herdless::Result<()> {
        match self {
            Socket::Udp(u) => w.add(u, key, interest),
            Socket::Tcp(l) => w.add(l, key, interest),
        }
    }

    fn delete(&self, w: &mut Waiter) -> herdless::Result<()> {
        match self {
            Socket::Udp(u) => w.delete(u),
            Socket::Tcp(l) => w.delete(l),
        }
    }

    /// Takes every message waiting (datagrams read, connections accepted); how many.
    fn drain(&self) -> usize {
        let mut n = 0;
        loop {
            let got = match self {
                Socket::Udp(u) => u.recv(&mut [0u8; 16]).map(drop),
                Socket::Tcp(l) => l.accept().map(drop),
            };
            match got {
                Ok(()) => n += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return n,
                Err(e) => panic!("reading T: {e}"),
            }
        }
    }
}

/// What one member saw.
#[derive(Debug, Default)]
struct Seen {
    errors: usize,
    first_error: Option<String>,
}

/// One case, once. `Ok` with a line of figures, or `Err` with what went wrong.
fn run_case(
    backend: Backend,
    proto: Proto,
    exclusive: bool,
    variant: Variant,
    bound: Duration,
) -> Result<String, String> {
    let interest = match exclusive {
        true => Interest::READABLE.exclusive(),
        false => Interest::READABLE,
    };
    let group = Group::builder()
        .backend(backend)
        .build()
        .map_err(|e| e.to_string())?;
    let s = Socket::new(proto);
    let t = Arc::new(Socket::new(proto));
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let mut w = group.join().map_err(|e| e.to_string())?;
        s.add(&mut w, S_KEY, interest).map_err(|e| e.to_string())?;
        t.add(&mut w, T_KEY, interest).map_err(|e| e.to_string())?;
        waiters.push(w);
    }
    let notifiers: Vec<_> = waiters.iter().map(|w| w.notifier()).collect();
    let received = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let waiting = Arc::new(AtomicUsize::new(0));
    // S goes to member A in the variants where A closes it.
    let mut s_here = Some(s);
    let (done_tx, done_rx) = mpsc::channel::<(usize, Seen)>();
    for (i, mut w) in waiters.into_iter().enumerate() {
        let mine = match (i, variant) {
            (0, Variant::MemberDrops | Variant::MemberDeletes) => s_here.take(),
            _ => None,
        };
        let (t, received, stop, waiting, done_tx) = (
            t.clone(),
            received.clone(),
            stop.clone(),
            waiting.clone(),
            done_tx.clone(),
        );
        thread::spawn(move || {
            let mut mine = mine;
            let mut events = Events::with_capacity(8);
            let mut seen = Seen::default();
            let mut first = true;
            while !stop.load(SeqCst) {
                let result = w.wait(&mut events, Some(Duration::from_millis(100)));
                if std::mem::take(&mut first) {
                    waiting.fetch_add(1, SeqCst);
                }
                match result {
                    Ok(_) => {
                        for ev in events.iter() {
                            if ev.key == T_KEY {
                                received.fetch_add(t.drain(), SeqCst);
                            }
                        }
                    }
                    Err(e) => {
                        seen.errors += 1;
                        seen.first_error.get_or_insert_with(|| e.to_string());
                        if seen.errors > 50 {
                            break; // an error for ever: reported below
                        }
                    }
                }
                // Member A closes S between two of its waits, once both have waited.
                if waiting.load(SeqCst) == 2 {
                    if let Some(s) = mine.take() {
                        if variant == Variant::MemberDeletes {
                            if let Err(e) = s.delete(&mut w) {
                                seen.errors += 1;
                                seen.first_error
                                    .get_or_insert_with(|| format!("delete: {e}"));
                            }
                        }
                        drop(s);
                    }
                }
            }
            let _ = done_tx.send((i, seen));
        });
    }
    drop(done_tx);
    let started = Instant::now();
    // Both members wait (their first wait has returned once and they wait again), then S goes.
    while waiting.load(SeqCst) < 2 && started.elapsed() < bound {
        thread::sleep(Duration::from_millis(5));
    }
    thread::sleep(Duration::from_millis(150));
    if variant == Variant::OtherDrops {
        drop(s_here.take());
    }
    thread::sleep(Duration::from_millis(150));
    // The 5 messages on T.
    let addr = t.addr();
    let mut clients = Vec::new();
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..MESSAGES {
        match proto {
            Proto::Udp => {
                sender.send_to(&(i as u64).to_ne_bytes(), addr).unwrap();
            }
            Proto::Tcp => clients.push(TcpStream::connect(addr).unwrap()),
        }
    }
    while received.load(SeqCst) < MESSAGES && started.elapsed() < bound {
        thread::sleep(Duration::from_millis(5));
    }
    let got = received.load(SeqCst);
    let took = started.elapsed();
    stop.store(true, SeqCst);
    for n in &notifiers {
        let _ = n.notify();
    }
    let mut seen: Vec<Option<Seen>> = vec![None, None];
    let until = Instant::now() + bound.min(Duration::from_secs(5));
    while seen.iter().any(Option::is_none) {
        let left = until.saturating_duration_since(Instant::now());
        match done_rx.recv_timeout(left) {
            Ok((i, s)) => seen[i] = Some(s),
            Err(_) => break,
        }
    }
    let mut problems = Vec::new();
    if got < MESSAGES {
        problems.push(format!(
            "{got} of {MESSAGES} messages received in {took:.1?} (hung?)"
        ));
    }
    for (i, s) in seen.iter().enumerate() {
        let name = ["A", "B"][i];
        match s {
            None => problems.push(format!(
                "member {name} did not return when told to stop (hung)"
            )),
            Some(s) if s.errors > 1 => problems.push(format!(
                "member {name}: {} errors (at most 1 allowed), first: {}",
                s.errors,
                s.first_error.as_deref().unwrap_or("")
            )),
            Some(_) => {}
        }
    }
    let errors: Vec<String> = seen
        .iter()
        .map(|s| s.as_ref().map_or("-".into(), |s| s.errors.to_string()))
        .collect();
    let first: Vec<String> = seen
        .iter()
        .flatten()
        .filter_map(|s| s.first_error.clone())
        .collect();
    let first = match first.is_empty() {
        true => String::new(),
        false => format!(" (first: {})", first.join("; ")),
    };
    match problems.is_empty() {
        true => Ok(format!(
            "{got} of {MESSAGES} received in {took:.1?}, errors A {} B {}{first}",
            errors[0], errors[1]
        )),
        false => Err(problems.join("; ")),
    }
}

fn main() {
    let mut runs = 1usize;
    let mut bound = Duration::from_secs(20);
    let (mut only, mut only_proto, mut only_interest) =
        (None::<String>, None::<String>, None::<String>);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().and_then(|v| v.parse().ok()).expect("--runs N"),
            "--bound-secs" => {
                bound = Duration::from_secs(
                    args.next()
                        .and_then(|v| v.parse().ok())
                        .expect("--bound-secs S"),
                )
            }
            "--only" => only = args.next(),
            "--proto" => only_proto = args.next(),
            "--interest" => only_interest = args.next(),
            other => panic!(
                "unknown argument {other}: --runs N, --bound-secs S, --only VARIANT, \
                 --proto udp|tcp, --interest plain|exclusive"
            ),
        }
    }
    let mut backends = vec![Backend::Emulated];
    match Group::builder().backend(Backend::Native).build() {
        Ok(_) => backends.insert(0, Backend::Native),
        Err(e) => println!("SKIPPED: the native backend is not available on this system: {e}"),
    }
    let mut failed = 0;
    let mut summary = Vec::new();
    for &backend in &backends {
        for variant in [
            Variant::OtherDrops,
            Variant::MemberDrops,
            Variant::MemberDeletes,
        ] {
            if only.as_deref().is_some_and(|o| o != variant.name()) {
                continue;
            }
            for proto in [Proto::Udp, Proto::Tcp] {
                let proto_name = format!("{proto:?}").to_lowercase();
                if only_proto.as_deref().is_some_and(|o| o != proto_name) {
                    continue;
                }
                for exclusive in [false, true] {
                    let interest_name = if exclusive { "exclusive" } else { "plain" };
                    if only_interest.as_deref().is_some_and(|o| o != interest_name) {
                        continue;
                    }
                    let case = format!("{backend:?} {} {proto:?} {interest_name}", variant.name());
                    let mut passed = 0;
                    for run in 1..=runs {
                        match run_case(backend, proto, exclusive, variant, bound) {
                            Ok(line) => {
                                passed += 1;
                                println!("ok      {case} (run {run}): {line}");
                            }
                            Err(why) => {
                                failed += 1;
                                println!("FAILED  {case} (run {run}): {why}");
                            }
                        }
                    }
                    summary.push(format!("{case}: {passed} of {runs} passed"));
                }
            }
        }
    }
    println!("\n== summary ==");
    for line in &summary {
        println!("{line}");
    }
    if failed > 0 {
        println!("{failed} run(s) failed");
        std::process::exit(1);
    }
    println!("every case passed");
    // Threads of a hung case would keep the process alive: exit explicitly either way.
    std::process::exit(0);
}
