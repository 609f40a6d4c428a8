//! Standing aside: a member whose turn ends under a backlog leaves the line until it is rung.
//!
//! A rotation is a delete and a re-add, and the re-add asks the file at once: a descriptor
//! that is still ready (a backlog) goes straight onto the re-adding member's own ready list.
//! So under a backlog the member whose turn just ended takes the next event as soon as it is
//! back in its wait, and the members asleep in the line are not woken (the kernel wakes an
//! exclusive waiter on a *new* event, and a POSIX queue's receive from a full queue wakes no
//! poller at all): whoever the scheduler runs most gets most (50 unrelated servers on one
//! queue: Jain 0.55–0.98 natively with the plain rotation, 0.996–0.997 standing aside). Here a turn that ends while the descriptor is still ready
//! deletes the entry and does not add it back; the member rings the door bell of the next
//! idle member in the group's ring order (`hand_on::ring_idle`), which takes the backlog as
//! if the kernel had woken it. That ring is the hand-off of the turn, so the member stands
//! aside, with no entry, until the first of:
//!
//! - its own bell rings (someone's turn ended and it is next in the ring order);
//! - it comes back to `wait` and the descriptor is no longer ready (the backlog is served);
//! - `ASIDE_BOUND` passes inside its wait. A ring that went to a member without this
//!   descriptor is rung back to the member standing aside (`hand_on.rs`), but a backlog that
//!   ended while the member slept aside leaves nobody to ring it, and a ring-back can miss
//!   (the rung member's wait had no room, or its mark was cleared by a new wait): the bound
//!   keeps any of these from leaving it out of the line for long.
//!
//! Then the entry is added again, at the tail. (A member standing aside from a *stream*,
//! `stream_aside.rs`, looks at the stream's turn at longer intervals instead.) With nobody
//! idle to ring, a turn ends as a plain rotation. Without a backlog nothing changes: the entry
//! goes to the tail and the next new event wakes the member at the head, so a quiet service
//! pays nothing for this. Only `Rotation::Adaptive` stands aside, where a turn under a backlog
//! is a batch (one ring per batch); `Every(n)` keeps the plain rotation (a ring per event under
//! strict turns took twice the time per message of the plain rotation at 500 waiters,
//! `docs/lab.md`).

use std::os::fd::RawFd;
use std::time::Duration;

use super::hand_on::ring_idle_for_turn;
use super::kernel::{ctl, epoll_flags};
use super::{token, NativeWaiter};
use crate::error::Result;
use crate::registry;

/// The longest a member stands aside inside its wait before it goes back into the line by
/// itself (a whole number of milliseconds: epoll's unit). Longer than a round of turns of a
/// few dozen members (`turn::STREAM_TURN` each) would be, so that rings, not the bound, bring
/// members back while the backlog lasts; short enough that a lost ring costs little.
pub(super) const ASIDE_BOUND: Duration = Duration::from_millis(10);

/// A member that works on its events stands aside for its lead over its share only while at
/// least this many members are inside their wait: one of them takes the backlog while it works,
/// and the others are there for the events after that. With fewer, a member out of the line
/// leaves the backlog to the few others for as long as it lasts (a full POSIX queue: until
/// `ASIDE_BOUND`, as nobody rings it back), and the work is done on fewer CPUs than the group
/// has members at work (2 members on a queue with 50 µs of work each: 52 µs per message
/// against 32, `docs/lab.md`).
const CROWD_FOR_LEAD: u32 = 4;

impl NativeWaiter {
    /// A member that works on its events (`turn::Away`) ends its turn at each event; does it
    /// stand aside (`pass_turn`) rather than go to the tail (`rotate`)? Only while it is ahead
    /// of its share by more than half an `ADAPTIVE_BATCH`, with `CROWD_FOR_LEAD` members or
    /// more inside their wait. Back in its wait, a member at the tail takes a backlog at once
    /// (the re-add put it on its own ready list), ahead of the members asleep in the line: at
    /// 500 waiters with 10 µs of work per message, Jain's index was 0.77–0.84 without this.
    pub(super) fn stands_aside_for_its_lead(&self) -> bool {
        let lead = self.lead_over_share();
        lead > i64::from(crate::contract::ADAPTIVE_BATCH / 2)
            && super::NativeHints::of(&self.shared)
                .at_least_waiting(self.shared.high(), CROWD_FOR_LEAD)
    }

