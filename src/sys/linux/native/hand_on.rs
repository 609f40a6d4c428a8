//! Hand-on: readiness that a member gives up goes to an idle member of the group.
//!
//! An `EPOLLEXCLUSIVE` entry hears of a descriptor only through a wake-up, and the kernel wakes
//! on a *new* event of the file alone. A rotation (delete and re-add) of a descriptor that is
//! still ready puts it on the re-adding member's own ready list and on nobody else's; a member
//! that leaves or dies takes its ready list with it; and a POSIX queue's receive that moves a
//! blocked sender's message into the queue wakes no poller at all. So a second request in one
//! write, or the message after a receive from a full queue, waited for the member that held
//! the readiness to come back, however many members sat idle (a second, or for good once the
//! member left). Here a member that gives a descriptor up (`consumed`, its leave, or a reap of a
//! dead member) while it is still ready (a zero-timeout `poll`) rings the door bell
//! (`crate::doorbell`, the emulation's bells: abstract datagram sockets any process of the
//! group reaches, an eventfd within the process) of one idle member, the next one in slot order
//! after the group's last rung member (a cursor in the shared header) whose bell is not rung
//! already; the rung member looks at its exclusive descriptors with one zero-timeout `poll` and
//! hands out what is ready, as if the kernel had woken it. Hand-ons go round the slots in turn,
//! whoever rings: a ring to "the next idle member after the ringer" would send most rings to
//! the member just past a run of busy ones (`docs/lab.md`, "The figures behind two
//! constants"). The `poll` is paid only on `consumed` while another member is inside its wait (else
//! nobody could be rung) and this member's last absence from `wait` was longer than `QUICK`
//! (a member that comes back at once takes a backlog itself), on leave, and by the rung
//! member. A member that dies (or exits without leaving) is found by the member watching its
//! process (`crate::ring`, `deaths.rs`), and its reap rings the next idle member. The same ring
//! hands a turn on when it ends under a backlog (`aside.rs`); that ring names its ringer in the
//! rung slot's mark, and a rung member that takes nothing (the ring went to a member without
//! that descriptor) rings the ringer back, who then takes its turn again.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use super::kernel::ctl;
use super::{Claim, NativeWaiter};
use crate::contract::Rotation;
use crate::doorbell::Doorbells;
use crate::error::Result;
use crate::interest::Events;
use crate::members::{first_in_ring, state};
use crate::registry;
use crate::shared::SharedState;
use crate::sys::unix::{monotonic_ns, poll_now};

/// A member that came back to `wait` this soon after its last `consumed` hands nothing on at
/// its next `consumed`: it will take a backlog itself before a rung member could wake (a
/// thread's wake-up costs several microseconds, and under a producer at full speed a ring
/// per message cost 0.35–0.4 kernel wake-ups more per message at 500 waiters, `herd pipe`).
/// Its first `consumed`, and any after work longer than this, hand on.
const QUICK: Duration = Duration::from_micros(100);

/// The epoll data value of the member's door bell (above every token: see `crate::registry`).
pub(super) const BELL_DATA: u64 = u64::MAX - 1;

/// Rings the door bell of the first idle member from the group's ring cursor on (in slot order,
/// wrapping), other than `except`, whose bell is not rung already, and moves the cursor past
/// it; returns whether it rang one. A rung member looks at its exclusive descriptors; one with
/// its bell rung and not yet drained will look anyway.
pub(crate) fn ring_idle(shared: &SharedState, bells: &Doorbells, except: Option<u32>) -> bool {
    ring_first_idle(shared, bells, except, RUNG, &|_| {}).is_some()
}

