//! Named groups: workers that were exec'd (this test binary re-executes itself as a worker)
//! open the group by name and share one listener with the same guarantees as forked ones; many
//! processes creating one name at once end up in one group; an opener with other settings, a
//! group of another layout version, a garbage or truncated object and another user are each
//! refused with their own error; a group whose members all died is re-made by the next creator;
//! the descriptors a process holds do not grow with the group's size.

// Linux only: forked and exec'd members, /dev/shm, /proc/self/fd.
#![cfg(any(target_os = "linux", target_os = "android"))]

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use herdless::{Backend, Error, Events, Group, Interest, Origin, Rotation};

/// A name of this test run's own.
fn name(tag: &str) -> String {
    format!("test.{}.{tag}", std::process::id())
}

/// The shared-memory object behind a name, on Linux.
fn object_path(name: &str) -> String {
    format!("/dev/shm/herdless.{name}")
}

/// Removes the group when the test ends, whatever happens (by force: a failed test may leave
/// members behind).
struct Removed(String);
impl Drop for Removed {
    fn drop(&mut self) {
        let _ = Group::remove_forced(&self.0);
    }
}

/// The environment variable that makes this binary a worker (see `exec_worker_entry_point`).
const WORKER: &str = "HERDLESS_TEST_NAMED_WORKER";

/// The entry point of the exec'd workers: the test binary re-executes itself with
/// `--exact exec_worker_entry_point` and `HERDLESS_TEST_NAMED_WORKER=<group name>`; the
/// listener and a ready pipe come as inherited descriptors (numbers in the environment). Run by
/// the test harness without that variable, it returns at once.
#[test]
fn exec_worker_entry_point() {
    let Ok(group_name) = std::env::var(WORKER) else {
        return;
    };
    if std::env::var("HERDLESS_TEST_ACTION").as_deref() == Ok("open") {
        // Only open the group, as a program of another user would; the exit status says how
        // it went: 0 opened, 3 PermissionDenied, 4 anything else.
        let code = match Group::open(&group_name) {
            Ok(_) => 0,
            Err(Error::PermissionDenied { .. }) => 3,
            Err(e) => {
                eprintln!("opening {group_name}: {e:?}");
                4
            }
        };
        std::process::exit(code);
    }
    let fd = |var: &str| -> RawFd { std::env::var(var).unwrap().parse().unwrap() };
    if std::env::var("HERDLESS_TEST_ACTION").as_deref() == Ok("pipe") {
        return read_pipe_worker(
            &group_name,
            fd("HERDLESS_TEST_PIPE"),
            fd("HERDLESS_TEST_READY"),
        );
    }
    // SAFETY: the descriptors were left open across exec for this process alone.
    let listener = unsafe {
        use std::os::fd::FromRawFd;
        TcpListener::from_raw_fd(fd("HERDLESS_TEST_LISTENER"))
    };
    let ready = fd("HERDLESS_TEST_READY");
    let group = Group::open(&group_name).expect("opening the group by name");
    let mut waiter = group.join().unwrap();
    waiter
        .add(
            &listener,
            0,
            Interest::READABLE.exclusive().one_event_round_robin(),
        )
        .unwrap();
    write_all(ready, &gettid().to_ne_bytes());
    let mut events = Events::with_capacity(1);
    let mut accepted: u8 = 0;
    loop {
        waiter.wait(&mut events, None).unwrap();
        if events.is_empty() {
            continue;
        }
        match listener.accept() {
            Ok((mut stream, _)) => {
                waiter.consumed(0).unwrap();
                accepted += 1;
                let mut byte = [0u8; 1];
                stream.set_nonblocking(false).unwrap();
                if stream.read_exact(&mut byte).is_err() || byte[0] == b'q' {
                    stream.write_all(&[accepted]).unwrap();
                    return;
                }
                stream.write_all(&[accepted]).unwrap();
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// An exec'd worker on a shared pipe: reads ids and reports each one (8 bytes, an atomic pipe
/// write) on the report pipe, until the pipe hangs up.
fn read_pipe_worker(group_name: &str, data: RawFd, report: RawFd) {
    let group = Group::open(group_name).expect("opening the group by name");
    let mut waiter = group.join().unwrap();
    // SAFETY: the inherited read end is this process's to use for its whole life.
    let data_fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(data) };
    waiter
        .add(&data_fd, 0, Interest::READABLE.exclusive())
        .unwrap();
    write_all(report, &(gettid() as u64).to_ne_bytes());
    let mut events = Events::with_capacity(1);
    loop {
        waiter.wait(&mut events, None).unwrap();
        if events.is_empty() {
            continue;
        }
        match read_msg(data) {
            Some(Some(id)) => {
                waiter.consumed(0).unwrap();
                write_all(report, &id.to_ne_bytes());
            }
            Some(None) => return,
            None => waiter.consumed(0).unwrap(),
        }
    }
}

/// Exec'd members on one pipe, two of them killed with SIGKILL while the others read (one
/// right after it reported a message, so possibly holding the token or an unconsumed claim):
/// every message is still read exactly once, by the survivors.
fn exec_d_members_killed_while_others_read(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    const WORKERS: usize = 6;
    const MESSAGES: u64 = 600;
    let n = name("killed");
    let _removed = Removed(n.clone());
    let _group = Group::builder()
        .name(&n)
        .backend(backend)
        .rotation(Rotation::Every(1))
        .max_members(WORKERS)
        .build()
        .unwrap();
    let (data_r, data_w) = pipe();
    let (report_r, report_w) = pipe();
    // SAFETY: fcntl on our own descriptor: the parent reads it blocking.
    unsafe { libc::fcntl(report_r.as_raw_fd(), libc::F_SETFL, 0) };
    let (dfd, rfd) = (data_r.as_raw_fd(), report_w.as_raw_fd());
    let mut children = Vec::new();
    for _ in 0..WORKERS {
        let mut cmd = worker(
            &n,
            "pipe",
            &[("HERDLESS_TEST_PIPE", dfd), ("HERDLESS_TEST_READY", rfd)],
        );
        children.push(cmd.spawn().unwrap());
    }
    drop(report_w);
    drop(data_r);
    let mut word = [0u8; 8];
    for _ in 0..WORKERS {
        read_exact(report_r.as_raw_fd(), &mut word);
        let tid = u64::from_ne_bytes(word) as i32;
        until_asleep(tid as u32, &[tid]);
    }
    let mut seen = vec![0u32; MESSAGES as usize];
    let mut killed = 0;
    for id in 0..MESSAGES {
        write_msg(data_w.as_raw_fd(), id);
        read_exact(report_r.as_raw_fd(), &mut word);
        seen[u64::from_ne_bytes(word) as usize] += 1;
        if id == 200 || id == 400 {
            // The worker that took the previous message, or any other: the first one alive.
            let victim = &mut children[killed];
            victim.kill().unwrap();
            victim.wait().unwrap();
            killed += 1;
        }
    }
    drop(data_w);
    for mut c in children.into_iter().skip(killed) {
        assert!(c.wait().unwrap().success(), "a survivor failed");
    }
    assert!(
        seen.iter().all(|&c| c == 1),
        "not read exactly once: {seen:?}"
    );
}

/// This test binary, to be exec'd as a worker of the group `n` that does `action` ("serve" a
/// listener, read a "pipe", or only "open" the group), with `fds` inherited (close-on-exec
/// cleared between fork and exec) and their numbers in the environment variables named.
fn worker(n: &str, action: &str, fds: &[(&str, RawFd)]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "exec_worker_entry_point", "--nocapture"])
        .stdout(std::process::Stdio::null()) // the harness's lines, not the test's
        .env(WORKER, n)
        .env("HERDLESS_TEST_ACTION", action);
    let inherited: Vec<RawFd> = fds.iter().map(|&(_, fd)| fd).collect();
    for &(var, fd) in fds {
        cmd.env(var, fd.to_string());
    }
    // SAFETY: the hook only calls fcntl, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || inherited.iter().try_for_each(|&fd| inherit(fd)));
    }
    cmd
}

