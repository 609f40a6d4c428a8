//! One row of `herd rpc`: N server processes on one service queue, one client thread (this
//! process's main thread) making its calls one at a time, and the checks that nothing was lost.
//!
//! The order: make the group and the queues, fork (or exec) the servers, wait for each to say
//! it is ready and then until each sleeps in its wait in the kernel (`until_asleep`, /proc),
//! then the calls: send the request, wait (bounded) for its reply, check that the reply is
//! this call's and says which server answered, next call. After the last call (or the time
//! cap) the stop pipe hangs up, each server reports, the servers are reaped, and their
//! kernel wake-ups and CPU time are read from `getrusage(RUSAGE_CHILDREN)` around the row,
//! less what each server had used before its first wait. Nothing lost: every call got exactly
//! one reply (its own id, in turn), both queues are empty at the end, and each server's own
//! count of calls served equals what the client saw from it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use herdless_fixtures::{pipe, until_asleep, Blocking};

use super::queues::Queues;
use super::server::{self, ServerSpec, Tally, Wiring, RECORD_WORDS};
use crate::exec::{self, Spawn};
use crate::herd_bench::{Refusal, RowGroup, Setup};

/// The most a server may take to be ready and asleep, a reply to come, or a report to come.
const BOUND: Duration = Duration::from_secs(30);

/// What one row runs.
#[derive(Debug, Clone)]
pub struct RowSpec {
    pub setup: Setup,
    pub servers: usize,
    pub calls: u64,
    pub time_cap: Duration,
}

/// What one row measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Calls made, each answered once.
    pub calls: u64,
    pub stopped_by_time_cap: bool,
    /// From the first request to the last reply.
    pub seconds: f64,
    /// Each call's time, request sent to reply read, in ns (sorted).
    pub call_ns: Vec<u64>,
    /// Voluntary context switches of the servers over the calls.
    pub kernel_wakeups: u64,
    /// CPU µs (user + system) of the servers over the calls.
    pub server_cpu_us: u64,
    /// Receives that found the service queue empty (`EAGAIN`).
    pub empty_wakeups: u64,
    /// herdless's `MemberStats::empty_wakeups`, summed (none for no flag).
    pub library_empty_wakeups: Option<u64>,
    /// Calls answered by each server, in start order.
    pub per_server: Vec<u64>,
}

/// Runs one row.
pub fn run(spec: &RowSpec) -> Result<Measured, Refusal> {
    let setup = spec.setup;
    let group = setup
        .mode
        .group(spec.servers, setup.rotate_every, setup.spawn)?;
    let queues = Queues::create()?;
    let (stop_r, stop_w) = pipe(Blocking::WriteEnd)?;
    let (ready_r, ready_w) = pipe(Blocking::Both)?;
    let (results_r, results_w) = pipe(Blocking::Both)?;
    let before = children_usage();
    let mut servers = Servers(Vec::with_capacity(spec.servers));
    for index in 0..spec.servers {
        let wiring = Wiring {
            index,
            mode: setup.mode,
            request_name: &queues.request_name,
            reply_name: &queues.reply_name,
            stop: stop_r.as_raw_fd(),
            ready: ready_w.as_raw_fd(),
            results: results_w.as_raw_fd(),
        };
        servers
            .0
            .push(start(&wiring, setup.spawn, group.as_ref(), &stop_w)?);
    }
    drop((ready_w, results_w));
    let mut ready = vec![0u8; spec.servers];
    read_within(&ready_r, &mut ready, "say it is ready")?;
    if ready.contains(&0) {
        return Err(Refusal::Failed(
            "a server could not start (see above)".into(),
        ));
    }
    let sleepers: Vec<(u32, i32)> = servers.0.iter().map(|&p| (p as u32, p)).collect();
    until_asleep(&sleepers, BOUND)?;
    let calls = client(spec, &queues)?;
    drop(stop_w);
    let tallies = reports(spec.servers, &results_r)?;
    servers.reap()?;
    let after = children_usage();
    check(&calls, &tallies, &queues)?;
    let (switches_before, cpu_before) = tallies.iter().fold((0, 0), |(s, c), t| {
        (s + t.switches_before, c + t.cpu_us_before)
    });
    let library_empty_wakeups = tallies.iter().map(|t| t.library_empty).sum::<Option<u64>>();
    Ok(Measured {
        calls: calls.per_server.iter().sum(),
        stopped_by_time_cap: calls.stopped_by_time_cap,
        seconds: calls.seconds,
        call_ns: calls.call_ns,
        kernel_wakeups: (after.0 - before.0).saturating_sub(switches_before),
        server_cpu_us: (after.1 - before.1).saturating_sub(cpu_before),
        empty_wakeups: tallies.iter().map(|t| t.empty).sum(),
        library_empty_wakeups,
        per_server: calls.per_server,
    })
}

