//! A member's counters (`MemberStats`), read from its slot in the group's shared state: what
//! `Group::stats` reports for every member and `Waiter::stats` for one. Apart from both, so
//! that the group and the waiter each read them without reaching into the other.

use crate::inner::GroupInner;

/// One member's counters, as [`Group::stats`](crate::Group::stats) and [`Waiter::stats`](crate::Waiter::stats) report them.
///
/// What they count, and what they do not: the kernel hides most of a herd. A waiter woken for
/// readiness that another waiter took goes back to sleep *inside* the kernel's wait, and no
/// counter here sees it; count those with the waiter's voluntary context switches
/// (`getrusage`), as the lab does. `wakeups` counts only the kernel waits that came back to
/// herdless; `empty_wakeups` those, and the events handed out, that came to nothing.
///
/// Made by herdless only (`#[non_exhaustive]`): read its fields; a later version may count
/// something more without breaking code that reads these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemberStats {
    /// The member's slot in the group (join order, reused after a member is gone).
    pub member: usize,
    /// The member's process.
    pub pid: u32,
    /// Is the member still joined? (false once it left, or once its process died)
    pub alive: bool,
    /// Times the member's kernel wait (epoll, or the emulation's poller) returned with
    /// something: events, a notification, the emulation's token. Not timeouts, not signals,
    /// and not the wake-ups the kernel swallowed (see above). One `wait` call may count several
    /// when the library went back to sleep before returning.
    pub wakeups: u64,
    /// Events handed to the member's caller by `wait`.
    pub events: u64,
    /// Empty wake-ups: events handed out that found nothing, as the application reported them
    /// ([`Waiter::found_nothing`](crate::Waiter::found_nothing): the read or accept said `EAGAIN`), plus kernel waits that
    /// came back with readiness herdless found already taken and so did not hand out (it went
    /// back to sleep: under the emulation, another member had taken the descriptor; natively,
    /// another member held the file's readiness and read it, or an entry of a descriptor since
    /// closed). A member that never calls `found_nothing` shows only the second kind.
    pub empty_wakeups: u64,
    /// Wake-ups that only passed the emulation's token or rang its door bell: no event, no
    /// notification (0 for the native backend).
    pub token_wakeups: u64,
    /// Events of exclusive descriptors that the member's next `wait` had to consume because
    /// the caller did not call [`Waiter::consumed`](crate::Waiter::consumed) (or
    /// [`found_nothing`](crate::Waiter::found_nothing)) for them. Nothing is lost, but until
    /// then the group waits for the member (emulated) or keeps it first in line (native): a
    /// count that grows says a `consumed` is missing from the loop. Counted alike on both
    /// backends. Example: see [`Waiter::consumed`](crate::Waiter::consumed).
    pub unconsumed: u64,
    /// Does the member hold the emulation's token of some exclusive descriptor right now?
    /// (always false for the native backend, where the kernel's wait queue is the line)
    pub leader: bool,
}

/// The counters of member slot `i`, read by process `me`.
pub(crate) fn member_stats(inner: &GroupInner, i: u32, me: u32) -> MemberStats {
    use std::sync::atomic::Ordering::SeqCst;
    let slot = inner.shared.member(i);
    MemberStats {
        member: i as usize,
        pid: slot.pid.load(SeqCst),
        alive: inner.members().is_alive(i, me),
        wakeups: slot.wakeups.get(),
        events: slot.events.get(),
        empty_wakeups: slot.empty_wakeups.get(),
        token_wakeups: slot.token_wakeups.get(),
        unconsumed: slot.unconsumed.get(),
        leader: inner.emulation.is_some() && inner.protocol().leads_any(i),
    }
}
