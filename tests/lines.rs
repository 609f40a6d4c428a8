//! Lines: `herdless::poll` with `POLLEXCL` and `POLLONE` and no group, on the line of each
//! object (the implicit group of its permission class). The seed's four calls; threads that
//! exit without leaving; descriptors closed and their numbers reused; overlapping sets; `EINTR`,
//! `POLLNVAL` and a timeout under a signal every millisecond; plain `poll(2)` without the bits;
//! unrelated member processes (spawned, not forked) SIGKILLed; another user with and without the
//! object's permission; a planted group object refused.
//!
//! The backend of a line is the environment's `HERDLESS_BACKEND`, read once per process, so
//! every behaviour runs in a child process per backend: `native::name` and `emulated::name` run
//! this test binary again on the ignored `body::name` with `HERDLESS_BACKEND` set (the native
//! one skips loudly where there is no native backend). Member processes are this binary again
//! too, on `role::member`: started by `Command`, they share nothing with the test but the
//! FIFO's path (or, for the user without permission, an inherited descriptor).

#![cfg(target_os = "linux")]

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::*;
use herdless::{Error, PollFd, POLLEXCL, POLLONE};

/// Every behaviour once per backend, each in a child process of its own (see the module's
/// paragraph).
macro_rules! every_line_backend {
    ($($name:ident),* $(,)?) => {
        mod native {
            $(#[test] fn $name() { super::in_child("native", stringify!($name)); })*
        }
        mod emulated {
            $(#[test] fn $name() { super::in_child("emulated", stringify!($name)); })*
        }
        mod body {
            $(
                #[test]
                #[ignore = "run by native:: and emulated:: in a process with HERDLESS_BACKEND set"]
                fn $name() { super::$name(); }
            )*
        }
    };
}

every_line_backend!(
    the_seeds_four_calls_serve_fd1_fd2_fd3_fd1,
    without_the_bits_it_is_plain_poll,
    threads_that_exit_without_leaving_strand_nothing,
    closed_numbers_get_pollnval_and_reused_ones_the_new_object,
    overlapping_sets_keep_exclusivity_and_turns_per_object,
    signals_end_a_wait_with_eintr_and_leave_a_timeout_whole,
    members_sigkilled_strand_nothing,
    another_user_with_the_objects_permission_shares_its_line,
    another_user_without_the_objects_permission_is_refused,
    a_planted_group_object_is_refused,
);

/// Runs `body::name` in a child process with `HERDLESS_BACKEND=backend`; fails with its output
/// unless its one test passed.
fn in_child(backend: &str, name: &str) {
    if backend == "native" && herdless_fixtures::native_backend().is_none() {
        return;
    }
    let out = Command::new(std::env::current_exe().expect("the test knows its path"))
        .args(["--ignored", "--exact", &format!("body::{name}")])
        .args(["--nocapture", "--test-threads=1"])
        .env("HERDLESS_BACKEND", backend)
        .stdin(Stdio::null())
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "body::{name} on {backend}: {}",
        out.status
    );
}

/// The backend word of this process's lines, as `HERDLESS_BACKEND` says it.
fn backend_word() -> String {
    std::env::var("HERDLESS_BACKEND").expect("the body runs with HERDLESS_BACKEND set")
}

const BOUND: Option<Duration> = Some(WAIT_BOUND);

fn shared(events: i16) -> i16 {
    events | POLLEXCL | POLLONE
}

/// The seed's illustration: three descriptors full of POLLIN, four calls, one event each, in
/// turn: fds[0], fds[1], fds[2], fds[0].
fn the_seeds_four_calls_serve_fd1_fd2_fd3_fd1() {
    let pipes: Vec<_> = (0..3).map(|_| pipe()).collect();
    for (i, (_, tx)) in pipes.iter().enumerate() {
        write_msg(tx.as_raw_fd(), i as u64);
    }
    let mut fds: Vec<PollFd<'_>> = pipes
        .iter()
        .map(|(rx, _)| PollFd::new(rx, shared(libc::POLLIN)))
        .collect();
    let mut served = Vec::new();
    for _ in 0..4 {
        assert_eq!(herdless::poll(&mut fds, BOUND).unwrap(), 1);
        let ready: Vec<usize> = (0..3).filter(|&i| fds[i].revents() != 0).collect();
        assert_eq!(ready.len(), 1, "one event per call");
        assert_eq!(fds[ready[0]].revents(), libc::POLLIN);
        served.push(ready[0]);
    }
    assert_eq!(served, [0, 1, 2, 0]);
}

/// Without either bit the call is `poll(2)`: the same count and `revents` as the system's call,
/// `POLLNVAL` for a closed number (`-1`, ignored, is the C tests' `poll_errors.c`).
fn without_the_bits_it_is_plain_poll() {
    let (ready_rx, ready_tx) = pipe();
    let (idle_rx, _idle_tx) = pipe();
    write_msg(ready_tx.as_raw_fd(), 1);
    let closed = {
        let (rx, _) = pipe();
        rx.as_raw_fd()
    };
    let wanted = [
        (ready_rx.as_raw_fd(), libc::POLLIN),
        (idle_rx.as_raw_fd(), libc::POLLIN),
        (closed, libc::POLLIN),
        (ready_tx.as_raw_fd(), libc::POLLOUT),
    ];
    let mut system: Vec<libc::pollfd> = wanted
        .iter()
        .map(|&(fd, events)| libc::pollfd {
            fd,
            events,
            revents: 0,
        })
        .collect();
    // SAFETY: a live array of pollfd of the length given.
    let n = unsafe { libc::poll(system.as_mut_ptr(), system.len() as libc::nfds_t, 0) };
    assert_eq!(n, 3); // ready, closed, writable
                      // PollFd borrows a descriptor: the closed number is borrowed raw, as C passes it.
    let closed_fd = raw_borrow(closed);
    let mut ours = [
        PollFd::new(&ready_rx, libc::POLLIN),
        PollFd::new(&idle_rx, libc::POLLIN),
        PollFd::new(&closed_fd, libc::POLLIN),
        PollFd::new(&ready_tx, libc::POLLOUT),
    ];
    assert_eq!(
        herdless::poll(&mut ours, Some(Duration::ZERO)).unwrap(),
        n as usize
    );
    let got: Vec<i16> = ours.iter().map(|p| p.revents()).collect();
    let want: Vec<i16> = system.iter().map(|p| p.revents).collect();
    assert_eq!(got, want);
    assert_eq!(got[2], libc::POLLNVAL);
    // And an empty wait ends at its timeout with 0.
    let mut idle = [PollFd::new(&idle_rx, libc::POLLIN)];
    assert_eq!(
        herdless::poll(&mut idle, Some(Duration::from_millis(20))).unwrap(),
        0
    );
}

/// A descriptor number as a borrowable value that is never closed (a closed number).
struct RawNumber(RawFd);

impl AsFd for RawNumber {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: the number (never -1) is only handed to poll, which looks it up and answers
        // POLLNVAL; it is never read, written nor closed through this borrow.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.0) }
    }
}

