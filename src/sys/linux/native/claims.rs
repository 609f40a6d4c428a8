//! One member at a time holds a readiness of an exclusive file, natively: the claims.
//!
//! `EPOLLEXCLUSIVE` wakes one sleeping member per wake-up, but a file may wake its pollers for
//! more than its readiness. A POSIX message queue's `mq_receive` wakes them for the room it
//! freed (`pipelined_receive` calls `wake_up_interruptible` with no key, which the flag takes as
//! news of any event), so every message received wakes one more sleeping member, for nothing.
//! If the next message comes before that member has looked, it sees the message too, beside the
//! member the message woke, and one of the two reads nothing (`EAGAIN`). So a member handed an
//! exclusive event claims the file's slot in this table until its caller has consumed the event
//! (`consumed`, `found_nothing`, or the next `wait`), and a member whose kernel wait reports a
//! file another member has claimed waits until that claim ends (yielding the CPU, at most
//! `CLAIM_WAIT`) and asks the descriptor again (a zero-timeout `poll`): still ready, that is a
//! readiness of its own and is handed out (claimed, unless a member claimed the file again
//! meanwhile: a backlog, which both may read); not, it was the claimed one, and the member goes
//! back to sleep without its caller seeing anything (an empty wake-up of its own,
//! `MemberStats::empty_wakeups`), its entry moved to the tail as after a read that found
//! nothing. It waits for *that* claim to end, not for the slot to be free, as a holder may
//! claim the file again at once. A member that claims a free file after another member's claim
//! asks the descriptor too (`still_ready_after_another`): that member may have read the
//! readiness this one was woken for, while this one was preempted between its kernel wait and
//! its claim. In a stream (the group's stream hint: events close together
//! that overlap) the member does not wait and does not ask: a stream is a backlog that members
//! read side by side, and a look per woken member would cost more than the few `EAGAIN`s it
//! saves.
//!
//! The claims are hints: the kernel decides who is woken, and a claim only holds back a second
//! report of one readiness. A slot is chosen by the file's device and inode
//! (`FileId::spread`), the same in every process, so files that share a slot (or an inode: a
//! pipe's two ends, Linux's anonymous inodes) at worst wait for each other's release; a holder
//! that stalls past `CLAIM_WAIT` is passed over; a dead member's claims are cleared by its
//! reaper (`clear_out`). `rotate_every(0)`, the raw flag, claims nothing.

use std::os::fd::RawFd;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use super::hints::{NativeHints, CLAIM_SLOTS};
use super::{NativeWaiter, Registration};
use crate::contract::Rotation;
use crate::error::Result;
use crate::registry::{self, FileId};
use crate::sys::unix::monotonic_ns;

/// The longest a member waits for another member's release of a file its kernel wait
/// reported. A claim lasts from a `wait`'s return to the caller's read of the descriptor and
/// its `consumed`: microseconds, unless the holder was preempted or stalls.
const CLAIM_WAIT: Duration = Duration::from_micros(100);

/// Spins before each wait for a release starts yielding the CPU.
const SPINS_BEFORE_YIELD: u32 = 32;

// A slot of the table (`hints::ClaimTable`). The low 32 bits: 0 when free, else the holder's
// member index + 1; the high 32: a count of the slot's claims, so that every claim is a new
// value (a member that waits for a claim to end sees it end even if the holder claims again at
// once).

fn slot<'a>(hints: &NativeHints<'a>, file: FileId) -> &'a AtomicU64 {
    // The top bits of the spread: the best mixed.
    let i = (file.spread() >> (64 - CLAIM_SLOTS.trailing_zeros())) as usize;
    &hints.claims_table()[i].0
}

/// Member `me`'s mark in the low half of a slot it holds.
fn mine(me: u32) -> u64 {
    u64::from(me.wrapping_add(1))
}

/// The holder's mark of a slot's value (0: free).
fn holder(value: u64) -> u64 {
    value & u64::from(u32::MAX)
}

/// The slot's value once `me` has claimed it, from `value`.
fn claimed(value: u64, me: u32) -> u64 {
    (value & !u64::from(u32::MAX)).wrapping_add(1 << 32) | mine(me)
}