/// As `ring_idle`, for member `me` whose turn ended and who stands aside (`aside.rs`), or whose
/// stream turn of the file in slot `stream_slot` of the turn table ended (`stream_aside.rs`):
/// the rung member knows who rang, and rings it back if it finds nothing to take (the ring was
/// for a descriptor it does not have), so that the turn comes back to `me` rather than wait
/// for `aside::ASIDE_BOUND`; rung for a stream's turn of a file it watches, it is back in that
/// line and rings nobody back. `before_ring` runs with the member chosen, after its slot is
/// marked and before its bell rings (a stream's turn is named in the turn word there: a rung
/// member that gave back a word not yet naming it would leave the turn to nobody). Returns the
/// member rung.
pub(super) fn ring_idle_for_turn(
    shared: &SharedState,
    bells: &Doorbells,
    me: u32,
    stream_slot: Option<u32>,
    before_ring: &dyn Fn(u32),
) -> Option<u32> {
    let slot = stream_slot.map_or(0, |s| (s + 1) << SLOT_SHIFT);
    ring_first_idle(
        shared,
        bells,
        Some(me),
        (RUNG_BY_MEMBER + me) | slot,
        before_ring,
    )
}

/// Member `me`'s stream is over (`stream_aside.rs`): the first idle member is rung back into
/// every line, and if it stood aside from a stream it rings the next one the same way.
pub(super) fn call_back_from_stream(shared: &SharedState, bells: &Doorbells, me: u32) {
    ring_first_idle(shared, bells, Some(me), RUNG | CALL_BACK, &|_| {});
}

/// Rings member `m` (joined, inside its wait or not) to look at its descriptors.
pub(super) fn ring_holder(shared: &SharedState, bells: &Doorbells, m: u32) -> bool {
    ring_member(shared, bells, m, RUNG, state::BUSY, &|_| {})
}

/// A member slot's `rung` word: 0 (not rung), `RUNG` (rung), or `RUNG_BY_MEMBER + m` (rung by
/// member `m`, whose turn ended, see `ring_idle_for_turn`), the latter with the slot + 1 of a
/// stream's file from bit `SLOT_SHIFT` on, and either with `CALL_BACK` (the stream is over).
const RUNG: u32 = 1;
const RUNG_BY_MEMBER: u32 = 2;
const SLOT_SHIFT: u32 = 24;
const CALL_BACK: u32 = 1 << 31;

fn ring_first_idle(
    shared: &SharedState,
    bells: &Doorbells,
    except: Option<u32>,
    mark: u32,
    before_ring: &dyn Fn(u32),
) -> Option<u32> {
    let high = shared.high();
    let cursor = &super::NativeHints::of(shared).ring_cursor;
    first_in_ring(high, cursor.load(SeqCst), |m| {
        if Some(m) == except || !ring_member(shared, bells, m, mark, state::IDLE, before_ring) {
            return None;
        }
        // A plain store: two ringers racing may leave it at either one's member, and either is
        // past a member just rung.
        cursor.store((m + 1) % high, SeqCst);
        Some(m)
    })
}

/// Rings member `m`'s bell, marking its slot `mark`, if it is in `when` (`state::IDLE`: inside
/// its wait; `state::BUSY`: joined, inside its wait or not) and not rung already; returns
/// whether it rang (`before_ring` runs just before the bell does). A member rung outside its
/// wait finds its bell readable at its next wait.
fn ring_member(
    shared: &SharedState,
    bells: &Doorbells,
    m: u32,
    mark: u32,
    when: u32,
    before_ring: &dyn Fn(u32),
) -> bool {
    let slot = shared.member(m);
    let life = slot.life();
    let state_ok = match when {
        state::IDLE => life.state() == state::IDLE,
        _ => life.is_joined(),
    };
    if !state_ok || slot.rung.load(SeqCst) != 0 {
        return false;
    }
    if slot.rung.swap(mark, SeqCst) != 0 {
        return false; // another ringer came first
    }
    before_ring(m);
    bells.ring(m, life.generation());
    true
}