fn raw_borrow(fd: RawFd) -> RawNumber {
    RawNumber(fd)
}

/// Polls `fd` (exclusive, one event) until one message is read: the message.
fn take_one(fd: &OwnedFd) -> u64 {
    loop {
        let mut fds = [PollFd::new(fd, shared(libc::POLLIN))];
        assert_eq!(herdless::poll(&mut fds, BOUND).unwrap(), 1, "nothing came");
        if let Some(Some(id)) = read_msg(fd.as_raw_fd()) {
            return id;
        }
    }
}

/// Eight threads each join the pipe's line at their first call, take one message and exit
/// without a word: the next eight and the test's own thread still get every message, once.
fn threads_that_exit_without_leaving_strand_nothing() {
    let (rx, tx) = pipe();
    let rx = Arc::new(rx);
    let mut got = Vec::new();
    for round in 0..2u64 {
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let rx = Arc::clone(&rx);
                std::thread::spawn(move || take_one(&rx))
            })
            .collect();
        for i in 0..8 {
            write_msg(tx.as_raw_fd(), round * 100 + i);
        }
        got.extend(threads.into_iter().map(|t| t.join().unwrap()));
    }
    write_msg(tx.as_raw_fd(), 999);
    got.push(take_one(&rx));
    got.sort_unstable();
    let mut want: Vec<u64> = (0..8).chain(100..108).chain([999]).collect();
    want.sort_unstable();
    assert_eq!(got, want);
}

