//! What the model checker swaps for its own: the atomics of the shared state, the yield and the
//! nap of a waiting loop, and the clock. Everything else the models run is the library's code
//! as it runs in production; no path of the protocol differs under `--cfg loom`.
//!
//! Normally these are the standard atomics, `std::thread::{yield_now, sleep}` and the monotonic
//! clock. Under `--cfg loom` (the models: `emulated/protocol/model.rs`, `members/model.rs`)
//! they are loom's atomics, so that every access is a step the checker interleaves; loom's
//! yield, so that a loop waiting for another thread lets it run; and a clock of the model's own,
//! one per execution, which moves on by `MODEL_TICK` at every reading and by the length of every
//! nap, so that a loop bounded by time (a spin for a turn, a patience loop) ends after a bounded
//! number of looks in the model, as it ends after its time budget in real life, and a model can
//! make time pass (`advance`: a hold grows overdue).
//!
//! The kernel objects the protocol talks to are modelled too, each where it is defined, under
//! `#[cfg(loom)]`: door bells as flags (`crate::doorbell`), the liveness record locks as a model
//! of the kernel's (`crate::liveness`), the shared memory as ordinary values of its atomics
//! (`crate::shared`, and the source table's storage in `emulated/protocol/table.rs`). What has
//! no part in the models is left out of that build: the native backend (`sys/mod.rs`),
//! named groups (`crate::named`), a member's own kernel objects (its bell's sockets in its
//! poller, `emulated/mod.rs` and `registrations.rs`), the Windows checks, and the fault tests'
//! hook (`members::testing`).

use std::time::Duration;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64};

/// Lets another thread run (under the model checker, lets loom switch threads).
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// Lets the CPU go for `d`, in a loop that waits for another member: sleeps (under the model
/// checker, lets loom switch threads and moves the model's clock on by `d`).
pub(crate) fn nap(d: Duration) {
    #[cfg(loom)]
    {
        model_clock::advance(d);
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    std::thread::sleep(d);
}

/// Monotonic nanoseconds, comparable across the processes of a group (the model's clock under
/// the model checker).
#[cfg(all(unix, not(loom)))]
pub(crate) use crate::sys::unix::monotonic_ns;

/// Monotonic nanoseconds since this process first asked (groups span threads only here).
#[cfg(all(not(unix), not(loom)))]
pub(crate) fn monotonic_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

/// The model's clock: one reading moves it on by a tick.
#[cfg(loom)]
pub(crate) fn monotonic_ns() -> u64 {
    model_clock::read()
}

/// Moves the model's clock on by `d` (a model's way to let time pass).
#[cfg(all(loom, test))]
pub(crate) fn advance(d: Duration) {
    model_clock::advance(d);
}

/// Makes the model's clock, in the model's first thread, before it spawns another: a lazy
/// static synchronizes its readers with the thread that made it, so a clock made later by one
/// of the threads would order the others' steps after that thread's.
#[cfg(all(loom, test))]
pub(crate) fn start_model_clock() {
    model_clock::read();
}

/// How far the model's clock moves at each reading: a spin for a turn (`LEADER_SPIN`, 100 µs)
/// takes three looks or fewer, a deputy's (50 µs) one, and a hold lasts a few ticks.
#[cfg(loom)]
pub(crate) const MODEL_TICK: Duration = Duration::from_micros(25);

/// The clock under the model checker: a value per execution of a model (loom's lazy statics
/// are made afresh for each), a plain atomic rather than loom's, so that a reading is not a
/// step the checker interleaves (the kernel's clock synchronizes nobody). It starts an hour
/// after boot, as a machine's clock would be, so that a time of 0 (a source never claimed) is
/// long past.
#[cfg(loom)]
mod model_clock {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::time::Duration;

    loom::lazy_static! {
        static ref NOW: AtomicU64 = AtomicU64::new(3_600_000_000_000);
    }

    pub(super) fn read() -> u64 {
        let tick = super::MODEL_TICK.as_nanos() as u64;
        NOW.fetch_add(tick, Relaxed) + tick
    }

    pub(super) fn advance(d: Duration) {
        NOW.fetch_add(d.as_nanos() as u64, Relaxed);
    }
}

/// A loop's wait for something another member does within moments (drop a lock byte, give the
/// source table's lock back): the first looks yield the CPU, the later ones nap, and the wait
/// gives up once its budget has passed on the clock above (so a model sees the very loop,
/// bounded: its naps move the model's clock on).
pub(crate) struct Patience {
    /// When to give up (`monotonic_ns`).
    until: u64,
    looks: u32,
    nap: Duration,
}

impl Patience {
    /// Looks that yield before the loop starts napping.
    const YIELDS: u32 = 64;

    /// A wait of at most `budget`, napping `nap` between its later looks.
    pub(crate) fn new(budget: Duration, nap: Duration) -> Patience {
        Patience {
            until: monotonic_ns().saturating_add(budget.as_nanos() as u64),
            looks: 0,
            nap,
        }
    }

    /// Before the next look: false once the budget has passed (give up), else true after a
    /// yield or a nap.
    pub(crate) fn wait(&mut self) -> bool {
        if monotonic_ns() > self.until {
            return false;
        }
        self.looks += 1;
        match self.looks < Self::YIELDS {
            true => yield_now(),
            false => nap(self.nap),
        }
        true
    }
}
