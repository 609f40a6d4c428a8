//! The emulated waiter's hand-out: a kernel wait's events become ready descriptors queued in
//! turn order (`collect_candidates`), handed out over the next waits (`serve_pending`), each
//! looked at again first if an earlier kernel wait found it, and each exclusive one claimed
//! and confirmed (`hand_one`, `Protocol::claim`, `confirm_claim`).

use super::{Candidate, EmulatedWaiter, Pending, Protocol, DOORBELL_KEY};
use crate::error::RawSource;
#[cfg(unix)]
use crate::interest::Readiness;
use crate::interest::{Event, Events, Interest};
use crate::registry;
use crate::sync::monotonic_ns;

impl EmulatedWaiter {
    /// Turns the poller's events into ready descriptors queued in turn order, behind those
    /// queued already; returns whether the bell rang.
    pub(super) fn collect_candidates(&mut self, tk: &Protocol<'_>) -> bool {
        let mut rung = false;
        self.candidates.clear();
        for ev in self.raw_events.iter() {
            if ev.key == DOORBELL_KEY {
                rung = true;
                continue;
            }
            if ev.key > isize::MAX as usize {
                continue; // the library's own (a death watch): not a registration's token
            }
            let (fd, _) = registry::untoken(ev.key as u64);
            let Some(reg) = self
                .registrations
                .get_mut(&fd)
                .filter(|r| r.in_poller && registry::token_matches(ev.key as u64, r.seq))
            else {
                // An entry no live registration has (see `forget`): a new poller without it.
                self.rebuild_due = true;
                continue;
            };
            if reg.queued {
                continue; // in the queue already, from an earlier wait
            }
            if let Some(s) = reg.source {
                if !tk.leads(s, self.me) {
                    continue; // the token moved on while we slept
                }
            }
            // Every candidate goes to the queue below.
            reg.queued = true;
            self.candidates.push(Candidate {
                fd,
                seq: reg.seq,
                event: Event::new(reg.key, reg.interest, ev.ready),
                exact: ev.exact,
            });
        }
        // Serve in registration order, starting after the descriptor served last.
        let last = self.last_served;
        self.candidates
            .sort_by_key(|c| (c.seq <= last && last != u64::MAX, c.seq));
        for c in self.candidates.drain(..) {
            self.pending.push_back(Pending {
                fd: c.fd,
                seq: c.seq,
                event: c.event,
                found_by: self.polls,
                exact: c.exact,
            });
        }
        rung
    }

    /// Hands out queued ready descriptors, in turn: one if any registration asked for one
    /// event per wait, else as many as fit. One found by an earlier kernel wait is looked at
    /// again first (one poll(2) for all of them), and dropped if no longer ready. An exclusive
    /// one is handed out only if this member still leads its source and wins its claim.
    pub(super) fn serve_pending(&mut self, tk: &Protocol<'_>, events: &mut Events, limit: usize) {
        while events.len() < limit && !self.pending.is_empty() {
            let window = (limit - events.len()).min(self.pending.len()).min(4096);
            self.look_again(window);
            for _ in 0..window {
                let Some(p) = self.pending.pop_front() else {
                    break;
                };
                self.hand_one(tk, p, events);
            }
        }
        #[cfg(not(unix))]
        {
            // No cheap second look here: what was not handed out is found again next time.
            for p in self.pending.drain(..) {
                if let Some(reg) = self.registrations.get_mut(&p.fd) {
                    reg.queued = false;
                }
            }
        }
    }

    /// Looks again, with one poll(2), at the first `window` queued descriptors found by an
    /// earlier kernel wait, or whose hang-up and error the poller did not say: each one's event
    /// is updated, or marked stale (found_by = MAX).
    #[cfg(unix)]
    pub(super) fn look_again(&mut self, window: usize) {
        let polls = self.polls;
        let mut pollfds = std::mem::take(&mut self.pollfds);
        pollfds.clear();
        for p in self.pending.iter().take(window) {
            if p.found_by != polls || !p.exact {
                let interest = self.registrations.get(&p.fd).map(|r| r.interest);
                pollfds.push(libc::pollfd {
                    fd: p.fd,
                    events: interest.map_or(0, registry::poll_events),
                    revents: 0,
                });
            }
        }
        if !pollfds.is_empty() {
            let n = crate::sys::unix::poll_now(&mut pollfds).unwrap_or(0);
            let mut looked = pollfds.iter();
            for p in self.pending.iter_mut().take(window) {
                if p.found_by == polls && p.exact {
                    continue;
                }
                let revents = looked.next().map_or(0, |l| l.revents) as libc::c_int;
                let ready = n > 0 && revents & !libc::POLLNVAL as libc::c_int != 0;
                let interest = self.registrations.get(&p.fd).map(|r| r.interest);
                if let (true, Some(interest)) = (ready, interest) {
                    p.event = Event::new(p.event.key, interest, Readiness::from_poll(revents));
                    p.found_by = polls;
                    p.exact = true;
                } else {
                    p.found_by = u64::MAX;
                }
            }
        }
        self.pollfds = pollfds;
    }