/// A closed number gets `POLLNVAL` (and the call returns at once); the number reused for
/// another object is that object's: its readiness, not the old one's.
fn closed_numbers_get_pollnval_and_reused_ones_the_new_object() {
    let (old_rx, old_tx) = pipe();
    write_msg(old_tx.as_raw_fd(), 1);
    assert_eq!(take_one(&old_rx), 1);
    write_msg(old_tx.as_raw_fd(), 2); // left unread in the old pipe
    let number = old_rx.as_raw_fd();
    drop(old_rx);
    let gone = raw_borrow(number);
    let mut fds = [PollFd::new(&gone, shared(libc::POLLIN))];
    assert_eq!(herdless::poll(&mut fds, BOUND).unwrap(), 1);
    assert_eq!(fds[0].revents(), libc::POLLNVAL);
    // The number again, for a new pipe with nothing in it yet (the lowest free number, or
    // dup2'd there if something else took it).
    let (new_rx, new_tx) = pipe();
    let reused = match new_rx.as_raw_fd() == number {
        true => new_rx,
        false => {
            let fd = nix::unistd::dup2(new_rx.as_raw_fd(), number).expect("dup2");
            assert_eq!(fd, number);
            // SAFETY: dup2 made `number` a new descriptor that nothing else owns.
            unsafe { OwnedFd::from_raw_fd(fd) }
        }
    };
    let mut fds = [PollFd::new(&reused, shared(libc::POLLIN))];
    let n = herdless::poll(&mut fds, Some(Duration::from_millis(50))).unwrap();
    assert_eq!(
        n,
        0,
        "the old pipe's message is not the new one's: {:#x}",
        fds[0].revents()
    );
    write_msg(new_tx.as_raw_fd(), 3);
    assert_eq!(take_one(&reused), 3);
    drop(old_tx);
}