    /// The turn of the exclusive `fd` is over: if it is still ready and an idle member could be
    /// rung, the entry is deleted and the member stands aside (see the module docs); else the
    /// entry goes to the tail (`rotate`).
    pub(super) fn pass_turn(&mut self, fd: RawFd) -> Result<()> {
        let Some(reg) = self.registrations.get(&fd).copied() else {
            return Ok(());
        };
        let ready = match self.ready_seen.get() {
            Some((seen_fd, ready)) if seen_fd == fd => ready, // the turn rule just asked
            _ => self.ready_now(fd, reg.interest),
        };
        if !ready {
            return self.rotate(fd);
        }
        if let Err(e) = ctl(&self.epoll, libc::EPOLL_CTL_DEL, fd, 0, 0) {
            if registry::maybe_stale(&e) {
                self.forget(fd);
                return self.rebuild();
            }
            return Err(crate::error::Error::io(
                "rotating an exclusive registration",
                e,
            ));
        }
        if ring_idle_for_turn(&self.shared, &self.bells, self.me, None, &|_| {}).is_none() {
            return self.step_back(fd); // nobody to hand the turn to: the tail, as a rotation
        }
        if let Some(reg) = self.registrations.get_mut(&fd) {
            reg.aside = true;
        }
        self.aside += 1;
        Ok(())
    }

    /// The member goes back into the line of the exclusive `fd` it stood aside from: its entry
    /// is added again, at the tail (a ready descriptor lands on its own ready list: its turn).
    pub(super) fn step_back(&mut self, fd: RawFd) -> Result<()> {
        let Some(reg) = self.registrations.get_mut(&fd) else {
            return Ok(());
        };
        let was_aside = std::mem::replace(&mut reg.aside, false);
        let (flags, data) = (epoll_flags(reg.interest), token(fd, reg.gen));
        if was_aside {
            self.one_less_aside();
        }
        match ctl(&self.epoll, libc::EPOLL_CTL_ADD, fd, flags, data) {
            Ok(()) => Ok(()),
            // Closed or reused while it stood aside: the registration goes (no entry of it is
            // left in this instance).
            Err(e) if registry::maybe_stale(&e) => {
                self.forget(fd);
                Ok(())
            }
            Err(e) => Err(self.readd_failed(fd, e)),
        }
    }

    /// Before a kernel wait: the member goes back into every line whose backlog it stood aside
    /// from and that is not ready any more (`all`: into every line, whatever the backlog: its
    /// bell rang, or it stood aside `ASIDE_BOUND`). One zero-timeout `poll` per descriptor it
    /// stands aside from, none while it stands aside from nothing.
    pub(super) fn step_back_where_due(&mut self, all: bool) -> Result<()> {
        if self.aside == 0 {
            return Ok(());
        }
        let aside: Vec<RawFd> = self
            .exclusive
            .iter()
            .copied()
            .filter(|fd| self.registrations[fd].aside)
            .collect();
        for fd in aside {
            let interest = self.registrations[&fd].interest;
            if all || !registry::still_ready(fd, interest) {
                self.step_back(fd)?;
            }
        }
        Ok(())
    }

    /// The member stands aside from one descriptor less (its `aside` count goes down by one).
    pub(super) fn one_less_aside(&mut self) {
        self.aside -= 1;
        if self.aside == 0 {
            self.stream_looks = None;
        }
    }

    /// The kernel wait's timeout (`ms`, -1 for none) capped at `ASIDE_BOUND` while the member
    /// stands aside (at `stream_aside::look_after` if it stands aside from a stream): (the
    /// timeout, whether it was capped).
    pub(super) fn aside_cap(&self, ms: libc::c_int) -> (libc::c_int, bool) {
        let bound = self
            .stream_looks
            .map_or(ASIDE_BOUND, super::stream_aside::look_after);
        let cap = bound.as_millis() as libc::c_int;
        match self.aside > 0 && (ms < 0 || ms > cap) {
            true => (cap, true),
            false => (ms, false),
        }
    }
}
