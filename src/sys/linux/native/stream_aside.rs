//! Standing aside from a stream: in a stream only the member whose turn it is stays in line.
//!
//! `EPOLLEXCLUSIVE` stops the kernel's walk of a file's wait queue at the first entry whose
//! epoll has a thread asleep in it; an entry whose member is running (reading the last event,
//! or on its way back to `epoll_wait`) only queues the event and lets the walk go on
//! (`ep_poll_callback`). So while one member reads a stream, every write wakes one of the
//! members asleep behind it: at 500 waiters on a pipe, 1.00 kernel wake-ups per message, each
//! paid by the producer inside its `write`, where one member alone never sleeps (`docs/lab.md`,
//! "Why 500 waiters cost more than one, natively"). Here, under `Rotation::Adaptive` and in a
//! stream (the group's stream hint, `NativeWaiter::stream_now`):
//!
//! - the member that takes a stream's events writes its turn in the file's word of the
//!   group's turn table (`turns.rs`: its member, a tag of the file, a coarse clock), at most
//!   every few microseconds;
//! - a member that the kernel reports the file to while the word names another member who
//!   took an event of it in the last `turns::FRESH` deletes its entry and stands aside
//!   (`aside.rs`), and rings that member (the report may have been the file's only wake-up,
//!   the holder's entry never hearing of it); after one wake-up each, the members asleep are
//!   out of the line and the holder reads alone, as one member does;
//! - the holder's turn ends by the stream rule (`turn::ends`: about `STREAM_TURN`, sooner or
//!   later by its lead over its share); it names the next idle member in ring order in the
//!   word and rings it (`hand_on`), and stays in line: while the rung member wakes (tens of
//!   microseconds for a cold thread) it reads on, for `turn::READ_ON_FOR` of the stream at
//!   most, until the word says the rung member took an event (the events count towards the
//!   share of the member that read them); its next report of the file then finds the turn the
//!   other's, and it stands aside, while the rung member has stepped back into the line and
//!   looked. A member rung for a file it does not watch clears the word and rings the ringer
//!   back. A handed turn stays live until its member takes an event of it or
//!   `turns::HANDED_FRESH` passes, and the rung member takes it back if its ringer read on
//!   meanwhile (`turns::arrive`). Only the member the word names passes a turn on, and a member
//!   the word does not name stands aside however it learnt of the file (the kernel, a ring, a
//!   contested event): one chain of turns;
//! - with one member reading, events no longer overlap (the stream hint's first sign): an event
//!   already there when a member comes back to `wait` (its first, zero-timeout look finds it)
//!   came while it held the last one, and counts as an overlap;
//! - a member standing aside goes back into line when rung (its turn), when the stream ends
//!   (the last holder rings one member standing aside, and each rings the next), or by itself:
//!   it looks at the word after `FIRST_LOOK`, then at twice each interval up to `LAST_LOOK`,
//!   and goes back once the word names no live turn of the file (a holder stopped, stalled or
//!   gone: a stall is found `FIRST_LOOK` after it by the members that stood aside last).
//!
//! Everything here is a hint: the kernel still wakes whoever is in line, a file whose slot
//! another file's stream writes (a different tag) is read side by side as without this, and a
//! holder that dies is found by the bound (its word goes stale in `turns::FRESH`) and by its
//! reap.

use std::os::fd::RawFd;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use super::hints::NativeHints;
use super::kernel::ctl;
use super::turns::{hand, handed, holder, slot_index};
use super::NativeWaiter;
use crate::error::{Error, Result};
use crate::registry;
use crate::turn;

/// A member standing aside from a stream first looks whether the turn is still live this long
/// after it stood aside (the emulation's `HOLD_BOUND`: a stopped holder is passed over as late
/// there), then at twice the interval each time, up to `LAST_LOOK`.
const FIRST_LOOK: Duration = Duration::from_millis(40);
const LAST_LOOK: Duration = Duration::from_millis(640);

/// A member that handed its stream turn of `fd` to member `to` reads on, at most `left` events
/// more, until `to` takes an event of it (`aside_from_stream`).
#[derive(Clone, Copy, Debug)]
pub(super) struct ReadingOn {
    /// The member rung for the turn.
    to: u32,
    /// The descriptor whose turn it was.
    pub(super) fd: RawFd,
    /// Events this member may still read on.
    left: u32,
}

