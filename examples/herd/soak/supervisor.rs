//! One backend's soak, from the supervisor's side: it builds the named group
//! (`Group::builder().name(..)`, the run's own name, removed at the end), the ledger and the
//! first queues and homes (`plan`), waits until every first server is ready, then runs the
//! timetable: the client on while loaded, the servers' signals on while loaded, and every
//! second (while loaded only, with `--quiet-churn false`) the churn — a random server
//! SIGKILLed and a replacement exec'd into its home, another SIGSTOPped for 100 ms, a new home
//! exec'd with a new queue (once one of its servers is ready the pending queue becomes active
//! and the oldest active one is retired). Between ticks, every 5 ms, it reaps the servers that
//! ended, notes the ones that became ready, resumes the stopped ones, moves the queues along (a
//! retired queue is unlinked once its servers emptied it, or after 2 s the supervisor takes
//! what is left, marked stranded) and tells a home whose queues are both gone to leave. Every
//! wait is bounded: a server not ready within 20 s, or not gone 5 s after it was told to leave,
//! is killed and fails the run. The censuses: at the start, after the first cycle, at the end.
//! At the end: traffic off, every queue retired and drained (the same 2 s rule), the end
//! census, every server told to leave, the fates counted. Anything that fails a server or the
//! client ends the run early, reported as the run's failure, with the counts so far.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use herdless::{Backend, Group};

use super::fleet::{Exit, Fleet};
use super::guard;
use super::ledger::{Ledger, Phase, STRANDED, UNSERVED};
use super::plan::{Layout, Plan};
use super::probe::{Census, ShmObjects};
use super::queues::{self, ServiceQueue};
use super::report::{Churn, Fates, Row};
use super::traffic::Traffic;
use super::wakeups::Sampler;
use super::Fault;

/// How long a new server may take to be ready.
const START_LIMIT: Duration = Duration::from_secs(20);
/// How long a server told to leave may take to be gone.
const LEAVE_LIMIT: Duration = Duration::from_secs(5);
/// How long the servers of a retired queue have to empty it.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);
/// The supervisor's step between its looks.
const STEP: Duration = Duration::from_millis(5);
/// How long a stopped server stays stopped.
const STOP_FOR: Duration = Duration::from_millis(100);
/// Progress lines on stderr, this often.
const PROGRESS: Duration = Duration::from_secs(10);

/// The run's settings, checked.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub minutes: f64,
    pub layout: Layout,
    pub plan: Plan,
    pub rate: u32,
    pub deadline: Duration,
    pub seed: u64,
    pub inject: Option<Fault>,
    /// Whether the churn goes on while quiet (`--quiet-churn`).
    pub quiet_churn: bool,
}

impl Settings {
    /// Server slots the ledger needs: the first servers, then per tick a replacement and a home.
    fn slots(&self) -> usize {
        let ticks = self.plan.total.as_secs() as usize + 2;
        self.layout.servers + ticks * (1 + self.layout.most_in_a_home()) + 16
    }

    /// Request records the ledger needs: the loaded seconds at the rate, with room.
    fn records(&self) -> usize {
        let loaded = (self.plan.load * self.plan.cycles).as_secs_f64() + 2.0;
        (f64::from(self.rate) * loaded * 1.1) as usize + 1000
    }

    /// The group's member slots: the live servers, a home starting and one leaving, spares.
    fn members(&self) -> usize {
        let most = 2 * self.layout.servers + 2 * self.layout.most_in_a_home() + 8;
        most.clamp(16, herdless::MAX_MEMBERS_LIMIT)
    }

    /// How long one backend's run may take before the watchdog ends it.
    pub fn bound(&self) -> Duration {
        self.plan.total + START_LIMIT * 2 + DRAIN_LIMIT * 2 + LEAVE_LIMIT + Duration::from_secs(30)
    }
}

