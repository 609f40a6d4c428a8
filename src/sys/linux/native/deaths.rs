//! A native member's watch of its neighbour's death (`crate::ring`): the pidfd of the next
//! member's process in its epoll, under `DEATH_DATA`. When it fires, the member clears out the
//! dead process's slots (`GroupInner::reap_process`), whose reap hands on a readiness the dead
//! member took with it (`hand_on::ring_idle`), and watches its next neighbour. Where no pidfd can
//! be had, the member falls back on looking for dead members every `ring::SWEEP` of a wait
//! (`sweep_cap`).

use std::os::fd::{AsRawFd, OwnedFd};

use super::kernel::ctl;
use super::NativeWaiter;
use crate::ring;

/// The epoll data value of the neighbour's pidfd (above every token: see `crate::registry`).
pub(super) const DEATH_DATA: u64 = u64::MAX - 2;

/// The neighbour's process whose death a member watches, and the pidfd it watches it by.
struct Watched {
    pid: u32,
    fd: OwnedFd,
}

/// A member's watch of deaths: whose (`crate::ring`), and the pidfd in its epoll.
#[derive(Default)]
pub(super) struct Deaths {
    ring: crate::ring::RingWatch,
    watched: Option<Watched>,
}

/// What a member does about a death: reap the dead slots of one process (`Some(pid)`), or of
/// every process (`None`, the fallback sweep).
pub(crate) type OnDeath<'a> = &'a dyn Fn(Option<u32>);

impl NativeWaiter {
    /// Before a kernel wait: makes the member's epoll watch its neighbour's death (a new
    /// neighbour after a change of the roster gets a new pidfd; the first look after it
    /// reaps whatever of that process is dead already, as it may have died before its pidfd
    /// was opened). Returns whether deaths reach this member as events (else it sweeps).
    pub(super) fn watch_neighbour(&mut self, on_death: OnDeath<'_>) -> bool {
        let want = self
            .deaths
            .ring
            .neighbour(&self.shared, self.me, crate::pid::current());
        let want = want.map(|n| n.pid);
        if want == self.deaths.watched.as_ref().map(|w| w.pid) {
            return want.is_none() || self.deaths.watched.is_some();
        }
        self.unwatch();
        let Some(pid) = want else {
            return true;
        };
        match ring::open_process(pid) {
            Ok(fd) => {
                let added = ctl(
                    &self.epoll,
                    libc::EPOLL_CTL_ADD,
                    fd.as_raw_fd(),
                    libc::EPOLLIN as u32,
                    DEATH_DATA,
                );
                if added.is_err() {
                    self.deaths.ring.look_again();
                    return false;
                }
                self.deaths.watched = Some(Watched { pid, fd });
                on_death(Some(pid));
                true
            }
            Err(Some(libc::ESRCH)) => {
                // Gone already: its slots are cleared out now, and the next neighbour watched.
                on_death(Some(pid));
                self.deaths.ring.look_again();
                true
            }
            Err(_) => {
                self.deaths.ring.look_again();
                false
            }
        }
    }

    /// The neighbour's pidfd fired: its process ended. Its dead slots are cleared out (what it
    /// held handed on), and the next neighbour is watched at once.
    pub(super) fn neighbour_died(&mut self, on_death: OnDeath<'_>) -> bool {
        if let Some(w) = self.deaths.watched.take() {
            let _ = ctl(&self.epoll, libc::EPOLL_CTL_DEL, w.fd.as_raw_fd(), 0, 0);
            on_death(Some(w.pid));
        }
        self.deaths.ring.look_again();
        self.watch_neighbour(on_death)
    }

    /// Stops watching the neighbour (a new one, or the member leaves).
    pub(super) fn unwatch(&mut self) {
        if let Some(w) = self.deaths.watched.take() {
            let _ = ctl(&self.epoll, libc::EPOLL_CTL_DEL, w.fd.as_raw_fd(), 0, 0);
        }
    }

    /// Adds the neighbour's pidfd to `epoll` (a rebuilt instance).
    pub(super) fn watch_death(&self, epoll: &OwnedFd) -> std::io::Result<()> {
        match &self.deaths.watched {
            Some(w) => ctl(
                epoll,
                libc::EPOLL_CTL_ADD,
                w.fd.as_raw_fd(),
                libc::EPOLLIN as u32,
                DEATH_DATA,
            ),
            None => Ok(()),
        }
    }
}

/// The kernel wait's timeout (`ms`, -1 for none) capped at `ring::SWEEP` if the member
/// `sweeping` (it cannot watch its neighbour's death as an event): (the timeout, whether it
/// was capped).
pub(super) fn sweep_cap(ms: libc::c_int, sweeping: bool) -> (libc::c_int, bool) {
    let cap = ring::SWEEP.as_millis() as libc::c_int;
    match sweeping && (ms < 0 || ms > cap) {
        true => (cap, true),
        false => (ms, false),
    }
}
