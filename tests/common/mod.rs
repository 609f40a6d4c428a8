//! Helpers shared by the behaviour tests: real pipes, kernel counters, waiting for a thread to be
//! asleep in the kernel, fairness figures, and (from `herdless-fixtures`) the macro that runs each
//! behaviour against every backend.
#![allow(dead_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use herdless::{Backend, Group, Rotation};
#[allow(unused_imports)] // each test binary uses a part
pub use herdless_fixtures::{every_backend, wait_keys, WAIT_BOUND};

/// Forking while another test thread of the same binary forks, or holds a lock a child
/// needs, is asking for trouble: the tests that fork take this first, one at a time.
pub fn one_fork_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static FORKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    FORKING.lock().unwrap_or_else(|e| e.into_inner())
}

/// The size of one test message: a u64 id.
pub const MSG: usize = 8;

/// A pipe: (read end, non-blocking; write end, blocking).
pub fn pipe() -> (OwnedFd, OwnedFd) {
    herdless_fixtures::pipe(herdless_fixtures::Blocking::WriteEnd).expect("pipe")
}

pub fn set_nonblocking(fd: RawFd) {
    herdless_fixtures::set_nonblocking(fd).expect("fcntl");
}

/// Writes one message (atomic: 8 bytes < PIPE_BUF).
pub fn write_msg(fd: RawFd, id: u64) {
    let buf = id.to_ne_bytes();
    // SAFETY: writes from a live buffer.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), MSG) };
    assert_eq!(n, MSG as isize, "write: {}", io::Error::last_os_error());
}

/// Reads one message; `None` if there was none (EAGAIN: an empty wake-up), `Some(None)` at EOF.
pub fn read_msg(fd: RawFd) -> Option<Option<u64>> {
    let mut buf = [0u8; MSG];
    // SAFETY: reads into a live buffer.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), MSG) };
    match n {
        8 => Some(Some(u64::from_ne_bytes(buf))),
        0 => Some(None),
        -1 if io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock => None,
        other => panic!("read returned {other}: {}", io::Error::last_os_error()),
    }
}

pub fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// Voluntary context switches of the calling thread: its kernel-level wake-ups.
pub fn vcsw() -> u64 {
    herdless_fixtures::counters::thread_voluntary_switches().expect("getrusage")
}

/// Waits (bounded) until every listed thread sleeps in the kernel's wait. Checks the real
/// condition in /proc; it is not a timed sleep.
pub fn until_asleep(pid: u32, tids: &[i32]) {
    let threads: Vec<(u32, i32)> = tids.iter().map(|&t| (pid, t)).collect();
    herdless_fixtures::until_asleep(&threads, Duration::from_secs(20)).unwrap();
}

pub use herdless_fixtures::jain;

/// What one turn-taking run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Messages read, per member, in join order.
    pub per_member: Vec<u64>,
    /// Reads that found nothing (user-level empty wake-ups).
    pub empty_reads: u64,
    /// Voluntary context switches inside `wait`, all members together (kernel-level wake-ups).
    pub kernel_wakeups: u64,
    /// Every message id read, in any order.
    pub ids: Vec<u64>,
    /// The ids each member read, in join order (threads only; empty for processes).
    pub ids_per_member: Vec<Vec<u64>>,
    /// For each member killed: how long the first message written after the kill took to be
    /// read (the group's stall while it noticed the death).
    pub stalls_after_kills: Vec<Duration>,
}

impl Outcome {
    /// One line for the test log (`cargo test -- --nocapture` shows it).
    pub fn report(&self, what: &str) {
        let n = self.total().max(1) as f64;
        eprintln!(
            "{what}: per member {:?}, Jain {:.4}, empty reads {}, kernel wake-ups/message {:.2}",
            self.per_member,
            jain(&self.per_member),
            self.empty_reads,
            self.kernel_wakeups as f64 / n
        );
        if !self.stalls_after_kills.is_empty() {
            eprintln!(
                "{what}: first message after each kill read within {:?}",
                self.stalls_after_kills
            );
        }
    }

    pub fn total(&self) -> u64 {
        self.per_member.iter().sum()
    }
    pub fn max_share(&self) -> f64 {
        *self.per_member.iter().max().unwrap() as f64 / self.total().max(1) as f64
    }
    /// Checks that every id in 0..n was read exactly once.
    pub fn assert_exactly_once(&self, n: u64) {
        let mut ids = self.ids.clone();
        ids.sort_unstable();
        assert_eq!(
            ids,
            (0..n).collect::<Vec<_>>(),
            "messages lost or read twice"
        );
    }

