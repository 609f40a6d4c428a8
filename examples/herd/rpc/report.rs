//! What `herd rpc` prints and writes: a table with a row per (run, servers, mode), the same
//! rows as JSON, and a verdict line per herdless mode and server count against the raw flag
//! of the same run, with issue 32's targets (≤ 1.1× the raw flag's time per call, Jain ≥ 0.99,
//! natively ≤ 1 % empty wake-ups per call).

use std::path::Path;

use serde::Serialize;

use super::row::{Measured, RowSpec};
use crate::fairness::{sketch, Distribution, Spread};
use crate::herd_bench::{Mode, Refusal, Setup};

/// Issue 32's targets.
const TIME_TARGET: f64 = 1.1;
const JAIN_TARGET: f64 = 0.99;
const EMPTY_TARGET: f64 = 0.01;

/// One row as it ran.
pub struct Outcome {
    pub run: u64,
    pub spec: RowSpec,
    pub result: Result<Measured, Refusal>,
}

impl Outcome {
    fn measured(&self) -> Option<&Measured> {
        self.result.as_ref().ok()
    }
}

impl Measured {
    fn us_per_call(&self) -> f64 {
        self.seconds * 1e6 / self.calls.max(1) as f64
    }
    fn per_call(&self, n: u64) -> f64 {
        n as f64 / self.calls.max(1) as f64
    }
    /// The `q` quantile of the calls' times, in µs.
    fn call_us(&self, q: f64) -> f64 {
        let at = ((self.call_ns.len().max(1) - 1) as f64 * q).round() as usize;
        self.call_ns.get(at).copied().unwrap_or(0) as f64 / 1e3
    }
}

/// A row of the JSON file.
#[derive(Serialize)]
struct JsonRow<'a> {
    run: u64,
    servers: usize,
    #[serde(flatten)]
    setup: &'a Setup,
    calls: Option<u64>,
    stopped_by_time_cap: Option<bool>,
    seconds: Option<f64>,
    us_per_call: Option<f64>,
    call_us_min: Option<f64>,
    call_us_median: Option<f64>,
    call_us_p99: Option<f64>,
    server_cpu_us_per_call: Option<f64>,
    kernel_wakeups_per_call: Option<f64>,
    empty_wakeups_per_call: Option<f64>,
    library_empty_wakeups_per_call: Option<f64>,
    per_server: Option<&'a [u64]>,
    distribution: Option<Distribution>,
    time_vs_raw_flag: Option<f64>,
    error: Option<String>,
}

/// The rows of a run, in the order they ran.
pub struct Report {
    pub outcomes: Vec<Outcome>,
}

impl Report {
    /// This row's time per call ÷ the raw flag's at the same server count in the same run.
    fn vs_raw(&self, o: &Outcome) -> Option<f64> {
        let raw = self.outcomes.iter().find(|r| {
            r.run == o.run
                && r.spec.servers == o.spec.servers
                && r.spec.setup.mode == Mode::NativeExclusive
        })?;
        Some(o.measured()?.us_per_call() / raw.measured()?.us_per_call())
    }

    pub fn failures(&self) -> Vec<String> {
        self.outcomes
            .iter()
            .filter_map(|o| match &o.result {
                Err(Refusal::Failed(why)) => Some(format!("{}: {why}", label(o))),
                _ => None,
            })
            .collect()
    }

    pub fn print_table(&self, calls: u64) {
        println!(
            "\n## herd rpc: one client thread, {calls} calls one at a time, N server processes \
             on one POSIX service queue, replies on the client's reply queue (warm runs)\n"
        );
        println!(
            "| run | servers | mode | calls | µs/call | call µs min / p50 / p99 | server CPU µs/call \
             | kernel wake-ups/call | EAGAIN/call | stats() empty/call | max share | Jain \
             | ÷ raw flag | calls per server |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for o in &self.outcomes {
            let head = format!(
                "| {} | {} | {} |",
                o.run + 1,
                o.spec.servers,
                o.spec.setup.name()
            );
            let m = match &o.result {
                Ok(m) => m,
                Err(Refusal::Unavailable(why)) => {
                    println!("{head} did not run, not available here: {why} |");
                    continue;
                }
                Err(Refusal::Failed(why)) => {
                    println!("{head} FAILED: {why} |");
                    continue;
                }
            };
            let dist = Distribution::of(&m.per_server);
            println!(
                "{head} {}{} | {:.2} | {:.1} / {:.1} / {:.1} | {:.2} | {:.3} | {:.4} | {} | \
                 {:.3} | {:.4} | {} | {} |",
                m.calls,
                if m.stopped_by_time_cap { " †" } else { "" },
                m.us_per_call(),
                m.call_us(0.0),
                m.call_us(0.5),
                m.call_us(0.99),
                m.server_cpu_us as f64 / m.calls.max(1) as f64,
                m.per_call(m.kernel_wakeups),
                m.per_call(m.empty_wakeups),
                m.library_empty_wakeups
                    .map_or("n/a".into(), |n| format!("{:.4}", m.per_call(n))),
                dist.max_share,
                dist.jain,
                self.vs_raw(o).map_or("n/a".into(), |r| format!("{r:.2}×")),
                sketch(&m.per_server),
            );
        }
        if self
            .outcomes
            .iter()
            .any(|o| o.measured().is_some_and(|m| m.stopped_by_time_cap))
        {
            println!("\n† stopped by --time-cap: its figures are per call of the calls it made");
        }
        println!(
            "\nµs/call: the client's wall time ÷ calls. Server CPU and kernel wake-ups \
             (voluntary context switches) are getrusage(RUSAGE_CHILDREN) of the reaped servers \
             over the row, less what each had used before its first wait. EAGAIN: receives \
             that found the service queue empty; stats() empty: herdless's \
             MemberStats::empty_wakeups. ÷ raw flag: µs/call ÷ the raw flag's, same run and \
             servers."
        );
    }