/// Clears close-on-exec on `fd` (in the child, between fork and exec).
fn inherit(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl on a descriptor of this process; async-signal-safe.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// 8 workers started by fork + exec open the group by name and take 400 connections, one at a
/// time, in strict turns (the forked workers' figure of `tests/processes.rs`), and each of
/// their kernel waits is woken about once per connection.
fn exec_workers_share_a_listener(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    const WORKERS: usize = 8;
    const CONNECTIONS: usize = 400;
    let n = name("exec");
    let _removed = Removed(n.clone());
    let group = Group::builder()
        .name(&n)
        .backend(backend)
        .max_members(WORKERS)
        .build()
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let (ready_r, ready_w) = pipe();
    // SAFETY: fcntl on our own descriptor: the parent reads it blocking.
    unsafe { libc::fcntl(ready_r.as_raw_fd(), libc::F_SETFL, 0) };
    let (lfd, rfd) = (listener.as_raw_fd(), ready_w.as_raw_fd());
    let mut children = Vec::new();
    for _ in 0..WORKERS {
        let mut cmd = worker(
            &n,
            "serve",
            &[
                ("HERDLESS_TEST_LISTENER", lfd),
                ("HERDLESS_TEST_READY", rfd),
            ],
        );
        children.push(cmd.spawn().unwrap());
    }
    drop(ready_w);
    // Each worker's waiting thread (the harness runs a test in a thread of its own).
    let mut tid = [0u8; 4];
    let mut threads = Vec::new();
    for _ in 0..WORKERS {
        read_exact(ready_r.as_raw_fd(), &mut tid);
        threads.push(i32::from_ne_bytes(tid));
    }
    // The thread id is the process id of its own /proc/<id>/task/<id> entry too.
    let asleep: Vec<(u32, i32)> = threads.iter().map(|&t| (t as u32, t)).collect();
    let mut byte = [0u8; 1];
    for _ in 0..CONNECTIONS {
        // Each connection once every worker is back in its wait: the turns are then the
        // library's to give, however loaded the machine (a worker not yet back would lose its
        // turn to the next one, as the kernel gives it).
        herdless_fixtures::until_asleep(&asleep, std::time::Duration::from_secs(20)).unwrap();
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"x").unwrap();
        c.read_exact(&mut byte).unwrap();
    }
    let mut counts = Vec::new();
    for _ in 0..WORKERS {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"q").unwrap();
        c.read_exact(&mut byte).unwrap();
        counts.push(u64::from(byte[0]) - 1);
    }
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a worker failed");
    }
    eprintln!("{backend:?} exec'd workers, accepts per worker: {counts:?}");
    assert_eq!(group.stats().len(), WORKERS, "{:?}", group.stats());
    assert_eq!(counts.iter().sum::<u64>(), CONNECTIONS as u64, "{counts:?}");
    for &c in &counts {
        assert!((48..=52).contains(&c), "not 50 ± 2 each: {counts:?}");
    }
}

/// 32 processes create-or-open one name at the same instant: one group, 32 distinct slots.
fn a_creation_race_ends_in_one_group(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    const RACERS: usize = 32;
    let n = name("race");
    let _removed = Removed(n.clone());
    let racers = Racers::fork(RACERS, || {
        Group::builder()
            .name(&n)
            .backend(backend)
            .max_members(64)
            .build()
    });
    racers.go();
    let mut slots: Vec<usize> = racers.reports().into_iter().map(|(s, _)| s).collect();
    let group = Group::open(&n).unwrap();
    let stats = group.stats();
    racers.stop();
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), RACERS, "two racers got one slot: {slots:?}");
    assert_eq!(stats.len(), RACERS, "not one group: {stats:?}");
    assert!(stats.iter().all(|m| m.alive), "{stats:?}");
    assert_eq!(group.backend(), backend);
}

/// Forked processes that race to a named group: each, at the word go, builds it with the
/// function given, joins, reports its (slot, process id), and stays a member until `stop`.
struct Racers {
    pids: Vec<libc::pid_t>,
    go: std::os::fd::OwnedFd,
    reports: std::os::fd::OwnedFd,
    stop: std::os::fd::OwnedFd,
}

