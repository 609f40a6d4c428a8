//! One row of the herd benchmark: a producer, one shared pipe or message queue, W waiters.
//!
//! This is the experiment of the AIX POLLEXCL request. The producer writes 8-byte ids as fast as it can (it blocks
//! when the pipe or queue is full); each waiter waits, reads one message per wake-up, tells
//! herdless it consumed the readiness, and does the optional busy work. Waiters are threads, or
//! processes that report their figures back through a pipe: forked, or forked and exec'd
//! (`--spawn exec`: the lab re-executes itself, the waiter opens the row's named group and a
//! message queue by name, inherits the pipe, the stop, ready and report pipes and the board). The clock starts once every
//! waiter sleeps in the kernel (checked in /proc) and stops when the last data message is read:
//! the producer marks that message, and its reader stamps the time on a board in shared memory.
//!
//! Kernel wake-ups are voluntary context switches of each waiter (`RUSAGE_THREAD`, which in a
//! single-threaded child is the process's figure), from the waiter's start to its first wake-up
//! after the last data message was read; so the herd the stop signal itself causes (W mq
//! sentinels at W = 500) is not charged to the data. Empty wake-ups are reads that found nothing
//! (`EAGAIN`) in the same window; after each one the member tells herdless
//! (`Waiter::found_nothing`), and the library's own count of them (`MemberStats::empty_wakeups`,
//! read by each member at the window's end) is reported beside the members' count. A watchdog bounds every row: if it overruns, the process kills
//! its children and exits.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use herdless::{Backend, Events, Group, GroupBuilder, Interest, Rotation, Waiter};
use serde::{Deserialize, Serialize};

use crate::exec::{self, RunGroup, Spawn};

use crate::queue::{read_one, Channel, Read, Workload};
use herdless_fixtures::{
    busy_for, pipe, read_exact, until_asleep, write_all, Blocking, SharedCounters,
};

/// The key of the stop descriptor (the data descriptor's is 0).
pub const STOP_KEY: usize = 1;
/// Marks the id of the last data message of a run.
const LAST: u64 = 1 << 62;
/// The most a waiter may take to fall asleep in the kernel before the clock starts.
const ASLEEP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a row may run beyond its producer time cap before the watchdog ends the process.
const WATCHDOG_GRACE: Duration = Duration::from_secs(90);

/// How the waiters wait: each mode is one row of the table. The names are the README's; the
/// lab's earlier names (`plain`, `native-exclusive`, `native-rr`, `emulated-rr`) are accepted
/// by `--modes` as aliases. (Serialized with these kebab-case names for exec'd waiters only:
/// the JSON report writes `Mode::name`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// No flag: the `polling` crate used plainly, one Poller per waiter, level mode, no
    /// exclusivity (the herd).
    #[value(name = "no-flag", alias = "plain")]
    Plain,
    /// The raw flag: `EPOLLEXCLUSIVE` alone, herdless native with no rotation
    /// (`rotate_every(0)`).
    #[value(name = "raw-flag", alias = "native-exclusive")]
    NativeExclusive,
    /// herdless native: exclusive + one event round robin, rotation as `--rotate-every` says
    /// (default: the library's default, `Rotation::Adaptive`).
    #[value(name = "herdless-native", alias = "native-rr")]
    NativeRr,
    /// herdless emulated (token passing), exclusive + one event round robin, rotation likewise.
    #[value(name = "herdless-emulated", alias = "emulated-rr")]
    EmulatedRr,
}

