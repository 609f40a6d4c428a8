//! Lifecycle: members that join, leave and die at any moment. A storm of forked members joining
//! a group at the same moment (the way a prefork master starts its workers), the same while
//! other members leave or die, and a reaper killed in the middle of its reap. Each member checks
//! that its slot stays its own and alive; a join on a full group gets `GroupFull`, never a lock
//! error; nothing a dead member or a dead reaper held is left stranded.
//!
//! `HERDLESS_STORM_ITERATIONS` sets how many storms each test runs (default 10).

// Linux only: forked members killed with SIGKILL, and tests/common uses pipe2, gettid and /proc.
#![cfg(any(target_os = "linux", target_os = "android"))]

mod common;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use common::*;
use herdless::{Backend, Error, Events, Group, Interest};

/// Slots of the storm's group, and joiners at the go.
const SLOTS: usize = 48;

fn iterations() -> usize {
    std::env::var("HERDLESS_STORM_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
}

/// What a storm member says of its join (one 16-byte record: code, member, pid, 0).
const OWN: u32 = 0;
const FULL: u32 = 1;
const OTHER_ERROR: u32 = 2;
const NOT_OWN: u32 = 3;
/// An old member says it has joined, before the go.
const JOINED: u32 = 4;

/// Forked children, killed and reaped if the test fails halfway.
struct Kids(Vec<i32>);

impl Drop for Kids {
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

fn report(fd: RawFd, code: u32, member: usize) {
    let mut rec = Vec::with_capacity(16);
    for v in [code, member as u32, std::process::id(), 0] {
        rec.extend_from_slice(&v.to_ne_bytes());
    }
    write_all(fd, &rec);
}

fn read_report(fd: RawFd) -> (u32, usize, u32) {
    let mut rec = [0u8; 16];
    read_exact(fd, &mut rec);
    let v = |i: usize| u32::from_ne_bytes(rec[i * 4..i * 4 + 4].try_into().unwrap());
    (v(0), v(1) as usize, v(2))
}

/// Blocks until the other end of `fd` is closed (the parent's signal).
fn await_close(fd: RawFd) {
    let mut byte = [0u8; 1];
    // SAFETY: reads into a live buffer from a blocking pipe.
    while unsafe { libc::read(fd, byte.as_mut_ptr().cast(), 1) } != 0 {}
}

/// A blocking pipe (both ends).
fn blocking_pipe() -> (OwnedFd, OwnedFd) {
    let (r, w) = pipe();
    // SAFETY: fcntl on our own descriptor.
    unsafe { libc::fcntl(r.as_raw_fd(), libc::F_SETFL, 0) };
    (r, w)
}

/// What an old member does at the go.
#[derive(Clone, Copy, PartialEq)]
enum Old {
    Leaves,
    Dies,
}

/// One storm: `old` members joined beforehand do their part at the go while `joiners` new
/// members join at the same moment; each new member that joined waits a moment in its own
/// `wait` and then checks that its slot is its own and alive. Then a late join on the group.
fn storm(backend: Backend, old: &[Old], joiners: usize) {
    let group = Group::builder()
        .backend(backend)
        .max_members(SLOTS)
        .build()
        .unwrap();
    let (rx, _tx) = pipe();
    let (go_r, go_w) = blocking_pipe();
    let (done_r, done_w) = blocking_pipe();
    let (rep_r, rep_w) = blocking_pipe();
    let mut kids = Kids(Vec::new());
    let fork = |kids: &mut Kids, child: &dyn Fn()| {
        // SAFETY: the child only uses this crate, raw system calls and _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // The parent's signals are the close of these ends: no child may keep a copy.
            // SAFETY: closes this child's copies; their owners never drop them here (_exit).
            unsafe {
                libc::close(go_w.as_raw_fd());
                libc::close(done_w.as_raw_fd());
            }
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).is_ok();
            // SAFETY: leaves the child at once, without the test harness's exit.
            unsafe { libc::_exit(i32::from(!ok)) };
        }
        kids.0.push(pid);
    };
    for &what in old {
        fork(&mut kids, &|| {
            let waiter = group.join().unwrap();
            report(rep_w.as_raw_fd(), JOINED, waiter.member());
            await_close(go_r.as_raw_fd());
            match what {
                // SAFETY: dies at once, without leaving: its slot is left to the reapers.
                Old::Dies => unsafe { libc::_exit(0) },
                Old::Leaves => drop(waiter),
            }
            await_close(done_r.as_raw_fd());
        });
    }
    for _ in old {
        assert_eq!(read_report(rep_r.as_raw_fd()).0, JOINED);
    }
    for _ in 0..joiners {
        fork(&mut kids, &|| {
            await_close(go_r.as_raw_fd());
            let mut waiter = match group.join() {
                Ok(w) => w,
                Err(Error::GroupFull { .. }) => {
                    report(rep_w.as_raw_fd(), FULL, 0);
                    return;
                }
                Err(e) => {
                    eprintln!("join failed: {e}");
                    report(rep_w.as_raw_fd(), OTHER_ERROR, 0);
                    return;
                }
            };
            // A moment inside the group: registered, in `wait` (idle) and back (busy).
            waiter.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
            let mut events = Events::with_capacity(1);
            waiter
                .wait(&mut events, Some(Duration::from_millis(30)))
                .unwrap();
            let me = std::process::id();
            let own = group
                .stats()
                .iter()
                .any(|s| s.member == waiter.member() && s.pid == me && s.alive);
            report(
                rep_w.as_raw_fd(),
                if own { OWN } else { NOT_OWN },
                waiter.member(),
            );
            await_close(done_r.as_raw_fd());
            waiter.delete(&rx).unwrap();
        });
    }
    drop(go_w); // the go: every joiner and every old member at once
    let mut slots = std::collections::BTreeMap::new();
    let mut full = 0;
    for _ in 0..joiners {
        let (code, member, pid) = read_report(rep_r.as_raw_fd());
        match code {
            OWN => {
                if let Some(other) = slots.insert(member, pid) {
                    panic!("slot {member} shared by processes {other} and {pid}");
                }
            }
            FULL => full += 1,
            NOT_OWN => panic!("process {pid} found its slot {member} not its own or not alive"),
            _ => panic!("a join failed with an error other than GroupFull"),
        }
    }
    let free_before = SLOTS - old.len();
    assert!(
        slots.len() >= joiners.min(free_before),
        "{} joined of {joiners}, with {free_before} slots free: {full} were told the group is full",
        slots.len()
    );
    if old.is_empty() && joiners > SLOTS {
        assert_eq!(slots.len(), SLOTS);
        assert_eq!(full, joiners - SLOTS);
    }
    // A late join: the group is full (every storm member is alive) or has a free slot.
    match group.join() {
        Ok(late) => assert!(
            slots.len() < SLOTS,
            "a late join took slot {} of a full group",
            late.member()
        ),
        Err(Error::GroupFull { .. }) => {}
        Err(e) => panic!("the late join failed: {e}"),
    }
    drop(done_w);
    for pid in std::mem::take(&mut kids.0) {
        let mut status = 0;
        // SAFETY: reaps our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "a storm member failed (status {status})"
        );
    }
}

