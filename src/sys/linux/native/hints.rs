//! The native backend's region of the group's shared memory: the hints its members share. None
//! of them decides who gets an event (the kernel does); they decide when a member's turn ends
//! (`Rotation::Adaptive`: is anyone else waiting, is the group in a stream), whom a hand-on
//! rings next, which member holds a file's readiness (`claims.rs`), and whose stream turn a file
//! is in (`turns.rs`). Each word that members write at every wait or every event has a line
//! pair of its own (128 bytes, as crossbeam pads on x86_64: the prefetcher pulls lines in
//! pairs), so that a member's writes do not make every other member's reads miss.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicU32, AtomicU64};

use crate::shared::{RegionSpec, Settings, SharedState};

/// A value on a line pair of its own.
#[repr(C, align(128))]
pub(super) struct Line<T>(pub(super) T);

impl<T> std::ops::Deref for Line<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The words of a stream (see `NativeWaiter::stream_batch`), written together by the member
/// handed an event.
#[repr(C)]
pub(super) struct Stream {
    /// How many exclusive events the native members of the group were handed in all: a member
    /// notes the count when it is handed one, and if the count moved by the time it consumed
    /// it, another event came while it held its own (see `overlap_at`).
    pub(super) handed: AtomicU64,
    /// `handed` when a member's event last overlapped another (0: never): a hint for
    /// `Rotation::Adaptive`, which lets a member take a batch while events overlap (a stream:
    /// the producer does not wait for the readers), and for the claims (`claims.rs`: in a
    /// stream a member woken beside a claim does not wait for it to end).
    pub(super) overlap_at: AtomicU64,
    /// When a member was last handed an exclusive event (monotonic ns).
    pub(super) last_event_ns: AtomicU64,
    /// The moving average of the gaps between such events (1/32 weight).
    pub(super) gap_ns: AtomicU64,
}

/// Slots in a group's claim table (a power of two): each on a line pair of its own, as
/// members claim different files at once.
pub(super) const CLAIM_SLOTS: usize = 64;

/// The claim table (`claims.rs` reads and writes its words).
pub(super) type ClaimTable = [Line<AtomicU64>; CLAIM_SLOTS];

/// The native backend's hints of fixed size, after the group's member slots.
#[repr(C)]
pub(super) struct Fixed {
    /// Where the hand-on looks for an idle member to ring next (a slot number): each ring
    /// starts here and leaves it just past the member rung, so the group's hand-ons go round
    /// the slots in turn, whoever rings (`hand_on.rs`).
    pub(super) ring_cursor: Line<AtomicU32>,
    /// The stream's words.
    pub(super) stream: Line<Stream>,
    /// Who holds a readiness of each file slot (`claims.rs`).
    pub(super) claims: ClaimTable,
    /// Whose stream turn each file slot is in, and when it last took an event (`turns.rs`).
    pub(super) turns: ClaimTable,
}

/// The native backend's region: the fixed hints, then a bitmap of the members inside their
/// kernel wait right now (bit n: member n), whose words follow.
pub(super) struct NativeHints<'a> {
    fixed: &'a Fixed,
    /// With nobody else waiting there is nobody to hand a turn to, so no rotation, and nobody
    /// to hand a readiness on to. A member sets its own bit around its kernel wait (one
    /// atomic `or` and one `and`; 64 members share a word, so a large group's members do not
    /// all write one line) and its reaper clears the bit of a member killed inside its wait,
    /// so a death leaves no member counted as waiting.
    waiting: &'a [AtomicU64],
}

impl<'a> std::ops::Deref for NativeHints<'a> {
    type Target = Fixed;
    fn deref(&self) -> &Fixed {
        self.fixed
    }
}

/// The region's size for a group of `capacity` members.
fn len(capacity: usize) -> usize {
    std::mem::size_of::<Fixed>() + capacity.div_ceil(64) * std::mem::size_of::<u64>()
}

/// What a native group keeps in the shared memory after its member slots (zeroes are its
/// starting values).
pub(crate) fn region(settings: &Settings) -> RegionSpec {
    RegionSpec {
        len: len(settings.capacity),
        set_up: |_| {},
    }
}

/// Does the shared state's region hold the native hints? (What a process checks before it uses
/// a named group's.)
pub(crate) fn check_region(shared: &SharedState) -> std::result::Result<(), String> {
    let (_, got) = shared.region();
    let want = len(shared.capacity() as usize);
    match got == want {
        true => Ok(()),
        false => Err(format!(
            "its native region takes {got} bytes, where its members take {want}"
        )),
    }
}

impl<'a> NativeHints<'a> {
    /// The hints in `shared`'s region (checked by `check_region` when the group was opened).
    pub(super) fn of(shared: &'a SharedState) -> NativeHints<'a> {
        let (start, got) = shared.region();
        let words = (shared.capacity() as usize).div_ceil(64);
        assert!(
            got >= len(shared.capacity() as usize),
            "a native region checked at attach"
        );
        // SAFETY: the region is 128-aligned and `len(capacity)` bytes long (checked above), all
        // of it atomics (any bytes are a value), living as long as `shared`: the fixed hints,
        // then the bitmap's words.
        unsafe {
            NativeHints {
                fixed: &*start.cast::<Fixed>(),
                waiting: std::slice::from_raw_parts(
                    start.add(std::mem::size_of::<Fixed>()).cast::<AtomicU64>(),
                    words,
                ),
            }
        }
    }

    /// The claim table (`claims.rs`).
    pub(super) fn claims_table(&self) -> &'a ClaimTable {
        &self.fixed.claims
    }

    /// The stream turns' table (`turns.rs`).
    pub(super) fn turns_table(&self) -> &'a ClaimTable {
        &self.fixed.turns
    }

    /// Member `m` enters (`true`) or leaves its kernel wait, or is reaped (`false`).
    pub(super) fn set_waiting(&self, m: u32, on: bool) {
        let Some(word) = self.waiting.get(m as usize / 64) else {
            return;
        };
        let bit = 1u64 << (m % 64);
        match on {
            true => word.fetch_or(bit, SeqCst),
            false => word.fetch_and(!bit, SeqCst),
        };
    }

    /// Is any member inside its kernel wait (of the first `high` slots)?
    pub(super) fn anyone_waiting(&self, high: u32) -> bool {
        let words = (high as usize).div_ceil(64).min(self.waiting.len());
        self.waiting[..words].iter().any(|w| w.load(SeqCst) != 0)
    }

    /// Are at least `n` members inside their kernel wait (of the first `high` slots)?
    pub(super) fn at_least_waiting(&self, high: u32, n: u32) -> bool {
        let words = (high as usize).div_ceil(64).min(self.waiting.len());
        let mut count = 0;
        for w in &self.waiting[..words] {
            count += w.load(SeqCst).count_ones();
            if count >= n {
                return true;
            }
        }
        false
    }
}