    /// What a settled run (`Turns::settled`, 8 members, 800 messages) promises: every message
    /// once, 100 ± 2 each, and reads that find nothing: none emulated, under 1% natively.
    pub fn assert_settled_turns(&self, backend: Backend) {
        self.assert_exactly_once(800);
        for &c in &self.per_member {
            assert!((98..=102).contains(&c), "not 100 ± 2 each: {self:?}");
        }
        if backend == Backend::Emulated {
            assert_eq!(self.empty_reads, 0, "{self:?}");
        } else {
            assert!(self.empty_reads < 8, "empty wake-ups ≥ 1%: {self:?}");
        }
    }
}

/// A turn-taking run: one pipe, `members` waiters registered exclusive with one event per
/// wait, each reading one message per wake-up; the producer writes message i+1 after message i
/// was read, `gap` later (None: at once).
#[derive(Debug, Clone, Copy)]
pub struct Turns {
    pub backend: Backend,
    pub rotation: Rotation,
    pub members: usize,
    pub messages: u64,
    pub gap: Option<Duration>,
    /// Each message is written once every live member (thread or process) is asleep in the
    /// kernel again, so that turns depend on the library and not on how soon the scheduler
    /// runs the member that just handled one (back to back, a member not yet back in its wait
    /// loses its turn, as the contract says).
    pub settled: bool,
}

/// The group of one run (`Turns::group`); a named one is removed when the run ends, once its
/// members have left or died (the removal would refuse, naming them, if one lingered).
pub struct RunGroup(Group);

impl std::ops::Deref for RunGroup {
    type Target = Group;
    fn deref(&self) -> &Group {
        &self.0
    }
}

impl Drop for RunGroup {
    fn drop(&mut self) {
        match (self.0.name(), std::thread::panicking()) {
            (Some(name), false) => Group::remove(name).unwrap(),
            // A failed run may leave members behind: the name goes all the same.
            (Some(name), true) => drop(Group::remove_forced(name)),
            (None, _) => {}
        }
    }
}

/// One member's loop: wait, read one message, consume, tell the producer (`ack`); until EOF.
/// `before_consumed` runs between the read and `consumed`.
/// Returns (count, empty reads, kernel wake-ups, ids).
fn member_loop(
    waiter: &mut herdless::Waiter,
    rx: RawFd,
    mut ack: impl FnMut(u64),
    mut before_consumed: impl FnMut(u64),
) -> (u64, u64, u64, Vec<u64>) {
    let mut events = herdless::Events::with_capacity(1);
    let (mut count, mut empty, mut switches, mut ids) = (0, 0, 0, Vec::new());
    loop {
        let before = vcsw();
        waiter.wait(&mut events, None).unwrap();
        switches += vcsw() - before;
        for event in events.iter() {
            match read_msg(rx) {
                Some(Some(id)) => {
                    count += 1;
                    ids.push(id);
                    before_consumed(id);
                    // Consumed right after the read, before handling (here: telling the
                    // producer), as the API asks.
                    waiter.consumed(event.key).unwrap();
                    ack(id);
                }
                Some(None) => return (count, empty, switches, ids),
                None => empty += 1,
            }
        }
    }
}

impl Turns {
    /// 8 members, 800 messages written back to back, strict turns.
    pub fn eight_members(backend: Backend) -> Turns {
        Turns {
            backend,
            rotation: Rotation::Every(1),
            members: 8,
            messages: 800,
            gap: None,
            settled: false,
        }
    }

    /// The same, each message written once every member is asleep again.
    pub fn eight_members_settled(backend: Backend) -> Turns {
        Turns {
            settled: true,
            ..Turns::eight_members(backend)
        }
    }

    /// The group of the run: anonymous, or with `HERDLESS_TEST_NAMED_GROUPS` set a named one
    /// (`.ci/run` runs the turn and fault tests both ways), removed when the run ends, so
    /// nothing is left in /dev/shm.
    fn group(&self) -> RunGroup {
        let builder = Group::builder()
            .backend(self.backend)
            .rotation(self.rotation)
            .max_members(self.members.max(1));
        if std::env::var_os("HERDLESS_TEST_NAMED_GROUPS").is_none() {
            return RunGroup(builder.build().unwrap());
        }
        static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!("turns.{}.{run}", std::process::id());
        let group = builder.name(&name).build().unwrap();
        assert_eq!(group.name(), Some(name.as_str()));
        RunGroup(group)
    }

