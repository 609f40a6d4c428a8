//! epoll(7), as herdless uses it: one instance per waiter (close-on-exec), entries with the
//! flags their caller gives and a 64-bit datum the kernel hands back, and a wait into a buffer
//! kept from wait to wait. Nothing else: no timer (a timeout goes to `epoll_wait` itself,
//! rounded up to the millisecond, so a wait never ends before its timeout) and no notifier
//! (whoever must be woken adds a descriptor of its own: herdless's door bells). A signal
//! handler that runs during the wait ends it with `EINTR`, handed back to the caller, which
//! decides (the emulation ends the member's `wait` early, as `poll(2)` does).
//!
//! Through rustix's safe wrappers: the instance, its entries and the wait, into a buffer of
//! rustix's `Event`s read as the kernel wrote them (flags and datum copied out, no check on
//! each read). Errors are `std::io::Error`s that keep the kernel's error number
//! (`crate::registry` names a refusal by it).

use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use rustix::event::epoll::{self, CreateFlags, Event, EventData};

pub(crate) use rustix::event::epoll::EventFlags as Flags;

/// One epoll instance; its descriptor is closed on drop and on `exec`.
#[derive(Debug)]
pub(crate) struct Epoll {
    epoll: OwnedFd,
}

impl Epoll {
    /// A new, empty instance (`epoll_create1(EPOLL_CLOEXEC)`).
    pub(crate) fn new() -> io::Result<Epoll> {
        let epoll = epoll::create(CreateFlags::CLOEXEC)?;
        Ok(Epoll { epoll })
    }

    /// Adds `fd` with `flags` (level-triggered unless they hold `ET`); its events carry
    /// `data`. The kernel's entry belongs to `fd`'s open file, not to its number: it lives
    /// until deleted or until every descriptor of that file is closed.
    pub(crate) fn add(&self, fd: BorrowedFd<'_>, flags: Flags, data: u64) -> io::Result<()> {
        Ok(epoll::add(
            &self.epoll,
            fd,
            EventData::new_u64(data),
            flags,
        )?)
    }

    /// Is `fd`'s entry, added with `flags` and `data`, still the entry of the open file the
    /// number names? See [`entry_is_live`].
    pub(crate) fn entry_is_live(&self, fd: RawFd, flags: Flags, data: u64) -> Option<bool> {
        entry_is_live(self.epoll.as_fd(), fd, flags, data)
    }

    /// Deletes `fd`'s entry: `ENOENT` if `fd` names no entry's file (a number closed and
    /// reused since it was added, say), `EBADF` if the number is not open.
    pub(crate) fn delete(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        Ok(epoll::delete(&self.epoll, fd)?)
    }

    /// Waits up to `timeout` (`None`: until an event) and puts what it found in `events`, in
    /// place of what they held; returns how many. `Interrupted` if a signal handler ran. A
    /// timeout is rounded up to the millisecond, so a wait never ends before it.
    pub(crate) fn wait(&self, events: &mut Events, timeout: Option<Duration>) -> io::Result<usize> {
        let max = events.list.len();
        wait(self.epoll.as_fd(), events, max, timeout)
    }
}

/// Is `fd`'s entry in `epoll` (any epoll descriptor: the native backend keeps its own), a plain
/// one added with `flags` and `data`, still the entry of the open file the number names? Asked
/// with an `EPOLL_CTL_MOD` that sets the entry to what it was: the kernel finds an entry by
/// number *and* open file, so it answers `EBADF` for a closed number and `ENOENT` for one that
/// names another file now (closed and reused, or another file `dup2`'d onto it), and a live
/// level-triggered entry stays as it was (a ready file is reported by the next wait, as it
/// would have been). Cheaper than asking the file (0.34–0.39 µs here against 0.45 for an
/// `fstat`, 0.68 with the `fcntl` a pipe's direction needs: `crate::registry::still_names`;
/// docs/lab.md, "The descriptor check asks the entry"), and exact where that is not (a FIFO
/// opened again under the number: the same inode and direction, another open file). `None`
/// for any other refusal: the caller asks the file. Not for an exclusive entry, which the
/// kernel refuses to modify (the native backend's `entry_is_live` asks it so).
pub(crate) fn entry_is_live(
    epoll: BorrowedFd<'_>,
    fd: RawFd,
    flags: Flags,
    data: u64,
) -> Option<bool> {
    let Ok(number) = crate::sys::unix::by_number(fd) else {
        return Some(false);
    };
    match epoll::modify(epoll, number, EventData::new_u64(data), flags) {
        Ok(()) => Some(true),
        Err(rustix::io::Errno::BADF | rustix::io::Errno::NOENT) => Some(false),
        Err(_) => None,
    }
}