/// Server A polls q1 and q2, server B q2 and q3 (threads here; three pipes, one line): q1's
/// messages go to A only, q3's to B only, q2's to both in turn, every one read once; a stop
/// pipe polled without the bit wakes both.
fn overlapping_sets_keep_exclusivity_and_turns_per_object() {
    let queues: Vec<_> = (0..3).map(|_| pipe()).collect();
    let (stop_rx, stop_tx) = pipe();
    let rx: Arc<Vec<OwnedFd>> =
        Arc::new(queues.iter().map(|(r, _)| r.try_clone().unwrap()).collect());
    let stop_rx = Arc::new(stop_rx);
    let (report, reports) = mpsc::channel::<(usize, usize, u64)>();
    let (tid_tx, tids) = mpsc::channel();
    let servers: Vec<_> = [[0usize, 1], [1, 2]]
        .into_iter()
        .enumerate()
        .map(|(server, set)| {
            let (rx, stop_rx, report) = (Arc::clone(&rx), Arc::clone(&stop_rx), report.clone());
            let tid_tx = tid_tx.clone();
            std::thread::spawn(move || loop {
                let _ = tid_tx.send(gettid());
                let mut fds = [
                    PollFd::new(&rx[set[0]], shared(libc::POLLIN)),
                    PollFd::new(&rx[set[1]], shared(libc::POLLIN)),
                    PollFd::new(&*stop_rx, libc::POLLIN),
                ];
                herdless::poll(&mut fds, BOUND).unwrap();
                if fds[2].revents() != 0 {
                    return;
                }
                let ready: Vec<usize> = (0..2).filter(|&i| fds[i].revents() != 0).collect();
                assert!(ready.len() <= 1, "POLLONE: one event per call");
                for i in ready {
                    if let Some(Some(id)) = read_msg(rx[set[i]].as_raw_fd()) {
                        report.send((server, set[i], id)).unwrap();
                    }
                }
            })
        })
        .collect();
    drop(report);
    let tids: Vec<i32> = vec![tids.recv().unwrap(), tids.recv().unwrap()];
    // One message at a time, each written once the last was read and both servers sleep in
    // their poll again.
    let plan: Vec<usize> = (0..40).map(|i| [1, 1, 0, 1, 2][i % 5]).collect();
    let mut got: Vec<(usize, usize, u64)> = Vec::new();
    for (id, &queue) in plan.iter().enumerate() {
        until_asleep(std::process::id(), &tids);
        write_msg(queues[queue].1.as_raw_fd(), id as u64);
        got.push(
            reports
                .recv_timeout(WAIT_BOUND)
                .expect("a message was not read"),
        );
    }
    drop(stop_tx);
    for s in servers {
        s.join().unwrap();
    }
    got.extend(reports.try_iter());
    let mut ids: Vec<u64> = got.iter().map(|g| g.2).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..plan.len() as u64).collect::<Vec<_>>(), "{got:?}");
    for &(server, queue, id) in &got {
        assert_eq!(queue, plan[id as usize]);
        assert!(queue == 1 || queue == server * 2, "{got:?}");
    }
    let q2: Vec<usize> = got.iter().filter(|g| g.1 == 1).map(|g| g.0).collect();
    let a = q2.iter().filter(|&&s| s == 0).count();
    eprintln!("q2's {} messages: A {a}, B {}", q2.len(), q2.len() - a);
    assert!(
        a >= q2.len() / 4 && q2.len() - a >= q2.len() / 4,
        "q2 in turns: {q2:?}"
    );
    drop(stop_rx);
}

extern "C" fn on_signal(_: libc::c_int) {}

