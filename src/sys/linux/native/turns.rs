//! The group's turn table, natively: whose stream turn each file is in.
//!
//! One word per slot (the claims' slots: `hints::CLAIM_SLOTS`, on a line pair each), written by
//! the member taking a stream's events and read by the members the kernel wakes for the file
//! (`stream_aside.rs`). A word names a member, a tag of the file and its direction, and a
//! coarse clock; a turn older than `FRESH` is dead (its member stopped, stalled, died, or the
//! stream ended; `HANDED_FRESH` for a turn handed on whose member has not taken an event of it
//! yet), and files that share a slot tell their turns apart by the tag. A hint: a
//! race between two members only lets one of them read beside the other for a while.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use super::hints::{NativeHints, CLAIM_SLOTS};
use crate::interest::Interest;
use crate::registry::FileId;
use crate::sys::unix::monotonic_ns;

/// A stream's turn whose member took an event of its file this recently is live: a stream's
/// events come closer than `turn::STREAM_GAP` apart.
pub(super) const FRESH: Duration = Duration::from_micros(100);

/// A turn handed to a member that has taken no event of it yet is live this long. The member
/// rung for it may wait for a CPU well past `FRESH` on a loaded machine, or find the stream
/// paused when it looks and go to sleep in the line; with the turn lapsed by then, the member
/// that handed it read on, and the rung one stood aside at its first report: a round without
/// a turn (256 threads on two cores and 8 busy loops: members with a third of their share).
pub(super) const HANDED_FRESH: Duration = Duration::from_millis(2);

// A word of the turn table (`hints::Fixed::turns`): bits 0..16: the member + 1 (0: none; at
// most `MAX_MEMBERS_LIMIT` members), bit 16: `HANDED` (handed to the member, who has taken no
// event of it yet), bits 17..32: the file's tag, bits 32..64: the clock in units of 1 024 ns,
// wrapping (a turn older than `FRESH`, or `HANDED_FRESH`, is dead, whatever the wrap).
const MEMBER_BITS: u64 = 0xFFFF;
const HANDED: u64 = 1 << 16;
const TAG_SHIFT: u32 = 17;
const TAG_BITS: u64 = 0x7FFF;
const CLOCK_SHIFT: u32 = 10;

/// The slot of the turn table (and of the claim table) that `file` uses.
pub(super) fn slot_index(file: FileId) -> u32 {
    (file.spread() >> (64 - CLAIM_SLOTS.trailing_zeros())) as u32
}

/// A tag of the file and of the direction it is read in (a pipe's two ends share an inode):
/// files that share a slot tell their turns apart by it.
fn tag(file: FileId, interest: Interest) -> u64 {
    let direction = u64::from(!interest.is_readable());
    ((file.spread() >> 20) ^ direction) & TAG_BITS
}

fn word<'a>(hints: &NativeHints<'a>, file: FileId) -> &'a AtomicU64 {
    &hints.turns_table()[slot_index(file) as usize].0
}

fn clock() -> u32 {
    (monotonic_ns() >> CLOCK_SHIFT) as u32
}

fn value(member: u32, tag: u64, at: u32) -> u64 {
    (u64::from(at) << 32) | (tag << TAG_SHIFT) | u64::from(member + 1)
}

/// The member whose live turn of the file of tag `tag` the word `value` names, seen at clock
/// `now` (none: no turn, too old, or another file's).
fn read(value: u64, tag: u64, now: u32) -> Option<u32> {
    let member = value & MEMBER_BITS;
    let age = u64::from(now.wrapping_sub((value >> 32) as u32)) << CLOCK_SHIFT;
    let fresh = match value & HANDED {
        0 => FRESH,
        _ => HANDED_FRESH,
    };
    let live =
        member != 0 && (value >> TAG_SHIFT) & TAG_BITS == tag && age < fresh.as_nanos() as u64;
    live.then(|| member as u32 - 1)
}

