//! The poller a member waits in, one per member, picked here per system. Every poller offers
//! the same small surface, under `polling`'s names: `Poller::{new, wait}` (and `notify` on
//! Windows, where it is the member's door bell), `Event::{new, set_priority, is_priority}` with
//! its `key`, `readable` and `writable`, and `Events::{new, with_capacity, capacity, clear,
//! is_empty, iter}`; descriptors go in and out through this module's [`add`] and [`delete`]
//! (level-triggered, by number), safe on every system.
//!
//! | system | poller | module |
//! |--------|--------|--------|
//! | Linux | herdless's own, on one epoll instance: one `epoll_wait` per wait, `EINTR` handed back | `epoll` over `crate::sys::epoll` |
//! | macOS, the BSDs; Linux with `--cfg polling_test_poll_backend` | the `polling` crate (kqueue; poll(2)) | `polling` itself |
//! | Windows | polling 3.11.0's IOCP backend, carried by herdless with the fix of its deadlock on a socket closed while registered | `windows` over `iocp` |
//!
//! Linux: the wait is the emulation's hot path, and `polling::Poller::wait` arms and re-arms a
//! timer and a notifier the emulation never needs; a poller of herdless's own waits with one
//! system call and keeps no key for itself.
//!
//! Elsewhere `polling` is used through its documented API only, so any 3.x release from 3.11
//! serves: level-triggered entries, the key `usize::MAX` left to it (every key the emulation
//! uses, its door bell's included, is below), `wait` appending to a cleared buffer, in batches or
//! with nothing. Two details are not promised by polling, and the emulation is right either
//! way: after a signal, `wait` retrying (as 3.11 does) or returning `Interrupted` (which ends
//! the member's `wait` early, as on Linux); and an error carrying the kernel's number, which
//! `crate::registry` reads to name a refusal (else the general error) and to tell an entry
//! that may outlive its descriptor (else no rebuild, which neither kqueue, whose entries go with
//! their descriptors, nor the poll(2) backend, which deletes by number, ever needs).
//!
//! Windows: polling 3.11.0 (the latest release, and its main branch, when this was checked)
//! deadlocks when an AFD poll completes with `LOCAL_CLOSE` (a registered socket closed without
//! `delete`): `feed_event` calls `begin_delete()` while it holds the socket's state lock,
//! which `begin_delete()` takes again, so the waiting thread blocks on its own lock for ever.
//! No check of herdless's can keep a sleeping member out of that branch (any thread may close
//! the socket while it sleeps), and a `[patch]` of polling would reach herdless's own builds
//! only, not the crates that depend on it. So on Windows herdless compiles the fixed code
//! itself: `iocp/{mod,afd,port}.rs` are polling 3.11.0's `src/iocp/` (MIT OR Apache-2.0, see
//! their headers), changed only as `iocp/mod.rs`'s header lists. The fix for upstream, with its
//! test, is `patches/polling-iocp-local-close-deadlock.patch` (`patches/README.md`); once a
//! polling release has it, Windows can take `polling` as the BSDs do and `iocp` can go.

use std::io;

use crate::error::RawSource;

cfg_if::cfg_if! {
    if #[cfg(all(any(target_os = "linux", target_os = "android"), not(polling_test_poll_backend)))] {
        mod epoll;
        pub(crate) use epoll::{Event, Events, Poller};
    } else if #[cfg(windows)] {
        mod iocp;
        mod windows;
        pub(crate) use windows::{Event, Events, Poller};
        use windows::PollMode;
    } else {
        pub(crate) use polling::{Event, Events, Poller};
        use polling::PollMode;
    }
}