impl Racers {
    fn fork(count: usize, build: impl Fn() -> herdless::Result<Group>) -> Racers {
        let (go_r, go_w) = pipe();
        let (reports_r, reports_w) = pipe();
        let (stop_r, stop_w) = pipe();
        for fd in [&go_r, &reports_r, &stop_r] {
            // SAFETY: fcntl on our own descriptor: these are read blocking.
            unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, 0) };
        }
        let mut pids = Vec::new();
        for _ in 0..count {
            // SAFETY: the child uses this crate, raw system calls and _exit only.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0);
            if pid == 0 {
                drop((go_w, stop_w, reports_r)); // the hang-ups come from the parent alone
                let report = |slot: u32| {
                    let mut record = slot.to_ne_bytes().to_vec();
                    record.extend_from_slice(&std::process::id().to_ne_bytes());
                    write_all(reports_w.as_raw_fd(), &record);
                };
                let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let mut b = [0u8; 1];
                    read_exact(go_r.as_raw_fd(), &mut b);
                    let waiter = build().unwrap().join().unwrap();
                    report(waiter.member() as u32);
                    // Stay a member until the parent has looked (its hang-up).
                    // SAFETY: a blocking read into a live byte.
                    unsafe { libc::read(stop_r.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
                }));
                if code.is_err() {
                    report(u32::MAX); // no slot: the parent does not wait for this one
                }
                // SAFETY: leaves the child at once.
                unsafe { libc::_exit(i32::from(code.is_err())) };
            }
            pids.push(pid);
        }
        Racers {
            pids,
            go: go_w,
            reports: reports_r,
            stop: stop_w,
        }
    }

    /// Every racer goes.
    fn go(&self) {
        write_all(self.go.as_raw_fd(), &vec![1; self.pids.len()]);
    }

    /// Each racer's (slot, process id), once every one has joined.
    fn reports(&self) -> Vec<(usize, u32)> {
        let mut records = vec![0u8; self.pids.len() * 8];
        read_exact(self.reports.as_raw_fd(), &mut records);
        records
            .chunks(8)
            .map(|c| {
                let word = |i: usize| u32::from_ne_bytes(c[i..i + 4].try_into().unwrap());
                (word(0) as usize, word(4))
            })
            .collect()
    }

    /// Ends every racer (they leave) and reaps them, each exit status 0.
    fn stop(self) {
        drop(self.stop);
        for pid in self.pids {
            reap(pid);
        }
    }
}

/// Forks a member of the named group that stays joined until the returned pipe end is dropped.
fn member_in_child(n: &str) -> (libc::pid_t, std::os::fd::OwnedFd) {
    members_in_child(|| Group::open(n).unwrap(), 1)
}

/// `count` members of `group()` joined in a forked child, which holds them until the returned
/// descriptor is closed (or the child is killed).
fn members_in_child(
    group: impl Fn() -> Group,
    count: usize,
) -> (libc::pid_t, std::os::fd::OwnedFd) {
    let (ready_r, ready_w) = pipe();
    // SAFETY: fcntl on our own descriptor: read blocking.
    unsafe { libc::fcntl(ready_r.as_raw_fd(), libc::F_SETFL, 0) };
    let (stop_r, stop_w) = pipe();
    // SAFETY: as above.
    unsafe { libc::fcntl(stop_r.as_raw_fd(), libc::F_SETFL, 0) };
    // SAFETY: the child uses this crate, raw system calls and _exit only.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        drop(stop_w);
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let group = group();
            let _members: Vec<_> = (0..count).map(|_| group.join().unwrap()).collect();
            write_all(ready_w.as_raw_fd(), &[1]);
            let mut b = [0u8; 1];
            // SAFETY: a blocking read into a live byte.
            unsafe { libc::read(stop_r.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
        }));
        // SAFETY: leaves the child at once.
        unsafe { libc::_exit(i32::from(code.is_err())) };
    }
    let mut b = [0u8; 1];
    read_exact(ready_r.as_raw_fd(), &mut b);
    (pid, stop_w)
}

fn reap(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: reaps our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
}

/// A creator whose settings differ from those of a group in use gets an error naming the
/// setting; `Group::open` takes the group's settings; once every member is gone and nobody has
/// the group open, the next creator re-makes it with its own.
fn settings_differ_while_in_use_and_a_dead_group_is_reused(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    let n = name("settings");
    let _removed = Removed(n.clone());
    let build = |max: usize, rotation: Rotation| {
        Group::builder()
            .name(&n)
            .backend(backend)
            .rotation(rotation)
            .max_members(max)
            .build()
    };
    let group = build(8, Rotation::Every(1)).unwrap();
    let (pid, stop) = member_in_child(&n);
    drop(group); // the child's member keeps the group in use
    match build(16, Rotation::Every(1)) {
        Err(Error::GroupSettingsDiffer {
            setting,
            group,
            asked,
            ..
        }) => assert_eq!(
            (setting, group.as_str(), asked.as_str()),
            ("max_members", "8", "16")
        ),
        other => panic!("expected GroupSettingsDiffer, got {other:?}"),
    }
    match build(8, Rotation::Adaptive) {
        Err(Error::GroupSettingsDiffer { setting, .. }) => assert_eq!(setting, "rotation"),
        other => panic!("expected GroupSettingsDiffer, got {other:?}"),
    }
    let other_backend = match backend {
        Backend::Native => Backend::Emulated,
        _ => Backend::Native,
    };
    if herdless_fixtures::native_backend().is_some() {
        let asked = Group::builder()
            .name(&n)
            .backend(other_backend)
            .rotation(Rotation::Every(1))
            .max_members(8)
            .build();
        assert!(
            matches!(
                asked,
                Err(Error::GroupSettingsDiffer {
                    setting: "backend",
                    ..
                })
            ),
            "{asked:?}"
        );
    }
    // Auto takes the group's backend; open takes everything.
    let auto = Group::builder()
        .name(&n)
        .rotation(Rotation::Every(1))
        .max_members(8)
        .build()
        .unwrap();
    assert_eq!(auto.backend(), backend);
    drop(auto);
    let opened = Group::open(&n).unwrap();
    assert_eq!(
        (opened.backend(), opened.rotation(), opened.max_members()),
        (backend, Rotation::Every(1), 8)
    );
    assert_eq!(opened.stats().len(), 1, "the child's member");
    assert!(opened.stats()[0].alive);
    drop(opened);
    drop(stop);
    reap(pid);
    // Every member gone, nobody has it open: the next creator makes it anew, with its settings.
    let fresh = build(16, Rotation::Adaptive).unwrap();
    assert_eq!(
        (fresh.max_members(), fresh.rotation(), fresh.stats().len()),
        (16, Rotation::Adaptive, 0)
    );
    assert_eq!(fresh.origin(), Origin::Remade);
}