    /// Members are threads, joined and registered in order by the test thread.
    pub fn threads(&self) -> Outcome {
        self.run_threads(|tx, acks, tids| {
            for i in 0..self.messages {
                if self.settled {
                    until_asleep(std::process::id(), tids);
                }
                write_msg(tx, i);
                acks.recv().unwrap();
                if let Some(gap) = self.gap {
                    std::thread::sleep(gap);
                }
            }
        })
    }

    /// As `threads`, but the producer writes every message at once (a backlog: the pipe holds
    /// them all), then waits until all were read.
    pub fn threads_backlog(&self) -> Outcome {
        self.run_threads(|tx, acks, _| {
            for i in 0..self.messages {
                write_msg(tx, i);
            }
            for _ in 0..self.messages {
                acks.recv().unwrap();
            }
        })
    }

    /// As `threads`, with the producer given: `produce` gets the pipe's write end, the
    /// members' acknowledgements (one per message read) and their thread ids.
    pub fn threads_with(
        &self,
        produce: impl FnOnce(RawFd, &std::sync::mpsc::Receiver<u64>, &[i32]),
    ) -> Outcome {
        self.run_threads(produce)
    }

    /// Starts the member threads, waits until all sleep in the kernel, runs `produce` (given
    /// the pipe's write end, the members' acknowledgements and their thread ids), then hangs
    /// up and collects.
    fn run_threads(
        &self,
        produce: impl FnOnce(RawFd, &std::sync::mpsc::Receiver<u64>, &[i32]),
    ) -> Outcome {
        use std::sync::mpsc;
        let group = self.group();
        let (rx, tx) = pipe();
        let (ack_tx, ack_rx) = mpsc::channel::<u64>();
        let (tid_tx, tid_rx) = mpsc::channel();
        let interest = herdless::Interest::READABLE
            .exclusive()
            .one_event_round_robin();
        let handles: Vec<_> = (0..self.members)
            .map(|_| {
                let mut waiter = group.join().unwrap();
                waiter.add(&rx, 0, interest).unwrap();
                let (ack_tx, tid_tx) = (ack_tx.clone(), tid_tx.clone());
                let rx = rx.as_raw_fd();
                std::thread::spawn(move || {
                    tid_tx.send(gettid()).unwrap();
                    let result =
                        member_loop(&mut waiter, rx, |id| ack_tx.send(id).unwrap(), |_| {});
                    // SAFETY: the pipe's read end lives until every member thread was joined.
                    let rx = unsafe { std::os::fd::BorrowedFd::borrow_raw(rx) };
                    waiter.delete(&rx).ok();
                    result
                })
            })
            .collect();
        let tids: Vec<i32> = (0..self.members).map(|_| tid_rx.recv().unwrap()).collect();
        until_asleep(std::process::id(), &tids);
        produce(tx.as_raw_fd(), &ack_rx, &tids);
        drop(tx); // EOF: every member stops
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        drop(rx);
        outcome(results)
    }

