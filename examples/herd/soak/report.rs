//! The soak's verdict: every request's fate read from the ledger once the run is over, the
//! figures of the run, growth over the run, and how they are printed (a table per backend, then
//! the final line per backend) and written as JSON.
//!
//! Fates, for each request that entered a queue (the definitions `--help` and `docs/lab.md`
//! give): *read* (counted by a server), *duplicated* (each read beyond the first), *stranded*
//! (found in its queue by the supervisor after the drain period, while servers of that queue
//! were alive: lost), *unserved* (found there with no live server: not counted against the
//! library; by construction 0), *vanished* (never read and in no queue). A vanished request is
//! *taken by a killed server* when a server of its queue was SIGKILLed with its receiving mark
//! set (each such death explains at most one request of that queue); the rest are lost.
//! *Late*: read after its deadline. Arrival to read: from the client's stamp just before
//! `mq_send` to the server's stamp right after `mq_receive`.

use std::collections::HashMap;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use serde::Serialize;

use super::ledger::{Ledger, REFUSED, STRANDED, UNSERVED};
use super::probe::{Census, ShmObjects, Spread};
use super::wakeups::Rates;

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Latency {
    pub median_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub worst_ms: f64,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Fates {
    /// Requests that entered a queue.
    pub sent: u64,
    /// Refused by a full queue (never entered one).
    pub refused: u64,
    pub read: u64,
    pub duplicated: u64,
    /// Reads of an id the ledger never gave out (must be 0).
    pub bad_ids: u64,
    pub stranded: u64,
    pub unserved: u64,
    pub vanished: u64,
    pub taken_by_killed: u64,
    pub lost: u64,
    pub late: u64,
    pub latency: Latency,
}

impl Fates {
    /// Reads the fate of every request; `corpses[q]`: servers of queue q killed mid-receive;
    /// `servers`: the slots used.
    pub fn tally(
        ledger: &Ledger,
        corpses: &HashMap<u64, u64>,
        servers: usize,
        deadline: Duration,
    ) -> Fates {
        let mut f = Fates::default();
        // Requests lost on purpose (`--inject lose`): lost, whatever the corpses.
        let injected: Vec<u64> = (0..servers)
            .filter_map(|i| ledger.slot(i).injected().load(SeqCst).checked_sub(1))
            .collect();
        let mut vanished: HashMap<u64, u64> = HashMap::new();
        let mut latencies = Vec::new();
        for id in 0..ledger.ids_taken() as u64 {
            let r = ledger.record(id).expect("an id the table has");
            let (sent, flags) = (r.sent_ns(), r.flags());
            if sent == 0 {
                continue; // taken as the run ended, never stamped
            }
            if flags & REFUSED != 0 {
                f.refused += 1;
                continue;
            }
            f.sent += 1;
            match r.reads() {
                0 if flags & STRANDED != 0 => f.stranded += 1,
                0 if flags & UNSERVED != 0 => f.unserved += 1,
                0 if injected.contains(&id) => {
                    f.vanished += 1;
                    f.lost += 1;
                }
                0 => *vanished.entry(r.queue()).or_default() += 1,
                n => {
                    f.read += 1;
                    f.duplicated += n - 1;
                    let read = r.read_ns();
                    if read != 0 {
                        let ns = read.saturating_sub(sent);
                        latencies.push(ns);
                        if ns > deadline.as_nanos() as u64 {
                            f.late += 1;
                        }
                    }
                }
            }
        }
        for (q, n) in vanished {
            let explained = n.min(corpses.get(&q).copied().unwrap_or(0));
            f.vanished += n;
            f.taken_by_killed += explained;
            f.lost += n - explained;
        }
        f.lost += f.stranded;
        latencies.sort_unstable();
        let at = |p: f64| -> f64 {
            match latencies.len() {
                0 => 0.0,
                n => latencies[((n - 1) as f64 * p).round() as usize] as f64 / 1e6,
            }
        };
        f.latency = Latency {
            median_ms: at(0.5),
            p99_ms: at(0.99),
            p999_ms: at(0.999),
            worst_ms: at(1.0),
        };
        f
    }
}

/// What the churn did.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Churn {
    pub kills: u64,
    /// Killed with the receiving mark set.
    pub kills_mid_receive: u64,
    pub stops: u64,
    pub servers_started: u64,
    pub servers_left: u64,
    pub queues_made: u64,
    pub queues_unlinked: u64,
    /// Queues whose drain ran out of time (the supervisor took what was left).
    pub queues_drained_by_supervisor: u64,
    /// Queue names of this run that still exist after it (must be 0).
    pub queues_left_behind: u64,
    /// SIGALRMs handled by the servers.
    pub signals: u64,
}