/// A member killed with SIGKILL leaves a slot the next member of another process reuses, and
/// a group whose creator died before setting it up is set up by the next creator.
fn deaths_between_unrelated_processes(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    let n = name("deaths");
    let _removed = Removed(n.clone());
    // A creator that died after making the object, before setting it up: an empty object.
    std::fs::File::create(object_path(&n)).unwrap();
    assert!(matches!(Group::open(&n), Err(Error::GroupNotFound { .. })));
    let group = Group::builder()
        .name(&n)
        .backend(backend)
        .max_members(1)
        .build()
        .unwrap();
    let (pid, _stop) = member_in_child(&n);
    assert!(matches!(group.join(), Err(Error::GroupFull { max: 1 })));
    // SAFETY: kills our own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let mut status = 0;
    // SAFETY: reaps our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let waiter = group.join().expect("the dead member's slot");
    assert_eq!(waiter.member(), 0);
}

/// Writes `bytes` at `offset` of the object behind `name`.
fn scribble(name: &str, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(object_path(name))
        .unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

/// A group of another layout version, a garbage object and a truncated one are refused, by
/// openers and creators alike, and nothing of them is used; removing the name lets a creator
/// start again.
fn bad_objects_are_refused(backend: Backend) {
    // (A fork of another test must not happen while this one holds the table of open groups.)
    let _one_at_a_time = one_fork_at_a_time();
    let n = name("bad");
    let _removed = Removed(n.clone());
    let make = || {
        Group::builder()
            .name(&n)
            .backend(backend)
            .max_members(4)
            .build()
    };
    drop(make().unwrap());
    // The layout version: the u32 after the magic word.
    scribble(&n, 8, &999u32.to_ne_bytes());
    for got in [Group::open(&n), make()] {
        match got {
            Err(Error::IncompatibleGroup {
                found, expected, ..
            }) => assert_eq!((found, expected), (999, 7)), // this herdless's layout: 7
            other => panic!("expected IncompatibleGroup, got {other:?}"),
        }
    }
    // Garbage: no magic word.
    scribble(&n, 0, &[0xA5; 4096]);
    for got in [Group::open(&n), make()] {
        assert!(matches!(got, Err(Error::CorruptGroup { .. })), "{got:?}");
    }
    // Truncated: a valid group cut short.
    Group::remove(&n).unwrap();
    drop(make().unwrap());
    let len = std::fs::metadata(object_path(&n)).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(object_path(&n))
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    match Group::open(&n) {
        Err(Error::CorruptGroup { reason, .. }) => assert!(reason.contains("bytes"), "{reason}"),
        other => panic!("expected CorruptGroup, got {other:?}"),
    }
    // A member count out of range in an otherwise valid preamble (u32 at offset 12).
    Group::remove(&n).unwrap();
    drop(make().unwrap());
    scribble(&n, 12, &1_000_000u32.to_ne_bytes());
    assert!(matches!(Group::open(&n), Err(Error::CorruptGroup { .. })));
    Group::remove(&n).unwrap();
    assert!(matches!(
        Group::remove(&n),
        Err(Error::GroupNotFound { .. })
    ));
    assert!(matches!(Group::open(&n), Err(Error::GroupNotFound { .. })));
    let fresh = make().unwrap();
    assert_eq!(fresh.max_members(), 4);
}

/// A group is created 0600 unless a mode is given; another user is refused with
/// PermissionDenied, and let in by a mode that allows it.
fn another_user_is_refused(backend: Backend) {
    // SAFETY: getuid cannot fail.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("SKIPPED: another_user_is_refused needs root to become another user");
        return;
    }
    let _one_at_a_time = one_fork_at_a_time();
    for (mode, allowed) in [(0o600, false), (0o666, true)] {
        let n = name(&format!("perm{mode:o}"));
        let _removed = Removed(n.clone());
        let _group = Group::builder()
            .name(&n)
            .backend(backend)
            .mode(mode)
            .build()
            .unwrap();
        use std::os::unix::fs::PermissionsExt;
        let on_disk = std::fs::metadata(object_path(&n))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(on_disk, mode, "the mode asked for, whatever the umask");
        // Another user's program: this binary exec'd as nobody, opening the name.
        let status = worker(&n, "open", &[])
            .uid(65534)
            .gid(65534)
            .status()
            .unwrap();
        let want = if allowed { 0 } else { 3 };
        assert_eq!(status.code(), Some(want), "mode {mode:o}: {status:?}");
    }
}

/// The descriptors a process holds for a group and one member do not grow with the group's
/// size but for an anonymous group's lock files, one per 256 members (64 and 4 096 members
/// differ by 15); a named group's are opened when a member needs one, so they do not.
fn descriptors_do_not_grow_with_the_group(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    for named in [false, true] {
        // Counted in a forked child: one thread, so no other test opens descriptors meanwhile.
        let (report_r, report_w) = pipe();
        // SAFETY: fcntl on our own descriptor: read blocking.
        unsafe { libc::fcntl(report_r.as_raw_fd(), libc::F_SETFL, 0) };
        let n = name("descriptors");
        let _removed = Removed(n.clone());
        // SAFETY: the child uses this crate, /proc, raw system calls and _exit only.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let open_fds = || std::fs::read_dir("/proc/self/fd").unwrap().count() as u8;
            let mut cost = Vec::new();
            // The first round opens what a process opens once (the native probe's answer is
            // kept).
            for max in [64, 64, 4096] {
                let before = open_fds();
                let mut builder = Group::builder().backend(backend).max_members(max);
                if named {
                    builder = builder.name(&n);
                }
                let group = builder.build().unwrap();
                let waiter = group.join().unwrap();
                cost.push(open_fds() - before);
                drop((waiter, group));
                if named {
                    Group::remove(&n).unwrap();
                }
            }
            write_all(report_w.as_raw_fd(), &cost);
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(0) };
        }
        drop(report_w);
        let mut cost = [0u8; 3];
        read_exact(report_r.as_raw_fd(), &mut cost);
        reap(pid);
        let what = if named { "a named" } else { "an anonymous" };
        eprintln!(
            "{backend:?}: descriptors for {what} group and one member, 64 and 4096 members: {cost:?}"
        );
        let lock_files = if named { 0 } else { 15 };
        assert_eq!(cost[1] + lock_files, cost[2], "{what}: {cost:?}");
        assert!(cost[1] <= 8, "{cost:?}");
    }
}