    /// Members are forked processes; each joins in the child. `faults` kill members mid-run.
    /// Returns the outcome and the indices of the members killed.
    pub fn processes(&self, faults: &[Kill]) -> (Outcome, Vec<usize>) {
        let group = self.group();
        let (rx, tx) = pipe();
        let (ack_r, ack_w) = pipe();
        let (res_r, res_w) = pipe();
        let (ready_r, ready_w) = pipe();
        for fd in [&ack_r, &res_r, &ready_r] {
            // SAFETY: fcntl on our own descriptor: the parent reads these blocking.
            unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, 0) };
        }
        let hang_at = |victim| -> Vec<u64> {
            faults
                .iter()
                .filter(|k| k.victim == victim)
                .map(|k| k.at)
                .collect()
        };
        let hang_on = hang_at(Victim::Handling);
        let hang_unconsumed = hang_at(Victim::Claimed);
        let killed_after_read: Vec<u64> = hang_on.iter().chain(&hang_unconsumed).copied().collect();
        let mut pids = Vec::new();
        for index in 0..self.members {
            // SAFETY: the child only uses this crate, raw system calls and _exit.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                drop(tx);
                let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let mut waiter = group.join().unwrap();
                    let interest = herdless::Interest::READABLE
                        .exclusive()
                        .one_event_round_robin();
                    waiter.add(&rx, 0, interest).unwrap();
                    write_all(ready_w.as_raw_fd(), &[1]);
                    let ack = |id: u64| {
                        let mut ack = id.to_ne_bytes().to_vec();
                        ack.extend_from_slice(&(index as u64).to_ne_bytes());
                        write_all(ack_w.as_raw_fd(), &ack);
                    };
                    let (count, empty, switches, _) = member_loop(
                        &mut waiter,
                        rx.as_raw_fd(),
                        |id| {
                            ack(id);
                            if hang_on.contains(&id) {
                                hang_forever();
                            }
                        },
                        |id| {
                            if hang_unconsumed.contains(&id) {
                                ack(id);
                                hang_forever();
                            }
                        },
                    );
                    let mut record = Vec::new();
                    for v in [index as u64, count, empty, switches] {
                        record.extend_from_slice(&v.to_ne_bytes());
                    }
                    write_all(res_w.as_raw_fd(), &record);
                }));
                // SAFETY: leaves the child at once, without running the test harness's exit.
                unsafe { libc::_exit(i32::from(code.is_err())) };
            }
            pids.push(pid);
        }
        drop((ack_w, res_w, ready_w, rx));
        let mut on_failure = Children(pids.clone());
        let mut byte = [0u8; 1];
        for _ in 0..self.members {
            read_exact(ready_r.as_raw_fd(), &mut byte);
        }
        for &pid in &pids {
            until_asleep(pid as u32, &[pid]);
        }
        let mut ids = Vec::new();
        let mut killed = Vec::new();
        let mut per_member = vec![0u64; self.members];
        let mut stalls_after_kills = Vec::new();
        let mut just_killed = false;
        for i in 0..self.messages {
            for kill in faults
                .iter()
                .filter(|k| k.at == i && !matches!(k.victim, Victim::Handling | Victim::Claimed))
            {
                let victim = kill.choose(&group, &pids, &killed);
                // SAFETY: kill(2) and waitpid(2) on our own child. Waiting for it to be gone
                // matters for the native backend: a process killed while asleep in epoll_wait
                // can still be the one the kernel picks for the next exclusive wake-up, in the
                // instant before it exits, and the kernel does not hand that wake-up on.
                unsafe {
                    libc::kill(pids[victim], libc::SIGKILL);
                    libc::waitpid(pids[victim], std::ptr::null_mut(), 0);
                }
                killed.push(victim);
                just_killed = true;
            }
            if self.settled {
                for (index, &pid) in pids.iter().enumerate() {
                    if !killed.contains(&index) {
                        until_asleep(pid as u32, &[pid]);
                    }
                }
            }
            let written = Instant::now();
            write_msg(tx.as_raw_fd(), i);
            let mut ack = [0u8; 16];
            read_ack(ack_r.as_raw_fd(), &mut ack);
            if std::mem::take(&mut just_killed) {
                stalls_after_kills.push(written.elapsed());
            }
            let id = u64::from_ne_bytes(ack[..8].try_into().unwrap());
            let member = u64::from_ne_bytes(ack[8..].try_into().unwrap()) as usize;
            ids.push(id);
            per_member[member] += 1;
            if killed_after_read.contains(&id) {
                // That member now "handles" the message forever (its readiness consumed or not).
                // SAFETY: kill(2) on our own child.
                unsafe { libc::kill(pids[member], libc::SIGKILL) };
                killed.push(member);
                just_killed = true;
            }
            if let Some(gap) = self.gap {
                std::thread::sleep(gap);
            }
        }
        drop(tx);
        let (mut empty_reads, mut kernel_wakeups) = (0, 0);
        for _ in 0..self.members - killed.len() {
            let mut record = [0u8; 32];
            read_exact(res_r.as_raw_fd(), &mut record);
            let v: Vec<u64> = record
                .chunks(8)
                .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(
                per_member[v[0] as usize], v[1],
                "a member's own count disagrees"
            );
            empty_reads += v[2];
            kernel_wakeups += v[3];
        }
        on_failure.0.clear();
        for (index, pid) in pids.into_iter().enumerate() {
            let mut status = 0;
            // SAFETY: reaps our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            if !killed.contains(&index) {
                assert!(
                    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                    "member {index} failed (status {status})"
                );
            }
        }
        let outcome = Outcome {
            per_member,
            empty_reads,
            kernel_wakeups,
            ids,
            ids_per_member: Vec::new(),
            stalls_after_kills,
        };
        (outcome, killed)
    }
}

