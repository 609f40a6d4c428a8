//! When a member's turn ends: the one rule both backends ask.
//!
//! A turn is the run of events a member takes from one exclusive descriptor before it goes to
//! the back of the line (natively: its epoll entry deleted and re-added at the tail of the
//! wait queue; emulated: the line's head moved past it). The setting is [`Rotation`]; this
//! module decides, from what the backend measured, whether the turn is over:
//!
//! - `Every(n)`: after `n` events (`due_by_count`; never for `Every(0)`), decided as the event
//!   is handed out (emulated) or consumed (native);
//! - `Adaptive`, once the member consumed an event: natively (`ends`), in a *stream* (events
//!   closer than [`STREAM_GAP`] apart on average that overlap) after `stream_batch` events or,
//!   from `SHARE_RULE_FROM` on, when the member is ahead of its share; otherwise after this
//!   event unless the descriptor is still ready (a backlog), and after [`ADAPTIVE_BATCH`] in a
//!   row whatever the backlog. The emulation (`ends_under_backlog`), where one member holds a
//!   descriptor at a time and events never overlap: after this event unless there is a
//!   backlog, and under a backlog after
//!   `backlog_batch` events (a backlog taken closer than `STREAM_GAP` apart is its stream) or
//!   when the member is ahead of its share.
//!
//! Natively, a member that works on its events (`Away`: away from its wait [`BUSY_AWAY`] or
//! longer after each of its last few events) ends its turn at each event whatever the backlog
//! or the stream.
//!
//! With nobody to hand the turn to, no backend rotates at all; each backend knows who waits,
//! and asks this module only when someone does. The public description of the rule is
//! [`Rotation`]'s documentation (`src/contract.rs`); a test below checks that it states the
//! constants this module uses.

// The stream rule is the native backend's, which the model checker (`--cfg loom`) leaves out.
#![cfg_attr(loom, allow(dead_code))]

use std::time::Duration;

use crate::contract::{Rotation, ADAPTIVE_BATCH};

/// `Rotation::Adaptive`, the stream: how many of the group's events one overlap counts for. A
/// producer writing as fast as it can to 500 waiters on a pipe overlaps about 1 event in 9
/// under strict turns here, and less often once members take batches (a member in its batch
/// is back in its wait sooner); a producer that waits for each reply, never.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the native backend's measure
pub(crate) const STREAM_MEMORY: u64 = 4096;

/// `Rotation::Adaptive`: overlapping events closer together than this on average are a stream.
/// A producer at full speed to 500 waiters sends one every 3 to 8 µs here (pipe, message
/// queue); overlapping requests at fewer than 50 000 a second keep strict turns.
pub(crate) const STREAM_GAP: Duration = Duration::from_micros(20);

/// `Rotation::Adaptive`: how long a member's turn lasts in a stream (`STREAM_TURN / gap`
/// events, between `ADAPTIVE_BATCH` and `STREAM_BATCH`). Every turn that starts wakes a thread
/// that has not run for a whole round of the group, so at 500 waiters on a pipe the batch sets
/// the price: about 300 µs (96 events at a pipe's pace, 40 at a message queue's) is near the
/// raw flag's speed while a few hundred events per member still give Jain's index about 0.99
/// (the figures for batches of 1 to 256: `docs/lab.md`, "The figures behind two constants").
pub(crate) const STREAM_TURN: Duration = Duration::from_micros(300);
/// The most events of a turn in a stream.
pub(crate) const STREAM_BATCH: u32 = 96;

/// Natively, how long the member that handed a stream's turn on reads on, at the stream's
/// pace and at most a quarter of `STREAM_BATCH` events, until the member it rang takes an event:
/// that member's wake-up (a cold thread's, often on the other CPU) takes 20 to 40 µs here, and
/// a stream left unread meanwhile cost 2 members on a pipe a third more time than one member
/// alone (`docs/lab.md`, "Reading on while the next member wakes").
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the native backend's rule
pub(crate) const READ_ON_FOR: Duration = Duration::from_micros(24);

/// The most events a member reads on (see `READ_ON_FOR`): more took Jain's index at 500
/// waiters on a pipe below 0.99.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) const READ_ON_MOST: u32 = STREAM_BATCH / 4;