/// A group built for 4 096 members works in processes limited to 256 descriptors
/// (`RLIMIT_NOFILE`): 8 processes of 32 member threads each (`HERDLESS_NAMED_PROCESSES` sets
/// another count of processes: 128 fill the 4 096 slots) share one pipe, and every message is
/// read exactly once. (Door bells made per slot in every process, as before named groups,
/// needed 8 193 descriptors here.)
fn a_big_group_under_a_small_descriptor_limit(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    const THREADS: usize = 32;
    let processes: usize = std::env::var("HERDLESS_NAMED_PROCESSES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let messages = processes * THREADS * 4;
    let n = name("big");
    let _removed = Removed(n.clone());
    let group = Group::builder()
        .name(&n)
        .backend(backend)
        .max_members(4096)
        .build()
        .unwrap();
    let (data_r, data_w) = pipe();
    let (ready_r, ready_w) = pipe();
    // SAFETY: fcntl on our own descriptor: the parent reads it blocking.
    unsafe { libc::fcntl(ready_r.as_raw_fd(), libc::F_SETFL, 0) };
    let reads = herdless_fixtures::SharedCounters::new(messages).unwrap();
    let mut pids = Vec::new();
    for _ in 0..processes {
        // SAFETY: the child uses this crate, std threads, raw system calls and _exit only.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = std::panic::catch_unwind(|| {
                drop(data_w);
                let limit = libc::rlimit {
                    rlim_cur: 256,
                    rlim_max: 256,
                };
                // SAFETY: sets this child's own limit from a live struct.
                assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
                std::thread::scope(|scope| {
                    for _ in 0..THREADS {
                        scope.spawn(|| {
                            let mut waiter = group.join().unwrap();
                            waiter
                                .add(&data_r, 0, Interest::READABLE.exclusive())
                                .unwrap();
                            write_all(ready_w.as_raw_fd(), &[1]);
                            let mut events = Events::with_capacity(1);
                            loop {
                                waiter.wait(&mut events, None).unwrap();
                                if events.is_empty() {
                                    continue;
                                }
                                match read_msg(data_r.as_raw_fd()) {
                                    Some(Some(id)) => {
                                        waiter.consumed(0).unwrap();
                                        reads
                                            .get(id as usize)
                                            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                    }
                                    Some(None) => return, // the parent hung up
                                    None => waiter.consumed(0).unwrap(),
                                }
                            }
                        });
                    }
                });
            });
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(i32::from(code.is_err())) };
        }
        pids.push(pid);
    }
    drop(ready_w);
    let mut ready = vec![0u8; processes * THREADS];
    read_exact(ready_r.as_raw_fd(), &mut ready);
    for id in 0..messages {
        write_msg(data_w.as_raw_fd(), id as u64);
    }
    // Every message read before the hang-up: then the members see EOF and stop.
    let start = std::time::Instant::now();
    while (0..messages).any(|i| reads.get(i).load(std::sync::atomic::Ordering::SeqCst) == 0) {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(120),
            "messages left unread"
        );
        std::thread::yield_now();
    }
    drop(data_w);
    for pid in pids {
        reap(pid);
    }
    let counts: Vec<u64> = (0..messages)
        .map(|i| reads.get(i).load(std::sync::atomic::Ordering::SeqCst))
        .collect();
    assert!(
        counts.iter().all(|&c| c == 1),
        "a message not read exactly once"
    );
    assert_eq!(group.stats().len(), processes * THREADS);
}

/// The descriptors a named group and its member hold are close-on-exec: a program a member
/// execs inherits none of them (the shared-memory object, the liveness locks' file, the door
/// bells, the poller).
fn the_groups_descriptors_are_close_on_exec(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    let n = name("cloexec");
    let _removed = Removed(n.clone());
    let listed = || -> Vec<(RawFd, String)> {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| {
                let e = e.ok()?;
                let fd: RawFd = e.file_name().to_str()?.parse().ok()?;
                let target = std::fs::read_link(e.path()).ok()?;
                Some((fd, target.to_string_lossy().into_owned()))
            })
            .collect()
    };
    let before = listed();
    let group = Group::builder().name(&n).backend(backend).build().unwrap();
    let waiter = group.join().unwrap();
    let new: Vec<(RawFd, String)> = listed()
        .into_iter()
        .filter(|entry| !before.contains(entry) && !entry.1.starts_with("/proc/"))
        .collect();
    assert!(
        new.iter()
            .any(|(_, t)| t.contains(&format!("herdless.{n}"))),
        "the shared-memory object is not among the new descriptors: {new:?}"
    );
    for (fd, target) in &new {
        // SAFETY: reads the flags of a descriptor of this process.
        let flags = unsafe { libc::fcntl(*fd, libc::F_GETFD) };
        // (A descriptor another test thread opened meanwhile may be gone already.)
        if flags >= 0 {
            assert_ne!(
                flags & libc::FD_CLOEXEC,
                0,
                "{fd} ({target}) is inherited across exec"
            );
        }
    }
    drop((waiter, group));
}

/// Creates the named group `n` (8 members), or opens it.
fn build_named(n: &str, backend: Backend) -> herdless::Result<Group> {
    Group::builder()
        .name(n)
        .backend(backend)
        .max_members(8)
        .build()
}

/// What a member in a child process tells the parent (`ServingMember`): 16 bytes, a tag and a
/// value, one atomic pipe write each.
const JOINED: u64 = 1; // value: its slot
const READ: u64 = 2; // value: the message id read
const REMOVED: u64 = 3; // its call got Error::GroupRemoved; it opens the name again

/// A member of the named group in a forked child, serving a pipe as a server would: it opens
/// the group by name, joins, and reads messages (`send`); when a call says `GroupRemoved` it
/// leaves, opens the name again and joins the group then under it. A byte on its poke pipe
/// (watched plainly) makes its `wait` return, so that it calls again; the data pipe's hang-up
/// (`stop`) ends it.
struct ServingMember {
    pid: libc::pid_t,
    data: std::os::fd::OwnedFd,
    poke: std::os::fd::OwnedFd,
    report: std::os::fd::OwnedFd,
}