impl Mode {
    /// The mode's one name, as the README, the table, the JSON and the chart write it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Plain => "no flag",
            Mode::NativeExclusive => "raw flag",
            Mode::NativeRr => "herdless native",
            Mode::EmulatedRr => "herdless emulated",
        }
    }

    /// What the mode is, in one line (the legend under the table).
    pub fn meaning(self) -> &'static str {
        match self {
            Mode::Plain => {
                "the `polling` crate used plainly, one poller per waiter, no exclusivity: \
                 every waiter is woken (`--modes no-flag`, formerly `plain`)"
            }
            Mode::NativeExclusive => {
                "EPOLLEXCLUSIVE alone (herdless native, `rotate_every(0)`): one waiter woken, \
                 no turns (`raw-flag`, formerly `native-exclusive`)"
            }
            Mode::NativeRr => {
                "EPOLLEXCLUSIVE + herdless's one-event round robin, under the library's \
                 default `Rotation::Adaptive` (`herdless-native`, formerly `native-rr`)"
            }
            Mode::EmulatedRr => {
                "herdless's token passing, no kernel flag, same rotation; members next in line \
                 spin, yielding, up to 50 µs per hand-off under a backlog \
                 (`herdless-emulated`, formerly `emulated-rr`)"
            }
        }
    }

    /// Does `--rotate-every` apply to this mode? (the herdless round-robin modes)
    pub fn rotates(self) -> bool {
        matches!(self, Mode::NativeRr | Mode::EmulatedRr)
    }

    /// The group the waiters join (none for no flag): anonymous, or for exec'd waiters named
    /// (its name removed when the row ends); or why this system cannot run the mode.
    pub fn group(
        self,
        waiters: usize,
        rotation: Option<Rotate>,
        spawn: Option<Spawn>,
    ) -> Result<Option<RowGroup>, Refusal> {
        let (backend, rotation) = match self {
            Mode::Plain => return Ok(None),
            Mode::NativeExclusive => (Backend::Native, Rotation::Every(0)),
            Mode::NativeRr => (Backend::Native, rotation.unwrap_or_default().rotation()),
            Mode::EmulatedRr => (Backend::Emulated, rotation.unwrap_or_default().rotation()),
        };
        let builder: GroupBuilder = Group::builder()
            .backend(backend)
            .rotation(rotation)
            .max_members(waiters);
        let built = match spawn {
            Some(Spawn::Exec) => RunGroup::build("herd", builder).map(RowGroup::Named),
            _ => builder.build().map(RowGroup::Anonymous),
        };
        match built {
            Ok(group) => Ok(Some(group)),
            Err(e @ herdless::Error::BackendUnavailable { .. }) => {
                Err(Refusal::Unavailable(e.to_string()))
            }
            Err(e) => Err(Refusal::Failed(e.to_string())),
        }
    }

    pub fn interest(self) -> Interest {
        match self {
            Mode::NativeExclusive => Interest::READABLE.exclusive(),
            _ => Interest::READABLE.exclusive().one_event_round_robin(),
        }
    }
}

/// A row's group: anonymous (threads, forked waiters), or named for exec'd waiters.
pub enum RowGroup {
    Anonymous(Group),
    Named(RunGroup),
}

impl RowGroup {
    pub fn group(&self) -> &Group {
        match self {
            RowGroup::Anonymous(g) => g,
            RowGroup::Named(g) => &g.group,
        }
    }
}

/// A value of `--rotate-every`: `adaptive` (the library's default) or a number of events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Rotate {
    /// `Rotation::Adaptive`: turns by the event, batches under a backlog.
    #[default]
    Adaptive,
    /// `Rotation::Every(n)`: 1 is strict turns, 0 never rotates.
    Every(u32),
}

impl Rotate {
    fn rotation(self) -> Rotation {
        match self {
            Rotate::Adaptive => Rotation::Adaptive,
            Rotate::Every(n) => Rotation::Every(n),
        }
    }
    /// As the table and `--rotate-every` write it.
    pub fn name(self) -> String {
        match self {
            Rotate::Adaptive => "adaptive".into(),
            Rotate::Every(n) => n.to_string(),
        }
    }
}

impl std::str::FromStr for Rotate {
    type Err = String;
    fn from_str(s: &str) -> Result<Rotate, String> {
        match s.trim() {
            "adaptive" => Ok(Rotate::Adaptive),
            n => n.parse().map(Rotate::Every).map_err(|_| {
                format!(
                    "{s:?}: give `adaptive` or a number of events (0 to {})",
                    u32::MAX
                )
            }),
        }
    }
}

impl Serialize for Rotate {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Rotate::Adaptive => serializer.serialize_str("adaptive"),
            Rotate::Every(n) => serializer.serialize_u32(*n),
        }
    }
}

/// What one line of the table compares: a mode, and for the herdless round-robin modes the
/// rotation setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Setup {
    pub mode: Mode,
    pub rotate_every: Option<Rotate>,
    /// How process waiters were started (none for threads).
    pub spawn: Option<Spawn>,
}

/// In the JSON: `mode` is the mode's one name (`herdless native`), `setup` the table's name of
/// the line (`herdless native/1 (exec)`), then `rotate_every` and `spawn` where they apply.
impl Serialize for Setup {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let fields =
            2 + usize::from(self.rotate_every.is_some()) + usize::from(self.spawn.is_some());
        let mut s = serializer.serialize_struct("Setup", fields)?;
        s.serialize_field("mode", self.mode.name())?;
        s.serialize_field("setup", &self.name())?;
        if let Some(r) = &self.rotate_every {
            s.serialize_field("rotate_every", r)?;
        }
        if let Some(spawn) = &self.spawn {
            s.serialize_field("spawn", spawn)?;
        }
        s.end()
    }
}

