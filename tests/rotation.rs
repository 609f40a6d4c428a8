//! rotation: 8 waiters, 800 messages, one message read per wake-up. With `rotate_every(1)`, and
//! with the default `Rotation::Adaptive` (events one at a time: strict turns), every waiter gets
//! 100 ± 2 when each message comes once all waiters sleep, and reads almost never come back
//! empty; with `rotate_every(0)` the first registered waiter takes at least 90% (the kernel's
//! monopoly, reproduced on purpose); written back to back the spread stays even; with all 800
//! queued at once the emulation still takes turns (the native backend does not under strict
//! turns: see `a_backlog`; under the default rule both share a stream's backlog,
//! `adaptive_under_a_backlog`).

// Linux only: /proc and kernel counters; the portable turns are tests/portable_turns.rs, and tests/common uses pipe2, gettid and /proc.
#![cfg(any(target_os = "linux", target_os = "android"))]

mod common;

use std::time::Duration;

use common::*;
use herdless::{Backend, Rotation};

fn turns(backend: Backend, rotation: Rotation, gap: Option<Duration>) -> Turns {
    Turns {
        backend,
        rotation,
        members: 8,
        messages: 800,
        gap,
        settled: false,
    }
}

/// The same run, each message written once all 8 members sleep in the kernel again: turns
/// then depend on the library alone, not on how soon the scheduler brings the last reader
/// back to its wait (a member not yet back loses its turn, as the contract says).
fn settled_turns(backend: Backend, rotation: Rotation, gap: Option<Duration>) -> Turns {
    Turns {
        settled: true,
        ..turns(backend, rotation, gap)
    }
}

fn strict_turns_with_a_gap(backend: Backend) {
    strict_turns_with_a_gap_under(backend, Rotation::Every(1));
}

/// The default rule gives strict turns when events come one at a time.
fn adaptive_turns_with_a_gap(backend: Backend) {
    strict_turns_with_a_gap_under(backend, Rotation::Adaptive);
}

fn strict_turns_with_a_gap_under(backend: Backend, rotation: Rotation) {
    let out = settled_turns(backend, rotation, Some(Duration::from_millis(1))).threads();
    out.report(&format!("{backend:?} {rotation:?}, 1 ms gap, all asleep"));
    out.assert_exactly_once(800);
    for &c in &out.per_member {
        assert!((98..=102).contains(&c), "not 100 ± 2 each: {out:?}");
    }
    assert!(out.empty_reads < 8, "empty wake-ups ≥ 1%: {out:?}");
}

fn no_rotation_reproduces_the_monopoly(backend: Backend) {
    let out = turns(backend, Rotation::Every(0), Some(Duration::from_millis(1))).threads();
    out.report(&format!("{backend:?} rotate_every(0), 1 ms gap"));
    out.assert_exactly_once(800);
    let first = out.per_member[0] as f64 / 800.0;
    assert!(
        first >= 0.9,
        "the first registered waiter took only {first}: {out:?}"
    );
}

fn back_to_back_stays_even(backend: Backend) {
    back_to_back_stays_even_under(backend, Rotation::Every(1));
}

/// Back to back (the next message is written once the last was read) there is no backlog
/// either, and however close together the messages come (5 to 10 µs here, a channel round
/// trip), none overlaps another: the default rule keeps turns on both backends (the native
/// stream rule needs overlapping events, see `src/sys/linux/native.rs`).
fn adaptive_back_to_back_stays_even(backend: Backend) {
    back_to_back_stays_even_under(backend, Rotation::Adaptive);
}

