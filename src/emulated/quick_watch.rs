//! A leader whose source's events come quickly looks for the next one awake, then sleeps.
//!
//! One request at a time (a client that waits for each reply), the token reaches the next
//! member while the holder reads, and that member, now leading a free source, waits for the
//! next request. Asleep in its kernel wait, it costs the request a thread's wake-up, tens of
//! microseconds on a virtual machine whose CPU has gone idle. So a leader watching a free
//! source first looks for its event with zero-timeout kernel waits, yielding the CPU between
//! them, for at most `WATCH_SPIN`, and sleeps only then; but only while this member's watches
//! end within `WATCH_SPIN` on average (`QuickWatch::pays`: a moving average of the time from the
//! start of a watch to the event it found, or to the end of a wait that found none, one watch in
//! `SAMPLE` timed), so that a quiet group, or one whose events come far apart, spins for nothing
//! after a few waits and costs nothing more. The looks are the kernel wait's, the bell among
//! what they see: a ring ends the spin as it ends a sleep, and the member goes on as if woken.
//! Unix only: on Windows a ring is the poller's notify, which a zero-timeout wait consumes
//! without an event to show for it. With no backlog behind the source, the leader that looks
//! awake also rings the member next in line as its deputy, which spins for the token
//! (`Protocol::wake_deputy_early`): the token then reaches a member that is running.
//! Measured (`herd rpc`, `herd mq`): `docs/lab.md`, "The emulated leader looks for the next
//! event awake".

use std::io;
use std::time::Duration;

use super::kernel_wait::RawEvents;
use super::poller::Poller;
use crate::sync::{monotonic_ns, yield_now};

/// The longest a leader looks for its source's event awake before it sleeps, and the longest
/// its watches may last on average for it to look so. About what a sleeping thread's wake-up
/// costs on a loaded virtual machine; the deputy spins as long for its token
/// (`protocol::SPIN_FOR_RELEASE`).
pub(super) const WATCH_SPIN: Duration = Duration::from_micros(50);

/// This member's watches: when the current one started, and how long they last on average
/// (until the event they found, or at least until the wait that ended without one).
#[derive(Debug, Clone, Copy)]
pub(super) struct QuickWatch {
    /// When the member started sleeping (or spinning) on a free source it leads (monotonic
    /// ns; 0: it is not watching one).
    since_ns: u64,
    /// Moving average (1/4 weight) of the time from a watch's start to the event it found
    /// (`u64::MAX`: none measured yet).
    average_ns: u64,
    /// Watches started so far: one in `SAMPLE` is timed.
    started: u32,
}

/// One watch in this many is timed (the first is): on a pipe at one waiter, where the member
/// finds the next message at once, two clock readings per watch are a tenth of a message's
/// cost, and the average is a hint that needs no more.
const SAMPLE: u32 = 8;

impl Default for QuickWatch {
    fn default() -> QuickWatch {
        QuickWatch {
            since_ns: 0,
            average_ns: u64::MAX,
            started: 0,
        }
    }
}

impl QuickWatch {
    /// The member is about to sleep on a free source it leads: a watch starts, unless one is
    /// going on already (a pass woken for something else); timed if it is one of the sample.
    pub(super) fn start(&mut self) {
        if self.since_ns == 0 {
            self.started = self.started.wrapping_add(1);
            if self.started % SAMPLE == 1 {
                self.since_ns = monotonic_ns().max(1);
            }
        }
    }

    /// Is a timed watch going on?
    pub(super) fn is_on(&self) -> bool {
        self.since_ns != 0
    }

    /// Its watch found the source's event: how long it took goes into the average.
    pub(super) fn found(&mut self) {
        self.end();
    }

    /// The member's wait ended without the event (a timeout, a notification, a signal, the
    /// token taken away): the watch lasted at least this long, which goes into the average
    /// too, so that a member whose waits time out in a quiet group stops looking awake.
    pub(super) fn stop(&mut self) {
        self.end();
    }

    fn end(&mut self) {
        if self.since_ns == 0 {
            return;
        }
        let took = monotonic_ns().saturating_sub(self.since_ns);
        self.since_ns = 0;
        self.average_ns = match self.average_ns {
            u64::MAX => took,
            average => average - average / 4 + took / 4,
        };
    }

    /// Do this member's watches end quickly enough for a look awake to pay?
    pub(super) fn pays(&self) -> bool {
        self.average_ns <= WATCH_SPIN.as_nanos() as u64
    }
}

/// Looks in `poller` without sleeping, yielding the CPU between looks, until it finds an event
/// (returns true, the events in `raw`) or `WATCH_SPIN` (or `timeout`, if shorter) has passed
/// (false: the caller sleeps in its kernel wait).
pub(super) fn look_awake(
    raw: &mut RawEvents,
    poller: &Poller,
    timeout: Option<Duration>,
) -> io::Result<bool> {
    let budget = timeout.map_or(WATCH_SPIN, |t| t.min(WATCH_SPIN));
    let mut until = None;
    loop {
        raw.wait(poller, Some(Duration::ZERO))?;
        if !raw.is_empty() {
            return Ok(true);
        }
        // The clock is read from the second look on: the first usually finds the event.
        let now = monotonic_ns();
        if now >= *until.get_or_insert_with(|| now.saturating_add(budget.as_nanos() as u64)) {
            return Ok(false);
        }
        yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Starts a watch that is timed whatever the sample.
    fn start_timed(watch: &mut QuickWatch) {
        watch.started = 0;
        watch.start();
    }

    #[test]
    fn one_watch_in_a_sample_is_timed() {
        let mut watch = QuickWatch::default();
        let mut timed = 0;
        for _ in 0..SAMPLE * 3 {
            watch.start();
            timed += u32::from(watch.is_on());
            watch.found();
        }
        assert_eq!(timed, 3);
        assert!(watch.pays());
    }

    #[test]
    fn watches_that_end_quickly_pay_and_slow_ones_do_not() {
        let mut watch = QuickWatch::default();
        assert!(!watch.pays(), "nothing measured yet: the member sleeps");
        watch.found(); // no watch going on: nothing to measure
        assert!(!watch.pays());
        start_timed(&mut watch);
        std::thread::sleep(WATCH_SPIN * 20);
        watch.found();
        assert!(!watch.pays(), "a watch twenty spins long");
        // Watches that end at once bring the average down within the spin.
        for _ in 0..40 {
            start_timed(&mut watch);
            watch.found();
        }
        assert!(watch.pays());
        // A watch going on is not restarted by a second start (a pass woken for something
        // else).
        start_timed(&mut watch);
        let since = watch.since_ns;
        watch.start();
        assert_eq!(watch.since_ns, since);
        watch.found();
        assert!(watch.pays());
    }

    #[test]
    fn waits_that_end_without_the_event_count_as_long_watches() {
        let mut watch = QuickWatch::default();
        for _ in 0..40 {
            start_timed(&mut watch);
            watch.found();
        }
        assert!(watch.pays());
        // A quiet group: waits that time out, each after twenty spins.
        for _ in 0..4 {
            start_timed(&mut watch);
            std::thread::sleep(WATCH_SPIN * 20);
            watch.stop();
        }
        assert!(!watch.pays());
        watch.stop(); // no watch going on: nothing more to measure
        assert!(!watch.pays());
    }
}