/// Member `me` took an event of `file` in a stream: the turn is its own, stamped now (at most
/// one store every few microseconds: the word's line stays with the holder), and no longer
/// handed.
pub(super) fn note(hints: &NativeHints<'_>, file: FileId, interest: Interest, me: u32) {
    let w = word(hints, file);
    let (tag, now) = (tag(file, interest), clock());
    let old = w.load(SeqCst);
    let recent = now.wrapping_sub((old >> 32) as u32) < 8;
    if read(old, tag, now) != Some(me) || !recent || old & HANDED != 0 {
        w.store(value(me, tag, now), SeqCst);
    }
}

/// The stream turn of `file` goes to member `next`, rung for it (or, stamped again, that member
/// has come for it): live for `HANDED_FRESH` until `next` takes an event of it.
pub(super) fn hand(hints: &NativeHints<'_>, file: FileId, interest: Interest, next: u32) {
    let tag = tag(file, interest);
    word(hints, file).store(value(next, tag, clock()) | HANDED, SeqCst);
}

/// Member `me` comes for the stream turn of `file` that member `by` handed it: the turn is
/// stamped again as handed to `me` if the word still names `me` or `by` at any age (`by` read
/// on while `me` was on its way), and left alone if it names a third member (the turn went on
/// without `me`, and a late claim would cut that member's turn short). Returns whether the
/// turn is `me`'s.
pub(super) fn arrive(
    hints: &NativeHints<'_>,
    file: FileId,
    interest: Interest,
    me: u32,
    by: u32,
) -> bool {
    let w = word(hints, file);
    let tag = tag(file, interest);
    let old = w.load(SeqCst);
    let named = (old & MEMBER_BITS) as u32;
    let ours = (old >> TAG_SHIFT) & TAG_BITS == tag && (named == me + 1 || named == by + 1);
    if ours || old & MEMBER_BITS == 0 {
        let _ = w.compare_exchange(old, value(me, tag, clock()) | HANDED, SeqCst, SeqCst);
    }
    holder(hints, file, interest, u32::MAX) == Some(me)
}

/// Member `me`, rung for the stream turn of the file in `slot` of the table, does not watch that
/// file: the word names it no more (the member that rang it is rung back and takes it again).
pub(super) fn give_back(hints: &NativeHints<'_>, slot: u32, me: u32) {
    let Some(w) = hints.turns_table().get(slot as usize) else {
        return;
    };
    let old = w.0.load(SeqCst);
    if old & MEMBER_BITS == u64::from(me + 1) {
        let _ = w.0.compare_exchange(old, 0, SeqCst, SeqCst);
    }
}

/// Member `me`'s turn of `file` ended outside a stream: was the file's last stream turn its
/// own, however long ago (then the stream is over, and the members standing aside are called
/// back)? The word is cleared.
pub(super) fn end(hints: &NativeHints<'_>, file: FileId, interest: Interest, me: u32) -> bool {
    let w = word(hints, file);
    let old = w.load(SeqCst);
    // Its own turn at any age: `read` at the word's own clock.
    let mine = read(old, tag(file, interest), (old >> 32) as u32) == Some(me);
    if mine {
        let _ = w.compare_exchange(old, 0, SeqCst, SeqCst);
    }
    mine
}

/// Is the live stream turn of `file` handed to a member that has taken no event of it yet?
pub(super) fn handed(hints: &NativeHints<'_>, file: FileId, interest: Interest) -> bool {
    let value = word(hints, file).load(SeqCst);
    value & HANDED != 0 && read(value, tag(file, interest), clock()).is_some()
}