impl Setup {
    /// `herdless native` under the default rotation, `herdless native/1` under
    /// `--rotate-every 1`; `(exec)` after it for exec'd waiters.
    pub fn name(self) -> String {
        let name = match self.rotate_every {
            None | Some(Rotate::Adaptive) => self.mode.name().to_string(),
            Some(r) => format!("{}/{}", self.mode.name(), r.name()),
        };
        match self.spawn {
            Some(Spawn::Exec) => format!("{name} (exec)"),
            _ => name,
        }
    }
}

/// Why a row has no figures.
#[derive(Debug)]
pub enum Refusal {
    /// The mode does not exist on this system (a reason, not an error).
    Unavailable(String),
    /// Something broke.
    Failed(String),
}

impl From<io::Error> for Refusal {
    fn from(e: io::Error) -> Refusal {
        Refusal::Failed(e.to_string())
    }
}

impl From<herdless::Error> for Refusal {
    fn from(e: herdless::Error) -> Refusal {
        Refusal::Failed(e.to_string())
    }
}

/// What one row runs.
#[derive(Debug, Clone)]
pub struct RowSpec {
    pub workload: Workload,
    pub mode: Mode,
    /// The rotation setting of a herdless round-robin mode (None: not one).
    pub rotate_every: Option<Rotate>,
    pub waiters: usize,
    pub messages: u64,
    pub work: Duration,
    pub processes: bool,
    /// How process waiters start (`processes` only).
    pub spawn: Spawn,
    /// The producer stops early (marking the message it writes as the last) after this long.
    pub time_cap: Duration,
    /// What the progress line calls this row.
    pub label: String,
    /// Raise /proc/sys/fs/mqueue/msg_max for a deeper queue (root; see `queue::Channel::open`).
    pub raise_mq_limit: bool,
}

impl RowSpec {
    /// The line of the table this row belongs to.
    pub fn setup(&self) -> Setup {
        Setup {
            mode: self.mode,
            rotate_every: self.rotate_every,
            spawn: self.processes.then_some(self.spawn),
        }
    }
}

/// What one row measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Data messages written and read.
    pub messages: u64,
    /// Did the producer stop early at the time cap?
    pub stopped_by_time_cap: bool,
    /// From the first write to the read of the last data message.
    pub seconds: f64,
    /// Voluntary context switches of all waiters.
    pub kernel_wakeups: u64,
    /// Reads that found nothing.
    pub empty_wakeups: u64,
    /// The library's count of empty wake-ups over the same window (`MemberStats::empty_wakeups`
    /// summed over the members); none for no flag, which does not use herdless.
    pub library_empty_wakeups: Option<u64>,
    /// CPU time (user + system) of all waiters, in seconds, over the same window as the
    /// kernel wake-ups.
    pub cpu_seconds: f64,
    /// Data messages read by each waiter, in join order.
    pub per_waiter: Vec<u64>,
    /// The message queue's depth (mq_maxmsg), for the mq workload.
    pub mq_depth: Option<i64>,
}

/// What one waiter counted.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    messages: u64,
    empty: u64,
    /// The member's `MemberStats::empty_wakeups` at the window's end (none for no flag).
    library_empty: Option<u64>,
    switches: u64,
    /// CPU time (user + system) in nanoseconds.
    cpu_ns: u64,
}

/// Runs one row.
pub fn run_row(spec: &RowSpec) -> Result<Measured, Refusal> {
    let group = spec
        .mode
        .group(spec.waiters, spec.rotate_every, spec.setup().spawn)?;
    let channel = Channel::open(spec.workload, spec.raise_mq_limit)?;
    let board = board()?;
    board.store(0, SeqCst);
    if spec.processes {
        run_processes(spec, group.as_ref(), channel)
    } else {
        run_threads(spec, group.as_ref().map(RowGroup::group), channel)
    }
}