/// Starts server `wiring.index`: forked (it runs `server::run` and leaves with `_exit`), or
/// exec'd with its three pipe ends inherited and the group's name in its spec. Returns its pid.
fn start(
    wiring: &Wiring<'_>,
    spawn: Option<Spawn>,
    group: Option<&RowGroup>,
    stop_w: &OwnedFd,
) -> Result<i32, Refusal> {
    if spawn == Some(Spawn::Exec) {
        let spec = ServerSpec {
            index: wiring.index,
            mode: wiring.mode,
            group: group.and_then(|g| g.group().name()).map(str::to_owned),
            request_name: wiring.request_name.to_owned(),
            reply_name: wiring.reply_name.to_owned(),
            stop: wiring.stop,
            ready: wiring.ready,
            results: wiring.results,
        };
        let inherit = [spec.stop, spec.ready, spec.results];
        let child = exec::spawn(&exec::Job::Rpc(spec), &inherit)?;
        return Ok(child.id() as i32);
    }
    // SAFETY: this process has one thread now (the rows run one after another and join what
    // they start); the child runs this crate's code and raw system calls, then `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    if pid == 0 {
        // The client's end of the stop pipe must close with the client's alone.
        // SAFETY: closes the child's copy; the OwnedFd is never used or dropped here (`_exit`).
        unsafe { libc::close(stop_w.as_raw_fd()) };
        let status = server::run(wiring, group.map(RowGroup::group));
        // SAFETY: leaves the child at once, without the parent's destructors (queue names,
        // the group's name, the other servers' pids).
        unsafe { libc::_exit(status) };
    }
    Ok(pid)
}

/// What the client saw.
struct Calls {
    per_server: Vec<u64>,
    call_ns: Vec<u64>,
    seconds: f64,
    stopped_by_time_cap: bool,
}

/// The client: calls 0.. one at a time, each a request and its reply, until `spec.calls` or
/// the time cap. A reply that is not this call's (lost, late, or a second answer to an earlier
/// one), from no server of the row, or none within `BOUND` fails the row.
fn client(spec: &RowSpec, queues: &Queues) -> Result<Calls, Refusal> {
    let mut calls = Calls {
        per_server: vec![0; spec.servers],
        call_ns: Vec::with_capacity(spec.calls as usize),
        seconds: 0.0,
        stopped_by_time_cap: false,
    };
    let start = Instant::now();
    for id in 0..spec.calls {
        if start.elapsed() >= spec.time_cap {
            calls.stopped_by_time_cap = true;
            break;
        }
        let sent = Instant::now();
        queues.send_request(id)?;
        let reply = queues.receive_reply(BOUND)?;
        calls.call_ns.push(sent.elapsed().as_nanos() as u64);
        match reply {
            Some((answered, server)) if answered == id && (server as usize) < spec.servers => {
                calls.per_server[server as usize] += 1;
            }
            Some((answered, server)) => {
                return Err(Refusal::Failed(format!(
                    "call {id}: the reply was to call {answered}, from server {server}"
                )))
            }
            None => {
                return Err(Refusal::Failed(format!(
                    "call {id}: no reply within {} s (lost)",
                    BOUND.as_secs()
                )))
            }
        }
    }
    calls.seconds = start.elapsed().as_secs_f64();
    calls.call_ns.sort_unstable();
    Ok(calls)
}