/// Natively, how many events a member reads on after handing a stream's turn on, its events
/// `gap_ns` apart (`READ_ON_FOR`, `READ_ON_MOST`).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn read_on(gap_ns: u64) -> u32 {
    (READ_ON_FOR.as_nanos() as u64 / gap_ns.max(1)).min(u64::from(READ_ON_MOST)) as u32
}

/// Natively, the fewest events of a stream's turn before the share rule may end it. The native
/// share is the group's (its events over its member slots), not the descriptor's, and a turn
/// that ends under a backlog is handed on with a ring: a member of a descriptor that few of the
/// group's members watch is always ahead of that share, and with the rule from the first event
/// it rang once per event (3 000 messages of a full queue beside 3 members of another queue:
/// 88 ms against 35 ms without them). From the 16th event, the rule lost most of its effect
/// (50 unrelated servers under a backlog: Jain 0.977–0.991 against 0.995–0.998 from the 4th;
/// `docs/lab.md`).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the native backend's rule
pub(crate) const SHARE_RULE_FROM: u32 = 4;

/// Natively, a member behind its share by more than half a turn in a stream takes its turn on
/// until it has caught up, up to this many full turns (`STREAM_BATCH`) in one. A stream's turn
/// is `STREAM_TURN` long, so a member whose turns came while the producer was slow (a loaded
/// machine) took fewer events in them, and a member rung late may find its turn taken: with
/// the lead rule alone those stayed behind for good (256 threads on two cores with 8 busy
/// loops: a member with 30-48 % of its share at the least, 61-75 % with this rule).
pub(crate) const CATCH_UP: u32 = 3;

/// `Rotation::Adaptive`: a member away from its wait this long or longer after each of its
/// last `AWAY_WINDOW` events (the shortest of them: a member preempted now and then on its way
/// back is not working) works on its events, and natively its turn ends at each of them
/// whatever the backlog or the stream: the next event goes to another member while it works.
/// Longer turns pay off only for events quick to handle, where a hand-off costs more than the
/// event. (At 2 waiters with 10 µs of work per message on a pipe, a member that kept a stream's
/// turn did all the work on one CPU: 12.8 µs per message against 6.0 with the turn ending at
/// each event, `docs/lab.md`.)
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the native backend's rule
pub(crate) const BUSY_AWAY: Duration = Duration::from_micros(5);

/// How many of a member's events `BUSY_AWAY` is judged on.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) const AWAY_WINDOW: u8 = 8;

/// A member's time away from its wait after its events, judged by windows of `AWAY_WINDOW`
/// events: whether it works on them (`BUSY_AWAY`) by its last full window.
#[derive(Debug, Clone, Copy, Default)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the native backend's measure
pub(crate) struct Away {
    /// The shortest absence of the window so far, in units of 128 ns (saturating: 8 ms).
    shortest: u16,
    /// Absences in the window so far.
    seen: u8,
    /// By the last full window: does the member work on its events?
    works: bool,
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
impl Away {
    /// The member was away `ns` after an event.
    pub(crate) fn note(&mut self, ns: u64) {
        let units = u16::try_from(ns >> 7).unwrap_or(u16::MAX);
        self.shortest = match self.seen {
            0 => units,
            _ => self.shortest.min(units),
        };
        self.seen += 1;
        if self.seen >= AWAY_WINDOW {
            self.works = u128::from(self.shortest) >= BUSY_AWAY.as_nanos() >> 7;
            self.seen = 0;
        }
    }