impl NativeWaiter {
    /// Adds the member's door bell (its socket and eventfd) to `epoll`.
    pub(super) fn watch_bell(&self, epoll: &OwnedFd) -> io::Result<()> {
        let Some(bell) = &self.bell else {
            return Ok(());
        };
        for fd in bell.watch() {
            ctl(
                epoll,
                libc::EPOLL_CTL_ADD,
                fd.as_raw_fd(),
                libc::EPOLLIN as u32,
                BELL_DATA,
            )?;
        }
        Ok(())
    }

    /// The caller consumed an event of the exclusive `fd`: if another member is inside its
    /// wait and `fd` is still ready, ring one (see the module docs). Not if this member came
    /// back to `wait` within `QUICK` of its last `consumed`: it is trusted to be back as soon
    /// and take the rest itself.
    pub(super) fn hand_on_if_ready(&self, fd: RawFd) {
        let seen = self.ready_seen.take();
        if self.quick {
            return;
        }
        let shared = &self.shared;
        if !super::NativeHints::of(shared).anyone_waiting(shared.high()) {
            return; // nobody inside a wait to ring; a member coming back looks itself
        }
        let Some(reg) = self.registrations.get(&fd) else {
            return;
        };
        if reg.aside {
            return; // the turn was handed on as it ended (`aside.rs`)
        }
        let ready = match seen {
            Some((seen_fd, ready)) if seen_fd == fd => ready, // the turn rule just asked
            _ => registry::still_ready(fd, reg.interest),
        };
        if ready {
            ring_idle(&self.shared, &self.bells, Some(self.me));
        }
    }

    /// Does the member work on its events (`turn::BUSY_AWAY`)?
    pub(super) fn busy(&self) -> bool {
        self.away.works()
    }

    /// The member is back in `wait`: was it away (since its last `consumed`) less than `QUICK`?
    pub(super) fn note_back(&mut self) {
        if self.consumed_at != 0 {
            let away = monotonic_ns().saturating_sub(self.consumed_at);
            self.quick = away < QUICK.as_nanos() as u64;
            self.away.note(away);
            self.consumed_at = 0;
        }
    }

    /// Is `fd` still ready (a zero-timeout `poll`)? The turn rule's backlog check; the answer
    /// is kept for the hand-on that follows in the same `consumed`.
    pub(super) fn ready_now(&self, fd: RawFd, interest: crate::interest::Interest) -> bool {
        let ready = registry::still_ready(fd, interest);
        self.ready_seen.set(Some((fd, ready)));
        ready
    }

    /// The member leaves: each exclusive descriptor still ready is handed on (one ring for all:
    /// the rung member looks at every descriptor it has).
    pub(super) fn hand_on_at_leave(&self) {
        let ready = self.exclusive.iter().any(|fd| {
            let reg = &self.registrations[fd];
            registry::still_ready(*fd, reg.interest)
        });
        if ready {
            ring_idle(&self.shared, &self.bells, Some(self.me));
        }
    }