fn run_threads(
    spec: &RowSpec,
    group: Option<&Group>,
    mut channel: Channel,
) -> Result<Measured, Refusal> {
    let watchdog = Watchdog::start(spec, Vec::new());
    let board = board()?;
    let (result_tx, result_rx) = mpsc::channel::<(usize, Result<Tally, String>)>();
    let (tid_tx, tid_rx) = mpsc::channel::<i32>();
    let (fd, stop) = (channel.read.as_raw_fd(), channel.stop_fd());
    let mut handles = Vec::with_capacity(spec.waiters);
    for index in 0..spec.waiters {
        // Joined and registered here, in order, so registration order is join order.
        let mut member = Member::new(spec.mode, group, fd, stop)?;
        let (result_tx, tid_tx) = (result_tx.clone(), tid_tx.clone());
        let (workload, work) = (spec.workload, spec.work);
        let handle = std::thread::Builder::new()
            .name(format!("waiter-{index}"))
            .stack_size(256 * 1024)
            .spawn(move || {
                // SAFETY: gettid has no arguments and cannot fail.
                let _ = tid_tx.send(unsafe { libc::gettid() });
                let tally = member_loop(&mut member, fd, workload, work, board);
                member.leave(fd, stop);
                let _ = result_tx.send((index, tally.map_err(|e| e.to_string())));
            })?;
        handles.push(handle);
    }
    drop((result_tx, tid_tx));
    let tids: Vec<i32> = tid_rx.iter().take(spec.waiters).collect();
    let pid = std::process::id();
    let sleepers: Vec<(u32, i32)> = tids.iter().map(|&t| (pid, t)).collect();
    until_asleep(&sleepers, ASLEEP_TIMEOUT)?;
    let written = produce_then_stop(spec, &mut channel, board)?;
    let mut totals = Totals::new(spec.waiters);
    let mut failure = None;
    for (index, tally) in result_rx.iter() {
        match tally {
            Ok(t) => totals.add(index, &t),
            Err(e) => failure = Some(format!("waiter {index}: {e}")),
        }
    }
    for handle in handles {
        handle
            .join()
            .map_err(|_| Refusal::Failed("a waiter thread panicked".into()))?;
    }
    watchdog.stop();
    if let Some(e) = failure {
        return Err(Refusal::Failed(e));
    }
    finish(written, totals, board, channel.mq_depth)
}

/// A child's report: index, messages, empty wake-ups, switches, CPU ns, the library's empty
/// wake-ups (`u64::MAX`: none); index `u64::MAX` if it failed.
const RECORD_BYTES: usize = 48;

fn run_processes(
    spec: &RowSpec,
    group: Option<&RowGroup>,
    mut channel: Channel,
) -> Result<Measured, Refusal> {
    let (ready_r, ready_w) = pipe(Blocking::Both)?;
    let (results_r, results_w) = pipe(Blocking::Both)?;
    let board = board()?;
    let (fd, stop) = (channel.read.as_raw_fd(), channel.stop_fd());
    let mut pids = Vec::with_capacity(spec.waiters);
    for index in 0..spec.waiters {
        if spec.spawn == Spawn::Exec {
            let exec_spec = ExecSpec {
                index,
                mode: spec.mode,
                workload: spec.workload,
                work_ns: spec.work.as_nanos() as u64,
                group: group.and_then(|g| g.group().name()).map(str::to_owned),
                data: (spec.workload == Workload::Pipe).then_some(fd),
                mq_name: channel.mq_name().map(str::to_owned),
                stop,
                ready: ready_w.as_raw_fd(),
                results: results_w.as_raw_fd(),
                board: board_file().as_raw_fd(),
            };
            let mut inherit = vec![stop, exec_spec.ready, exec_spec.results, exec_spec.board];
            inherit.extend(exec_spec.data);
            match exec::spawn(&exec::Job::Herd(exec_spec), &inherit) {
                Ok(child) => pids.push(child.id() as i32),
                Err(e) => {
                    kill_all(&pids);
                    reap_all(&pids);
                    return Err(e.into());
                }
            }
            continue;
        }
        // SAFETY: the parent has no other thread now (waiters of earlier rows were joined); the
        // child uses this crate, raw system calls and _exit only.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            kill_all(&pids);
            reap_all(&pids);
            return Err(io::Error::last_os_error().into());
        }
        if pid == 0 {
            channel.close_write_end();
            let group = group.map(RowGroup::group);
            let record = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                child(
                    spec.mode,
                    spec.workload,
                    spec.work,
                    group,
                    (fd, stop),
                    ready_w.as_raw_fd(),
                    board,
                )
            }));
            let failed = !matches!(record, Ok(Ok(_)));
            report(results_w.as_raw_fd(), index, record);
            // SAFETY: leaves the child at once, without running the parent's destructors.
            unsafe { libc::_exit(i32::from(failed)) };
        }
        pids.push(pid);
    }
    drop((ready_w, results_w));
    let watchdog = Watchdog::start(spec, pids.clone());
    let outcome = parent(spec, &mut channel, &ready_r, &results_r, &pids, board);
    if outcome.is_err() {
        kill_all(&pids);
    }
    reap_all(&pids);
    watchdog.stop();
    outcome
}