/// The member other than `me` whose live stream turn of `file` it is, if any.
pub(super) fn holder(
    hints: &NativeHints<'_>,
    file: FileId,
    interest: Interest,
    me: u32,
) -> Option<u32> {
    read(word(hints, file).load(SeqCst), tag(file, interest), clock()).filter(|&m| m != me)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAG: u64 = 0x1234;

    #[test]
    fn a_turn_is_live_for_its_file_until_it_is_fresh_no_more() {
        let now = 1_000_000u32;
        // `FRESH` in the clock's units, rounded up: the first age that is too old.
        let fresh = (FRESH.as_nanos() as u64).div_ceil(1 << CLOCK_SHIFT) as u32;
        assert_eq!(read(0, TAG, now), None);
        let v = value(7, TAG, now);
        assert_eq!(read(v, TAG, now), Some(7));
        assert_eq!(read(v, TAG, now + fresh - 1), Some(7));
        assert_eq!(read(v, TAG, now + fresh), None, "too old");
        assert_eq!(read(v, TAG ^ 1, now), None, "another file's");
        // Member 0 and the last member have marks of their own; the clock wraps.
        assert_eq!(read(value(0, TAG, now), TAG, now), Some(0));
        let last = crate::MAX_MEMBERS_LIMIT as u32 - 1;
        assert_eq!(read(value(last, TAG, now), TAG, now), Some(last));
        assert_eq!(read(value(3, TAG, u32::MAX), TAG, 2), Some(3));
        // A handed turn lives longer, until its member takes an event.
        let handed = value(7, TAG, now) | HANDED;
        assert_eq!(
            read(handed, TAG, now + fresh),
            Some(7),
            "handed: still live"
        );
        let handed_fresh = (HANDED_FRESH.as_nanos() as u64).div_ceil(1 << CLOCK_SHIFT) as u32;
        assert_eq!(read(handed, TAG, now + handed_fresh - 1), Some(7));
        assert_eq!(
            read(handed, TAG, now + handed_fresh),
            None,
            "handed, too old"
        );
    }

    /// The life of one file's word: the member taking events holds it, the others see it
    /// theirs to stand aside for; handed on, it names the rung member; a rung member that does
    /// not watch the file gives it back; a turn that ends outside a stream tells its member
    /// the stream is over, and clears the word.
    #[test]
    fn a_files_word_from_note_to_end() {
        let shared = crate::inner::test_state(crate::Backend::Native, 8);
        let hints = NativeHints::of(&shared);
        let (rx, _tx) = std::os::unix::net::UnixStream::pair().unwrap();
        let file = crate::registry::file_id(std::os::fd::AsRawFd::as_raw_fd(&rx)).unwrap();
        let interest = Interest::READABLE.exclusive();
        assert_eq!(
            holder(&hints, file, interest, 5),
            None,
            "a new group: no turn"
        );
        note(&hints, file, interest, 3);
        assert_eq!(holder(&hints, file, interest, 5), Some(3));
        assert_eq!(holder(&hints, file, interest, 3), None, "its own turn");
        assert_eq!(
            holder(&hints, file, Interest::WRITABLE.exclusive(), 5),
            None,
            "other end"
        );
        hand(&hints, file, interest, 5);
        assert_eq!(holder(&hints, file, interest, 3), Some(5));
        let w = word(&hints, file);
        assert_ne!(w.load(SeqCst) & HANDED, 0, "handed, not taken yet");
        note(&hints, file, interest, 5);
        assert_eq!(w.load(SeqCst) & HANDED, 0, "taken: a turn like any other");
        assert_eq!(holder(&hints, file, interest, 3), Some(5));
        // Member 5 comes for a turn that 3 handed it: still its own, or 3's again (3 read on).
        assert!(arrive(&hints, file, interest, 5, 3));
        note(&hints, file, interest, 3);
        assert!(arrive(&hints, file, interest, 5, 3), "3 read on: 5's now");
        assert_eq!(holder(&hints, file, interest, 3), Some(5));
        note(&hints, file, interest, 4);
        assert!(
            !arrive(&hints, file, interest, 5, 3),
            "gone on to 4: left to it"
        );
        assert_eq!(holder(&hints, file, interest, 5), Some(4));
        hand(&hints, file, interest, 5);
        give_back(&hints, slot_index(file), 6);
        assert_eq!(
            holder(&hints, file, interest, 3),
            Some(5),
            "not 6's to give back"
        );
        give_back(&hints, slot_index(file), 5);
        assert_eq!(holder(&hints, file, interest, 3), None);
        note(&hints, file, interest, 3);
        assert!(!end(&hints, file, interest, 5), "not 5's turn");
        assert!(end(&hints, file, interest, 3));
        assert_eq!(holder(&hints, file, interest, 5), None, "cleared");
        assert!(!end(&hints, file, interest, 3), "ended once");
    }
}