/// Forked members, killed and reaped if the test fails halfway (a panic unwinds through it), so
/// none is left behind holding the test's pipes.
struct Children(Vec<i32>);

impl Drop for Children {
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

/// Which member a fault kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Victim {
    /// The member holding the emulation's token (asleep, watching the descriptor).
    TokenHolder,
    /// A member asleep in `wait` that does not hold the token.
    Idle,
    /// The member that read message `at` and is handling it (readiness consumed, as the API
    /// asks).
    Handling,
    /// The member that read message `at` before it said so with `consumed`: it still holds the
    /// descriptor's claim when it dies.
    Claimed,
}

/// SIGKILL a member just before message `at` is written (for `Handling`: right after it was
/// read).
#[derive(Debug, Clone, Copy)]
pub struct Kill {
    pub at: u64,
    pub victim: Victim,
}

impl Kill {
    /// The first member that fits: alive, asleep in `wait`, and holding the token or not. The
    /// group may need a moment to settle (a token passed while every member was busy is taken
    /// by the first to come back), so this waits, bounded, for one to fit.
    fn choose(&self, group: &Group, pids: &[i32], killed: &[usize]) -> usize {
        let wants_leader = self.victim == Victim::TokenHolder;
        let start = Instant::now();
        loop {
            let stats = group.stats();
            let fits = |i: &usize| {
                let m = stats.iter().find(|m| m.pid == pids[*i] as u32);
                m.is_some_and(|m| m.alive && m.leader == wants_leader)
                    && herdless_fixtures::counters::asleep_in_wait(pids[*i] as u32, pids[*i])
            };
            if let Some(victim) = (0..pids.len()).filter(|i| !killed.contains(i)).find(fits) {
                return victim;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "no member to kill"
            );
            std::thread::yield_now();
        }
    }
}

/// Blocks the calling process until it is killed.
fn hang_forever() -> ! {
    let (r, _w) = pipe();
    // SAFETY: fcntl on our own descriptor.
    unsafe { libc::fcntl(r.as_raw_fd(), libc::F_SETFL, 0) };
    let mut byte = [0u8; 1];
    read_exact(r.as_raw_fd(), &mut byte);
    unreachable!("nobody writes to this pipe");
}

fn outcome(results: Vec<(u64, u64, u64, Vec<u64>)>) -> Outcome {
    let mut out = Outcome {
        per_member: Vec::new(),
        empty_reads: 0,
        kernel_wakeups: 0,
        ids: Vec::new(),
        ids_per_member: Vec::new(),
        stalls_after_kills: Vec::new(),
    };
    for (count, empty, switches, ids) in results {
        out.per_member.push(count);
        out.empty_reads += empty;
        out.kernel_wakeups += switches;
        out.ids.extend(&ids);
        out.ids_per_member.push(ids);
    }
    out
}

pub fn write_all(fd: RawFd, buf: &[u8]) {
    herdless_fixtures::write_all(fd, buf).expect("write");
}

/// Reads one acknowledgement; a group that stays stuck for 30 s fails the test (a liveness
/// bound, not a timing measure).
fn read_ack(fd: RawFd, buf: &mut [u8]) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: polls one live pollfd.
    let ready = unsafe { libc::poll(&mut pfd, 1, 30_000) };
    assert!(ready == 1, "the group stalled: no message read for 30 s");
    read_exact(fd, buf);
}

pub fn read_exact(fd: RawFd, buf: &mut [u8]) {
    herdless_fixtures::read_exact(fd, buf).expect("read");
}

/// The machine's scheduling noise, measured beside a test: a thread that sleeps `PROBE_SLEEP`
/// in `poll(2)` again and again and keeps its worst lateness (how long after its timeout it
/// ran again), and after each sleep yields the CPU once and keeps the longest yield (how long
/// the runnable tasks ahead of it kept it off the core: a woken thread is favoured, a thread
/// that yields or was preempted is not, and a chain of hand-offs meets both), until `worst`
/// stops it. On a quiet machine well under a millisecond; with 8 busy loops beside a test on
/// 2 CPUs, milliseconds to tens of milliseconds (the sleep alone once read 88 µs beside 6 busy
/// loops, while a death's hand-off took 6.3 ms); at a load average of 50, about a second. Timing bounds are `noisy_bound(target, noise)`, so they hold on a loaded machine and
/// still catch a wait that overruns by far more than the machine's noise (or never returns).
pub struct NoiseProbe {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<Duration>>,
}

