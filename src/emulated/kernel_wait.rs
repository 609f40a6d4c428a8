//! The member's kernel wait, and the events it found. On Linux the member waits with one
//! `epoll_wait` on its poller's own epoll descriptor: `polling::Poller::wait` would add, on
//! every call and whatever the timeout, a `timerfd_settime` and an `epoll_ctl` to arm its
//! timer and an `epoll_ctl` to re-arm its notifier, three system calls per message on the
//! emulation's hot path. The member needs neither: its timeout goes to `epoll_wait` (rounded
//! up to the millisecond), and its bell is its own pipe, never the poller's notifier. So the
//! poller's timer and notifier, registered one-shot and never armed, never fire (and are
//! skipped should they). Elsewhere, and on `polling`'s poll(2) backend (`--cfg
//! polling_test_poll_backend`), which has no epoll descriptor, the wait is `polling`'s.
//!
//! A signal: on Linux the wait returns `EINTR` to the caller, which ends the member's `wait`
//! with no events (`Waiter::wait`); `polling`'s wait retries by itself, with the time left to
//! its deadline recomputed, so elsewhere a signal ends nothing early but every timeout holds.

use std::io;
use std::time::Duration;

use super::poller::Poller;

/// One event found by a kernel wait.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seen {
    /// The registration's key in the poller.
    pub(crate) key: usize,
    /// Readable (or hung up, in error, or with priority data).
    pub(crate) readable: bool,
    /// Writable (or hung up, or in error).
    pub(crate) writable: bool,
}

/// The events one kernel wait found, in a buffer kept from wait to wait.
#[cfg(all(target_os = "linux", not(polling_test_poll_backend)))]
pub(crate) struct RawEvents {
    list: Vec<libc::epoll_event>,
    len: usize,
}

#[cfg(all(target_os = "linux", not(polling_test_poll_backend)))]
impl RawEvents {
    /// The poller's own key for its timer and notifier (`polling::NOTIFY_KEY`).
    const POLLER_KEY: u64 = usize::MAX as u64;

    pub(crate) fn new() -> RawEvents {
        RawEvents {
            list: Vec::new(),
            len: 0,
        }
    }

    /// Makes room for at least `wanted` events per wait.
    pub(crate) fn reserve(&mut self, wanted: usize) {
        if self.list.len() < wanted {
            let capacity = wanted.next_power_of_two();
            self.list = vec![libc::epoll_event { events: 0, u64: 0 }; capacity];
            self.len = 0;
        }
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Seen> + '_ {
        const READ: u32 = (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLPRI) as u32;
        const WRITE: u32 = (libc::EPOLLOUT | libc::EPOLLHUP | libc::EPOLLERR) as u32;
        self.list[..self.len].iter().filter_map(|ev| {
            // (Copied out: the struct is packed on some targets.)
            let (flags, data) = (ev.events, ev.u64);
            (data != Self::POLLER_KEY).then_some(Seen {
                key: data as usize,
                readable: flags & READ != 0,
                writable: flags & WRITE != 0,
            })
        })
    }

    /// Waits in `poller` up to `timeout` (`None`: until an event) and keeps what it found.
    pub(crate) fn wait(&mut self, poller: &Poller, timeout: Option<Duration>) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        self.reserve(1);
        let ms = match timeout {
            None => -1,
            Some(t) => t.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32,
        };
        let max = self.list.len().min(i32::MAX as usize) as i32;
        // SAFETY: the poller's epoll descriptor is live while `poller` is borrowed, and the
        // buffer holds `max` writable events.
        let n = unsafe { libc::epoll_wait(poller.as_raw_fd(), self.list.as_mut_ptr(), max, ms) };
        if n >= 0 {
            self.len = n as usize;
            return Ok(());
        }
        // EINTR included: a signal handler ran, and the caller decides (it ends the member's
        // `wait`, whose timers are deadlines, not this wait's timeout).
        self.len = 0;
        Err(io::Error::last_os_error())
    }
}

/// The events one kernel wait found, in a buffer kept from wait to wait.
#[cfg(not(all(target_os = "linux", not(polling_test_poll_backend))))]
pub(crate) struct RawEvents {
    events: super::poller::Events,
}

#[cfg(not(all(target_os = "linux", not(polling_test_poll_backend))))]
impl RawEvents {
    pub(crate) fn new() -> RawEvents {
        RawEvents {
            events: super::poller::Events::new(),
        }
    }

    /// Makes room for at least `wanted` events per wait.
    pub(crate) fn reserve(&mut self, wanted: usize) {
        if self.events.capacity().get() < wanted {
            let capacity = wanted.next_power_of_two();
            self.events = super::poller::Events::with_capacity(
                std::num::NonZeroUsize::new(capacity).expect("at least one"),
            );
        }
    }

    pub(crate) fn clear(&mut self) {
        self.events.clear();
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Seen> + '_ {
        self.events.iter().map(|ev| Seen {
            key: ev.key,
            readable: ev.readable || ev.is_priority(),
            writable: ev.writable,
        })
    }

    /// Waits in `poller` up to `timeout` (`None`: until an event) and keeps what it found.
    pub(crate) fn wait(&mut self, poller: &Poller, timeout: Option<Duration>) -> io::Result<()> {
        self.events.clear();
        poller.wait(&mut self.events, timeout).map(|_| ())
    }
}