/// Reads one report per server (each bounded by `BOUND`), in index order.
fn reports(servers: usize, results: &OwnedFd) -> Result<Vec<Tally>, Refusal> {
    let mut tallies: Vec<Option<Tally>> = vec![None; servers];
    for _ in 0..servers {
        let mut bytes = [0u8; RECORD_WORDS * 8];
        read_within(results, &mut bytes, "report after the stop")?;
        let words: [u64; RECORD_WORDS] = std::array::from_fn(|i| {
            u64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
        });
        match Tally::from_words(words) {
            Some(t) if t.index < servers && tallies[t.index].is_none() => {
                tallies[t.index] = Some(t);
            }
            Some(t) => return Err(Refusal::Failed(format!("a second report of {}", t.index))),
            None => return Err(Refusal::Failed("a server failed (see above)".into())),
        }
    }
    Ok(tallies.into_iter().map(|t| t.expect("one each")).collect())
}

/// Fills `buf` from pipe `fd` (blocking), giving up after `BOUND` without data: a server that
/// died before it could write holds up nothing. A report is one write of at most 48 bytes, so
/// it arrives whole.
fn read_within(fd: &OwnedFd, buf: &mut [u8], what: &str) -> Result<(), Refusal> {
    let mut filled = 0;
    while filled < buf.len() {
        let mut poll = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, BOUND.as_millis() as libc::c_int) };
        if ready < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if ready <= 0 {
            return Err(Refusal::Failed(format!(
                "a server did not {what} within {} s",
                BOUND.as_secs()
            )));
        }
        let rest = &mut buf[filled..];
        // SAFETY: reads at most `rest.len()` bytes into the live slice.
        let n = unsafe { libc::read(fd.as_raw_fd(), rest.as_mut_ptr().cast(), rest.len()) };
        match n {
            0 => {
                return Err(Refusal::Failed(format!(
                    "the servers left before they could {what}"
                )))
            }
            n if n > 0 => filled += n as usize,
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return Err(std::io::Error::last_os_error().into()),
        }
    }
    Ok(())
}

/// Nothing lost, nothing answered twice: each server served what the client saw from it, and
/// neither queue holds anything (a second reply to a call would wait in the reply queue).
fn check(calls: &Calls, tallies: &[Tally], queues: &Queues) -> Result<(), Refusal> {
    for t in tallies {
        if t.served != calls.per_server[t.index] {
            return Err(Refusal::Failed(format!(
                "server {} says it served {} calls, the client got {} replies from it",
                t.index, t.served, calls.per_server[t.index]
            )));
        }
    }
    match queues.pending()? {
        (0, 0) => Ok(()),
        (requests, replies) => Err(Refusal::Failed(format!(
            "left in the queues: {requests} requests, {replies} replies"
        ))),
    }
}

/// `(ru_nvcsw, CPU µs)` of this process's reaped children so far.
fn children_usage() -> (u64, u64) {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid `who` and a live out-parameter.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    (u.ru_nvcsw as u64, exec::cpu_us(&u))
}

/// The servers of a row, by pid: reaped by `reap`, or killed and reaped if the row fails
/// before that.
struct Servers(Vec<i32>);

impl Servers {
    /// Waits for every server to exit (they have reported, so they are leaving); a server that
    /// failed makes the row fail.
    fn reap(mut self) -> Result<(), Refusal> {
        let mut failed = 0;
        for pid in std::mem::take(&mut self.0) {
            let mut status = 0;
            // SAFETY: reaps our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
                failed += 1;
            }
        }
        match failed {
            0 => Ok(()),
            n => Err(Refusal::Failed(format!(
                "{n} server(s) exited with a failure"
            ))),
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for &pid in &self.0 {
            // SAFETY: kill(2) and waitpid(2) on our own children.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
    }
}