/// Claims `value`'s slot for `me` if it is free: whether `me` holds it now.
fn claim_free(word: &AtomicU64, value: u64, me: u32) -> bool {
    match holder(value) {
        0 => word
            .compare_exchange(value, claimed(value, me), SeqCst, SeqCst)
            .is_ok(),
        h => h == mine(me),
    }
}

/// Takes `file`'s slot for `me`, unless another member holds it: the count of the slot's claims
/// once `me` holds it, or `None`.
fn try_claim(hints: &NativeHints<'_>, file: FileId, me: u32) -> Option<u32> {
    let word = slot(hints, file);
    loop {
        let value = word.load(SeqCst);
        if claim_free(word, value, me) {
            return Some(claim_count(match holder(value) {
                0 => claimed(value, me),
                _ => value, // held by `me` already
            }));
        }
        if holder(word.load(SeqCst)) != 0 {
            return None; // held by another member (or it was, and the next look decides)
        }
    }
}

/// The count of claims in a slot's value.
fn claim_count(value: u64) -> u32 {
    (value >> 32) as u32
}

/// A member whose last claim of a file left the slot's count at `last` holds it now at `count`:
/// is it still its own claim, or the next after it (`Fresh`), or did another member's claim
/// come in between (`AfterAnother`)?
fn claimed_after(last: u32, count: u32) -> Claim {
    match count == last || count == last.wrapping_add(1) {
        true => Claim::Fresh,
        false => Claim::AfterAnother,
    }
}

/// What `NativeWaiter::claim` found for a descriptor its kernel wait reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Claim {
    /// It takes no claim (not exclusive, or the raw flag): hand it out.
    Untaken,
    /// This member claimed its file, and no other member did since this member's last claim:
    /// the readiness it was woken for is there (hand it out).
    Fresh,
    /// This member claimed its file after another member's claim, whose read may have taken
    /// the readiness this member was woken for (`still_ready_after_another` decides).
    AfterAnother,
    /// Another member holds the file's claim (`take_contested` decides).
    Held,
}

/// Gives up the claim of slot `word` if `m` holds it.
fn release_word(word: &AtomicU64, m: u32) {
    let value = word.load(SeqCst);
    if holder(value) == mine(m) {
        let free = value & !u64::from(u32::MAX);
        let _ = word.compare_exchange(value, free, SeqCst, SeqCst);
    }
}

/// Gives up `file`'s slot if `me` holds it.
pub(super) fn release(hints: &NativeHints<'_>, file: FileId, me: u32) {
    release_word(slot(hints, file), me);
}

/// A reap of member `m`: every slot it holds is free again.
pub(super) fn clear_member(hints: &NativeHints<'_>, m: u32) {
    for word in hints.claims_table() {
        release_word(&word.0, m);
    }
}