/// Waits on `epoll` (any epoll descriptor: the native backend keeps its own) up to `timeout`
/// (`None`: until an event; rounded up to the millisecond, so a wait never ends before it) for
/// at most `max` events (at least one, at most the buffer's capacity), put in `events` in place
/// of what they held; returns how many. `Interrupted` if a signal handler ran.
pub(crate) fn wait(
    epoll: BorrowedFd<'_>,
    events: &mut Events,
    max: usize,
    timeout: Option<Duration>,
) -> io::Result<usize> {
    events.len = 0;
    let timeout = timeout.map(|t| {
        let ms = t
            .as_nanos()
            .div_ceil(1_000_000)
            .min(libc::c_int::MAX as u128) as i64;
        rustix::time::Timespec {
            tv_sec: ms / 1000,
            tv_nsec: (ms % 1000) * 1_000_000,
        }
    });
    let max = max.clamp(1, events.list.len());
    events.len = epoll::wait(epoll, &mut events.list[..max], timeout.as_ref())?;
    Ok(events.len)
}

impl AsFd for Epoll {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}

/// The events one wait found, in a buffer kept from wait to wait: its capacity is the most
/// one wait returns.
pub(crate) struct Events {
    /// `capacity` slots for the kernel to fill, never fewer than one (`epoll_wait` refuses a
    /// buffer of none).
    list: Vec<Event>,
    /// How many of them the last wait filled.
    len: usize,
}

// SAFETY: an `Event`'s datum is a union of a `u64` and a pointer, which makes rustix's type
// neither `Send` nor `Sync`; herdless only ever stores and reads `u64`s there (keys and
// tokens, never a pointer), so the buffer is plain integers, safe to move to another thread.
unsafe impl Send for Events {}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Events {
    pub(crate) fn with_capacity(capacity: NonZeroUsize) -> Events {
        let empty = Event {
            flags: Flags::empty(),
            data: EventData::new_u64(0),
        };
        Events {
            list: vec![empty; capacity.get()],
            len: 0,
        }
    }

    pub(crate) fn capacity(&self) -> NonZeroUsize {
        NonZeroUsize::new(self.list.len()).unwrap_or(NonZeroUsize::MIN)
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The datum and flags of event `i` of the last wait (`i` below its count).
    // (Read by the native backend, which the model checker's build, `--cfg loom`, leaves out.)
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn get(&self, i: usize) -> (u64, Flags) {
        let ev = &self.list[..self.len][i];
        // (Copied out: the struct is packed on some targets.)
        let (flags, data) = (ev.flags, ev.data);
        (data.u64(), flags)
    }

    /// Each event's datum and the flags it was reported with.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, Flags)> + '_ {
        self.list[..self.len].iter().map(|ev| {
            // (Copied out: the struct is packed on some targets.)
            let (flags, data) = (ev.flags, ev.data);
            (data.u64(), flags)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    use super::*;

    fn look(epoll: &Epoll, events: &mut Events) -> Vec<(u64, Flags)> {
        epoll.wait(events, Some(Duration::ZERO)).unwrap();
        events.iter().collect()
    }

    #[test]
    fn an_entry_reports_until_read_and_stops_when_deleted() {
        let epoll = Epoll::new().unwrap();
        let (mut a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let mut events = Events::with_capacity(NonZeroUsize::new(4).unwrap());
        epoll.add(a.as_fd(), Flags::IN, 7).unwrap();
        assert_eq!(look(&epoll, &mut events), []);
        b.write_all(b"x").unwrap();
        // Level-triggered: reported by every wait until it is read.
        for _ in 0..2 {
            assert_eq!(look(&epoll, &mut events), [(7, Flags::IN)]);
        }
        a.read_exact(&mut [0]).unwrap();
        assert_eq!(look(&epoll, &mut events), []);
        b.write_all(b"y").unwrap();
        epoll.delete(a.as_fd()).unwrap();
        assert_eq!(look(&epoll, &mut events), []);
        // Deleted twice: the kernel names the missing entry.
        let err = epoll.delete(a.as_fd()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn a_wait_returns_at_most_its_capacity_and_a_hang_up_is_reported() {
        let epoll = Epoll::new().unwrap();
        let mut ends = Vec::new();
        for key in 0..3 {
            let (a, b) = UnixStream::pair().unwrap();
            epoll.add(a.as_fd(), Flags::IN, key).unwrap();
            ends.push(a);
            drop(b); // the peer hangs up: the entry reports readable and hung up
        }
        let mut events = Events::with_capacity(NonZeroUsize::new(2).unwrap());
        assert_eq!(events.capacity().get(), 2);
        assert_eq!(epoll.wait(&mut events, None).unwrap(), 2);
        assert!(events
            .iter()
            .all(|(key, flags)| key < 3 && flags == Flags::IN | Flags::HUP));
        events.clear();
        assert!(events.is_empty());
    }

    #[test]
    fn the_descriptor_is_closed_on_exec() {
        let epoll = Epoll::new().unwrap();
        let flags = rustix::io::fcntl_getfd(&epoll).unwrap();
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
    }
}