    #[cfg(not(unix))]
    pub(super) fn look_again(&mut self, _window: usize) {}

    /// Hands out one queued ready descriptor, if it is still registered as it was, still ready
    /// and (exclusive) still led by this member and claimed by it.
    pub(super) fn hand_one(&mut self, tk: &Protocol<'_>, p: Pending, events: &mut Events) {
        let me = self.me;
        let Some(reg) = self.registrations.get_mut(&p.fd) else {
            return;
        };
        if reg.seq != p.seq {
            return; // the number was registered again since
        }
        reg.queued = false;
        if p.found_by != self.polls {
            return; // no longer ready
        }
        let live = || {
            let event = super::registrations::poller_event(
                registry::token(p.fd, reg.seq) as usize,
                reg.interest,
            );
            super::poller::entry_is_live(&self.poller, p.fd, event)
                .unwrap_or_else(|| registry::still_names(p.fd, reg.file))
        };
        if reg.source.is_none() && !live() {
            // Closed or reused since it was added: forgotten, never reported, and its entry
            // (which fired, so it lives on) removed with a new poller.
            let _ = self.forget(tk, p.fd);
            self.rebuild_due = true;
            return;
        }
        if let Some(s) = reg.source {
            if !tk.leads(s, me) {
                return;
            }
            let Some(hold) = tk.claim(s, me) else {
                return;
            };
            let (fd, interest) = (p.fd, reg.interest);
            if !tk.confirm_claim(s, hold, reg.claims_seen, || ready_now(fd, interest)) {
                return; // consumed by another member since this one saw it ready
            }
            self.holding.push((s, reg.key, hold));
            reg.handed += 1;
            reg.taken = reg.taken.wrapping_add(1);
            if reg.handed == 1 {
                reg.turn_started_ns = monotonic_ns();
            }
            if tk.rotation_due(reg.handed) {
                reg.handed = 0;
                self.to_back.push(s);
            }
        }
        self.last_served = p.seq;
        events.push(p.event);
    }
}

/// Is `fd` ready for `interest` right now? (One poll(2) that does not wait.)
#[cfg(unix)]
pub(super) fn ready_now(fd: RawSource, interest: Interest) -> bool {
    let revents = crate::sys::unix::poll_one_now(fd, registry::poll_events(interest));
    revents != 0 && revents & libc::POLLNVAL == 0
}

#[cfg(not(unix))]
pub(super) fn ready_now(_fd: RawSource, _interest: Interest) -> bool {
    false
}

/// The event of `fd` if it is ready for `interest` right now (one poll(2) that does not wait).
#[cfg(unix)]
pub(super) fn poll_event(fd: RawSource, interest: Interest, key: usize) -> Option<Event> {
    let revents = crate::sys::unix::poll_one_now(fd, registry::poll_events(interest));
    if revents == 0 || revents & libc::POLLNVAL != 0 {
        return None;
    }
    Some(Event::new(
        key,
        interest,
        Readiness::from_poll(libc::c_int::from(revents)),
    ))
}

/// Is `fd` still ready for `interest` right now (a zero-timeout `poll`)? `None` where the
/// emulation cannot ask (Windows): the caller falls back on the backlog average.
#[cfg(unix)]
pub(super) fn still_ready(fd: RawSource, interest: Interest) -> Option<bool> {
    Some(registry::still_ready(fd, interest))
}

#[cfg(not(unix))]
pub(super) fn still_ready(_fd: RawSource, _interest: Interest) -> Option<bool> {
    None
}