    /// The member's bell rang: its bell is drained, and its exclusive descriptors that are
    /// ready now and not among `events` already are handed out (up to `max` events in all),
    /// with one zero-timeout `poll`; with no room left, the bell is left for the next wait.
    /// A member rung for a turn (`ring_idle_for_turn`) that takes no exclusive event in this
    /// wait rings the member who handed it back. Returns whether the stream hint counts any.
    pub(super) fn take_handed_on(
        &mut self,
        events: &mut Events,
        max: usize,
        was_aside_from_stream: bool,
    ) -> Result<bool> {
        if events.len() >= max {
            // No room (one event per wait, and the kernel gave one): the bell stays rung and
            // readable, and the next wait looks.
            return Ok(false);
        }
        self.reading_on = None; // rung: whatever it handed on before is behind it
        self.bells.drain(self.me);
        // After the drain (a ring between a clear and the drain would be lost).
        let mark = self.shared.member(self.me).rung.swap(0, SeqCst);
        let slot = (mark & !CALL_BACK) >> SLOT_SHIFT;
        let by = mark & ((1 << SLOT_SHIFT) - 1);
        let for_turn = by >= RUNG_BY_MEMBER && by - RUNG_BY_MEMBER != self.me;
        // Rung for a stream's turn of a file it watches: it is in that line now, and the turn
        // is its own, if the member that rang read on meanwhile (`turns::arrive`).
        let turn_of = (for_turn && slot != 0)
            .then(|| {
                self.exclusive.iter().find_map(|fd| {
                    let reg = &self.registrations[fd];
                    (super::turns::slot_index(reg.file) + 1 == slot).then_some(reg)
                })
            })
            .flatten();
        let in_line = turn_of.is_some();
        if let Some(reg) = turn_of {
            let hints = super::NativeHints::of(&self.shared);
            super::turns::arrive(&hints, reg.file, reg.interest, self.me, by - RUNG_BY_MEMBER);
        }
        let noted = self.look_handed_on(events, max)?;
        if mark & CALL_BACK != 0 && was_aside_from_stream {
            // The stream is over and this member was out of its line: the next one too.
            call_back_from_stream(&self.shared, &self.bells, self.me);
        }
        if !for_turn {
            return Ok(noted);
        }
        // Handed an exclusive event by this wait, from the kernel or the look?
        let took = self
            .exclusive
            .iter()
            .any(|fd| self.registrations[fd].outstanding);
        if !took && !in_line {
            // Rung for a turn this member could not take: back to the member who stands aside
            // (or, for a stream's turn, reads on: the turn is not this member's any more).
            // Rung whether or not it is back in its wait yet: it rang on its way out of it.
            if slot != 0 {
                let hints = super::NativeHints::of(&self.shared);
                super::turns::give_back(&hints, slot - 1, self.me);
            }
            ring_member(
                &self.shared,
                &self.bells,
                by - RUNG_BY_MEMBER,
                RUNG,
                state::BUSY,
                &|_| {},
            );
        }
        Ok(noted)
    }

    /// `take_handed_on`'s look: the exclusive descriptors ready now and not handed out by this
    /// wait already go into `events` (up to `max` in all), with one zero-timeout `poll`.
    /// Returns whether any was an event the group's stream hint counts (`hand_out`). A
    /// descriptor in another member's live stream turn is not taken: the member stands aside
    /// from it, as when the kernel reports it (`stream_aside.rs`).
    fn look_handed_on(&mut self, events: &mut Events, max: usize) -> Result<bool> {
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(self.exclusive.len());
        for &fd in &self.exclusive {
            let reg = &self.registrations[&fd];
            if reg.outstanding {
                continue; // handed out by this wait already
            }
            fds.push(libc::pollfd {
                fd,
                events: registry::poll_events(reg.interest),
                revents: 0,
            });
        }
        if fds.is_empty() {
            return Ok(false);
        }
        if poll_now(&mut fds).unwrap_or(0) == 0 {
            return Ok(false);
        }
        let mut any = false;
        for pfd in fds {
            if events.len() >= max {
                break;
            }
            // Hang-ups and errors are no readiness to hand on: every member hears of them.
            if pfd.revents & pfd.events == 0 {
                continue;
            }
            // In another member's stream turn: a ring for something else (a hand-on, a call
            // back) gives no right to it. Taken, the turn's events went to two members while
            // the member rung for the turn found none (at 500 waiters on a pipe, the members
            // that lost their turns that way had a quarter to a half of their share).
            if self.rotation == Rotation::Adaptive && self.aside_from_stream(pfd.fd)? {
                continue;
            }
            // Another member holds it (`claims.rs`): its holder hands on what is left. (Claimed
            // after another member's, it was found ready by this very look.)
            if self.claim(pfd.fd) == Claim::Held {
                continue;
            }
            // poll's bits are epoll's (POLLIN = EPOLLIN, POLLOUT = EPOLLOUT, ...).
            any |= self.hand_out(pfd.fd, pfd.revents as u16 as u32, events);
        }
        Ok(any)
    }
}