impl ServingMember {
    fn fork(n: &str) -> ServingMember {
        let (data_r, data_w) = pipe();
        let (poke_r, poke_w) = pipe();
        let (report_r, report_w) = pipe();
        // SAFETY: fcntl on our own descriptor: the parent reads it blocking.
        unsafe { libc::fcntl(report_r.as_raw_fd(), libc::F_SETFL, 0) };
        // SAFETY: the child uses this crate, raw system calls and _exit only.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            drop((data_w, poke_w, report_r));
            let code = std::panic::catch_unwind(|| {
                serve_until_hang_up(
                    n,
                    data_r.as_raw_fd(),
                    poke_r.as_raw_fd(),
                    report_w.as_raw_fd(),
                )
            });
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(i32::from(code.is_err())) };
        }
        ServingMember {
            pid,
            data: data_w,
            poke: poke_w,
            report: report_r,
        }
    }

    /// The child's next report: (tag, value).
    fn next(&self) -> (u64, u64) {
        let mut record = [0u8; 16];
        read_exact(self.report.as_raw_fd(), &mut record);
        let word = |i: usize| u64::from_ne_bytes(record[i..i + 8].try_into().unwrap());
        (word(0), word(8))
    }

    /// Writes message `id` and returns once the child reports it read.
    fn send(&self, id: u64) {
        write_msg(self.data.as_raw_fd(), id);
        assert_eq!(
            self.next(),
            (READ, id),
            "the member did not serve message {id}"
        );
    }

    /// Makes the child's `wait` return, so that it calls `wait` again.
    fn poke(&self) {
        write_all(self.poke.as_raw_fd(), &[1]);
    }

    /// Hangs up its data pipe and reaps it (exit status 0 asserted).
    fn stop(self) {
        drop(self.data);
        reap(self.pid);
    }
}

/// The child's side of `ServingMember`.
fn serve_until_hang_up(n: &str, data: RawFd, poke: RawFd, report: RawFd) {
    let tell = |tag: u64, value: u64| {
        let mut record = tag.to_ne_bytes().to_vec();
        record.extend_from_slice(&value.to_ne_bytes());
        write_all(report, &record);
    };
    // SAFETY: the pipe ends live as long as this child.
    let (data_fd, poke_fd) = unsafe {
        (
            std::os::fd::BorrowedFd::borrow_raw(data),
            std::os::fd::BorrowedFd::borrow_raw(poke),
        )
    };
    let join = || {
        let group = Group::open(n).expect("opening the group by name");
        let mut waiter = group.join().unwrap();
        waiter
            .add(&data_fd, 0, Interest::READABLE.exclusive())
            .unwrap();
        waiter.add(&poke_fd, 1, Interest::READABLE).unwrap();
        tell(JOINED, waiter.member() as u64);
        (group, waiter)
    };
    let (mut _group, mut waiter) = join();
    let mut events = Events::with_capacity(2);
    loop {
        match waiter.wait(&mut events, None) {
            Err(Error::GroupRemoved { .. }) => {
                tell(REMOVED, 0);
                drop(waiter);
                (_group, waiter) = join();
                continue;
            }
            other => {
                other.unwrap();
            }
        }
        for event in events.iter() {
            if event.key == 1 {
                let mut byte = [0u8; 1];
                // SAFETY: reads into a live byte (the poke pipe is non-blocking).
                unsafe { libc::read(poke, byte.as_mut_ptr().cast(), 1) };
                continue;
            }
            match read_msg(data) {
                Some(Some(id)) => {
                    waiter.consumed(0).unwrap();
                    tell(READ, id);
                }
                Some(None) => return,
                None => waiter.found_nothing(0).unwrap(),
            }
        }
    }
}

/// `Group::remove` while a member of another process is alive is refused, naming the member
/// (slot and process) and the process that has the group open; nothing changes: the member
/// goes on serving, and the name is the same group (a build opens it). A member of the
/// caller's own process is named too. Once every member has left, the removal goes through,
/// and the next build creates a new group.
fn remove_while_a_member_lives_is_refused(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    let n = name("inuse");
    let _removed = Removed(n.clone());
    let build = || build_named(&n, backend);
    assert_eq!(build().unwrap().origin(), Origin::Created);
    // (Dropped before the fork: the child opens the name itself, as an unrelated process
    // does, rather than inherit this process's open group.)
    let member = ServingMember::fork(&n);
    let (tag, slot) = member.next();
    assert_eq!(tag, JOINED);
    let child = (slot as usize, member.pid as u32);
    match Group::remove(&n) {
        Err(e @ Error::GroupInUse { .. }) => {
            let text = e.to_string();
            let Error::GroupInUse {
                members, opened_by, ..
            } = e
            else {
                unreachable!()
            };
            assert_eq!(members, vec![child]);
            assert_eq!(opened_by, Some(child.1));
            assert!(
                text.contains(&format!("process {}", child.1)) && text.contains("remove_forced"),
                "{text}"
            );
        }
        other => panic!("expected GroupInUse, got {other:?}"),
    }
    // Nothing changed: the member serves, and the name is its group.
    member.send(7);
    let again = build().unwrap();
    assert_eq!(again.origin(), Origin::Opened);
    let mine = again.join().unwrap();
    let me = (mine.member(), std::process::id());
    match Group::remove(&n) {
        Err(Error::GroupInUse { mut members, .. }) => {
            members.sort_unstable();
            let mut want = vec![child, me];
            want.sort_unstable();
            assert_eq!(members, want, "this process's own member is named too");
        }
        other => panic!("expected GroupInUse, got {other:?}"),
    }
    member.send(8);
    assert_eq!(
        again.stats().iter().filter(|m| m.alive).count(),
        2,
        "{:?}",
        again.stats()
    );
    drop((mine, again));
    member.stop();
    // Every member gone, no other process has it open: removed, and the name is free.
    Group::remove(&n).unwrap();
    assert!(matches!(Group::open(&n), Err(Error::GroupNotFound { .. })));
    let fresh = build().unwrap();
    assert_eq!(fresh.origin(), Origin::Created);
    assert!(fresh.stats().is_empty());
}

/// `Group::remove_forced` removes a group in use: the name is free at once, the old group's
/// handles refuse to join, and its member, on its next call, gets `GroupRemoved`, opens the
/// name again and joins the group then under it (made meanwhile by the supervisor), where it
/// serves.
fn a_forced_removal_sends_the_members_to_the_new_group(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    let n = name("forced");
    let _removed = Removed(n.clone());
    let build = || build_named(&n, backend);
    let old = build().unwrap();
    let member = ServingMember::fork(&n);
    assert_eq!(member.next().0, JOINED);
    member.send(1);
    // Asleep in its wait when the group is removed: it hears of it at its next call.
    until_asleep(member.pid as u32, &[member.pid]);
    Group::remove_forced(&n).unwrap();
    assert!(matches!(Group::open(&n), Err(Error::GroupNotFound { .. })));
    assert!(matches!(old.join(), Err(Error::GroupRemoved { .. })));
    let new = build().unwrap();
    assert_eq!(new.origin(), Origin::Created, "not the removed group");
    member.poke();
    assert_eq!(member.next(), (REMOVED, 0));
    let (tag, slot) = member.next();
    assert_eq!(tag, JOINED);
    let stats = new.stats();
    assert_eq!(stats.len(), 1, "{stats:?}");
    assert_eq!(
        (stats[0].member, stats[0].pid, stats[0].alive),
        (slot as usize, member.pid as u32, true)
    );
    member.send(2);
    assert_eq!(new.stats()[0].events, 1, "served in the new group");
    drop(new);
    member.stop();
    Group::remove(&n).unwrap();
}

