//! `herd drain`: the harness of the drain experiment ("why does one epoll worker take all the
//! load?"), sized for a small machine by flags. Clients connect
//! over loopback (the connect storm decides who owns which connection), then together write B
//! bytes in 1 KiB payloads; the server drains every byte. Each architecture is a row, with the
//! drain time next to the per-worker distribution of connections and bytes, because a fast or
//! tight figure means nothing if two workers did all the work. The drain experiment found that a
//! fresh process spreads connections and a warm one does not, so every configuration runs cold (a
//! fresh process: this program re-executed with a hidden flag) and warm (repeated in one
//! process, after one discarded warm-up run), and the table says which is which.

mod server;

use std::io::Write;
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::fairness::{sketch, Distribution, Spread};
use server::{Arch, Server};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The payload of one client write.
const PAYLOAD: usize = 1024;
/// Bounds: the connect storm, the drain, one cold child process.
const CONNECT_LIMIT: Duration = Duration::from_secs(10);
const DRAIN_LIMIT: Duration = Duration::from_secs(30);
const CHILD_LIMIT: Duration = Duration::from_secs(60);

/// The default of the list flag of `Args`: every arch the table compares.
const DEFAULT_ARCHS: &str = "single-thread,shared,shared-edge,shared-oneshot,exclusive,per-worker,herdless-native,herdless-emulated";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Client connection counts, one table block each.
    #[arg(long, value_delimiter = ',', default_value = "64,128")]
    fanouts: Vec<usize>,
    /// Worker threads of the multi-threaded architectures.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Bytes the clients write in all (suffixes K, M, G, KiB, MiB, GiB).
    #[arg(long, default_value = "64MiB", value_parser = parse_bytes)]
    bytes: u64,
    /// Architectures to run, each a row.
    #[arg(long, value_enum, value_delimiter = ',', default_value = DEFAULT_ARCHS)]
    archs: Vec<Arch>,
    /// Measured runs per configuration, cold and warm each.
    #[arg(long, default_value_t = 2)]
    runs: usize,
    /// Client threads writing the payloads.
    #[arg(long, default_value_t = 2)]
    client_threads: usize,
    /// Also write one JSON row per run to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Internal: measure the first arch at the first fanout once and print it as JSON.
    #[arg(long, hide = true)]
    cold_child: bool,
}

/// `64MiB`, `1G`, `4096`: a byte count.
fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("not a byte count: {s}"))?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => return Err(format!("unknown unit in {s}")),
    };
    Ok(n * scale)
}

/// Cold: a fresh process. Warm: a process that has run the same configuration before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Temperature {
    Cold,
    Warm,
}

/// What one run of one configuration measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Measurement {
    arch: Arch,
    fanout: usize,
    workers: usize,
    bytes: u64,
    temperature: Temperature,
    run: usize,
    /// From the clients' first write to the server's last byte.
    drain_ms: f64,
    /// The connect storm, until the server had accepted every connection (not in drain_ms).
    connect_ms: f64,
    conns_per_worker: Vec<u64>,
    bytes_per_worker: Vec<u64>,
    conns_max_share: f64,
    conns_jain: f64,
    bytes_max_share: f64,
    bytes_jain: f64,
    /// Workers that own at least one connection.
    active_workers: usize,
}

pub fn run(args: Args) -> Res<()> {
    use crate::limits::{descriptors_for_threads as needed, members_and_files};
    members_and_files("--workers", args.workers, needed)?;
    if args.fanouts.contains(&0) || args.runs == 0 || args.bytes == 0 {
        return Err("--fanouts, --runs and --bytes must be at least 1".into());
    }
    let client_threads = args
        .client_threads
        .clamp(1, *args.fanouts.iter().min().unwrap_or(&1));
    let args = Args {
        client_threads,
        ..args
    };
    if args.cold_child {
        let m = measure(&args, args.archs[0], args.fanouts[0], Temperature::Cold, 0)?;
        println!("{}", serde_json::to_string(&m)?);
        return Ok(());
    }
    print_header(&args);
    let mut all = Vec::new();
    for &fanout in &args.fanouts {
        let mut block = Vec::new();
        for &arch in &args.archs {
            block.push(cold_runs(&args, arch, fanout)?);
            block.push(warm_runs(&args, arch, fanout)?);
        }
        print_block(&block);
        all.extend(block.into_iter().flatten());
    }
    crate::json::write_rows(args.json.as_deref(), &all)?;
    Ok(())
}