#[derive(Debug, Default, Serialize)]
pub struct Row {
    pub backend: &'static str,
    pub minutes: f64,
    pub servers: usize,
    pub queues: usize,
    pub rate: u32,
    pub deadline_ms: u64,
    pub seed: u64,
    pub plan: String,
    pub quiet_churn: bool,
    pub seconds: f64,
    #[serde(flatten)]
    pub fates: Fates,
    pub churn: Churn,
    pub quiet: Rates,
    pub load: Rates,
    pub start: Option<Census>,
    pub after_cycle: Option<Census>,
    pub end: Option<Census>,
    pub shm_before: ShmObjects,
    pub shm_after: ShmObjects,
    pub growth: Vec<String>,
    pub injected: Option<String>,
    pub failure: Option<String>,
}

impl Row {
    /// Whether the backend passed: nothing lost, duplicated or phantom, and the run completed.
    pub fn passed(&self) -> bool {
        self.fates.lost == 0
            && self.fates.duplicated == 0
            && self.fates.bad_ids == 0
            && self.failure.is_none()
    }

    /// The censuses taken, in order, with their names.
    fn censuses(&self) -> Vec<(&'static str, &Census)> {
        [
            ("at start", &self.start),
            ("after cycle 1", &self.after_cycle),
            ("at end", &self.end),
        ]
        .into_iter()
        .filter_map(|(name, c)| c.as_ref().map(|c| (name, c)))
        .collect()
    }

    /// Growth: a figure at the end above what it was both at the start and after the first
    /// cycle (the servers' descriptors by more than 1 on average, as an emulated member holds
    /// one pidfd per member it depends on; the supervisor's descriptors, the objects mapped and
    /// the run's /dev/shm objects by any; memory by more than a quarter and 1 MiB), and whatever
    /// the cleanup left. A run of one cycle has no census after a cycle: its first servers
    /// joined a fresh group and had seen no death, unlike any later ones, so only its /dev/shm
    /// objects are judged.
    pub fn find_growth(&mut self) {
        let mut growth = Vec::new();
        if let (Some(end), Some(cycle)) = (&self.end, &self.after_cycle) {
            let before: Vec<&Census> = self.start.iter().chain([cycle]).collect();
            let most = |f: &Figure| before.iter().map(|c| f(c)).fold(0.0, f64::max);
            let mut check = |what: &str, f: &Figure, slack: &dyn Fn(f64) -> f64| {
                let (was, is) = (most(f), f(end));
                if is > slack(was) {
                    growth.push(format!("{what} {was:.1}→{is:.1}"));
                }
            };
            let exact = |x: f64| x;
            let memory = |x: f64| x * 1.25 + 1024.0;
            let descriptors = |x: f64| x + 1.0;
            check(
                "descriptors per server (mean)",
                &|c| c.server_descriptors.mean,
                &descriptors,
            );
            check(
                "supervisor descriptors",
                &|c| c.supervisor_descriptors() as f64,
                &exact,
            );
            check(
                "memory per server (mean KiB)",
                &|c| c.server_rss_kib.mean,
                &memory,
            );
            check(
                "supervisor memory (KiB)",
                &|c| c.supervisor.rss_kib as f64,
                &memory,
            );
            check(
                "shm objects mapped per server",
                &|c| c.server_shm_mapped.max as f64,
                &exact,
            );
        }
        if let (Some(start), Some(end)) = (&self.start, &self.end) {
            if end.shm.this_run > start.shm.this_run {
                growth.push(format!(
                    "/dev/shm objects {}→{}",
                    start.shm.this_run, end.shm.this_run
                ));
            }
        }
        if self.shm_after.this_run > self.shm_before.this_run {
            growth.push(format!(
                "{} /dev/shm objects left after cleanup",
                self.shm_after.this_run
            ));
        }
        if self.churn.queues_left_behind > 0 {
            growth.push(format!(
                "{} queues left after cleanup",
                self.churn.queues_left_behind
            ));
        }
        self.growth = growth;
    }