/// A handled signal during a wait ends it with `Error::Interrupted` (poll's `EINTR`); a signal
/// with no handler to run, every millisecond, leaves the timeout whole (the call returns 0 no
/// sooner than asked); a handled one every millisecond, with the call retried on the time left,
/// as a C loop does on `EINTR`, ends at the deadline too.
fn signals_end_a_wait_with_eintr_and_leave_a_timeout_whole() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let handled = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handler does nothing, so it is async-signal-safe.
    unsafe { sigaction(Signal::SIGUSR1, &handled) }.expect("sigaction");
    let (rx, _tx) = pipe();
    let rx = Arc::new(rx);
    // One signal into a blocking wait.
    let (tid_tx, tid_rx) = mpsc::channel();
    let waiting = {
        let rx = Arc::clone(&rx);
        std::thread::spawn(move || {
            // SAFETY: pthread_self cannot fail.
            tid_tx
                .send((unsafe { libc::pthread_self() }, gettid()))
                .unwrap();
            let mut fds = [PollFd::new(&*rx, shared(libc::POLLIN))];
            herdless::poll(&mut fds, BOUND)
        })
    };
    let (thread, tid) = tid_rx.recv().unwrap();
    until_asleep(std::process::id(), &[tid]);
    // SAFETY: signals a live thread of ours (it is joined below).
    assert_eq!(unsafe { libc::pthread_kill(thread, libc::SIGUSR1) }, 0);
    assert!(matches!(waiting.join().unwrap(), Err(Error::Interrupted)));

    // A signal every millisecond: SIGWINCH (nothing to run: no EINTR), then SIGUSR1 (EINTR).
    for (signal, handled) in [(libc::SIGWINCH, false), (libc::SIGUSR1, true)] {
        let timeout = Duration::from_millis(150);
        let done = Arc::new(AtomicBool::new(false));
        let (tid_tx, tid_rx) = mpsc::channel();
        let waiting = {
            let (rx, done) = (Arc::clone(&rx), Arc::clone(&done));
            std::thread::spawn(move || {
                // SAFETY: pthread_self cannot fail.
                tid_tx.send(unsafe { libc::pthread_self() }).unwrap();
                let (start, mut interrupted) = (Instant::now(), 0u32);
                let deadline = start + timeout;
                let result = loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let mut fds = [PollFd::new(&*rx, shared(libc::POLLIN))];
                    match herdless::poll(&mut fds, Some(left)) {
                        Err(Error::Interrupted) => interrupted += 1,
                        Ok(0) => {}
                        other => break other,
                    }
                    if Instant::now() >= deadline {
                        break Ok(0);
                    }
                };
                done.store(true, Ordering::SeqCst);
                (
                    result.map_err(|e| e.to_string()),
                    start.elapsed(),
                    interrupted,
                )
            })
        };
        let thread = tid_rx.recv().unwrap();
        while !done.load(Ordering::SeqCst) {
            // SAFETY: the thread is live until `done` is set, and joined below.
            unsafe { libc::pthread_kill(thread, signal) };
            std::thread::sleep(Duration::from_millis(1));
        }
        let (result, took, interrupted) = waiting.join().unwrap();
        eprintln!("signal {signal} every ms: {result:?} after {took:?}, {interrupted} EINTR");
        assert_eq!(result, Ok(0));
        assert!(took >= timeout, "ended before its timeout: {took:?}");
        assert!(took < WAIT_BOUND, "the signals kept it past its timeout");
        match handled {
            true => assert!(interrupted > 0, "a handled signal ends a wait"),
            false => assert_eq!(interrupted, 0, "a signal with no handler ends no wait"),
        }
    }
}

// ---- member processes ---------------------------------------------------------------------

mod role {
    /// A member process (see `member_role`); run only by the tests that start members.
    #[test]
    #[ignore = "a member process started by the tests of lines"]
    fn member() {
        super::member_role();
    }
}

/// A member: opens `LINES_FIFO` (or takes the inherited descriptor `LINES_FD`) and loops on
/// `herdless::poll` with the bits, printing `GOT <id>` for each message read, until killed.
/// An error of the call is printed as `ERROR <kind>: <message>` and ends the process.
fn member_role() {
    let fd: OwnedFd = match std::env::var("LINES_FD") {
        // SAFETY: the test left this descriptor open across exec for this process alone.
        Ok(n) => unsafe { OwnedFd::from_raw_fd(n.parse().unwrap()) },
        Err(_) => {
            let path = std::env::var("LINES_FIFO").expect("LINES_FIFO or LINES_FD");
            match std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&path)
            {
                Ok(f) => f.into(),
                Err(e) => {
                    println!("ERROR open: {e}");
                    return;
                }
            }
        }
    };
    println!("READY {}", std::process::id());
    loop {
        let mut fds = [PollFd::new(&fd, shared(libc::POLLIN))];
        match herdless::poll(&mut fds, None) {
            Ok(_) => {}
            Err(Error::Interrupted) => continue,
            Err(e) => {
                let kind = match e {
                    Error::LineRefused { .. } => "LineRefused",
                    _ => "other",
                };
                println!("ERROR {kind}: {e}");
                return;
            }
        }
        if let Some(Some(id)) = read_msg(fd.as_raw_fd()) {
            println!("GOT {id}");
            herdless::poll_consumed(&fd).unwrap();
        }
    }
}

/// Member processes and what they print, line by line, as `(member, line)`.
struct Members {
    children: Vec<Child>,
    lines: mpsc::Receiver<(usize, String)>,
    sender: Option<mpsc::Sender<(usize, String)>>,
}

impl Members {
    fn new() -> Members {
        let (sender, lines) = mpsc::channel();
        Members {
            children: Vec::new(),
            lines,
            sender: Some(sender),
        }
    }