/// `runs` fresh processes, each measuring once.
fn cold_runs(args: &Args, arch: Arch, fanout: usize) -> Res<Vec<Measurement>> {
    (0..args.runs)
        .map(|run| {
            let mut m = cold_child(args, arch, fanout)?;
            m.run = run;
            Ok(m)
        })
        .collect()
}

/// One discarded warm-up, then `runs` measured runs, all in this process.
fn warm_runs(args: &Args, arch: Arch, fanout: usize) -> Res<Vec<Measurement>> {
    measure(args, arch, fanout, Temperature::Warm, 0)?;
    (0..args.runs)
        .map(|run| measure(args, arch, fanout, Temperature::Warm, run))
        .collect()
}

/// Re-executes this program to measure one configuration in a fresh process.
fn cold_child(args: &Args, arch: Arch, fanout: usize) -> Res<Measurement> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["drain", "--cold-child", "--archs", arch.name()])
        .args(["--fanouts", &fanout.to_string()])
        .args(["--workers", &args.workers.to_string()])
        .args(["--bytes", &args.bytes.to_string()])
        .args(["--client-threads", &args.client_threads.to_string()])
        .stdout(Stdio::piped())
        .spawn()?;
    let deadline = Instant::now() + CHILD_LIMIT;
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            child.kill()?;
            child.wait()?;
            return Err(format!("the cold {} run took over {CHILD_LIMIT:?}", arch.name()).into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(format!("the cold {} run failed: {}", arch.name(), out.status).into());
    }
    let text = String::from_utf8(out.stdout)?;
    let line = text.lines().last().ok_or("the cold run printed nothing")?;
    Ok(serde_json::from_str(line)?)
}

/// One run: start the server, let the clients connect (the storm), then time the drain.
fn measure(
    args: &Args,
    arch: Arch,
    fanout: usize,
    temperature: Temperature,
    run: usize,
) -> Res<Measurement> {
    let server = Server::start(arch, args.workers, args.bytes)?;
    let start = Instant::now();
    let conns = match connect_storm(server.addr, fanout) {
        Ok(c) => c,
        Err(e) => {
            server.stop()?;
            return Err(e);
        }
    };
    let accepted = server.tally.until_accepted(fanout as u64, CONNECT_LIMIT);
    let connect_ms = start.elapsed().as_secs_f64() * 1e3;
    let drain_start = Instant::now();
    let clients = accepted.is_ok().then(|| spawn_clients(conns, args));
    let drained = accepted.and_then(|()| server.tally.until_drained(DRAIN_LIMIT));
    // Stopping the server closes its connections, which frees any client still writing.
    let tally = server.stop()?;
    for c in clients.into_iter().flatten() {
        c.join().map_err(|_| "a client panicked")??;
    }
    let done = drained?;
    let load = |v: &[std::sync::atomic::AtomicU64]| -> Vec<u64> {
        v.iter().map(|a| a.load(SeqCst)).collect()
    };
    let conns_per_worker = load(&tally.conns);
    let bytes_per_worker = load(&tally.bytes);
    let (conns, bytes) = (
        Distribution::of(&conns_per_worker),
        Distribution::of(&bytes_per_worker),
    );
    Ok(Measurement {
        arch,
        fanout,
        workers: conns_per_worker.len(),
        bytes: args.bytes,
        temperature,
        run,
        drain_ms: done.duration_since(drain_start).as_secs_f64() * 1e3,
        connect_ms,
        conns_max_share: conns.max_share,
        conns_jain: conns.jain,
        bytes_max_share: bytes.max_share,
        bytes_jain: bytes.jain,
        active_workers: conns_per_worker.iter().filter(|&&c| c > 0).count(),
        conns_per_worker,
        bytes_per_worker,
    })
}