/// Waits until the claim `seen` (a value of `word`) ends, or the clock passes `deadline_ns`
/// (`monotonic_ns`): whether it ended (a free slot has no claim to wait for).
fn wait_for_end(word: &AtomicU64, seen: u64, deadline_ns: u64) -> bool {
    let mut spins = 0u32;
    while holder(seen) != 0 && word.load(SeqCst) == seen {
        if monotonic_ns() >= deadline_ns {
            return false;
        }
        if spins < SPINS_BEFORE_YIELD {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
        spins += 1;
    }
    true
}

impl NativeWaiter {
    /// Do this member's exclusive events take claims? Not under the raw flag.
    pub(super) fn claims_events(&self) -> bool {
        self.rotation != Rotation::Every(0)
    }

    /// The kernel wait reported `fd`: may it be handed out now? Yes for a descriptor that takes
    /// no claim, or once this member has claimed its file, if no other member claimed it since
    /// this member's last claim; after another member's claim, once it is found still ready
    /// (`still_ready_after_another`); not while another member holds the file's claim (then
    /// `take_contested` decides, after this wait's other events).
    pub(super) fn claim(&mut self, fd: RawFd) -> Claim {
        let claims = self.claims_events();
        let hints = NativeHints::of(&self.shared);
        let Some(reg) = self.registrations.get_mut(&fd) else {
            return Claim::Untaken;
        };
        if !reg.interest.is_exclusive() || !claims {
            return Claim::Untaken;
        }
        let Some(count) = try_claim(&hints, reg.file, self.me) else {
            return Claim::Held;
        };
        let last = std::mem::replace(&mut reg.last_claim, count);
        claimed_after(last, count)
    }

    /// `fd`'s file was claimed by another member since this member's last claim, and this
    /// member has claimed it now, for a readiness its kernel wait reported: is it still there?
    /// The other member may have read it meanwhile (the member the readiness woke was preempted
    /// between its kernel wait and its claim, and a member woken for nothing took it; at 32
    /// servers beside busy loops, 1 to 1.5 % of the calls). In a stream nothing is asked, as in
    /// `claim_when_released`. Gone, the claim is given up and the entry goes to the tail, as
    /// after a read that found nothing (an empty wake-up of the member's own). One `poll` per
    /// such event.
    pub(super) fn still_ready_after_another(&mut self, fd: RawFd) -> Result<bool> {
        let Some(reg) = self.registrations.get(&fd).copied() else {
            return Ok(false);
        };
        if self.stream_now().is_some() || registry::still_ready(fd, reg.interest) {
            return Ok(true);
        }
        release(&NativeHints::of(&self.shared), reg.file, self.me);
        if !self.nobody_to_hand_to() {
            self.rotate(fd)?;
        }
        Ok(false)
    }

    /// The reported descriptors whose file another member held (`claim`): each waits for the
    /// release and is handed out if it is still ready then. One that is not goes to the tail
    /// of its wait queue (delete and add), as it would have after a read that found nothing:
    /// it was the member's turn for a readiness another member had, and a level-triggered
    /// entry that a wait reported stays on its epoll's ready list, which would bring the member
    /// back at once for every message while other members hold the file. Returns whether any
    /// was an event the group's stream hint counts (`hand_out`).
    pub(super) fn take_contested(&mut self, events: &mut crate::interest::Events) -> Result<bool> {
        let mut noted = false;
        while let Some((fd, flags)) = self.contested.pop() {
            if self.claim_when_released(fd) {
                // The holder may have handed its stream turn on meanwhile: the file is then
                // another member's, and this one stands aside (`stream_aside.rs`).
                match self.aside_after_release(fd) {
                    Ok(false) => noted |= self.hand_out(fd, flags, events),
                    Ok(true) => {}
                    Err(e) => {
                        self.contested.clear();
                        return Err(e);
                    }
                }
            } else if !self.nobody_to_hand_to() {
                if let Err(e) = self.rotate(fd) {
                    self.contested.clear();
                    return Err(e);
                }
            }
        }
        Ok(noted)
    }

    /// `take_contested`, the claim of `fd`'s file taken: is the file in another member's live
    /// stream turn now (under `Rotation::Adaptive`)? Then the claim is given up and the member
    /// stands aside from the file.
    fn aside_after_release(&mut self, fd: RawFd) -> Result<bool> {
        if self.rotation != Rotation::Adaptive {
            return Ok(false);
        }
        let Some(reg) = self.registrations.get(&fd).copied() else {
            return Ok(false);
        };
        if !self.aside_from_stream(fd)? {
            return Ok(false);
        }
        if self.claims_events() {
            release(&NativeHints::of(&self.shared), reg.file, self.me);
        }
        Ok(true)
    }

    /// Waits (at most `CLAIM_WAIT`) until the claim another member holds of `fd`'s file ends,
    /// then says whether `fd` is still ready, and if so claims the file if it is free. A claim
    /// still there at the end is passed over (its holder stalled, or died and is not reaped
    /// yet).
    fn claim_when_released(&self, fd: RawFd) -> bool {
        let Some(reg) = self.registrations.get(&fd).copied() else {
            return false;
        };
        let hints = NativeHints::of(&self.shared);
        let word = slot(&hints, reg.file);
        let seen = word.load(SeqCst);
        if self.stream_now().is_some() {
            // In a stream the file has a backlog, which members read side by side: handed out
            // at once, as with no claims (a look would put a system call on every message,
            // each waking a sleeper at 500 waiters, for a few `EAGAIN`s less).
            let _ = claim_free(word, seen, self.me);
            return true;
        }
        wait_for_end(word, seen, monotonic_ns() + CLAIM_WAIT.as_nanos() as u64);
        if !registry::still_ready(fd, reg.interest) {
            return false; // the readiness was the one the holder had
        }
        let value = word.load(SeqCst);
        let _ = claim_free(word, value, self.me); // taken again meanwhile: a backlog, shared
        true
    }

    /// Releases the claim that the outstanding event of `reg` holds.
    pub(super) fn release_claim(&self, reg: &Registration) {
        if reg.outstanding && self.claims_events() {
            release(&NativeHints::of(&self.shared), reg.file, self.me);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_after_another_members_is_told_from_the_next_of_ones_own() {
        let word = AtomicU64::new(0);
        // Member 2 claims and releases; its next claim follows its own.
        assert!(claim_free(&word, word.load(SeqCst), 2));
        let first = claim_count(word.load(SeqCst));
        release_word(&word, 2);
        assert!(claim_free(&word, word.load(SeqCst), 2));
        let second = claim_count(word.load(SeqCst));
        assert_eq!(claimed_after(first, second), Claim::Fresh);
        assert_eq!(claimed_after(second, second), Claim::Fresh, "still held");
        release_word(&word, 2);
        // Member 5 claims and releases in between: member 2's next claim comes after another.
        assert!(claim_free(&word, word.load(SeqCst), 5));
        release_word(&word, 5);
        assert!(claim_free(&word, word.load(SeqCst), 2));
        let third = claim_count(word.load(SeqCst));
        assert_eq!(claimed_after(second, third), Claim::AfterAnother);
        // The count wraps.
        assert_eq!(claimed_after(u32::MAX, 0), Claim::Fresh);
        assert_eq!(claimed_after(u32::MAX, 1), Claim::AfterAnother);
    }

    #[test]
    fn a_claim_is_one_members_and_every_claim_is_a_new_value() {
        let word = AtomicU64::new(0);
        assert!(claim_free(&word, word.load(SeqCst), 3));
        let first = word.load(SeqCst);
        assert_eq!(holder(first), mine(3));
        // Another member cannot claim it, nor release it; its holder may claim it again.
        assert!(!claim_free(&word, first, 5));
        release_word(&word, 5);
        assert_eq!(word.load(SeqCst), first);
        assert!(claim_free(&word, first, 3));
        assert_eq!(word.load(SeqCst), first, "held already: unchanged");
        // Released, then claimed again by the same member: a value never seen before, so a
        // member waiting for the first claim to end sees it end.
        release_word(&word, 3);
        assert_eq!(holder(word.load(SeqCst)), 0);
        assert!(claim_free(&word, word.load(SeqCst), 3));
        let second = word.load(SeqCst);
        assert_eq!(holder(second), mine(3));
        assert_ne!(second, first);
        // A stale value (taken before a change) claims nothing.
        release_word(&word, 3);
        assert!(!claim_free(&word, first & !u64::from(u32::MAX), 7));
        assert_eq!(holder(word.load(SeqCst)), 0);
    }

    #[test]
    fn member_zero_and_the_last_index_have_marks_of_their_own() {
        assert_ne!(mine(0), 0);
        assert_ne!(holder(claimed(0, u32::MAX - 1)), 0);
        // The count wraps without touching the holder's half.
        let full = !u64::from(u32::MAX);
        assert_eq!(holder(claimed(full, 9)), mine(9));
    }

    #[test]
    fn a_wait_for_a_claim_ends_at_its_release_or_at_the_deadline() {
        let word = AtomicU64::new(0);
        // Nothing held: nothing to wait for.
        assert!(wait_for_end(&word, word.load(SeqCst), 0));
        assert!(claim_free(&word, 0, 1));
        let held = word.load(SeqCst);
        // Held and never released: the deadline ends the wait, unended.
        assert!(!wait_for_end(&word, held, monotonic_ns() + 1_000_000));
        // Released by its holder on another thread: the wait sees it end, well within a
        // deadline it never reaches.
        std::thread::scope(|s| {
            let waiter = s.spawn(|| wait_for_end(&word, held, monotonic_ns() + 60_000_000_000));
            std::thread::sleep(std::time::Duration::from_millis(5));
            release_word(&word, 1);
            assert!(waiter.join().unwrap());
        });
        // Claimed again by its holder meanwhile: that too ends the claim waited for.
        assert!(claim_free(&word, word.load(SeqCst), 1));
        let again = word.load(SeqCst);
        release_word(&word, 1);
        assert!(claim_free(&word, word.load(SeqCst), 1));
        assert!(wait_for_end(&word, again, monotonic_ns() + 60_000_000_000));
    }
}