/// 49 forked members join a 48-slot group at the same moment: 48 get a slot of their own that
/// stays theirs, one is told the group is full, and so is a late join.
fn join_storm(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    for _ in 0..iterations() {
        storm(backend, &[], SLOTS + 1);
    }
}

/// 24 members were joined; at the go 12 leave and 12 die while 36 new members join: no new
/// member's slot is reaped or shared, and a join that finds no slot is told the group is full.
fn join_storm_while_others_leave_and_die(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    let old: Vec<Old> = (0..24)
        .map(|i| if i % 2 == 0 { Old::Leaves } else { Old::Dies })
        .collect();
    for _ in 0..iterations() {
        storm(backend, &old, 36);
    }
}

/// A reaper killed in the middle of its reap: the slot it was clearing stays unjoinable while
/// it lives, then another member finishes the reap. The token the dead member held moves on to
/// a live member (emulation), and the slot can be joined again.
fn reaper_killed_mid_reap(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    let group = Group::builder()
        .backend(backend)
        .max_members(2)
        .build()
        .unwrap();
    let (rx, tx) = pipe();
    let (ready_r, ready_w) = blocking_pipe();
    let mut kids = Kids(Vec::new());
    // Member A (slot 0), in another process: waits on the pipe, leading it (emulation).
    // SAFETY: the child only uses this crate, raw system calls and _exit.
    let a = unsafe { libc::fork() };
    if a == 0 {
        let mut waiter = group.join().unwrap();
        waiter.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
        write_all(ready_w.as_raw_fd(), &[1]);
        let mut events = Events::with_capacity(1);
        loop {
            let _ = waiter.wait(&mut events, None);
        }
    }
    kids.0.push(a);
    read_exact(ready_r.as_raw_fd(), &mut [0u8; 1]);
    until_asleep(a as u32, &[a]);
    // Member B (slot 1), this process: joined, not waiting yet (so it does not reap A itself).
    let mut b = group.join().unwrap();
    assert_eq!(b.member(), 1);
    let leader =
        |stats: &[herdless::MemberStats]| stats.iter().find(|m| m.member == 0).unwrap().leader;
    if backend == Backend::Emulated {
        assert!(leader(&group.stats()), "A leads the pipe");
    }
    // SAFETY: kill(2) and waitpid(2) on our own child.
    unsafe {
        libc::kill(a, libc::SIGKILL);
        libc::waitpid(a, std::ptr::null_mut(), 0);
    }
    kids.0.clear();
    // The reaper R: its join reaps A's slot and stops in the middle, where it is killed.
    let (mid_r, mid_w) = blocking_pipe();
    // SAFETY: as above.
    let r = unsafe { libc::fork() };
    if r == 0 {
        herdless::testing::block_mid_reap(mid_w.as_raw_fd());
        let _ = group.join();
        // SAFETY: never reached (the reap blocks until killed); leaves the child.
        unsafe { libc::_exit(1) };
    }
    kids.0.push(r);
    read_exact(mid_r.as_raw_fd(), &mut [0u8; 1]);
    let stats = group.stats();
    assert!(!stats[0].alive, "{stats:?}");
    if backend == Backend::Emulated {
        assert!(
            leader(&stats),
            "the token is still with the dead member mid-reap"
        );
    }
    // While the reaper lives the slot is its: nobody joins into it.
    assert!(matches!(group.join(), Err(Error::GroupFull { .. })));
    // SAFETY: kill(2) and waitpid(2) on our own child.
    unsafe {
        libc::kill(r, libc::SIGKILL);
        libc::waitpid(r, std::ptr::null_mut(), 0);
    }
    kids.0.clear();
    // B starts waiting: the message written now reaches it (the emulation's B takes the reap
    // over when it finds the dead reaper, and the token moves on to it).
    b.add(&rx, 0, Interest::READABLE.exclusive()).unwrap();
    write_msg(tx.as_raw_fd(), 7);
    assert_eq!(wait_keys(&mut b, 4), [0]);
    assert_eq!(read_msg(rx.as_raw_fd()), Some(Some(7)));
    // And the slot is free again.
    let again = group.join().unwrap();
    assert_eq!(again.member(), 0);
    let stats = group.stats();
    assert_eq!(stats.iter().filter(|m| m.alive).count(), 2, "{stats:?}");
    b.delete(&rx).unwrap();
}

every_backend!(
    join_storm,
    join_storm_while_others_leave_and_die,
    reaper_killed_mid_reap,
);
