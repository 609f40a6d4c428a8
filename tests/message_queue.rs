//! POSIX message queues are pollable descriptors on Linux (they look like regular files of the
//! mqueue file system, which herdless must not refuse): an exclusive registration on one queue
//! hands each message to one member, on both backends.

// Linux only: POSIX message queues as descriptors (Linux's mqueue file system), and tests/common uses pipe2, gettid and /proc.
#![cfg(any(target_os = "linux", target_os = "android"))]

mod common;

use common::wait_keys;
use herdless::{Backend, Group, Interest};
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

against_every_backend!(messages_go_one_to_each);