/// Opens `fanout` connections as fast as one thread can.
fn connect_storm(addr: SocketAddrV4, fanout: usize) -> Res<Vec<TcpStream>> {
    let target = SocketAddr::V4(addr);
    (0..fanout)
        .map(|_| {
            let c = TcpStream::connect_timeout(&target, CONNECT_LIMIT)?;
            c.set_write_timeout(Some(DRAIN_LIMIT))?;
            Ok(c)
        })
        .collect()
}

type ClientThread = std::thread::JoinHandle<std::io::Result<()>>;

/// Client threads, each writing its connections' share of the bytes in 1 KiB payloads, one
/// payload per connection in turn.
fn spawn_clients(conns: Vec<TcpStream>, args: &Args) -> Vec<ClientThread> {
    let fanout = conns.len() as u64;
    let quota = |i: u64| args.bytes / fanout + u64::from(i < args.bytes % fanout);
    let mut shares: Vec<Vec<(TcpStream, u64)>> =
        (0..args.client_threads).map(|_| Vec::new()).collect();
    for (i, c) in conns.into_iter().enumerate() {
        shares[i % args.client_threads].push((c, quota(i as u64)));
    }
    shares
        .into_iter()
        .map(|mut share| std::thread::spawn(move || write_share(&mut share)))
        .collect()
}

fn write_share(share: &mut [(TcpStream, u64)]) -> std::io::Result<()> {
    let payload = [0x5a_u8; PAYLOAD];
    loop {
        let mut wrote = false;
        for (conn, left) in share.iter_mut().filter(|(_, left)| *left > 0) {
            let n = (*left).min(PAYLOAD as u64);
            conn.write_all(&payload[..n as usize])?;
            *left -= n;
            wrote = true;
        }
        if !wrote {
            return Ok(());
        }
    }
}

fn print_header(args: &Args) {
    println!(
        "herd drain: clients write {} MiB in {PAYLOAD}-byte payloads from {} thread(s); \
         {} workers (1 for single-thread); {} run(s) per configuration, cold and warm",
        args.bytes as f64 / (1 << 20) as f64,
        args.client_threads,
        args.workers,
        args.runs
    );
    println!(
        "cold = a fresh process per run; warm = repeated in one process after one discarded \
         warm-up run. drain ms: mean (min–max), from the first client write to the last byte \
         drained; connections are accepted before (the connect storm decides who owns what). \
         Distributions: last run."
    );
}

fn print_block(block: &[Vec<Measurement>]) {
    let Some(first) = block.first().and_then(|r| r.first()) else {
        return;
    };
    println!("\nfanout {} connections:\n", first.fanout);
    println!(
        "| arch | run | drain ms | ÷ per-worker | connections per worker | conns top share | \
         conns Jain | bytes top share | bytes Jain | active workers |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mean_ms = |runs: &[Measurement]| Spread::of(&ms(runs)).mean;
    let reference = |t: Temperature| {
        block
            .iter()
            .find(|r| r[0].arch == Arch::PerWorker && r[0].temperature == t)
            .map(|r| mean_ms(r))
    };
    for runs in block {
        let last = runs.last().expect("at least one run");
        let ratio = match reference(last.temperature) {
            Some(r) => format!("{:.2}", mean_ms(runs) / r),
            None => "–".into(),
        };
        let of =
            |f: &dyn Fn(&Measurement) -> f64| Spread::of(&runs.iter().map(f).collect::<Vec<_>>());
        println!(
            "| {} | {} | {} | {ratio} | {} | {} | {} | {} | {} | {} |",
            last.arch.name(),
            match last.temperature {
                Temperature::Cold => "cold",
                Temperature::Warm => "warm",
            },
            of(&|m| m.drain_ms).to_string().replace(".000", ""),
            sketch(&last.conns_per_worker),
            of(&|m| m.conns_max_share),
            of(&|m| m.conns_jain),
            of(&|m| m.bytes_max_share),
            of(&|m| m.bytes_jain),
            of(&|m| m.active_workers as f64),
        );
    }
}

fn ms(runs: &[Measurement]) -> Vec<f64> {
    runs.iter().map(|m| m.drain_ms).collect()
}