/// Runs one backend and returns its row (failures in it, not as an error).
pub fn run(s: &Settings, backend: Backend, tag: &'static str) -> Row {
    let prefix = format!("herdless.lab.soak.{}.", std::process::id());
    let mut row = Row {
        backend: tag,
        minutes: s.minutes,
        servers: s.layout.servers,
        queues: s.layout.queues,
        rate: s.rate,
        deadline_ms: s.deadline.as_millis() as u64,
        seed: s.seed,
        plan: s.plan.describe(),
        quiet_churn: s.quiet_churn,
        injected: s.inject.map(|f| f.describe().to_owned()),
        shm_before: ShmObjects::count(&prefix),
        ..Row::default()
    };
    let began = Instant::now();
    let watchdog = guard::Watchdog::start(s.bound());
    let made = soak(s, backend, tag, &prefix, &mut row);
    watchdog.stop();
    if let Err(e) = made {
        row.failure.get_or_insert(e);
    }
    row.seconds = began.elapsed().as_secs_f64();
    row.shm_after = ShmObjects::count(&prefix);
    row.churn.queues_left_behind = (0..row.churn.queues_made)
        .filter(|&n| queues::exists(&queues::name(tag, n)))
        .count() as u64;
    row.find_growth();
    row
}

/// The run, with everything it makes dropped (servers killed and reaped, queues unlinked, the
/// group removed) before it returns.
fn soak(
    s: &Settings,
    backend: Backend,
    tag: &'static str,
    prefix: &str,
    row: &mut Row,
) -> Result<(), String> {
    let builder = Group::builder().backend(backend).max_members(s.members());
    let group = crate::exec::RunGroup::build("soak", builder)
        .map_err(|e| format!("DID NOT RUN: the named group: {e}"))?;
    guard::remember(true, group.name());
    let ledger = Ledger::create(s.slots(), s.records()).map_err(|e| format!("the ledger: {e}"))?;
    let traffic = Traffic::default();
    let result = std::thread::scope(|scope| {
        let _end = EndTraffic(&traffic);
        scope.spawn(|| traffic.run(&ledger, s.rate, s.deadline));
        let mut soak = Soak::new(s, tag, &ledger, &traffic, group.name());
        let result = soak.run(prefix, row);
        row.churn = soak.churn;
        row.quiet = soak.sampler.quiet;
        row.load = soak.sampler.load;
        let servers = soak.fleet.started();
        row.fates = Fates::tally(&ledger, &soak.corpses, servers, s.deadline);
        if let Some(e) = soak.failure.take() {
            row.failure.get_or_insert(e);
        }
        result
    });
    let name = group.name().to_owned();
    drop(group);
    guard::forget(&name);
    result
}

/// Ends the client thread however the scope ends.
struct EndTraffic<'a>(&'a Traffic);

impl Drop for EndTraffic<'_> {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// Where a queue is in its life (unlinked queues are gone from the map).
enum Life {
    Pending,
    Active,
    Draining(Instant),
}

struct Queue {
    queue: ServiceQueue,
    life: Life,
}

struct Soak<'a> {
    s: &'a Settings,
    tag: &'static str,
    ledger: &'a Ledger,
    traffic: &'a Traffic,
    fleet: Fleet<'a>,
    queues: BTreeMap<u64, Queue>,
    next_queue: u64,
    /// Homes not told to leave.
    homes: BTreeSet<u64>,
    /// Servers of each queue killed with their receiving mark set.
    corpses: HashMap<u64, u64>,
    churn: Churn,
    sampler: Sampler,
    rng: Rng,
    failure: Option<String>,
}

