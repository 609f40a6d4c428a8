//! POSIX message queues are pollable descriptors on Linux (they look like regular files of the
//! mqueue file system, which herdless must not refuse): an exclusive registration on one queue
//! hands each message to one member, on both backends; and under a backlog, with members
//! taking batches (the default rotation), the emulation never hands out a message that another
//! member has read already (no empty read).

// Linux only: POSIX message queues as descriptors (Linux's mqueue file system), and tests/common uses pipe2, gettid and /proc.
#![cfg(any(target_os = "linux", target_os = "android"))]

mod common;

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{every_backend, fresh_queue, wait_keys, WAIT_BOUND};
use herdless::{Backend, Events, Group, Interest, Rotation};
use nix::errno::Errno;
use nix::mqueue::{mq_open, mq_receive, mq_send, mq_unlink, MQ_OFlag, MqAttr};
use nix::sys::stat::Mode;

fn messages_go_one_to_each(backend: Backend) {
    let name = format!("/herdless-test-{}-{backend:?}", std::process::id());
    let _ = mq_unlink(name.as_str());
    let attr = MqAttr::new(0, 10, 8, 0);
    let flags = MQ_OFlag::O_CREAT | MQ_OFlag::O_RDWR | MQ_OFlag::O_NONBLOCK;
    let mq = mq_open(
        name.as_str(),
        flags,
        Mode::S_IRUSR | Mode::S_IWUSR,
        Some(&attr),
    )
    .expect("mq_open");
    mq_unlink(name.as_str()).unwrap();
    let group = Group::builder().backend(backend).build().unwrap();
    let mut waiters: Vec<_> = (0..4)
        .map(|_| {
            let mut w = group.join().unwrap();
            w.add(
                &mq,
                0,
                Interest::READABLE.exclusive().one_event_round_robin(),
            )
            .unwrap();
            w
        })
        .collect();
    for (i, waiter) in waiters.iter_mut().enumerate() {
        mq_send(&mq, &(i as u64).to_ne_bytes(), 0).unwrap();
        assert_eq!(wait_keys(waiter, 4).len(), 1);
        let mut buf = [0u8; 8];
        assert_eq!(mq_receive(&mq, &mut buf, &mut 0).unwrap(), 8);
        assert_eq!(u64::from_ne_bytes(buf), i as u64);
        waiter.consumed(0).unwrap();
    }
}

/// Two CPUs this test may run on (one, twice, on a one-CPU machine), and keeps the calling
/// thread on `cpu`: the members and the producer share two CPUs, as on the 2-core machine
/// where the race was found, whatever the machine.
fn two_cpus() -> [usize; 2] {
    let allowed = herdless_fixtures::cpus::allowed().unwrap_or_default();
    let first = allowed.first().copied().unwrap_or(0);
    [first, allowed.get(1).copied().unwrap_or(first)]
}

fn on_cpu(cpu: usize) {
    let _ = herdless_fixtures::cpus::pin_to(cpu);
}

/// Messages per rotation in `a_backlog_read_in_batches`. Before the emulation checked claims
/// against the take-back race (`Protocol::confirm_claim`), the test saw 43–47 empty reads per
/// run with the default rotation (three runs, debug build, a loaded 2-core machine).
const BATCH_MESSAGES: u64 = 60_000;
/// Members in `a_backlog_read_in_batches`.
const BATCH_MEMBERS: usize = 8;

/// Eight members (threads) share one queue, exclusive and one event per wait, while a producer
/// keeps it full: each member reads one message per event and says it consumed it. Every
/// message is read once. On the emulation no read finds the queue empty: under a backlog a
/// member takes batches, coming back to `wait` and taking the token back from the member it
/// had passed it to, and that member, which may have seen the queue ready just before,
/// must not be handed a readiness the batch has consumed since. (The native backend has no
/// such promise: its members' readiness is the kernel's, and its empty reads are only
/// reported.)
fn a_backlog_read_in_batches(backend: Backend) {
    for rotation in [Rotation::Adaptive, Rotation::Every(16)] {
        let Some((read, write)) = fresh_queue(&format!("{backend:?}-{rotation:?}")) else {
            return;
        };
        let (read, write) = (Arc::new(read), Arc::new(write));
        let (stop_r, stop_w) = common::pipe();
        let stop_r = Arc::new(stop_r);
        let group = Group::builder()
            .backend(backend)
            .rotation(rotation)
            .build()
            .unwrap();
        let taken = Arc::new(AtomicU64::new(0));
        let cpus = two_cpus();
        let members: Vec<_> = (0..BATCH_MEMBERS)
            .map(|i| {
                let cpu = cpus[i % 2];
                let mut waiter = group.join().unwrap();
                let interest = Interest::READABLE.exclusive().one_event_round_robin();
                waiter.add(&*read, 0, interest).unwrap();
                waiter.add(&*stop_r, 1, Interest::READABLE).unwrap();
                let (read, taken) = (read.clone(), taken.clone());
                std::thread::spawn(move || {
                    on_cpu(cpu);
                    let (mut ids, mut empty) = (Vec::new(), 0u64);
                    let mut events = Events::with_capacity(1);
                    loop {
                        waiter.wait(&mut events, Some(WAIT_BOUND)).unwrap();
                        let Some(event) = events.iter().next() else {
                            continue;
                        };
                        if event.key == 1 {
                            break; // the stop pipe hung up: every message was read
                        }
                        let mut buf = [0u8; 8];
                        match mq_receive(&read, &mut buf, &mut 0) {
                            Ok(8) => {
                                waiter.consumed(0).unwrap();
                                ids.push(u64::from_ne_bytes(buf));
                                taken.fetch_add(1, SeqCst);
                            }
                            Err(Errno::EAGAIN) => empty += 1,
                            other => panic!("mq_receive: {other:?}"),
                        }
                    }
                    (ids, empty)
                })
            })
            .collect();
        let producer = std::thread::spawn(move || {
            on_cpu(cpus[0]);
            for id in 0..BATCH_MESSAGES {
                mq_send(&write, &id.to_ne_bytes(), 0).unwrap();
            }
        });
        producer.join().unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        while taken.load(SeqCst) < BATCH_MESSAGES {
            assert!(Instant::now() < deadline, "messages left unread");
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(stop_w);
        let (mut ids, mut empty) = (Vec::new(), 0);
        for member in members {
            let (mine, e) = member.join().unwrap();
            ids.extend(mine);
            empty += e;
        }
        ids.sort_unstable();
        assert!(
            ids.iter().copied().eq(0..BATCH_MESSAGES),
            "{backend:?}, {rotation:?}: a message lost or read twice"
        );
        println!("{backend:?}, {rotation:?}: {BATCH_MESSAGES} messages, {empty} empty reads");
        if backend == Backend::Emulated {
            assert_eq!(
                empty, 0,
                "{rotation:?}: members were handed a readiness another member had consumed"
            );
        }
    }
}

every_backend!(messages_go_one_to_each, a_backlog_read_in_batches);