/// Adds descriptor (on Windows, socket) `fd`, known by number, level-triggered, reported under
/// `interest.key`. The public API lets a caller close a registered descriptor before it is
/// deleted (`crate::registry` says what is then done about its entry); each poller survives
/// that, as said below.
pub(crate) fn add(poller: &Poller, fd: RawSource, interest: Event) -> io::Result<()> {
    cfg_if::cfg_if! {
        if #[cfg(all(any(target_os = "linux", target_os = "android"), not(polling_test_poll_backend)))] {
            // herdless's own epoll: an entry goes with the open file, not the number.
            poller.add(fd, interest)
        } else if #[cfg(windows)] {
            // herdless's IOCP copy forgets a socket closed while registered (`iocp`'s fix).
            poller.add(fd, interest)
        } else {
            // SAFETY: polling asks that a source be deleted before it is closed. herdless
            // deletes every source it added when the member stops watching it or leaves, but
            // cannot promise the order for a caller's descriptor, which the public API lets the
            // caller close while registered. What polling's backends here do with a source
            // closed first touches no memory of it: kqueue drops the entry itself at the close,
            // and the poll(2) backend keeps only the number, reported `POLLNVAL` or deleted by
            // number. (The number is open during this call: the caller just checked it.)
            unsafe { poller.add_with_mode(fd, interest, PollMode::Level) }
        }
    }
}

/// Does `fd`'s entry in `poller`, added with `interest`, still belong to the open file the
/// number names? `Some` where the poller can answer for its entry itself (Linux: herdless's own
/// epoll, one `epoll_ctl`), `None` where it cannot: the caller asks the file
/// (`crate::registry::still_names`).
pub(crate) fn entry_is_live(poller: &Poller, fd: RawSource, interest: Event) -> Option<bool> {
    cfg_if::cfg_if! {
        if #[cfg(all(any(target_os = "linux", target_os = "android"), not(polling_test_poll_backend)))] {
            poller.entry_is_live(fd, interest)
        } else {
            let _ = (poller, fd, interest);
            None
        }
    }
}

/// Deletes `fd`, known by number, from `poller`: the kernel's error for a number closed, or
/// naming another file, since it was added.
pub(crate) fn delete(poller: &Poller, fd: RawSource) -> io::Result<()> {
    #[cfg(unix)]
    return poller.delete(crate::sys::unix::by_number(fd)?);
    #[cfg(windows)]
    return poller.delete_raw(fd);
}

#[cfg(test)]
mod tests {
    //! A socket closed while registered, without `delete`: the next `wait` must still return.
    //! (polling 3.11.0's IOCP backend deadlocked there; this poller carries the fix. The same
    //! test, written against `polling`, is in `patches/`.)

    use std::net::{TcpListener, UdpSocket};
    use std::sync::mpsc;
    use std::time::Duration;

    #[cfg(unix)]
    use std::os::fd::OwnedFd as OwnedSocket;
    #[cfg(windows)]
    use std::os::windows::io::OwnedSocket;

    use super::{Event, Events, Poller};

    /// A look that returns at once: the poller starts watching what was added (on Windows,
    /// the AFD poll of a socket is submitted only now).
    fn arm(poller: &Poller) {
        let mut events = Events::new();
        poller.wait(&mut events, Some(Duration::ZERO)).unwrap();
    }

    /// One `wait` with a short timeout in another thread: fails if it does not come back.
    fn wait_returns(poller: Poller) {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut events = Events::new();
            let result = poller.wait(&mut events, Some(Duration::from_millis(100)));
            tx.send(result.map(|_| events.iter().count())).unwrap();
        });
        let result = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("wait did not return after a registered socket was closed");
        result.expect("wait failed");
    }

    /// Registers `socket`, lets the poller watch it, closes it without `delete`: the next
    /// `wait` must come back.
    fn closed_while_registered(socket: OwnedSocket) {
        let poller = Poller::new().unwrap();
        // (Closed below without `delete`, on purpose.)
        super::add(&poller, raw(&socket), Event::new(1, true, false)).unwrap();
        arm(&poller);
        drop(socket);
        wait_returns(poller);
    }

    fn raw(socket: &OwnedSocket) -> crate::error::RawSource {
        #[cfg(unix)]
        return std::os::fd::AsRawFd::as_raw_fd(socket);
        #[cfg(windows)]
        return std::os::windows::io::AsRawSocket::as_raw_socket(socket);
    }

    #[test]
    fn a_closed_udp_socket_does_not_block_the_wait() {
        closed_while_registered(UdpSocket::bind("127.0.0.1:0").unwrap().into());
    }

    #[test]
    fn a_closed_tcp_listener_does_not_block_the_wait() {
        closed_while_registered(TcpListener::bind("127.0.0.1:0").unwrap().into());
    }
}