/// Processes create-or-open a name while another removes it again and again, for many rounds:
/// a removal that finds the group unused goes through, and an opener that opened the name
/// just before it opens the name again, so every round ends with every opener in the one group
/// under the name (the parent, opening it afterwards, sees each of them there, alive). Without
/// the removed mark an opener that took the object's setup lock after the unlink set up a
/// group of its own in the unlinked object.
fn opening_while_removing_never_makes_two_groups(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    const RACERS: usize = 6;
    const ROUNDS: usize = 20;
    let n = name("rmrace");
    let _removed = Removed(n.clone());
    let (mut removed, mut refused) = (0, 0);
    for round in 0..ROUNDS {
        // Each round starts with an unused group under the name.
        drop(build_named(&n, backend).unwrap());
        let racers = Racers::fork(RACERS, || build_named(&n, backend));
        let done = std::sync::atomic::AtomicBool::new(false);
        let mut reported = std::thread::scope(|scope| {
            let remover = scope.spawn(|| {
                let (mut removed, mut refused) = (0, 0);
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    match Group::remove(&n) {
                        Ok(()) => removed += 1,
                        Err(Error::GroupInUse { .. }) => refused += 1,
                        Err(Error::GroupNotFound { .. }) => {}
                        Err(e) => panic!("removing: {e:?}"),
                    }
                }
                (removed, refused)
            });
            racers.go();
            let reported = racers.reports();
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            let (r, f) = remover.join().unwrap();
            removed += r;
            refused += f;
            reported
        });
        let group = Group::open(&n).unwrap();
        let mut alive: Vec<(usize, u32)> = group
            .stats()
            .into_iter()
            .filter(|m| m.alive)
            .map(|m| (m.member, m.pid))
            .collect();
        drop(group);
        racers.stop();
        reported.sort_unstable();
        alive.sort_unstable();
        assert_eq!(
            alive, reported,
            "round {round}: not every opener is in the group under the name"
        );
    }
    eprintln!(
        "{backend:?}: {removed} removals went through, {refused} refused, in {ROUNDS} rounds"
    );
}

/// `Group::origin` says what the call did: an anonymous group is created; a name nobody had is
/// created; a name this process has open, or that another process's member keeps, is opened;
/// a group nobody uses is re-made. A group only the caller's process has open, with no member,
/// is removed by `Group::remove`, and its handles then refuse to join (the name is one group,
/// in this process too).
fn origin_says_what_build_did(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    let n = name("origin");
    let _removed = Removed(n.clone());
    let build = || build_named(&n, backend);
    let anonymous = Group::builder().backend(backend).build().unwrap();
    assert_eq!(anonymous.origin(), Origin::Created);
    let first = build().unwrap();
    assert_eq!(first.origin(), Origin::Created);
    assert_eq!(first.clone().origin(), Origin::Created, "a clone keeps it");
    assert_eq!(build().unwrap().origin(), Origin::Opened, "this process's");
    assert_eq!(Group::open(&n).unwrap().origin(), Origin::Opened);
    drop(first);
    assert_eq!(build().unwrap().origin(), Origin::Remade, "nobody used it");
    let member = ServingMember::fork(&n);
    assert_eq!(member.next().0, JOINED);
    assert_eq!(
        build().unwrap().origin(),
        Origin::Opened,
        "another's member"
    );
    member.stop();
    // Only this process has it open, with no member: removed.
    let mine = build().unwrap();
    Group::remove(&n).unwrap();
    assert!(matches!(mine.join(), Err(Error::GroupRemoved { .. })));
    assert!(matches!(Group::open(&n), Err(Error::GroupNotFound { .. })));
    let next = build().unwrap();
    assert_eq!(next.origin(), Origin::Created);
    let _joined = next.join().unwrap();
}