/// The kernel wait's bound for a member that stands aside from a stream and has looked
/// `looks` times already.
pub(super) fn look_after(looks: u32) -> Duration {
    FIRST_LOOK.saturating_mul(1 << looks.min(8)).min(LAST_LOOK)
}

impl NativeWaiter {
    /// The kernel (or a look of its own) reported the exclusive `fd` to this member: is it in
    /// another member's live stream turn (then this member stands aside from it, and that
    /// member is rung)? Only under `Rotation::Adaptive`. A live turn is the stream's sign
    /// here, not the group's stream hint: turn words are written in a stream only, and the hint
    /// may lapse for a moment inside one (a producer that pauses on a loaded machine), when a
    /// member reading beside the holder would start a second chain of turns.
    pub(super) fn aside_from_stream(&mut self, fd: RawFd) -> Result<bool> {
        let Some(reg) = self.registrations.get(&fd).copied() else {
            return Ok(false);
        };
        let hints = NativeHints::of(&self.shared);
        let Some(holder) = holder(&hints, reg.file, reg.interest, self.me) else {
            self.reading_on = None;
            return Ok(false);
        };
        // Handed on by this member, and not taken yet: the member rung for it is on its way.
        if let Some(on) = self.reading_on.as_mut() {
            let waiting = on.to == holder && on.fd == fd && on.left > 0;
            if waiting && handed(&hints, reg.file, reg.interest) {
                on.left -= 1;
                return Ok(false);
            }
        }
        self.reading_on = None;
        self.stand_aside(fd, holder)?;
        Ok(true)
    }

    /// Is every descriptor this member stands aside from still in another member's live stream
    /// turn? Asked at the member's look (`look_after`).
    pub(super) fn stream_still_held(&self) -> bool {
        let hints = NativeHints::of(&self.shared);
        self.exclusive.iter().all(|fd| {
            let reg = &self.registrations[fd];
            !reg.aside || holder(&hints, reg.file, reg.interest, self.me).is_some()
        })
    }

    /// The member's turn of the exclusive `fd` ended in a stream: the next idle member is rung
    /// for it and named in the turn word, and this member reads on while that member wakes
    /// (`turn::read_on` events at most, `aside_from_stream`); its first report of the file
    /// after that finds the turn the other's. A turn that is another member's already (handed
    /// on, or taken over, while this member read) is not passed again: two chains of turns
    /// would cut each other's short.
    pub(super) fn pass_stream_turn(&mut self, fd: RawFd) {
        let Some(reg) = self.registrations.get(&fd).copied() else {
            return;
        };
        let hints = NativeHints::of(&self.shared);
        if holder(&hints, reg.file, reg.interest, self.me).is_some() {
            return; // another member's turn already: passed on without this member
        }
        // Named in the word before its bell rings: rung for a file it does not watch, it gives
        // the turn back (`hand_on::take_handed_on`), which it could not before the word named it.
        let name = |next| hand(&hints, reg.file, reg.interest, next);
        let slot = Some(slot_index(reg.file));
        let rung =
            super::hand_on::ring_idle_for_turn(&self.shared, &self.bells, self.me, slot, &name);
        let left = turn::read_on(hints.stream.gap_ns.load(SeqCst));
        self.reading_on = rung.map(|to| ReadingOn { to, fd, left });
    }

    /// The member leaves the line of the exclusive `fd` while a stream is member `holder`'s
    /// turn: its entry is deleted, and the holder is rung to look.
    fn stand_aside(&mut self, fd: RawFd, holder: u32) -> Result<()> {
        if let Err(e) = ctl(&self.epoll, libc::EPOLL_CTL_DEL, fd, 0, 0) {
            if registry::maybe_stale(&e) {
                self.forget(fd);
                return self.rebuild();
            }
            return Err(Error::io("standing aside from a stream", e));
        }
        if let Some(reg) = self.registrations.get_mut(&fd) {
            reg.aside = true;
        }
        self.aside += 1;
        self.stream_looks.get_or_insert(0);
        super::hand_on::ring_holder(&self.shared, &self.bells, holder);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_doubles_from_the_first_look_to_the_last() {
        assert_eq!(look_after(0), FIRST_LOOK);
        assert_eq!(look_after(1), FIRST_LOOK * 2);
        assert_eq!(look_after(4), LAST_LOOK);
        assert_eq!(look_after(u32::MAX), LAST_LOOK);
    }
}
