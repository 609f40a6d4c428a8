//! Deaths as events, for every group that spans processes: who watches whose death.
//!
//! A member killed while the kernel had handed it a readiness (natively), or while it held a
//! token or an event (emulated), takes that with it until somebody clears its slot out. Rather
//! than look for dead members on a clock, each member watches one other process in the kernel:
//! its *neighbour*, the process of the next member in slot order (wrapping) that belongs to
//! another process. So every process with members is watched by the member just before its run
//! of slots, each member holds one handle whatever the group's size, and a quiet group wakes
//! nobody. The handle is a pidfd in the member's own poll instance (Linux 5.3 and later): it
//! becomes readable the moment the process ends, after the kernel has dropped its record locks
//! (`crate::liveness`), reaped or not; the member wakes, clears out every dead slot of that
//! process (`GroupInner::reap_process`, which hands on what the dead held) and finds its next
//! neighbour. A member looks for its neighbour again only when the group's roster changed (a
//! join, a leave, a reap: the header's `roster` count), so the cost of a wait is one load.
//!
//! Where a pidfd cannot be had (an older kernel, no descriptor left, another system), the
//! backend falls back on looking for dead members every second (`SWEEP`), which is all this
//! module's caller needs to know (`Neighbour::by_event`).

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use crate::members::state;
use crate::shared::SharedState;

/// How often a member that cannot watch its neighbour's death as an event looks for dead
/// members instead.
pub(crate) const SWEEP: Duration = Duration::from_secs(1);

/// A member's neighbour: the next member in slot order of another process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Neighbour {
    /// Its slot.
    pub(crate) slot: u32,
    /// Its process.
    pub(crate) pid: u32,
}

/// The neighbour of member `me` of process `my_pid`: the first slot after `me` (wrapping) whose
/// member is joined, or leaving (it may die half-way), and of another process. `None` while
/// every member belongs to `my_pid`.
pub(crate) fn neighbour(shared: &SharedState, me: u32, my_pid: u32) -> Option<Neighbour> {
    let high = shared.high();
    (1..high).find_map(|i| {
        let m = (me + i) % high;
        let slot = shared.member(m);
        let watched = matches!(
            slot.life().state(),
            state::IDLE | state::BUSY | state::LEAVING
        );
        let pid = slot.pid.load(SeqCst);
        (watched && pid != my_pid && pid != 0).then_some(Neighbour { slot: m, pid })
    })
}

/// One member's watch of its neighbour: the roster it last looked at, and whom it found.
#[derive(Debug, Default)]
pub(crate) struct RingWatch {
    /// The header's `roster` when the neighbour was last looked for (`None`: look now).
    seen: Option<u64>,
    neighbour: Option<Neighbour>,
}

impl RingWatch {
    /// The neighbour member `me` of process `my_pid` watches now, looked for again if the
    /// group's roster changed since (a join, a leave or a reap). `None` in a group of one
    /// process, where members die together.
    pub(crate) fn neighbour(
        &mut self,
        shared: &SharedState,
        me: u32,
        my_pid: u32,
    ) -> Option<Neighbour> {
        if !shared.spans_processes() {
            return None;
        }
        let roster = shared.header().roster.load(SeqCst);
        if self.seen != Some(roster) {
            self.seen = Some(roster);
            self.neighbour = neighbour(shared, me, my_pid);
        }
        self.neighbour
    }

    /// The neighbour's process ended (or its handle could not be watched): look again at the
    /// next wait, whatever the roster says.
    pub(crate) fn look_again(&mut self) {
        self.seen = None;
    }
}

/// A handle on process `pid` that becomes readable when it ends: a pidfd (close-on-exec, as
/// every pidfd is). `Err` with the error number: ESRCH when there is no such process any more,
/// ENOSYS on a kernel without `pidfd_open` (before 5.3), EMFILE when no descriptor is left.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn open_process(pid: u32) -> Result<std::os::fd::OwnedFd, Option<i32>> {
    use rustix::process::{pidfd_open, PidfdFlags};
    let pid = crate::sys::unix::process_id(pid).ok_or(Some(libc::EINVAL))?;
    pidfd_open(pid, PidfdFlags::empty()).map_err(|e| Some(e.raw_os_error()))
}
