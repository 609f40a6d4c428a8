//! The servers' kernel wake-ups per second, loaded and quiet. Once a second the supervisor reads
//! every live server's voluntary context switches (all its threads, `/proc/<pid>/task/*/status`)
//! and its ledger counters (waits ended by the 50 ms timeout, waits a signal interrupted). An
//! interval between two readings counts for a server only if the whole interval lies in one
//! phase, at least 0.5 s after the phase began, and the server was ready for at least 1 s
//! before it (not just started: its start-up and join are not charged), was not stopped since
//! the previous reading, and was neither killed nor told to leave. The churn goes on through
//! the quiet phases by default (a supervisor restarts crashed servers at night too), so the
//! quiet figure includes the wake-ups that a death, a join or a leave of another member
//! legitimately costs (`--quiet-churn false` keeps the quiet phases calm); the loop's own
//! timeouts are counted apart, and `beyond` is what is left once they and the signals are taken
//! away: the library's own wake-ups.

use std::collections::HashMap;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::fleet::Server;
use super::ledger::{Ledger, Phase};
use super::probe;

/// How long into a phase before its intervals count.
const SETTLE: Duration = Duration::from_millis(500);
/// How long a server must have been ready before its intervals count.
const YOUNG: Duration = Duration::from_secs(1);

#[derive(Clone, Copy)]
struct Reading {
    at: Instant,
    phase: Phase,
    phase_began: Instant,
    wakeups: u64,
    timeouts: u64,
    interrupted: u64,
}

/// Sums over the intervals that counted, for one phase.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Rates {
    pub server_seconds: f64,
    pub wakeups: u64,
    pub timeouts: u64,
    pub interrupted: u64,
}

impl Rates {
    fn per_second(&self, n: u64) -> Option<f64> {
        (self.server_seconds > 0.0).then(|| n as f64 / self.server_seconds)
    }

    /// Kernel wake-ups per server per second.
    pub fn wakeups_per_second(&self) -> Option<f64> {
        self.per_second(self.wakeups)
    }

    /// Waits ended by the loop's own timeout, per server per second.
    pub fn timeouts_per_second(&self) -> Option<f64> {
        self.per_second(self.timeouts)
    }

    /// Waits a signal interrupted, per server per second.
    pub fn interrupted_per_second(&self) -> Option<f64> {
        self.per_second(self.interrupted)
    }

    /// Wake-ups beyond the loop's timeouts and the signals, per server per second.
    pub fn beyond_per_second(&self) -> Option<f64> {
        let own = self.timeouts + self.interrupted;
        self.per_second(self.wakeups.saturating_sub(own))
    }
}

#[derive(Default)]
pub struct Sampler {
    last: HashMap<usize, Reading>,
    pub quiet: Rates,
    pub load: Rates,
}

impl Sampler {
    /// Reads every live server now; adds the intervals since their last reading that count.
    pub fn sample(
        &mut self,
        servers: &[Server],
        ledger: &Ledger,
        phase: Phase,
        phase_began: Instant,
        now: Instant,
    ) {
        let mut seen = HashMap::new();
        for s in servers {
            let Some(wakeups) = probe::wakeups(s.pid) else {
                continue;
            };
            let slot = ledger.slot(s.slot);
            let reading = Reading {
                at: now,
                phase,
                phase_began,
                wakeups,
                timeouts: slot.timeouts().load(SeqCst),
                interrupted: slot.interrupted().load(SeqCst),
            };
            if let Some(prev) = self.last.get(&s.slot) {
                let counts = prev.phase == phase
                    && prev.phase_began == phase_began
                    && prev.at >= phase_began + SETTLE
                    && s.ready_at.is_some_and(|r| r + YOUNG <= prev.at)
                    && s.last_stopped.is_none_or(|t| t < prev.at)
                    && s.stopped_until.is_none()
                    && s.serving();
                let rates = match phase {
                    Phase::Load => Some(&mut self.load),
                    Phase::Quiet => Some(&mut self.quiet),
                    Phase::End => None,
                };
                if let (true, Some(rates)) = (counts, rates) {
                    rates.server_seconds += (now - prev.at).as_secs_f64();
                    rates.wakeups += reading.wakeups.saturating_sub(prev.wakeups);
                    rates.timeouts += reading.timeouts.saturating_sub(prev.timeouts);
                    rates.interrupted += reading.interrupted.saturating_sub(prev.interrupted);
                }
            }
            seen.insert(s.slot, reading);
        }
        self.last = seen;
    }
}