/// A group of more than 256 members keeps its later members' liveness bytes in further lock
/// files (the kernel walks every lock of a file on each lock call): for a named group, objects
/// `~1`, `~2`, … beside its own, made when a member first needs one and unlinked by the
/// group's removal. Members of other processes in slots past 256 are alive while they live and
/// dead once killed, and a removal names them; a lock object gone missing is an error for the
/// member that needs it, and the group can still be removed.
fn members_past_256_across_lock_files(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    for named in [false, true] {
        let n = name("locks");
        let _removed = Removed(n.clone());
        let mut builder = Group::builder().backend(backend).max_members(600);
        if named {
            builder = builder.name(&n);
        }
        let group = builder.build().unwrap();
        let lock_object = |k: usize| format!("{}~{k}", object_path(&n));
        let exists = |k: usize| std::path::Path::new(&lock_object(k)).exists();
        if named {
            assert!(!exists(1), "made before a member needed it");
        }
        let open = || {
            if named {
                Group::open(&n).unwrap()
            } else {
                group.clone()
            }
        };
        // Slots 0–99, 100–199 and 200–299: the last child's span the first two lock files.
        let (a, stop_a) = members_in_child(open, 100);
        let (b, stop_b) = members_in_child(open, 100);
        let (c, _stop_c) = members_in_child(open, 100);
        let stats = group.stats();
        assert_eq!(stats.len(), 300);
        assert!(stats.iter().all(|m| m.alive), "{stats:?}");
        let of_c: Vec<usize> = stats
            .iter()
            .filter(|m| m.pid == c as u32)
            .map(|m| m.member)
            .collect();
        assert_eq!(of_c, (200..300).collect::<Vec<_>>());
        if named {
            assert!(exists(1) && !exists(2));
        }
        if named {
            match Group::remove(&n) {
                Err(Error::GroupInUse { members, .. }) => {
                    assert_eq!(members.len(), 300, "{members:?}");
                    assert!(members.contains(&(299, c as u32)), "{members:?}");
                }
                other => panic!("removed while in use: {other:?}"),
            }
        }
        // SAFETY: kill(2) and waitpid(2) on our own child.
        unsafe {
            libc::kill(c, libc::SIGKILL);
            libc::waitpid(c, std::ptr::null_mut(), 0);
        }
        let stats = group.stats();
        for m in &stats {
            assert_eq!(m.alive, m.pid != c as u32, "{m:?}");
        }
        drop((stop_a, stop_b));
        reap(a);
        reap(b);
        drop(group);
        if named {
            Group::remove(&n).unwrap();
            for k in 1..=3 {
                assert!(!std::path::Path::new(&lock_object(k)).exists(), "~{k} left");
            }
            // A lock object gone missing: a member that needs it gets an error.
            let group = Group::builder()
                .name(&n)
                .backend(backend)
                .max_members(600)
                .build()
                .unwrap();
            // Each join takes the next fresh slot: the 257th is slot 256, in lock object 1.
            for _ in 0..256 {
                drop(group.join().unwrap());
            }
            drop(group.join().unwrap());
            drop(group);
            assert!(exists(1));
            std::fs::remove_file(lock_object(1)).unwrap();
            let (report_r, report_w) = pipe();
            // SAFETY: fcntl on our own descriptor: read blocking.
            unsafe { libc::fcntl(report_r.as_raw_fd(), libc::F_SETFL, 0) };
            // SAFETY: the child uses this crate, raw system calls and _exit only.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0);
            if pid == 0 {
                // Opened afresh (the parent holds no handle of it): slot 257 needs lock object 1.
                let said = match Group::open(&n).map(|g| g.join()) {
                    Ok(Err(e)) if e.to_string().contains("lock object 1 is missing") => 1,
                    _ => 2,
                };
                write_all(report_w.as_raw_fd(), &[said]);
                // SAFETY: leaves the child at once.
                unsafe { libc::_exit(0) };
            }
            drop(report_w);
            let mut said = [0u8; 1];
            read_exact(report_r.as_raw_fd(), &mut said);
            reap(pid);
            assert_eq!(
                said[0], 1,
                "the join did not say the lock object is missing"
            );
            Group::remove(&n).unwrap();
            assert!(!std::path::Path::new(&object_path(&n)).exists());
            assert!(!std::path::Path::new(&lock_object(1)).exists());
        }
    }
}

/// This thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Two threads join past slot 256 while another process holds the group's setup lock (a setup
/// of its own, or a process stopped in one): the first waits for the setup lock to open lock
/// object 1, the second for the first. Both join once the lock is let go, and the second
/// sleeps while it waits: it does not spin on a core for as long as the other process holds
/// the lock.
fn a_join_waiting_for_a_lock_object_sleeps(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    let n = name("setupwait");
    let _removed = Removed(n.clone());
    let group = Group::builder()
        .name(&n)
        .backend(backend)
        .max_members(300)
        .build()
        .unwrap();
    // Each join takes the next fresh slot: the next two are slots 256 and 257, lock object 1.
    for _ in 0..256 {
        drop(group.join().unwrap());
    }
    let (held_r, held_w) = pipe();
    let (go_r, go_w) = pipe();
    for fd in [held_r.as_raw_fd(), go_r.as_raw_fd()] {
        // SAFETY: fcntl on our own descriptor: reads blocking.
        unsafe { libc::fcntl(fd, libc::F_SETFL, 0) };
    }
    let path = std::ffi::CString::new(object_path(&n)).unwrap();
    // SAFETY: the child makes raw system calls and _exit only.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: open, fcntl, read and _exit in the child, on its own descriptors.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDWR);
            let mut setup: libc::flock = std::mem::zeroed();
            setup.l_type = libc::F_WRLCK as libc::c_short;
            setup.l_whence = libc::SEEK_SET as libc::c_short;
            setup.l_start = 1 << 20; // the setup byte (src/named.rs, SETUP_BYTE)
            setup.l_len = 1;
            let held = fd >= 0 && libc::fcntl(fd, libc::F_SETLK, &setup) == 0;
            write_all(held_w.as_raw_fd(), &[u8::from(held)]);
            let mut go = [0u8; 1];
            libc::read(go_r.as_raw_fd(), go.as_mut_ptr().cast(), 1);
            libc::_exit(0);
        }
    }
    drop((held_w, go_r));
    let mut held = [0u8; 1];
    read_exact(held_r.as_raw_fd(), &mut held);
    assert_eq!(held[0], 1, "the child could not take the setup lock");
    let join = |group: Group| {
        std::thread::spawn(move || {
            let (wall, cpu) = (Instant::now(), thread_cpu());
            let member = group.join();
            (member.map(drop), wall.elapsed(), thread_cpu() - cpu)
        })
    };
    let first = join(group.clone());
    // The first is in its wait for the setup lock once it sleeps; then the second comes.
    std::thread::sleep(Duration::from_millis(100));
    let second = join(group.clone());
    let held_for = Duration::from_millis(500);
    std::thread::sleep(held_for);
    write_all(go_w.as_raw_fd(), &[1]);
    reap(pid);
    let (first, second) = (first.join().unwrap(), second.join().unwrap());
    eprintln!(
        "{backend:?}: first join {:?} ({:?} CPU), second {:?} ({:?} CPU)",
        first.1, first.2, second.1, second.2
    );
    first.0.as_ref().unwrap();
    second.0.as_ref().unwrap();
    assert!(
        second.1 >= held_for / 2,
        "the second join did not wait: {second:?}"
    );
    assert!(
        second.2 < second.1 / 4,
        "the second join spun while it waited: {second:?}"
    );
    assert!(first.2 < first.1 / 4, "the first join spun: {first:?}");
    drop(group);
    Group::remove(&n).unwrap();
}

every_backend!(
    members_past_256_across_lock_files,
    a_join_waiting_for_a_lock_object_sleeps,
    remove_while_a_member_lives_is_refused,
    a_forced_removal_sends_the_members_to_the_new_group,
    opening_while_removing_never_makes_two_groups,
    origin_says_what_build_did,
    the_groups_descriptors_are_close_on_exec,
    exec_d_members_killed_while_others_read,
    a_big_group_under_a_small_descriptor_limit,
    exec_workers_share_a_listener,
    a_creation_race_ends_in_one_group,
    settings_differ_while_in_use_and_a_dead_group_is_reused,
    deaths_between_unrelated_processes,
    bad_objects_are_refused,
    another_user_is_refused,
    descriptors_do_not_grow_with_the_group,
);
