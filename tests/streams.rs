//! streams: many members under a producer that does not wait for them. Under the default rule
//! (`Rotation::Adaptive`) a stream is read by one member at a time, in turns: the members
//! asleep are not woken message after message (natively they stand aside from the line, the
//! emulation never had them in it), every message is read once, and the turns stay even; once
//! the stream stops, events that come one at a time go round the members again.

// Linux only: kernel counters; tests/common uses pipe2, gettid and /proc.
#![cfg(any(target_os = "linux", target_os = "android"))]

mod common;

use std::time::Duration;

use common::*;
use herdless::{Backend, Rotation};

/// 64 members, a producer writing 40 000 messages back to back into a pipe (it blocks while
/// the pipe is full). Natively, with every member in the line, each write into the pipe woke
/// one of the members asleep behind the one reading (`ep_poll_callback`): about one kernel
/// wake-up per message. With the sleepers out of the line, a member wakes about once per turn.
fn a_stream_wakes_few_sleepers(backend: Backend) {
    let messages = 40_000;
    let out = Turns {
        backend,
        rotation: Rotation::Adaptive,
        members: 64,
        messages,
        gap: None,
        settled: false,
    }
    .threads_backlog();
    out.report(&format!(
        "{backend:?} Adaptive, 64 members, a stream of {messages}"
    ));
    out.assert_exactly_once(messages);
    let per_message = out.kernel_wakeups as f64 / messages as f64;
    assert!(
        per_message < 0.3,
        "{per_message:.2} kernel wake-ups per message in a stream: {out:?}"
    );
    // Turns: no member is left out of a stream of 625 messages each.
    for &c in &out.per_member {
        assert!(
            c >= 625 / 4,
            "a member took less than a quarter of its share: {out:?}"
        );
    }
}

/// 8 members: a stream of 20 000 messages, then 400 messages one at a time (each written once
/// the last was read and every member sleeps in the kernel, 1 ms apart). The group's stream
/// hint fades over the first few dozen of them (a moving average of the gaps: until then the
/// last member's turn goes on); from the 80th on, turns are strict again, the members that
/// stood aside from the stream back in line: each of the last 320 is taken in turn, 40 each.
fn turns_go_round_again_after_a_stream(backend: Backend) {
    let (stream, one_at_a_time, fading) = (20_000u64, 400u64, 80u64);
    let run = Turns {
        backend,
        rotation: Rotation::Adaptive,
        members: 8,
        messages: stream + one_at_a_time,
        gap: None,
        settled: false,
    };
    let out = run.threads_with(|tx, acks, tids| {
        for i in 0..stream {
            write_msg(tx, i);
        }
        for _ in 0..stream {
            acks.recv().unwrap();
        }
        for i in stream..stream + one_at_a_time {
            until_asleep(std::process::id(), tids);
            write_msg(tx, i);
            acks.recv().unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    out.report(&format!(
        "{backend:?} Adaptive, a stream then one at a time"
    ));
    out.assert_exactly_once(stream + one_at_a_time);
    let after: Vec<u64> = out
        .ids_per_member
        .iter()
        .map(|ids| ids.iter().filter(|&&id| id >= stream + fading).count() as u64)
        .collect();
    eprintln!("{backend:?}: one at a time, once the stream's hint faded, per member {after:?}");
    for &c in &after {
        assert!(
            (38..=42).contains(&c),
            "not 40 ± 2 each one at a time after a stream: {after:?}"
        );
    }
}

every_backend!(
    a_stream_wakes_few_sleepers,
    turns_go_round_again_after_a_stream
);