/// A child's report on the results pipe (index `u64::MAX` if it failed).
fn report(results: RawFd, index: usize, record: std::thread::Result<Result<Tally, Refusal>>) {
    let fields = match record {
        Ok(Ok(t)) => [
            index as u64,
            t.messages,
            t.empty,
            t.switches,
            t.cpu_ns,
            t.library_empty.unwrap_or(u64::MAX),
        ],
        Ok(Err(e)) => {
            eprintln!("waiter {index}: {e:?}");
            [u64::MAX, 0, 0, 0, 0, 0]
        }
        Err(_) => [u64::MAX, 0, 0, 0, 0, 0],
    };
    let bytes: Vec<u8> = fields.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let _ = write_all(results, &bytes);
}

fn reap_all(pids: &[i32]) {
    for &pid in pids {
        let mut status = 0;
        // SAFETY: reaps our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
    }
}

/// What an exec'd waiter is told (`crate::exec`): its index, how to wait, the named group,
/// and the numbers of the descriptors it inherited (a message queue it opens by name).
#[derive(Serialize, Deserialize)]
pub struct ExecSpec {
    index: usize,
    mode: Mode,
    workload: Workload,
    work_ns: u64,
    group: Option<String>,
    /// The pipe's read end (the pipe workload).
    data: Option<RawFd>,
    /// The queue's name (the mq workload).
    mq_name: Option<String>,
    stop: RawFd,
    ready: RawFd,
    results: RawFd,
    board: RawFd,
}

/// The exec'd waiter: takes what it inherited, opens the group and the queue by name, runs as
/// a forked waiter would, reports on the results pipe. Returns the exit status.
pub fn exec_worker(spec: ExecSpec) -> i32 {
    // SAFETY: the parent left these open for this process alone; each is taken once.
    let (stop, ready, results, board_fd) = unsafe {
        (
            exec::inherited(spec.stop),
            exec::inherited(spec.ready),
            exec::inherited(spec.results),
            exec::inherited(spec.board),
        )
    };
    let record = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let board = inherited_board(board_fd)?;
        let data = match (spec.data, &spec.mq_name) {
            // SAFETY: as above.
            (Some(fd), _) => unsafe { exec::inherited(fd) },
            (None, Some(name)) => crate::queue::open_mq_reader(name)?,
            (None, None) => return Err(Refusal::Failed("no pipe and no queue".into())),
        };
        let group = match &spec.group {
            Some(name) => Some(Group::open(name)?),
            None => None,
        };
        let fds = (data.as_raw_fd(), stop.as_raw_fd());
        let work = Duration::from_nanos(spec.work_ns);
        child(
            spec.mode,
            spec.workload,
            work,
            group.as_ref(),
            fds,
            ready.as_raw_fd(),
            board,
        )
    }));
    let failed = !matches!(record, Ok(Ok(_)));
    report(results.as_raw_fd(), spec.index, record);
    i32::from(failed)
}

