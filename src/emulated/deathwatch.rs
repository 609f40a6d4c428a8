//! Deaths as events: a member that depends on a member of another process waits on that
//! process's death in its own poller, instead of checking on it with a timer.
//!
//! Two members depend on another process in the emulation: the one that last passed the token
//! (the *watcher*) depends on the new leader, and a leader waiting for the holder to consume the
//! last event depends on that holder (`Protocol::dependency`). If that process is killed, the token
//! or the descriptor would stay with it until someone noticed. On Linux (5.3 and later) the
//! member opens a pidfd of the process (`pidfd_open(2)`) and adds it to its poller: the pidfd
//! becomes readable the moment the process ends, after the kernel has dropped its record locks,
//! so the member wakes, finds it dead through its liveness byte (`crate::liveness`) and clears
//! it out at once. Elsewhere, and on kernels without pidfds, the periodic check stays
//! (`protocol::LIVENESS_CHECK`). A member also watches its neighbour in the group this way
//! (`crate::ring`), so that a death nobody depends on is cleared out too. On macOS and the BSDs
//! kqueue's `EVFILT_PROC` with `NOTE_EXIT` could do the same (a later step; `polling` exposes it
//! as `os::kqueue::Process`).
//!
//! The pidfds are kept in a small cache by pid: with strict turns a member depends on its
//! neighbours in line, the same few processes, so opening one is rare on the hot path.

use super::poller::Poller;

/// How many processes' deaths one member watches at once (it depends on one or two per
/// source, and watches its neighbour in the group).
#[cfg(target_os = "linux")]
const WATCHED: usize = 8;

/// Poller keys of the death watches: `DEATH_KEYS..DEATH_KEYS + WATCHED`, far above any
/// descriptor number (the emulation's poller keys are descriptor numbers) and below the door
/// bell's key.
#[cfg(target_os = "linux")]
const DEATH_KEYS: usize = super::FIRST_OWN_KEY - 64;

/// One watched process.
#[cfg(target_os = "linux")]
struct Watch {
    pid: u32,
    /// The pidfd, in the poller; None once it fired or if it could not be opened (then the
    /// timer covers this process).
    fd: Option<std::os::fd::OwnedFd>,
    /// The process is known to have ended (its pidfd fired, or it was gone when asked): a
    /// member still depending on it checks at once.
    ended: bool,
}

/// The processes one member waits on the death of.
#[derive(Default)]
pub(crate) struct DeathWatch {
    #[cfg(target_os = "linux")]
    slots: [Option<Watch>; WATCHED],
    /// Set when a newly watched process may have died before its pidfd was opened: the caller
    /// checks once.
    #[cfg(target_os = "linux")]
    check_now: bool,
    /// Poller keys that fired in the last look (kept to save an allocation).
    #[cfg(target_os = "linux")]
    fired: Vec<usize>,
    /// The processes whose death fired and that the caller has not taken yet (`take_ended`).
    ended: Vec<u32>,
}

#[cfg(target_os = "linux")]
impl DeathWatch {
    /// Watches the deaths of `pids` (besides those watched already). Returns whether every one
    /// of them is watched by an event, so that the caller may check less often.
    pub(crate) fn watch(&mut self, poller: &Poller, pids: &[u32]) -> bool {
        let mut all = true;
        for &pid in pids {
            if let Some(w) = self.slots.iter().flatten().find(|w| w.pid == pid) {
                all &= w.fd.is_some();
                // Depending on a process known to have ended (the token was passed to a
                // member that died before anyone noticed): check now, not at the next tick.
                self.check_now |= w.ended;
                continue;
            }
            // A free place, or else the first watch of a process no longer depended on.
            let place = match self.slots.iter().position(Option::is_none) {
                Some(i) => i,
                None => match self
                    .slots
                    .iter()
                    .position(|w| w.as_ref().is_some_and(|w| !pids.contains(&w.pid)))
                {
                    Some(i) => {
                        self.forget(poller, i);
                        i
                    }
                    None => {
                        all = false;
                        continue;
                    }
                },
            };
            let opened = crate::ring::open_process(pid);
            let ended = matches!(opened, Err(Some(libc::ESRCH)));
            let fd = opened.ok().and_then(|fd| {
                // The pidfd is ours and stays open until `forget` deletes it from the poller and
                // closes it.
                let watch = super::poller::Event::new(DEATH_KEYS + place, true, false);
                super::poller::add(poller, std::os::fd::AsRawFd::as_raw_fd(&fd), watch)
                    .ok()
                    .map(|()| fd)
            });
            all &= fd.is_some();
            // Dead before it was opened, or opened for a process that reused a dead member's
            // pid: one check now finds out (the member's liveness byte is the truth).
            self.check_now = true;
            self.slots[place] = Some(Watch { pid, fd, ended });
        }
        all
    }

    /// Did a watched process die before its pidfd was opened, possibly? (asked once)
    pub(crate) fn take_check_now(&mut self) -> bool {
        std::mem::take(&mut self.check_now)
    }

    /// Takes note of the deaths among the poller's `events`: their pidfds leave the poller
    /// (the timer covers the process from now on, should its member not be cleared out at
    /// once). Returns (whether any process died, whether every event was a death).
    pub(crate) fn fired(
        &mut self,
        poller: &Poller,
        keys: impl Iterator<Item = usize>,
    ) -> (bool, bool) {
        self.fired.clear();
        let mut others = false;
        for key in keys {
            match key.checked_sub(DEATH_KEYS) {
                Some(i) if i < WATCHED => self.fired.push(i),
                _ => others = true,
            }
        }
        let fired = std::mem::take(&mut self.fired);
        for &i in &fired {
            if let Some(w) = self.slots[i].as_mut() {
                w.ended = true;
                if let Some(fd) = w.fd.take() {
                    let _ = poller.delete(&fd);
                    self.ended.push(w.pid);
                }
            }
        }
        let died = !fired.is_empty();
        self.fired = fired;
        (died, died && !others)
    }

    fn forget(&mut self, poller: &Poller, i: usize) {
        if let Some(Watch { fd: Some(fd), .. }) = self.slots[i].take() {
            let _ = poller.delete(&fd);
        }
    }

    /// The processes whose death fired since the last call (each once).
    pub(crate) fn take_ended(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.ended)
    }

    /// Stops watching everything (the member leaves).
    pub(crate) fn clear(&mut self, poller: &Poller) {
        for i in 0..WATCHED {
            self.forget(poller, i);
        }
    }
}

/// Without pidfds: every dependency is covered by the periodic check.
#[cfg(not(target_os = "linux"))]
impl DeathWatch {
    pub(crate) fn watch(&mut self, _poller: &Poller, _pids: &[u32]) -> bool {
        false
    }
    pub(crate) fn take_ended(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.ended)
    }
    pub(crate) fn take_check_now(&mut self) -> bool {
        false
    }
    pub(crate) fn fired(
        &mut self,
        _poller: &Poller,
        _keys: impl Iterator<Item = usize>,
    ) -> (bool, bool) {
        (false, false)
    }
    pub(crate) fn clear(&mut self, _poller: &Poller) {}
}

#[cfg(not(target_os = "linux"))]
const _: usize = super::FIRST_OWN_KEY;