impl<'a> Soak<'a> {
    fn new(
        s: &'a Settings,
        tag: &'static str,
        ledger: &'a Ledger,
        traffic: &'a Traffic,
        group: &str,
    ) -> Soak<'a> {
        Soak {
            s,
            tag,
            ledger,
            traffic,
            fleet: Fleet::new(ledger, group, s.inject),
            queues: BTreeMap::new(),
            next_queue: 0,
            homes: BTreeSet::new(),
            corpses: HashMap::new(),
            churn: Churn::default(),
            sampler: Sampler::default(),
            rng: Rng(s.seed | 1),
            failure: None,
        }
    }

    fn fail(&mut self, why: String) {
        self.failure.get_or_insert(why);
    }

    fn stopping(&self) -> bool {
        self.failure.is_some() || guard::must_stop()
    }

    fn run(&mut self, prefix: &str, row: &mut Row) -> Result<(), String> {
        let q = self.s.layout.queues as u64;
        for _ in 0..q + 2 {
            self.make_queue()?;
        }
        for home in 0..=q {
            self.start_home(home)?;
        }
        // Until every first server is ready (bounded by the start limit of each).
        while !self.stopping() && self.fleet.live.iter().any(|s| s.ready_at.is_none()) {
            self.look(Instant::now(), false);
            std::thread::sleep(STEP);
        }
        if let Some(first) = self.queues.get_mut(&0) {
            first.life = Life::Draining(Instant::now()); // home -1 does not exist
        }
        self.move_queues(Instant::now(), true);
        row.start = Some(Census::take(
            &self.serving_pids(),
            self.queues.len(),
            prefix,
        ));
        self.timetable(prefix, row);
        self.finish(prefix, row);
        Ok(())
    }

    /// The timetable: phases, ticks, samples, until the end or a failure; the census after the
    /// first cycle.
    fn timetable(&mut self, prefix: &str, row: &mut Row) {
        let plan = self.s.plan;
        let t0 = Instant::now();
        let (mut phase, mut phase_began) = (Phase::Load, t0);
        self.ledger.set_phase(phase);
        self.traffic.set_on(true);
        let second = Duration::from_secs(1);
        let (mut next_tick, mut next_sample) = (t0 + second, t0 + second / 2);
        let mut next_progress = t0 + PROGRESS;
        while !self.stopping() {
            let now = Instant::now();
            let t = now - t0;
            let p = plan.phase_at(t);
            if p == Phase::End {
                break;
            }
            if p != phase {
                if p == Phase::Load && row.after_cycle.is_none() {
                    let queues = self.queues.len();
                    row.after_cycle = Some(Census::take(&self.serving_pids(), queues, prefix));
                }
                (phase, phase_began) = (p, t0 + plan.phase_began(t));
                self.ledger.set_phase(p);
                self.traffic.set_on(p == Phase::Load);
            }
            self.look(now, true);
            if now >= next_tick {
                if phase == Phase::Load || self.s.quiet_churn {
                    self.tick(now);
                }
                next_tick += second;
            }
            if now >= next_sample {
                let live = &self.fleet.live;
                self.sampler
                    .sample(live, self.ledger, phase, phase_began, now);
                next_sample += second;
            }
            if now >= next_progress {
                self.progress(t);
                next_progress += PROGRESS;
            }
            std::thread::sleep(STEP);
        }
    }

    /// The end: traffic off, every queue drained, the end census, every server gone.
    fn finish(&mut self, prefix: &str, row: &mut Row) {
        self.traffic.set_on(false);
        self.ledger.set_phase(Phase::Quiet);
        self.fleet.resume_due(Instant::now(), true);
        let now = Instant::now();
        for (&no, q) in &mut self.queues {
            if !matches!(q.life, Life::Draining(_)) {
                self.traffic.retire(no);
                q.life = Life::Draining(now);
            }
        }
        let bound = now + DRAIN_LIMIT * 3;
        while !self.queues.is_empty() && Instant::now() < bound {
            self.look(Instant::now(), false);
            std::thread::sleep(STEP);
        }
        row.end = Some(Census::take(
            &self.serving_pids(),
            self.queues.len(),
            prefix,
        ));
        self.ledger.set_phase(Phase::End);
        let bound = Instant::now() + LEAVE_LIMIT;
        while !self.fleet.live.is_empty() && Instant::now() < bound {
            self.reap();
            std::thread::sleep(STEP);
        }
        for i in 0..self.fleet.live.len() {
            let slot = self.fleet.live[i].slot;
            self.fail(format!(
                "server {slot} did not leave within {LEAVE_LIMIT:?} of the end"
            ));
            self.fleet.kill(i);
        }
        let bound = Instant::now() + LEAVE_LIMIT;
        while !self.fleet.live.is_empty() && Instant::now() < bound {
            self.reap();
            std::thread::sleep(STEP);
        }
        // What is left is unlinked when the map is dropped; count it as unlinked now.
        self.churn.queues_unlinked += self.queues.len() as u64;
        self.queues.clear();
        self.churn.servers_started = self.fleet.started() as u64;
    }

    fn serving_pids(&self) -> Vec<u32> {
        self.fleet
            .live
            .iter()
            .filter(|s| s.serving() && s.stopped_until.is_none())
            .map(|s| s.pid)
            .collect()
    }

    /// One look between ticks: exits, readiness, overdue servers, stopped ones, the queues.
    fn look(&mut self, now: Instant, churning: bool) {
        self.reap();
        self.fleet.note_ready(now);
        self.overdue(now);
        self.fleet.resume_due(now, false);
        self.move_queues(now, churning);
        if let Some(e) = self.traffic.error() {
            self.fail(format!("the client: {e}"));
        }
    }

    fn reap(&mut self) {
        for (server, exit) in self.fleet.reap() {
            let slot = self.ledger.slot(server.slot);
            self.churn.signals += slot.signals().load(SeqCst);
            let what = format!("server {} (queues {:?})", server.slot, server.queues);
            match exit {
                Exit::Killed { receiving } => {
                    if let Some(q) = receiving {
                        *self.corpses.entry(q).or_default() += 1;
                        self.churn.kills_mid_receive += 1;
                    }
                }
                Exit::Left => self.churn.servers_left += 1,
                Exit::Failed(e) => self.fail(format!("{what} failed: {e}")),
                Exit::Unexpected(status) => self.fail(format!("{what} ended: {status}")),
            }
        }
    }

    fn overdue(&mut self, now: Instant) {
        for i in 0..self.fleet.live.len() {
            let s = &self.fleet.live[i];
            if s.killed {
                continue;
            }
            let why = if s.ready_at.is_none() && now - s.started > START_LIMIT {
                format!("server {} was not ready within {START_LIMIT:?}", s.slot)
            } else if s.leaving.is_some_and(|t| now - t > LEAVE_LIMIT) {
                format!("server {} did not leave within {LEAVE_LIMIT:?}", s.slot)
            } else {
                continue;
            };
            self.fail(why);
            self.fleet.kill(i);
        }
    }

    /// Activates pending queues whose two homes have a ready server (retiring the oldest active
    /// one for each), unlinks drained queues, and tells homes whose queues are gone to leave.
    fn move_queues(&mut self, now: Instant, churning: bool) {
        let pending: Vec<u64> = self
            .queues
            .iter()
            .filter(|(_, q)| matches!(q.life, Life::Pending))
            .map(|(&no, _)| no)
            .collect();
        for no in pending {
            if !churning || no == 0 || !self.home_ready(no - 1) || !self.home_ready(no) {
                break; // in order: a queue activates only after the ones before it
            }
            let q = self.queues.get_mut(&no).expect("pending");
            q.life = Life::Active;
            self.traffic.activate(no, q.queue.raw_fd());
            let active: Vec<u64> = self.traffic.active();
            if active.len() > self.s.layout.queues {
                let oldest = *active.iter().min().expect("not empty");
                self.traffic.retire(oldest);
                if let Some(q) = self.queues.get_mut(&oldest) {
                    q.life = Life::Draining(now);
                }
            }
        }
        let draining: Vec<(u64, Instant)> = self
            .queues
            .iter()
            .filter_map(|(&no, q)| match q.life {
                Life::Draining(since) => Some((no, since)),
                _ => None,
            })
            .collect();
        for (no, since) in draining {
            let depth = match self.queues[&no].queue.depth() {
                Ok(d) => d,
                Err(e) => {
                    self.fail(format!("queue {no}: mq_getattr: {e}"));
                    continue;
                }
            };
            if depth > 0 && now - since < DRAIN_LIMIT {
                continue;
            }
            if depth > 0 {
                self.take_leftovers(no);
            }
            self.queues.remove(&no); // unlinks it
            self.churn.queues_unlinked += 1;
        }
        if !churning {
            return;
        }
        let gone: Vec<u64> = self
            .homes
            .iter()
            .copied()
            .filter(|&h| {
                let [a, b] = Layout::queues_of(h);
                b < self.next_queue
                    && !self.queues.contains_key(&a)
                    && !self.queues.contains_key(&b)
            })
            .collect();
        for home in gone {
            self.homes.remove(&home);
            for i in 0..self.fleet.live.len() {
                if self.fleet.live[i].home == home {
                    self.fleet.tell_to_leave(i, now);
                }
            }
        }
    }

    /// The drain ran out of time: the supervisor takes what is left, marked stranded (a server
    /// of the queue is alive) or unserved (none is).
    fn take_leftovers(&mut self, no: u64) {
        let served = self
            .fleet
            .live
            .iter()
            .any(|s| s.queues.contains(&no) && s.ready_at.is_some() && !s.killed);
        let flag = if served { STRANDED } else { UNSERVED };
        self.churn.queues_drained_by_supervisor += 1;
        loop {
            match self.queues[&no].queue.take() {
                Ok(Some((id, _))) => match self.ledger.record(id) {
                    Some(r) => r.flag(flag),
                    None => self.fail(format!("queue {no} held id {id}, never given out")),
                },
                Ok(None) => break,
                Err(e) => {
                    self.fail(format!("queue {no}: taking what was left: {e}"));
                    break;
                }
            }
        }
    }

    fn home_ready(&self, home: u64) -> bool {
        self.homes.contains(&home)
            && self
                .fleet
                .live
                .iter()
                .any(|s| s.home == home && s.serving())
    }

    /// Every second: a kill and its replacement, a stop, a new home with a new queue.
    fn tick(&mut self, now: Instant) {
        let killable: Vec<usize> = (0..self.fleet.live.len())
            .filter(|&i| {
                let s = &self.fleet.live[i];
                !s.killed
                    && s.leaving.is_none()
                    && s.stopped_until.is_none()
                    && self.homes.contains(&s.home)
            })
            .collect();
        let mut victim = None;
        if let Some(&i) = self.rng.pick(&killable) {
            let home = self.fleet.live[i].home;
            victim = Some(self.fleet.live[i].pid);
            self.fleet.kill(i);
            self.churn.kills += 1;
            if let Err(e) = self.start_server(home) {
                self.fail(e);
            }
        }
        let stoppable: Vec<usize> = (0..self.fleet.live.len())
            .filter(|&i| {
                let s = &self.fleet.live[i];
                s.serving() && s.stopped_until.is_none() && Some(s.pid) != victim
            })
            .collect();
        if let Some(&i) = self.rng.pick(&stoppable) {
            self.fleet.stop(i, now + STOP_FOR);
            self.churn.stops += 1;
        }
        let home = self.next_queue - 1; // it serves the pending queue and the one made now
        let made = self.make_queue().and_then(|()| self.start_home(home));
        if let Err(e) = made {
            self.fail(e);
        }
    }

    fn make_queue(&mut self) -> Result<(), String> {
        let no = self.next_queue;
        let queue = ServiceQueue::create(self.tag, no)
            .map_err(|e| format!("mq_open of queue {no}: {e}"))?;
        self.queues.insert(
            no,
            Queue {
                queue,
                life: Life::Pending,
            },
        );
        self.next_queue += 1;
        self.churn.queues_made += 1;
        Ok(())
    }

    fn start_home(&mut self, home: u64) -> Result<(), String> {
        self.homes.insert(home);
        for _ in 0..self.s.layout.servers_in(home) {
            self.start_server(home)?;
        }
        Ok(())
    }

    /// Execs a server for `home`: its queues that are not unlinked yet (a retired queue is
    /// not in a new server's set).
    fn start_server(&mut self, home: u64) -> Result<(), String> {
        let set = Layout::queues_of(home)
            .into_iter()
            .filter(|n| self.queues.contains_key(n))
            .map(|n| (n, queues::name(self.tag, n)))
            .collect::<Vec<_>>();
        match set.is_empty() {
            true => Ok(()), // the home is leaving: nothing left to serve
            false => self.fleet.start(home, set),
        }
    }

    fn progress(&self, t: Duration) {
        let taken = self.ledger.ids_taken();
        let read = (0..self.ledger.slots())
            .take(self.fleet.started())
            .map(|i| self.ledger.slot(i).reads().load(SeqCst))
            .sum::<u64>();
        eprintln!(
            "  {} {:.0} s: {taken} requests sent, {read} read, {} kills, {} live servers, active \
             queues {:?}",
            self.tag,
            t.as_secs_f64(),
            self.churn.kills,
            self.fleet.live.len(),
            self.traffic.active()
        );
    }
}

/// xorshift64*: the churn's choices, reproducible from `--seed`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn pick<'v, T>(&mut self, from: &'v [T]) -> Option<&'v T> {
        match from.len() {
            0 => None,
            n => from.get((self.next() % n as u64) as usize),
        }
    }
}