    /// Does the member work on its events (by its last full window)?
    pub(crate) fn works(&self) -> bool {
        self.works
    }
}

/// `Every(n)`: is a member's turn over after it was handed `handed` events in a row? Never for
/// `Every(0)` or `Adaptive`.
pub(crate) fn due_by_count(rotation: Rotation, handed: u32) -> bool {
    matches!(rotation, Rotation::Every(n) if n > 0 && handed >= n)
}

/// In a stream of events `gap_ns` apart on average (`overlapping`: one was handed while
/// another was held, lately), how many events a turn takes: `STREAM_TURN / gap`, between
/// `ADAPTIVE_BATCH` and `STREAM_BATCH`. `None`: not a stream (no overlap, or events too far
/// apart, or no gap measured yet).
pub(crate) fn stream_batch(overlapping: bool, gap_ns: u64) -> Option<u32> {
    if !overlapping || gap_ns == 0 || gap_ns >= STREAM_GAP.as_nanos() as u64 {
        return None;
    }
    let batch = STREAM_TURN.as_nanos() as u64 / gap_ns;
    Some(batch.clamp(u64::from(ADAPTIVE_BATCH), u64::from(STREAM_BATCH)) as u32)
}

/// `Adaptive` as the emulation decides it, once the member consumed its `handed`-th event in a
/// row: its turn is over unless the descriptor has a `backlog`, and under a backlog after
/// `backlog_batch(pace())` events (`pace`: ns between the member's events this turn, asked
/// only under a backlog). The emulation knows no overlap (one member holds a source at a time),
/// so a backlog taken quickly is its stream.
pub(crate) fn ends_under_backlog(
    handed: u32,
    backlog: bool,
    pace: impl FnOnce() -> u64,
    ahead: impl FnOnce(u32) -> bool,
) -> bool {
    if !backlog {
        return true;
    }
    let batch = backlog_batch(pace());
    handed >= batch || (batch > ADAPTIVE_BATCH && ahead(batch))
}

/// How many events in a row a member takes from a backlog that it takes `pace_ns` apart: a
/// turn of about `STREAM_TURN` (`stream_batch`) when it takes them closer than `STREAM_GAP`
/// apart, else `ADAPTIVE_BATCH`.
pub(crate) fn backlog_batch(pace_ns: u64) -> u32 {
    stream_batch(true, pace_ns).unwrap_or(ADAPTIVE_BATCH)
}

/// The emulation, `Rotation::Adaptive`: a member that has taken its events this turn closer
/// than this apart (from its second) is in a quick stream, and its turn goes on without asking
/// the descriptor whether it is still ready (`goes_on_unasked`).
pub(crate) const UNASKED_PACE: Duration = Duration::from_micros(10);

/// Under `Adaptive` the emulation asks the descriptor at each consumed event whether it is
/// still ready (a zero-timeout `poll`), and ends the turn if not. In a quick stream (the
/// member's `handed` events this turn, two or more, taken less than `UNASKED_PACE` apart on
/// average: `pace` in ns) it does not ask, and the turn ends by its length or the share rule
/// alone: the answer costs a system call per event, and a "no" there only means that the
/// member caught up with its producer for a few microseconds (a message queue 10 deep is
/// empty again after every 10 receives while its producer waits for room). At 500 waiters:
/// 1.8–2.3 µs per message on a pipe against 2.4–3.2, 3.8–4.1 on a message queue against
/// 5.1–7.2 (`docs/lab.md`). The price: when a stream stops, the event that comes next, however
/// late, is still the last member's (one event out of turn; its pace then ends the turn).
pub(crate) fn goes_on_unasked(handed: u32, pace: impl FnOnce() -> u64) -> bool {
    handed >= 2 && pace() < UNASKED_PACE.as_nanos() as u64
}

/// The emulation's share rule: how far ahead of its share a member may get in a stream whose
/// turns are `batch` events long. In a round of even turns the lead a member is allowed is the
/// length its turns settle at, and the spread of the members' counts at any moment. A stream
/// taken at a pipe's pace (turns of the full `STREAM_BATCH`, events about 3 µs apart) keeps
/// half a turn: its events are so cheap that the hand-off is what a turn costs (at 500 waiters
/// on a pipe, 3.3 µs per message against 7 with a lead of 8). Slower streams, a message queue's
/// with work behind each message, pay for a hand-off in a few events, so their lead is half an
/// `ADAPTIVE_BATCH`: 50 unrelated servers with 200 requests each then get Jain 0.996-0.999
/// instead of 0.979-0.996 (`docs/lab.md`, the emulation's share lead).
pub(crate) fn share_lead(batch: u32) -> u32 {
    if batch >= STREAM_BATCH {
        batch / 2
    } else {
        (batch / 2).min(ADAPTIVE_BATCH / 2)
    }
}

/// The member consumed its `handed`-th event in a row: is its turn over? `Every(n)`: after `n`
/// (`due_by_count`). `Adaptive`: in a stream of turns of `stream` events, from
/// `SHARE_RULE_FROM` events on, as soon as the member's `lead` over its share (asked only
/// then) is more than half a turn, else after `stream` events, or, for a member behind its
/// share by more than half a turn, once it has caught up or taken `CATCH_UP` full turns;
/// otherwise unless the descriptor has a `backlog` (asked only then), and after
/// `ADAPTIVE_BATCH` whatever the backlog. The native backend's rule (the emulation's is
/// `ends_under_backlog`).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the native backend's rule
pub(crate) fn ends(
    rotation: Rotation,
    handed: u32,
    stream: Option<u32>,
    lead: impl FnOnce() -> i64,
    backlog: impl FnOnce() -> bool,
) -> bool {
    match (rotation, stream) {
        (Rotation::Every(_), _) => due_by_count(rotation, handed),
        (Rotation::Adaptive, Some(batch)) => {
            if handed < SHARE_RULE_FROM {
                return false;
            }
            let lead = lead();
            let half = i64::from(batch / 2);
            let behind = lead < -half && handed < CATCH_UP * STREAM_BATCH;
            lead > half || (handed >= batch && !behind)
        }
        (Rotation::Adaptive, None) => handed >= ADAPTIVE_BATCH || !backlog(),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The rule as stated: strict turns, batches under a backlog, streams within their bounds.
    #[test]
    fn the_rule() {
        let never = |_| false;
        let even = || 0;
        assert!(!due_by_count(Rotation::Every(0), 1000));
        assert!(due_by_count(Rotation::Every(3), 3) && !due_by_count(Rotation::Every(3), 2));
        assert!(!due_by_count(Rotation::Adaptive, 1000));
        let adaptive = Rotation::Adaptive;
        assert!(ends(adaptive, 1, None, even, || false));
        assert!(!ends(adaptive, 1, None, even, || true));
        assert!(ends(adaptive, ADAPTIVE_BATCH, None, even, || true));
        // A stream: turns of `batch`, shorter for a member ahead of its share by more than
        // half a turn (from `SHARE_RULE_FROM` on), longer for one behind it by as much.
        assert!(!ends(adaptive, 20, Some(96), even, || false));
        assert!(ends(adaptive, 96, Some(96), even, || true));
        assert!(ends(adaptive, SHARE_RULE_FROM, Some(96), || 49, || true));
        assert!(!ends(adaptive, SHARE_RULE_FROM, Some(96), || 48, || true));
        assert!(!ends(
            adaptive,
            SHARE_RULE_FROM - 1,
            Some(96),
            || 49,
            || true
        ));
        assert!(ends(adaptive, 96, Some(96), || -48, || true));
        assert!(!ends(adaptive, 96, Some(96), || -49, || true));
        let most = CATCH_UP * STREAM_BATCH;
        assert!(!ends(adaptive, most - 1, Some(40), || -21, || true));
        assert!(ends(adaptive, most, Some(40), || -21, || true));
        assert_eq!(stream_batch(false, 1_000), None);
        assert_eq!(stream_batch(true, 0), None);
        assert_eq!(stream_batch(true, STREAM_GAP.as_nanos() as u64), None);
        assert_eq!(stream_batch(true, 1), Some(STREAM_BATCH));
        assert_eq!(stream_batch(true, 19_000), Some(ADAPTIVE_BATCH));
        // The emulation's: no backlog ends the turn; a backlog taken slowly gives batches of
        // 16; one taken quickly, a stream's turn, cut short for a member ahead of its share.
        let slow = || STREAM_GAP.as_nanos() as u64;
        let quick = || 3_000;
        assert!(ends_under_backlog(1, false, quick, never));
        assert!(!ends_under_backlog(15, true, slow, never));
        assert!(ends_under_backlog(ADAPTIVE_BATCH, true, slow, never));
        assert!(!ends_under_backlog(ADAPTIVE_BATCH, true, quick, never));
        assert!(ends_under_backlog(STREAM_BATCH, true, quick, never));
        assert!(ends_under_backlog(20, true, quick, |_| true));
        assert!(!ends_under_backlog(5, true, slow, |_| true)); // (asked only in a stream)
        assert_eq!(share_lead(STREAM_BATCH), STREAM_BATCH / 2);
        assert_eq!(share_lead(STREAM_BATCH - 1), ADAPTIVE_BATCH / 2);
        assert_eq!(share_lead(ADAPTIVE_BATCH), ADAPTIVE_BATCH / 2);
        assert_eq!(backlog_batch(0), ADAPTIVE_BATCH);
        assert_eq!(backlog_batch(1_000), STREAM_BATCH);
        // A quick stream's turn is not asked about (from its second event); a slower one is.
        let unasked = UNASKED_PACE.as_nanos() as u64;
        assert!(!goes_on_unasked(1, quick));
        assert!(goes_on_unasked(2, quick));
        assert!(!goes_on_unasked(40, || unasked));
        assert!(goes_on_unasked(40, || unasked - 1));
    }

    /// A member works on its events once a whole window of them kept it away `BUSY_AWAY` or
    /// longer, not for one long absence (a preemption), and stops once one is quick again.
    #[test]
    fn a_member_works_after_a_window_of_long_absences_not_after_one() {
        let busy = BUSY_AWAY.as_nanos() as u64;
        let mut away = Away::default();
        assert!(!away.works(), "a new member");
        for i in 0..4 * u64::from(AWAY_WINDOW) {
            // Preempted for milliseconds on one event in four.
            away.note(if i % 4 == 0 { 10_000 * busy } else { 300 });
            assert!(!away.works());
        }
        for _ in 0..AWAY_WINDOW - 1 {
            away.note(busy);
        }
        assert!(!away.works(), "a window not full yet");
        away.note(busy);
        assert!(away.works(), "a full window of work");
        away.note(u64::MAX); // an absence longer than the units hold
        for _ in 0..AWAY_WINDOW - 2 {
            away.note(2 * busy);
        }
        assert!(away.works());
        away.note(busy - 128); // (in units of 128 ns)
        assert!(!away.works(), "one quick event in the window");
    }

    #[test]
    fn a_read_on_lasts_its_time_at_the_stream_s_pace_up_to_its_count() {
        let for_ns = READ_ON_FOR.as_nanos() as u64;
        // A queue's pace (4 µs apart): the time bounds it.
        assert_eq!(read_on(4_000), (for_ns / 4_000) as u32);
        assert!(read_on(4_000) < READ_ON_MOST);
        // A pipe's pace (1 µs apart, or closer): the count does.
        assert_eq!(read_on(1_000), READ_ON_MOST.min((for_ns / 1_000) as u32));
        assert_eq!(read_on(100), READ_ON_MOST);
        // No gap measured yet: the count.
        assert_eq!(read_on(0), READ_ON_MOST);
        // Events further apart than the bound: none.
        assert_eq!(read_on(for_ns + 1), 0);
    }

    /// The public description of the rule (`Rotation`'s docs) and the README state the
    /// numbers this module uses: a change of one without the other fails here.
    #[test]
    fn the_docs_state_the_rule_s_numbers() {
        let contract = include_str!("contract.rs");
        let readme = include_str!("../README.md");
        let in_contract = [
            format!("closer than {} µs apart", STREAM_GAP.as_micros()),
            format!(
                "about {} µs (at most {} events)",
                STREAM_TURN.as_micros(),
                STREAM_BATCH
            ),
            format!("{} µs or more per event", BUSY_AWAY.as_micros()),
            format!(
                "{} µs of the stream at most and at most {} events",
                READ_ON_FOR.as_micros(),
                READ_ON_MOST
            ),
            format!("last {AWAY_WINDOW} absences"),
            format!("pub const ADAPTIVE_BATCH: u32 = {ADAPTIVE_BATCH};"),
        ];
        for says in &in_contract {
            assert!(contract.contains(says), "contract.rs does not say {says:?}");
        }
        let readme_turn = format!(
            "turns of about {} µs, up to {} events",
            STREAM_TURN.as_micros(),
            STREAM_BATCH
        );
        assert!(
            readme.contains(&readme_turn),
            "README.md does not say {readme_turn:?}"
        );
    }
}