    /// Starts a member with `env`, as `user` (uid, gid) if given; waits for its READY line and
    /// until it sleeps in its first poll. Returns its first line (READY, or ERROR if it could
    /// not open the object).
    fn start(&mut self, env: &[(&str, String)], user: Option<(u32, u32)>) -> String {
        self.start_as(env, user, true)
    }

    /// As `start`; waits for its sleep only if `sleeps` (a member refused never sleeps).
    fn start_as(
        &mut self,
        env: &[(&str, String)],
        user: Option<(u32, u32)>,
        sleeps: bool,
    ) -> String {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--ignored", "--exact", "role::member", "--nocapture"])
            .args(["--test-threads=1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some((uid, gid)) = user {
            cmd.uid(uid).gid(gid); // std drops root's supplementary groups
        }
        let mut child = cmd.spawn().expect("a member starts");
        let index = self.children.len();
        let out = child.stdout.take().unwrap();
        let sender = self.sender.clone().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
                let _ = sender.send((index, line));
            }
        });
        self.children.push(child);
        let first = self.next(&format!("member {index}'s first line"));
        assert_eq!(first.0, index);
        if sleeps && first.1.starts_with("READY") {
            self.until_asleep(index);
        }
        first.1
    }

    /// Waits (bounded) until member `index`'s polling thread sleeps in the kernel's wait (the
    /// harness's main thread waits on a join, not in a poll); read from /proc.
    fn until_asleep(&self, index: usize) {
        let pid = self.children[index].id();
        let start = Instant::now();
        while !threads_of(pid)
            .iter()
            .any(|&tid| herdless_fixtures::counters::asleep_in_wait(pid, tid))
        {
            assert!(
                start.elapsed() < WAIT_BOUND * 2,
                "member {index} never slept in poll"
            );
            std::thread::yield_now();
        }
    }

    /// Kills member `index` (SIGKILL) and reaps it.
    fn kill(&mut self, index: usize) {
        self.children[index].kill().unwrap();
        self.children[index].wait().unwrap();
    }

    /// Collects `GOT` lines until `n` ids came: `(member, id)` each.
    fn collect(&self, n: usize) -> Vec<(usize, u64)> {
        let mut got = Vec::new();
        while got.len() < n {
            let (m, line) = self.next(&format!("message {} of {n}", got.len() + 1));
            match line.strip_prefix("GOT ") {
                Some(id) => got.push((m, id.parse().unwrap())),
                None => panic!("member {m}: {line}"),
            }
        }
        got
    }

    /// After everything was collected: any further `GOT` line (a message read twice), waiting
    /// a short while, then stops every member.
    fn extra(mut self) -> Vec<(usize, String)> {
        std::thread::sleep(Duration::from_millis(100));
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.sender = None;
        self.lines
            .iter()
            .filter(|(_, l)| l.contains("GOT ") || l.contains("ERROR"))
            .collect()
    }

    fn next(&self, what: &str) -> (usize, String) {
        loop {
            let (m, line) = self
                .lines
                .recv_timeout(WAIT_BOUND * 2)
                .unwrap_or_else(|_| panic!("no {what}"));
            // The harness's own words (running 1 test, the test's name before its first
            // line) are not the member's.
            let at = ["READY", "GOT ", "ERROR"].iter().find_map(|w| line.find(w));
            if let Some(at) = at {
                return (m, line[at..].to_string());
            }
        }
    }
}