/// The parent's half of a process row: start the clock, produce, collect the children's reports.
fn parent(
    spec: &RowSpec,
    channel: &mut Channel,
    ready_r: &OwnedFd,
    results_r: &OwnedFd,
    pids: &[i32],
    board: &'static AtomicU64,
) -> Result<Measured, Refusal> {
    let mut ready = vec![0u8; spec.waiters];
    read_exact(ready_r.as_raw_fd(), &mut ready)?;
    let sleepers: Vec<(u32, i32)> = pids.iter().map(|&p| (p as u32, p)).collect();
    until_asleep(&sleepers, ASLEEP_TIMEOUT)?;
    let written = produce_then_stop(spec, channel, board)?;
    let mut totals = Totals::new(spec.waiters);
    for _ in 0..spec.waiters {
        let mut record = [0u8; RECORD_BYTES];
        read_exact(results_r.as_raw_fd(), &mut record)?;
        let field =
            |i: usize| u64::from_ne_bytes(record[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        if field(0) == u64::MAX {
            return Err(Refusal::Failed("a waiter process failed".into()));
        }
        let tally = Tally {
            messages: field(1),
            empty: field(2),
            switches: field(3),
            cpu_ns: field(4),
            library_empty: Some(field(5)).filter(|&v| v != u64::MAX),
        };
        totals.add(field(0) as usize, &tally);
    }
    finish(written, totals, board, channel.mq_depth)
}

/// A waiter process (forked, or exec'd): joins the group in the child, says it is ready, runs
/// the member loop (which counts its switches from there on).
fn child(
    mode: Mode,
    workload: Workload,
    work: Duration,
    group: Option<&Group>,
    (fd, stop): (RawFd, RawFd),
    ready_w: RawFd,
    board: &AtomicU64,
) -> Result<Tally, Refusal> {
    let mut member = Member::new(mode, group, fd, stop)?;
    write_all(ready_w, &[1])?;
    let tally = member_loop(&mut member, fd, workload, work, board)?;
    member.leave(fd, stop);
    Ok(tally)
}

/// Waits (bounded) until the last data message has been read: with a FIFO queue every
/// earlier one has been taken by then, so the waiters may be told to stop.
fn until_last_read(board: &AtomicU64) -> io::Result<()> {
    let start = Instant::now();
    while board.load(SeqCst) == 0 {
        if start.elapsed() > ASLEEP_TIMEOUT {
            return Err(io::Error::other("the last message was never read"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// What the producer wrote.
struct Written {
    messages: u64,
    stopped_by_time_cap: bool,
    start_ns: u64,
}

/// The waiters' figures, added up as they report.
struct Totals {
    per_waiter: Vec<u64>,
    kernel_wakeups: u64,
    empty_wakeups: u64,
    library_empty_wakeups: Option<u64>,
    cpu_ns: u64,
}

impl Totals {
    fn new(waiters: usize) -> Totals {
        Totals {
            per_waiter: vec![0; waiters],
            kernel_wakeups: 0,
            empty_wakeups: 0,
            library_empty_wakeups: None,
            cpu_ns: 0,
        }
    }

    fn add(&mut self, index: usize, tally: &Tally) {
        self.per_waiter[index] = tally.messages;
        self.kernel_wakeups += tally.switches;
        self.empty_wakeups += tally.empty;
        if let Some(n) = tally.library_empty {
            *self.library_empty_wakeups.get_or_insert(0) += n;
        }
        self.cpu_ns += tally.cpu_ns;
    }
}

fn finish(
    written: Written,
    totals: Totals,
    board: &AtomicU64,
    mq_depth: Option<i64>,
) -> Result<Measured, Refusal> {
    let read: u64 = totals.per_waiter.iter().sum();
    if read != written.messages {
        return Err(Refusal::Failed(format!(
            "{} messages written but {read} read",
            written.messages
        )));
    }
    let end_ns = board.load(SeqCst);
    Ok(Measured {
        messages: written.messages,
        stopped_by_time_cap: written.stopped_by_time_cap,
        seconds: end_ns.saturating_sub(written.start_ns) as f64 / 1e9,
        kernel_wakeups: totals.kernel_wakeups,
        empty_wakeups: totals.empty_wakeups,
        library_empty_wakeups: totals.library_empty_wakeups,
        cpu_seconds: totals.cpu_ns as f64 / 1e9,
        per_waiter: totals.per_waiter,
        mq_depth,
    })
}

/// Produces the row's messages, waits until the last one was read, and tells the waiters to
/// stop.
fn produce_then_stop(
    spec: &RowSpec,
    channel: &mut Channel,
    board: &AtomicU64,
) -> Result<Written, Refusal> {
    let written = produce(spec, channel)?;
    until_last_read(board)?;
    channel.finish();
    Ok(written)
}

/// The producer: writes ids 0.. as fast as it can, marks the last one, and shows progress on
/// stderr when the row takes more than a few seconds.
fn produce(spec: &RowSpec, channel: &Channel) -> io::Result<Written> {
    let start = Instant::now();
    let start_ns = monotonic_ns();
    let mut progress = Progress::new(&spec.label);
    for i in 0..spec.messages {
        let early = i % 256 == 255 && start.elapsed() >= spec.time_cap;
        let last = early || i + 1 == spec.messages;
        if i % 1024 == 0 {
            progress.show(i, spec.messages, start.elapsed());
        }
        channel.send(if last { i | LAST } else { i })?;
        if last {
            progress.done();
            return Ok(Written {
                messages: i + 1,
                stopped_by_time_cap: i + 1 < spec.messages,
                start_ns,
            });
        }
    }
    Ok(Written {
        messages: 0,
        stopped_by_time_cap: false,
        start_ns,
    })
}

/// Progress on stderr, shown only once a row has run for a few seconds: one line rewritten in
/// place on a terminal, or, when stderr is a log or a pipe (CI), a plain line every few seconds.
struct Progress<'a> {
    label: &'a str,
    shown: bool,
    last: Duration,
    terminal: bool,
}

impl<'a> Progress<'a> {
    const AFTER: Duration = Duration::from_secs(3);
    const EVERY: Duration = Duration::from_secs(1);
    /// How often a log gets a line.
    const EVERY_IN_LOG: Duration = Duration::from_secs(5);

    fn new(label: &'a str) -> Progress<'a> {
        use std::io::IsTerminal;
        Progress {
            label,
            shown: false,
            last: Duration::ZERO,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    fn show(&mut self, written: u64, total: u64, elapsed: Duration) {
        let every = if self.terminal {
            Self::EVERY
        } else {
            Self::EVERY_IN_LOG
        };
        if elapsed < Self::AFTER || elapsed - self.last < every {
            return;
        }
        if !self.shown {
            eprintln!();
        }
        let line = format!(
            "    {}: {written}/{total} messages written, {:.0} s",
            self.label,
            elapsed.as_secs_f64()
        );
        if self.terminal {
            eprint!("\r{line}   ");
        } else {
            eprintln!("{line}");
        }
        self.shown = true;
        self.last = elapsed;
    }

    fn done(&self) {
        if self.shown && self.terminal {
            eprintln!();
        }
    }
}

/// One waiter: a plain `polling` Poller, or a herdless Waiter.
pub enum Member {
    Plain {
        poller: polling::Poller,
        events: polling::Events,
    },
    Herdless {
        waiter: Box<Waiter>,
        events: Events,
    },
}

impl Member {
    pub fn new(
        mode: Mode,
        group: Option<&Group>,
        fd: RawFd,
        stop: RawFd,
    ) -> Result<Member, Refusal> {
        // SAFETY: the channel's read end and stop descriptor outlive every member: members leave
        // (below) before the row drops the channel.
        let (source, stop_source) =
            unsafe { (BorrowedFd::borrow_raw(fd), BorrowedFd::borrow_raw(stop)) };
        match group {
            None => {
                let poller = polling::Poller::new()?;
                // SAFETY: `source` stays open until `leave` deletes it from this poller.
                unsafe {
                    poller.add_with_mode(
                        fd,
                        polling::Event::readable(0),
                        polling::PollMode::Level,
                    )?;
                    poller.add_with_mode(
                        stop,
                        polling::Event::readable(STOP_KEY),
                        polling::PollMode::Level,
                    )
                }?;
                Ok(Member::Plain {
                    poller,
                    events: polling::Events::with_capacity(std::num::NonZeroUsize::MIN),
                })
            }
            Some(group) => {
                let mut waiter = group.join()?;
                waiter.add(&source, 0, mode.interest())?;
                waiter.add(&stop_source, STOP_KEY, Interest::READABLE)?;
                Ok(Member::Herdless {
                    waiter: Box::new(waiter),
                    events: Events::with_capacity(1),
                })
            }
        }
    }

    /// Waits; returns the key of the event it was handed, if any.
    pub fn wait(&mut self) -> io::Result<Option<usize>> {
        match self {
            Member::Plain { poller, events } => {
                events.clear();
                poller.wait(events, None)?;
                Ok(events.iter().next().map(|e| e.key))
            }
            Member::Herdless { waiter, events } => {
                waiter.wait(events, None)?;
                Ok(events.iter().next().map(|e| e.key))
            }
        }
    }

    pub fn consumed(&mut self, key: usize) -> io::Result<()> {
        match self {
            Member::Plain { .. } => Ok(()),
            Member::Herdless { waiter, .. } => Ok(waiter.consumed(key)?),
        }
    }

    /// The read after the event of `key` found nothing: tells herdless (which counts it and
    /// does what `consumed` does).
    pub fn found_nothing(&mut self, key: usize) -> io::Result<()> {
        match self {
            Member::Plain { .. } => Ok(()),
            Member::Herdless { waiter, .. } => Ok(waiter.found_nothing(key)?),
        }
    }

    /// The library's count of this member's empty wake-ups (none for no flag).
    pub fn library_empty(&self) -> Option<u64> {
        match self {
            Member::Plain { .. } => None,
            Member::Herdless { waiter, .. } => Some(waiter.stats().empty_wakeups),
        }
    }

    pub fn leave(self, fd: RawFd, stop: RawFd) {
        for raw in [fd, stop] {
            // SAFETY: the channel's descriptors are still open (see `new`).
            let source = unsafe { BorrowedFd::borrow_raw(raw) };
            match &self {
                Member::Plain { poller, .. } => {
                    let _ = poller.delete(source);
                }
                Member::Herdless { .. } => {}
            }
        }
        if let Member::Herdless { mut waiter, .. } = self {
            for raw in [fd, stop] {
                // SAFETY: as above.
                let _ = waiter.delete(&unsafe { BorrowedFd::borrow_raw(raw) });
            }
        }
    }
}

/// wait → read one message → consumed → work, until the stop descriptor hangs up.
fn member_loop(
    member: &mut Member,
    fd: RawFd,
    workload: Workload,
    work: Duration,
    board: &AtomicU64,
) -> io::Result<Tally> {
    let (start_switches, start_cpu) = (switches(), cpu_ns());
    let start_library_empty = member.library_empty();
    let mut tally = Tally::default();
    // Switches, CPU time and the library's empty count at the first wake-up after the last
    // data message was read: the window's end.
    let mut at_drain = None;
    loop {
        let key = member.wait()?;
        if at_drain.is_none() && board.load(SeqCst) != 0 {
            at_drain = Some((switches(), cpu_ns(), member.library_empty()));
        }
        let Some(key) = key else { continue };
        if key == STOP_KEY {
            break;
        }
        match read_one(fd, workload)? {
            Read::Message(id) => {
                member.consumed(key)?;
                tally.messages += 1;
                if id & LAST != 0 {
                    board.store(monotonic_ns(), SeqCst);
                }
                busy_for(work);
            }
            Read::Stop => {
                member.consumed(key)?;
                break;
            }
            Read::Empty => {
                member.found_nothing(key)?;
                if at_drain.is_none() {
                    tally.empty += 1;
                }
            }
        }
    }
    let (end_switches, end_cpu, end_library_empty) =
        at_drain.unwrap_or_else(|| (switches(), cpu_ns(), member.library_empty()));
    tally.library_empty = end_library_empty
        .zip(start_library_empty)
        .map(|(end, start)| end - start);
    tally.switches = end_switches - start_switches;
    tally.cpu_ns = end_cpu.saturating_sub(start_cpu);
    Ok(tally)
}

fn switches() -> u64 {
    herdless_fixtures::counters::thread_voluntary_switches().unwrap_or(0)
}

/// CPU time (user + system) of the calling thread so far, in nanoseconds:
/// `getrusage(RUSAGE_THREAD)`, which in a single-threaded waiter process (forked or exec'd) is
/// the process's figure, as for the switches.
fn cpu_ns() -> u64 {
    herdless_fixtures::counters::thread_cpu_time().map_or(0, |t| t.as_nanos() as u64)
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every thread and process of the run.
fn monotonic_ns() -> u64 {
    // SAFETY: timespec is plain data.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and a pointer to a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The board in shared memory (a memfd, so forked and exec'd waiters see it too): 0 while data
/// messages remain, then the time the last one was read.
fn board() -> io::Result<&'static AtomicU64> {
    Ok(board_mapping()?.0.get(0))
}

/// The board's memfd, which exec'd waiters inherit (made by `board`, which runs first).
fn board_file() -> &'static OwnedFd {
    &board_mapping().expect("the board was made").1
}

fn board_mapping() -> io::Result<&'static (SharedCounters, OwnedFd)> {
    static BOARD: OnceLock<(SharedCounters, OwnedFd)> = OnceLock::new();
    if let Some(board) = BOARD.get() {
        return Ok(board);
    }
    let file = exec::memfd(1)?;
    let counters = SharedCounters::in_file(file.as_fd(), 1)?;
    Ok(BOARD.get_or_init(|| (counters, file)))
}

/// In an exec'd waiter: the board it inherited, mapped for the life of the process.
fn inherited_board(file: OwnedFd) -> io::Result<&'static AtomicU64> {
    let counters = Box::leak(Box::new(SharedCounters::in_file(file.as_fd(), 1)?));
    Ok(counters.get(0))
}

fn kill_all(pids: &[i32]) {
    for &pid in pids {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Ends the process if a row overruns its bound: kills the row's children, says why, exits.
struct Watchdog {
    cancel: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Watchdog {
    fn start(spec: &RowSpec, children: Vec<i32>) -> Watchdog {
        let (cancel, cancelled) = mpsc::channel::<()>();
        let bound = spec.time_cap + WATCHDOG_GRACE;
        let label = spec.label.clone();
        let thread = std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = cancelled.recv_timeout(bound) {
                kill_all(&children);
                eprintln!(
                    "\nherd: {label} did not finish within {:.0} s; stopping",
                    bound.as_secs_f64()
                );
                std::process::exit(3);
            }
        });
        Watchdog { cancel, thread }
    }

    fn stop(self) {
        let _ = self.cancel.send(());
        let _ = self.thread.join();
    }
}