/// How long the probe sleeps each time.
pub const PROBE_SLEEP: Duration = Duration::from_millis(10);

impl NoiseProbe {
    pub fn start() -> NoiseProbe {
        use std::sync::atomic::Ordering::SeqCst;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut worst = Duration::ZERO;
            while !flag.load(SeqCst) {
                let before = Instant::now();
                // SAFETY: polls no descriptor, only sleeps.
                unsafe { libc::poll(std::ptr::null_mut(), 0, PROBE_SLEEP.as_millis() as i32) };
                worst = worst.max(before.elapsed().saturating_sub(PROBE_SLEEP));
                let before = Instant::now();
                std::thread::yield_now();
                worst = worst.max(before.elapsed());
            }
            worst
        });
        NoiseProbe {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops the probe: the worst lateness it saw.
    pub fn worst(mut self) -> Duration {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.handle.take().unwrap().join().unwrap()
    }
}

impl Drop for NoiseProbe {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The bound of a lateness whose target on a quiet machine is `target`, given the `noise` a
/// `NoiseProbe` measured beside it: the target plus four times the noise (a wait is woken
/// like the probe, then does its own bookkeeping, possibly preempted again).
pub fn noisy_bound(target: Duration, noise: Duration) -> Duration {
    target + 4 * noise
}

/// A fresh queue of 8-byte messages, 10 deep, unlinked at once: a non-blocking descriptor for
/// the members and a blocking one for the senders. `None`, said loudly, where this system has
/// no message queues. Close both (`mq_close`) when done: an `MqdT` is not closed on drop, and
/// the system's queue count is shared.
#[cfg(target_os = "linux")]
pub fn fresh_queue(tag: &str) -> Option<(nix::mqueue::MqdT, nix::mqueue::MqdT)> {
    use nix::mqueue::{mq_open, mq_unlink, MQ_OFlag, MqAttr};
    use nix::sys::stat::Mode;
    let name = format!("/herdless-test-{}-{tag}", std::process::id());
    let _ = mq_unlink(name.as_str());
    let attr = MqAttr::new(0, 10, 8, 0);
    let mode = Mode::S_IRUSR | Mode::S_IWUSR;
    let flags = MQ_OFlag::O_CREAT | MQ_OFlag::O_RDONLY | MQ_OFlag::O_NONBLOCK;
    // The system's queue count (`queues_max`) is shared with every other program: a full
    // count is waited out (bounded), not taken for a system without queues.
    let start = Instant::now();
    let opened = loop {
        match mq_open(name.as_str(), flags, mode, Some(&attr)) {
            Err(nix::errno::Errno::ENOSPC) if start.elapsed() < WAIT_BOUND => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(nix::errno::Errno::ENOSPC) => {
                panic!("no queue free in the system for {WAIT_BOUND:?}")
            }
            other => break other,
        }
    };
    let read = match opened {
        Ok(read) => read,
        Err(e) => {
            eprintln!("SKIPPED: no POSIX message queue on this system (mq_open: {e})");
            println!("SKIPPED: no POSIX message queue on this system (mq_open: {e})");
            return None;
        }
    };
    let write = mq_open(name.as_str(), MQ_OFlag::O_WRONLY, mode, None).expect("mq_open");
    mq_unlink(name.as_str()).unwrap();
    Some((read, write))
}

/// Forks a child that runs `body` and exits with its code (101 if it panics).
pub fn fork_child(body: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: fork; the child runs `body` and leaves with _exit, never returning to the
    // test harness.
    match unsafe { libc::fork() } {
        -1 => panic!("fork: {}", std::io::Error::last_os_error()),
        0 => {
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(101);
            // SAFETY: leaves the child at once, running no destructor of the parent's state.
            unsafe { libc::_exit(code) }
        }
        pid => pid,
    }
}

/// Waits for `pid` (at most `limit`, then kills it): its exit code, or 128 + its signal.
pub fn reap(pid: libc::pid_t, limit: Duration) -> i32 {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waits for our own child without blocking.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            if libc::WIFEXITED(status) {
                return libc::WEXITSTATUS(status);
            }
            return 128 + libc::WTERMSIG(status);
        }
        if start.elapsed() > limit {
            // SAFETY: kills our own child, then reaps it.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return -1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