fn back_to_back_stays_even_under(backend: Backend, rotation: Rotation) {
    // Each message once all members sleep: exact turns.
    let out = settled_turns(backend, rotation, None).threads();
    out.report(&format!(
        "{backend:?} {rotation:?}, each message once all sleep"
    ));
    out.assert_settled_turns(backend);
    // Back to back, a member that just read may not be back in its wait when the next message
    // comes (8 threads on 2 cores): it loses that turn, as the contract says. How many it loses
    // depends on the machine (CI's dry run once saw [99, 102, 97, ...]; beside 8 busy loops,
    // one member had 73 and the others 103–104), so what is asserted is the library's part:
    // every message once and each member a real share (a monopoly leaves the others a few).
    let out = turns(backend, rotation, None).threads();
    out.report(&format!("{backend:?} {rotation:?}, back to back"));
    out.assert_exactly_once(800);
    for &c in &out.per_member {
        assert!(
            c >= 25,
            "a member took less than a quarter of its share: {out:?}"
        );
    }
    if backend == Backend::Emulated {
        // The emulation's promise: never an empty read, at most two kernel wake-ups per
        // message (the leader's, and the door bell of the next one).
        assert_eq!(out.empty_reads, 0, "{out:?}");
        let per_message = out.kernel_wakeups as f64 / 800.0;
        assert!(
            per_message <= 2.0,
            "{per_message} kernel wake-ups per message: {out:?}"
        );
    }
}

/// Every message queued before the first is read. The emulation keeps turns among its idle
/// members (its next leaders spin for their turn here, see `src/emulated/protocol.rs`); the
/// native backend only promises that nothing is lost (a re-added descriptor that is still
/// readable is ready at once for the member that re-added it: "Not promised" in the README).
fn a_backlog(backend: Backend) {
    let out = turns(backend, Rotation::Every(1), None).threads_backlog();
    out.report(&format!(
        "{backend:?} rotate_every(1), 800 messages queued at once"
    ));
    out.assert_exactly_once(800);
    if backend == Backend::Emulated {
        // 8 threads on 2 cores: a member whose turn comes while it is not yet back in `wait`
        // is skipped (as promised) and one ahead takes an extra turn. Usually that is a few
        // each way (100 ×8 in 5 of 6 runs beside a CI run); but the seven others can all wait
        // out the holder's time slice on its core, and then it takes every turn meanwhile
        // ([390, 59, 59, 59, 59, 59, 58, 57] once: 333 in a row). What is asserted is the
        // library's part: every member a real share (a monopoly leaves the others a few).
        for &c in &out.per_member {
            assert!(
                c >= 25,
                "a member took less than a quarter of its share: {out:?}"
            );
        }
        assert_eq!(out.empty_reads, 0, "{out:?}");
        let per_message = out.kernel_wakeups as f64 / 800.0;
        assert!(
            per_message <= 2.0,
            "{per_message} kernel wake-ups per message: {out:?}"
        );
    }
}

/// With 6400 messages written as fast as the pipe takes them, the default rule batches (a
/// stream: turns of up to `STREAM_BATCH`, 96, in a row): nothing is lost, every member gets a
/// real share on both backends (a quarter of its share at least: a member back in its wait
/// first no longer keeps a backlog natively, where before the turn handed on at its end the
/// fewest got 42–118 in 3 of 6 runs here), and on the emulation no read comes back empty. How
/// even the shares are depends on the machine: 8 threads on 2 cores, and a turn continues while
/// no other member is back in its wait (Jain 0.996–0.999 in most runs here, on both backends,
/// down to 0.82 natively when one member takes two shares).
fn adaptive_under_a_backlog(backend: Backend) {
    let out = Turns {
        messages: 6400,
        ..turns(backend, Rotation::Adaptive, None)
    }
    .threads_backlog();
    out.report(&format!(
        "{backend:?} Adaptive, 6400 messages queued at once"
    ));
    out.assert_exactly_once(6400);
    for &c in &out.per_member {
        assert!(
            c >= 200,
            "a member took less than a quarter of its share: {out:?}"
        );
    }
    if backend == Backend::Emulated {
        assert_eq!(out.empty_reads, 0, "{out:?}");
    }
}

every_backend!(
    strict_turns_with_a_gap,
    adaptive_turns_with_a_gap,
    no_rotation_reproduces_the_monopoly,
    back_to_back_stays_even,
    adaptive_back_to_back_stays_even,
    a_backlog,
    adaptive_under_a_backlog
);
