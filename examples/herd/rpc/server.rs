//! A server process of `herd rpc`: forked, or exec'd (`--spawn exec`, the lab re-run with its
//! spec in the environment, see `crate::exec`). It joins the row's group (anonymous when
//! forked, opened by name when exec'd), opens the service queue and the client's reply queue
//! by name, says it is ready, and serves: wait → one `mq_receive` → `consumed` (or
//! `found_nothing` if it found `EAGAIN`) → reply, until the stop pipe hangs up. The waiting
//! itself is the herd benchmark's `Member`: a plain `polling` poller for no flag, a herdless
//! `Waiter` otherwise.
//!
//! It reports on the results pipe what only it knows: the calls it served, its empty wake-ups
//! (its own count and herdless's `MemberStats::empty_wakeups`), and its voluntary switches and
//! CPU time just before its first wait, which the parent subtracts from the reaped children's
//! `getrusage` so that start-up (exec, join, open) is not charged to the calls.

use std::os::fd::{AsRawFd, RawFd};

use herdless::Group;
use herdless_fixtures::write_all;
use serde::{Deserialize, Serialize};

use super::queues::ServerQueues;
use crate::exec;
use crate::herd_bench::{Member, Mode, Refusal, STOP_KEY};

/// A server's report: index, calls served, empty wake-ups, herdless's empty wake-ups
/// (`u64::MAX`: none, no flag), voluntary switches and CPU µs before the first wait. Index
/// `u64::MAX` if it failed.
pub const RECORD_WORDS: usize = 6;

/// What a server counted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tally {
    pub index: usize,
    pub served: u64,
    pub empty: u64,
    pub library_empty: Option<u64>,
    /// `ru_nvcsw` of the server just before its first wait.
    pub switches_before: u64,
    /// CPU µs (user + system) of the server just before its first wait.
    pub cpu_us_before: u64,
}

impl Tally {
    pub fn to_words(self) -> [u64; RECORD_WORDS] {
        [
            self.index as u64,
            self.served,
            self.empty,
            self.library_empty.unwrap_or(u64::MAX),
            self.switches_before,
            self.cpu_us_before,
        ]
    }

    /// A report read back; `None` for a server that failed.
    pub fn from_words(w: [u64; RECORD_WORDS]) -> Option<Tally> {
        (w[0] != u64::MAX).then_some(Tally {
            index: w[0] as usize,
            served: w[1],
            empty: w[2],
            library_empty: Some(w[3]).filter(|&v| v != u64::MAX),
            switches_before: w[4],
            cpu_us_before: w[5],
        })
    }
}

/// The descriptors a server inherits and the names it opens.
pub struct Wiring<'a> {
    pub index: usize,
    pub mode: Mode,
    pub request_name: &'a str,
    pub reply_name: &'a str,
    /// The read end of the stop pipe: hangs up when the client has made its last call.
    pub stop: RawFd,
    /// One byte when ready (1) or failed before serving (0).
    pub ready: RawFd,
    /// Where the report goes.
    pub results: RawFd,
}

/// Runs one server to its end and reports; returns the process's exit status.
pub fn run(wiring: &Wiring<'_>, group: Option<&Group>) -> i32 {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| serve(wiring, group)));
    let tally = match outcome {
        Ok(Ok(t)) => Some(t),
        Ok(Err(e)) => {
            eprintln!("rpc server {}: {e:?}", wiring.index);
            None
        }
        Err(_) => None,
    };
    let words = tally.map_or([u64::MAX; RECORD_WORDS], Tally::to_words);
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let _ = write_all(wiring.results, &bytes);
    i32::from(tally.is_none())
}

/// Opens, joins, says ready (or that it failed: the parent never waits for a server that will
/// not come), then serves until the stop.
fn serve(w: &Wiring<'_>, group: Option<&Group>) -> Result<Tally, Refusal> {
    let setup = ServerQueues::open(w.request_name, w.reply_name)
        .map_err(Refusal::from)
        .and_then(|q| {
            let member = Member::new(w.mode, group, q.request.as_raw_fd(), w.stop)?;
            Ok((q, member))
        });
    let ready = [u8::from(setup.is_ok())];
    write_all(w.ready, &ready)?;
    let (queues, mut member) = setup?;
    let (switches_before, cpu_us_before) = exec::self_usage();
    let mut tally = Tally {
        index: w.index,
        switches_before,
        cpu_us_before,
        ..Tally::default()
    };
    let library_before = member.library_empty();
    loop {
        let Some(key) = member.wait()? else { continue };
        if key == STOP_KEY {
            break;
        }
        match queues.receive_request()? {
            Some(id) => {
                member.consumed(key)?;
                queues.reply(id, w.index as u64)?;
                tally.served += 1;
            }
            None => {
                member.found_nothing(key)?;
                tally.empty += 1;
            }
        }
    }
    tally.library_empty = member
        .library_empty()
        .zip(library_before)
        .map(|(end, start)| end - start);
    member.leave(queues.request.as_raw_fd(), w.stop);
    Ok(tally)
}

/// What an exec'd server is told (through `crate::exec`): as `Wiring`, with the group's name.
#[derive(Serialize, Deserialize)]
pub struct ServerSpec {
    pub index: usize,
    pub mode: Mode,
    pub group: Option<String>,
    pub request_name: String,
    pub reply_name: String,
    pub stop: RawFd,
    pub ready: RawFd,
    pub results: RawFd,
}

/// The exec'd server: takes the descriptors it inherited, opens the named group, serves.
pub fn exec_server(spec: ServerSpec) -> i32 {
    // SAFETY: the parent left these open for this process alone; each is taken once.
    let (stop, ready, results) = unsafe {
        (
            exec::inherited(spec.stop),
            exec::inherited(spec.ready),
            exec::inherited(spec.results),
        )
    };
    let wiring = Wiring {
        index: spec.index,
        mode: spec.mode,
        request_name: &spec.request_name,
        reply_name: &spec.reply_name,
        stop: stop.as_raw_fd(),
        ready: ready.as_raw_fd(),
        results: results.as_raw_fd(),
    };
    let group = match spec.group.as_deref().map(Group::open).transpose() {
        Ok(group) => group,
        Err(e) => {
            eprintln!("rpc server {}: cannot open the group: {e}", spec.index);
            let _ = write_all(wiring.ready, &[0]);
            let _ = write_all(wiring.results, &[0xff; RECORD_WORDS * 8]);
            return 1;
        }
    };
    run(&wiring, group.as_ref())
}
