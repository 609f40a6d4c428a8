//! The soak's timetable and its service layout, decided before anything runs.
//!
//! **Timetable.** A run of `--minutes` M is cut into cycles (⌈2M⌉, at least 1, at most 6), each
//! two thirds load then one third quiet: M = 1 is 20 s load, 10 s quiet, twice (40 s of load,
//! 20 s of quiet); M = 30 is six cycles of 200 s load and 100 s quiet. The churn (a kill, a
//! stop, a queue made and one retired) runs every second through both phases (through the load
//! phases only with `--quiet-churn false`).
//!
//! **Layout.** Queues are numbered in the order they are made; *home* h is the group of
//! servers that serve queues h and h + 1, so neighbouring homes share a queue (server A {q1,
//! q2}, B {q2, q3}, ...). The live homes are a sliding window of `--queues` + 1 homes; a queue
//! between two live homes is *active* (it gets traffic), the newest queue has one home so far
//! (*pending*), the oldest is *draining*. Every second a home is added with a new queue (when
//! its servers are ready the pending queue becomes active and the oldest active one is
//! retired), and the oldest home leaves once both its queues are drained and unlinked. So
//! every queue has live servers from the moment it is made until it is unlinked, and every
//! active queue has two homes. `--servers` S are spread over the window's homes (S / (Q + 1)
//! each, the remainder one more each), so S servers are live besides the home being added or
//! leaving.

use std::time::Duration;

use super::ledger::Phase;

/// When the load and the quiet phases are.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub total: Duration,
    pub cycles: u32,
    pub load: Duration,
    pub quiet: Duration,
}

impl Plan {
    pub fn new(minutes: f64) -> Plan {
        let total = Duration::from_secs_f64(minutes * 60.0);
        let cycles = ((minutes * 2.0).ceil() as u32).clamp(1, 6);
        let cycle = total / cycles;
        let load = cycle * 2 / 3;
        Plan {
            total,
            cycles,
            load,
            quiet: cycle - load,
        }
    }

    /// The phase at time `t` from the start.
    pub fn phase_at(&self, t: Duration) -> Phase {
        if t >= self.total {
            return Phase::End;
        }
        let cycle = self.load + self.quiet;
        let into = Duration::from_nanos((t.as_nanos() % cycle.as_nanos()) as u64);
        match into < self.load {
            true => Phase::Load,
            false => Phase::Quiet,
        }
    }

    /// When the phase running at `t` began.
    pub fn phase_began(&self, t: Duration) -> Duration {
        let cycle = self.load + self.quiet;
        let start =
            Duration::from_nanos((t.as_nanos() / cycle.as_nanos() * cycle.as_nanos()) as u64);
        match self.phase_at(t) {
            Phase::Quiet => start + self.load,
            _ => start,
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "{} cycle{} of {:.0} s load + {:.0} s quiet",
            self.cycles,
            if self.cycles == 1 { "" } else { "s" },
            self.load.as_secs_f64(),
            self.quiet.as_secs_f64()
        )
    }
}

/// Which servers serve which queues.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Active queues (`--queues`).
    pub queues: usize,
    /// Live servers (`--servers`).
    pub servers: usize,
}

impl Layout {
    /// Live homes in the window.
    pub fn homes(&self) -> usize {
        self.queues + 1
    }

    /// The two queues home `home` serves.
    pub fn queues_of(home: u64) -> [u64; 2] {
        [home, home + 1]
    }

    /// How many servers home `home` has: any `homes()` consecutive homes have `servers` in all.
    pub fn servers_in(&self, home: u64) -> usize {
        let homes = self.homes();
        let extra = (home % homes as u64) < (self.servers % homes) as u64;
        self.servers / homes + usize::from(extra)
    }

    /// Servers per home at most.
    pub fn most_in_a_home(&self) -> usize {
        self.servers.div_ceil(self.homes())
    }
}