    /// The run's table.
    pub fn print_details(&self) {
        let f = &self.fates;
        let c = &self.churn;
        println!(
            "{}: {:.1} s; {} requests sent ({} refused: queue full), {} read, {} lost ({} \
             stranded, {} vanished of which {} taken by killed servers), {} duplicated, {} \
             unserved",
            self.backend,
            self.seconds,
            f.sent,
            f.refused,
            f.read,
            f.lost,
            f.stranded,
            f.vanished,
            f.taken_by_killed,
            f.duplicated,
            f.unserved
        );
        if f.bad_ids > 0 {
            println!(
                "  {} reads of ids never sent (counted as duplicated)",
                f.bad_ids
            );
        }
        println!(
            "  churn: {} kills ({} mid-receive), {} stops of 100 ms, {} servers started, {} \
             left when told, {} queues made, {} unlinked ({} drained by the supervisor), {} \
             SIGALRMs handled",
            c.kills,
            c.kills_mid_receive,
            c.stops,
            c.servers_started,
            c.servers_left,
            c.queues_made,
            c.queues_unlinked,
            c.queues_drained_by_supervisor,
            c.signals
        );
        let l = &f.latency;
        println!(
            "  arrival to read: median {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, worst {:.2} ms; \
             {} late (after {} ms)",
            l.median_ms, l.p99_ms, l.p999_ms, l.worst_ms, f.late, self.deadline_ms
        );
        for (name, r) in [("quiet", &self.quiet), ("loaded", &self.load)] {
            println!(
                "  {name}: {} kernel wake-ups per server per second ({} of them the loop's 50 \
                 ms timeouts, {} signals; {} beyond), over {:.0} server-seconds",
                fmt(r.wakeups_per_second()),
                fmt(r.timeouts_per_second()),
                fmt(r.interrupted_per_second()),
                fmt(r.beyond_per_second()),
                r.server_seconds
            );
        }
        let censuses = self.censuses();
        if !censuses.is_empty() {
            let names: Vec<&str> = censuses.iter().map(|c| c.0).collect();
            println!("  | per process | {} |", names.join(" | "));
            println!("  |---|{}", "---|".repeat(names.len()));
            let spread = |s: &Spread| format!("{}–{} (mean {:.1})", s.min, s.max, s.mean);
            let mib = |s: &Spread| {
                format!(
                    "{:.1} ({:.1}–{:.1})",
                    s.mean / 1024.0,
                    s.min as f64 / 1024.0,
                    s.max as f64 / 1024.0
                )
            };
            let rows: [Line<'_>; 7] = [
                ("servers measured", &|c| {
                    c.server_descriptors.processes.to_string()
                }),
                ("descriptors per server", &|c| spread(&c.server_descriptors)),
                (
                    "VmRSS − RssShmem per server, MiB: mean (min–max)",
                    &|c| mib(&c.server_rss_kib),
                ),
                ("/dev/shm objects mapped per server", &|c| {
                    spread(&c.server_shm_mapped)
                }),
                ("supervisor descriptors besides its queues'", &|c| {
                    c.supervisor_descriptors().to_string()
                }),
                ("supervisor VmRSS − RssShmem, MiB", &|c| {
                    format!("{:.1}", c.supervisor.rss_kib as f64 / 1024.0)
                }),
                ("/dev/shm: this run's / herdless.* / all", &|c| shm(&c.shm)),
            ];
            for (what, cell) in rows {
                let cells: Vec<String> = censuses.iter().map(|(_, c)| cell(c)).collect();
                println!("  | {what} | {} |", cells.join(" | "));
            }
            println!(
                "  /dev/shm before the run: {}; after its cleanup: {}; queue names of the run \
                 left: {}; growth: {}",
                shm(&self.shm_before),
                shm(&self.shm_after),
                c.queues_left_behind,
                self.growth_text()
            );
        }
        if let Some(what) = &self.injected {
            println!("  INJECTED FAULT: {what}");
        }
        if let Some(why) = &self.failure {
            println!("  FAILED: {why}");
        }
    }

    fn growth_text(&self) -> String {
        let mut text = match self.growth.is_empty() {
            true => "none".to_string(),
            false => self.growth.join(", "),
        };
        if self.end.is_some() && self.after_cycle.is_none() {
            text.push_str(" (one cycle: per-process figures not judged)");
        }
        text
    }

    /// `native: lost L, duplicated D, late T, worst arrival-to-read X ms, quiet wake-ups W per
    /// server per second (B beyond the 50 ms timeouts), ...`
    pub fn final_line(&self) -> String {
        let f = &self.fates;
        let (d, m, s) = match (&self.start, &self.end) {
            (Some(a), Some(b)) => (
                format!(
                    "{:.1}→{:.1}",
                    a.server_descriptors.mean, b.server_descriptors.mean
                ),
                format!(
                    "{:.1}→{:.1} MiB",
                    a.server_rss_kib.mean / 1024.0,
                    b.server_rss_kib.mean / 1024.0
                ),
                format!("{}→{}", a.shm.this_run, b.shm.this_run),
            ),
            _ => ("n/a".into(), "n/a".into(), "n/a".into()),
        };
        let mut line = format!(
            "{}: lost {}, duplicated {}, late {}, worst arrival-to-read {:.2} ms, quiet wake-ups \
             {} per server per second ({} beyond the 50 ms timeouts), taken by killed servers \
             {}, refused {}, requests {}, descriptors per server {d}, memory per server {m}, \
             /dev/shm objects {s} ({} after cleanup), growth: {}",
            self.backend,
            f.lost,
            f.duplicated + f.bad_ids,
            f.late,
            f.latency.worst_ms,
            fmt(self.quiet.wakeups_per_second()),
            fmt(self.quiet.beyond_per_second()),
            f.taken_by_killed,
            f.refused,
            f.sent,
            self.shm_after.this_run,
            self.growth_text()
        );
        if let Some(why) = &self.failure {
            line.push_str(&format!(", FAILED: {why}"));
        }
        line
    }
}

/// One figure of a census, as a number to compare.
type Figure = dyn Fn(&Census) -> f64;

/// A line of the per-process table: its name and how each census fills its cell.
type Line<'a> = (&'a str, &'a dyn Fn(&Census) -> String);

fn shm(s: &ShmObjects) -> String {
    format!("{} / {} / {}", s.this_run, s.herdless, s.all)
}

fn fmt(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.2}"))
}