impl Drop for Members {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The thread ids of process `pid`.
fn threads_of(pid: u32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A scratch directory for FIFOs, readable by every user (the other user's members open them).
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("herdless-lines-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        Scratch(dir)
    }

    /// A FIFO of `mode` in the directory, and a writer held open (read-write: no reader needed).
    fn fifo(&self, name: &str, mode: u32) -> (PathBuf, OwnedFd) {
        let path = self.0.join(name);
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        let writer = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        (path, writer.into())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How many messages each member read; panics on a message lost, read twice, or read after
/// the count was complete.
fn tally(got: &[(usize, u64)], extra: &[(usize, String)], n: u64) -> HashMap<usize, u64> {
    assert!(extra.is_empty(), "read twice, or an error: {extra:?}");
    let mut ids: Vec<u64> = got.iter().map(|g| g.1).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..n).collect::<Vec<_>>(), "lost or duplicated");
    let mut per = HashMap::new();
    for &(m, _) in got {
        *per.entry(m).or_insert(0) += 1;
    }
    per
}

/// Four member processes on one FIFO (a named object: its owner's line); the first two
/// (one of them the line's longest sleeper) SIGKILLed while idle: the two left read every one
/// of 60 messages, once each, and both take turns. Each burst of three is written once both
/// survivors sleep in their poll again: a burst is a backlog, which one member may take whole,
/// and a survivor not back in its wait yet (on a loaded machine, the one that lost the burst
/// before and absorbed its wake-up) could not be handed the next.
fn members_sigkilled_strand_nothing() {
    let scratch = Scratch::new("killed");
    let (path, writer) = scratch.fifo("queue", 0o600);
    let env = [("LINES_FIFO", path.display().to_string())];
    let mut members = Members::new();
    for _ in 0..4 {
        assert!(members.start(&env, None).starts_with("READY"));
    }
    members.kill(0);
    members.kill(1);
    let mut got = Vec::new();
    for id in 0..60u64 {
        if id % 3 == 0 {
            // In bursts of three, each read before the next, and both survivors asleep again.
            members.until_asleep(2);
            members.until_asleep(3);
        }
        write_msg(writer.as_raw_fd(), id);
        if id % 3 == 2 {
            got.extend(members.collect(3));
        }
    }
    let extra = members.extra();
    let per = tally(&got, &extra, 60);
    eprintln!("after two SIGKILLs: {per:?}");
    assert!(per.keys().all(|&m| m >= 2), "a dead member read: {per:?}");
    assert_eq!(per.len(), 2, "both survivors take turns: {per:?}");
}

/// The unprivileged user this test runs the other user's members as.
const OTHER: (u32, u32) = (65534, 65534);

/// Can the other user run this test binary? (Its path must be open to everyone.)
fn other_user_can_run() -> bool {
    let exe = std::env::current_exe().unwrap();
    let ok = exe
        .ancestors()
        .skip(1)
        .all(|dir| std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
        && std::fs::metadata(&exe).is_ok_and(|m| m.permissions().mode() & 0o001 != 0);
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !(ok && root) {
        let why = match root {
            false => "this test is not root (it changes user to start them)",
            true => "the test binary's path is not open to every user",
        };
        eprintln!("SKIPPED: another user's members: {why}");
        println!("SKIPPED: another user's members: {why}");
    }
    ok && root
}

/// A FIFO of mode 0666 owned by root: a member of another (unprivileged) user and one of root
/// share its line (made with the FIFO's access: read and write for all) and take its 40
/// messages in turn, each once.
fn another_user_with_the_objects_permission_shares_its_line() {
    if !other_user_can_run() {
        return;
    }
    let scratch = Scratch::new("open");
    let (path, writer) = scratch.fifo("queue", 0o666);
    let env = [("LINES_FIFO", path.display().to_string())];
    let mut members = Members::new();
    let first = members.start(&env, None);
    assert!(first.starts_with("READY"), "{first}");
    let first = members.start(&env, Some(OTHER));
    assert!(first.starts_with("READY"), "{first}");
    let mut got = Vec::new();
    for id in 0..40u64 {
        write_msg(writer.as_raw_fd(), id);
        got.extend(members.collect(1));
    }
    let extra = members.extra();
    let per = tally(&got, &extra, 40);
    eprintln!("root and user {}: {per:?}", OTHER.0);
    assert_eq!(per.len(), 2, "both users take turns: {per:?}");
}

/// A FIFO of mode 0600 owned by root: the other user may not open it, and with the descriptor
/// itself (inherited) it may not join its line: the call is refused (`Error::LineRefused`),
/// and root's own member still reads every message.
fn another_user_without_the_objects_permission_is_refused() {
    if !other_user_can_run() {
        return;
    }
    let scratch = Scratch::new("shut");
    let (path, writer) = scratch.fifo("queue", 0o600);
    // Root polls first: the line's group object exists, made with the FIFO's access (0600).
    let reader: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .unwrap()
        .into();
    let mut fds = [PollFd::new(&reader, shared(libc::POLLIN))];
    assert_eq!(herdless::poll(&mut fds, Some(Duration::ZERO)).unwrap(), 0);
    let mut members = Members::new();
    let by_path = [("LINES_FIFO", path.display().to_string())];
    let line = members.start(&by_path, Some(OTHER));
    assert!(
        line.starts_with("ERROR open"),
        "opened a 0600 FIFO of root's: {line}"
    );
    // The descriptor itself, inherited (close-on-exec cleared for this one start).
    let inherited = reader.try_clone().unwrap();
    nix::fcntl::fcntl(
        inherited.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .unwrap();
    let by_fd = [("LINES_FD", inherited.as_raw_fd().to_string())];
    let ready = members.start_as(&by_fd, Some(OTHER), false);
    assert!(ready.starts_with("READY"), "{ready}");
    drop(inherited);
    let (m, line) = members.next("the refusal");
    assert_eq!(m, 1);
    assert!(line.starts_with("ERROR LineRefused"), "{line}");
    eprintln!("refused: {line}");
    write_msg(writer.as_raw_fd(), 7);
    let mut fds = [PollFd::new(&reader, shared(libc::POLLIN))];
    assert_eq!(herdless::poll(&mut fds, BOUND).unwrap(), 1);
    assert_eq!(read_msg(reader.as_raw_fd()), Some(Some(7)));
    assert!(members.extra().is_empty());
}

/// A group object planted under the name of a line whose objects its maker may not open (a
/// FIFO of root's, group 4242, mode 0640; the plant owned by the other user, mode 0660): the
/// call is refused with `Error::LineRefused` naming the plant's owner, and nothing is read.
fn a_planted_group_object_is_refused() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "SKIPPED: a planted group object: the test must be root to plant as another user"
        );
        println!("SKIPPED: a planted group object: the test must be root to plant as another user");
        return;
    }
    let scratch = Scratch::new("planted");
    let (path, writer) = scratch.fifo("queue", 0o640);
    std::os::unix::fs::chown(&path, Some(0), Some(4242)).unwrap();
    let plant = PathBuf::from(format!(
        "/dev/shm/herdless.implicit.{}.0.4242.660",
        backend_word()
    ));
    let _ = std::fs::remove_file(&plant);
    std::fs::write(&plant, vec![0u8; 4096]).unwrap();
    std::os::unix::fs::chown(&plant, Some(OTHER.0), Some(4242)).unwrap();
    std::fs::set_permissions(&plant, std::fs::Permissions::from_mode(0o660)).unwrap();
    let reader: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .unwrap()
        .into();
    write_msg(writer.as_raw_fd(), 1);
    let mut fds = [PollFd::new(&reader, shared(libc::POLLIN))];
    let result = herdless::poll(&mut fds, Some(Duration::ZERO));
    let _ = std::fs::remove_file(&plant);
    match result {
        Err(e @ Error::LineRefused { .. }) => {
            let text = e.to_string();
            eprintln!("refused: {text}");
            assert!(
                text.contains(&format!("owned by user {}", OTHER.0)),
                "{text}"
            );
        }
        other => panic!("a planted object was used: {other:?}"),
    }
    assert_eq!(
        read_msg(reader.as_raw_fd()),
        Some(Some(1)),
        "the message is still there"
    );
    let _ = Path::new(&path);
}