    /// One line per herdless setup and server count: its time against the raw flag's (mean
    /// and min–max over the runs), its worst Jain, and its empty wake-ups, each with issue
    /// 32's target.
    pub fn verdict(&self) -> Vec<String> {
        let mut keys: Vec<(usize, Setup)> = Vec::new();
        for o in &self.outcomes {
            let key = (o.spec.servers, o.spec.setup);
            if o.spec.setup.mode.rotates() && !keys.contains(&key) {
                keys.push(key);
            }
        }
        let met = |ok: bool| if ok { "met" } else { "MISSED" };
        keys.iter()
            .filter_map(|&(servers, setup)| {
                let rows: Vec<&Outcome> = self
                    .outcomes
                    .iter()
                    .filter(|o| o.spec.servers == servers && o.spec.setup == setup)
                    .collect();
                let ratios: Vec<f64> = rows.iter().filter_map(|o| self.vs_raw(o)).collect();
                let measured: Vec<&Measured> = rows.iter().filter_map(|o| o.measured()).collect();
                if ratios.is_empty() || measured.is_empty() {
                    return None;
                }
                let ratio = Spread::of(&ratios);
                let jain = measured
                    .iter()
                    .map(|m| Distribution::of(&m.per_server).jain)
                    .fold(f64::INFINITY, f64::min);
                let empty = measured
                    .iter()
                    .map(|m| m.per_call(m.empty_wakeups))
                    .fold(0.0, f64::max);
                let native = setup.mode == Mode::NativeRr;
                Some(format!(
                    "{} at {servers} servers: {ratio}× the raw flag's time per call \
                     (≤ {TIME_TARGET} in every run: {}), Jain {jain:.4} (≥ {JAIN_TARGET}: {}), \
                     empty wake-ups {:.2} % of calls{}",
                    setup.name(),
                    met(ratio.max <= TIME_TARGET),
                    met(jain >= JAIN_TARGET),
                    empty * 100.0,
                    if native {
                        format!(" (natively ≤ 1 %: {})", met(empty <= EMPTY_TARGET))
                    } else {
                        String::new()
                    }
                ))
            })
            .collect()
    }

    pub fn print_verdict(&self) {
        println!("\n## Verdict (issue 32's targets)\n");
        for line in self.verdict() {
            println!("- {line}");
        }
    }

    pub fn write_json(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let rows: Vec<JsonRow<'_>> = self
            .outcomes
            .iter()
            .map(|o| {
                let m = o.measured();
                JsonRow {
                    run: o.run + 1,
                    servers: o.spec.servers,
                    setup: &o.spec.setup,
                    calls: m.map(|m| m.calls),
                    stopped_by_time_cap: m.map(|m| m.stopped_by_time_cap),
                    seconds: m.map(|m| m.seconds),
                    us_per_call: m.map(Measured::us_per_call),
                    call_us_min: m.map(|m| m.call_us(0.0)),
                    call_us_median: m.map(|m| m.call_us(0.5)),
                    call_us_p99: m.map(|m| m.call_us(0.99)),
                    server_cpu_us_per_call: m.map(|m| m.server_cpu_us as f64 / m.calls as f64),
                    kernel_wakeups_per_call: m.map(|m| m.per_call(m.kernel_wakeups)),
                    empty_wakeups_per_call: m.map(|m| m.per_call(m.empty_wakeups)),
                    library_empty_wakeups_per_call: m
                        .and_then(|m| m.library_empty_wakeups.map(|n| m.per_call(n))),
                    per_server: m.map(|m| m.per_server.as_slice()),
                    distribution: m.map(|m| Distribution::of(&m.per_server)),
                    time_vs_raw_flag: self.vs_raw(o),
                    error: o.result.as_ref().err().map(|e| format!("{e:?}")),
                }
            })
            .collect();
        crate::json::write_rows(Some(path), &rows)
    }
}

/// What the progress lines and failures call a row.
pub fn label(o: &Outcome) -> String {
    format!(
        "rpc {} servers={} run {}",
        o.spec.setup.name(),
        o.spec.servers,
        o.run + 1
    )
}
