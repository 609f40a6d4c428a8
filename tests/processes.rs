//! Processes: members forked after the group was built share one pipe or one listening socket.
//! Turn-taking holds across processes, and connections are spread evenly over the workers.
//! (Killing members is in `faults.rs`.)

// Linux only: forked members, and tests/common uses pipe2, gettid and /proc.
#![cfg(any(target_os = "linux", target_os = "android"))]

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;

use common::*;
use herdless::{Backend, Events, Group, Interest};

fn pipe_turns_across_processes(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    // Turns: each message written once every member is back asleep, so the count is the
    // library's and not the scheduler's.
    let (out, _) = Turns::eight_members_settled(backend).processes(&[]);
    out.report(&format!(
        "{backend:?} 8 processes, each message once all sleep"
    ));
    out.assert_settled_turns(backend);
    // Back to back, the next message is written while the member that read the last one is
    // still on its way back to its wait: it loses that turn, as the contract says, so how far
    // turns hold depends on the machine's load (beside 6 busy loops and other tests, natively:
    // [46, 125, 114, 77, 130, 76, 95, 137]). What is the library's: every message once, each
    // member a real share (a monopoly leaves the others a few each), and (emulated) at most
    // the leader's wake-up and the promotion's per message.
    let (out, _) = Turns::eight_members(backend).processes(&[]);
    out.report(&format!("{backend:?} 8 processes, back to back"));
    out.assert_exactly_once(800);
    for &c in &out.per_member {
        assert!(
            c >= 25,
            "a member took less than a quarter of its share: {out:?}"
        );
    }
    if backend == Backend::Emulated {
        assert_eq!(out.empty_reads, 0, "{out:?}");
        let per_message = out.kernel_wakeups as f64 / 800.0;
        assert!(
            per_message <= 2.0,
            "{per_message} kernel wake-ups per message: {out:?}"
        );
    } else {
        assert!(out.empty_reads < 8, "{out:?}");
    }
}

fn listener_accepts_across_processes(backend: Backend) {
    let _one_at_a_time = one_fork_at_a_time();
    const WORKERS: usize = 8;
    const CONNECTIONS: usize = 400;
    let group = Group::builder().backend(backend).build().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let (ready_r, ready_w) = pipe();
    // SAFETY: fcntl on our own descriptor: the parent reads it blocking.
    unsafe { libc::fcntl(ready_r.as_raw_fd(), libc::F_SETFL, 0) };
    let mut pids = Vec::new();
    for _ in 0..WORKERS {
        // SAFETY: the child only uses this crate, std networking, raw system calls and _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = std::panic::catch_unwind(|| {
                let mut waiter = group.join().unwrap();
                waiter
                    .add(
                        &listener,
                        0,
                        Interest::READABLE.exclusive().one_event_round_robin(),
                    )
                    .unwrap();
                write_all(ready_w.as_raw_fd(), &[1]);
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
                                // The parent's last word: report the count and stop.
                                stream.write_all(&[accepted]).unwrap();
                                return;
                            }
                            stream.write_all(&[accepted]).unwrap();
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => panic!("accept: {e}"),
                    }
                }
            });
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(i32::from(code.is_err())) };
        }
        pids.push(pid);
    }
    drop(ready_w);
    let mut byte = [0u8; 1];
    for _ in 0..WORKERS {
        read_exact(ready_r.as_raw_fd(), &mut byte);
    }
    for &pid in &pids {
        until_asleep(pid as u32, &[pid]);
    }
    let asleep: Vec<(u32, i32)> = pids.iter().map(|&p| (p as u32, p)).collect();
    for _ in 0..CONNECTIONS {
        // Each connection once every worker is back in its wait: the turns are then the
        // library's to give, however loaded the machine.
        herdless_fixtures::until_asleep(&asleep, std::time::Duration::from_secs(20)).unwrap();
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"x").unwrap();
        c.read_exact(&mut byte).unwrap(); // accepted and answered: the next one may go
    }
    // One last connection per worker asks for its count; they come in turn.
    let mut counts = Vec::new();
    for _ in 0..WORKERS {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"q").unwrap();
        c.read_exact(&mut byte).unwrap();
        counts.push(u64::from(byte[0]) - 1);
    }
    for pid in pids {
        let mut status = 0;
        // SAFETY: reaps our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
    eprintln!("{backend:?} accepts per worker: {counts:?}");
    for m in group.stats() {
        eprintln!("  {m:?}");
    }
    assert_eq!(counts.iter().sum::<u64>(), CONNECTIONS as u64, "{counts:?}");
    for &c in &counts {
        assert!((48..=52).contains(&c), "not 50 ± 2 each: {counts:?}");
    }
}

every_backend!(
    pipe_turns_across_processes,
    listener_accepts_across_processes
);
