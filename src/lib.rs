//! # herdless
//!
//! Exclusive, fair wake-ups for many processes or threads waiting on one shared descriptor (a
//! listening socket, a pipe, a POSIX message queue).
//!
//! Two cures, one facade:
//!
//! - **exclusive** ([`Interest::exclusive`], the POLLEXCL proposal): an event on a shared
//!   descriptor wakes exactly one waiter of the [`Group`], not the whole herd;
//! - **one event, round robin** ([`Interest::one_event_round_robin`], the POLLONE proposal): a
//!   wait returns at most one event, ready descriptors are served in turn, and with
//!   [`Rotation`] the group's waiters take events in turn instead of the first registered one
//!   taking everything: by default strict turns while events come one at a time and short
//!   batches under a backlog ([`Rotation::Adaptive`]), or a fixed
//!   [`GroupBuilder::rotate_every`].
//!
//! # Backends
//!
//! | OS | `Backend::Auto` | mechanism |
//! |----|-----------------|-----------|
//! | Linux | `Native` | one epoll per waiter, `EPOLLEXCLUSIVE`, rotation by delete + re-add (nginx 1.21.6) |
//! | Linux, on request | `Emulated` | token passing (Leader/Followers) over herdless's own epoll poller |
//! | macOS, FreeBSD, other BSDs | `Emulated` | token passing over `polling` (kqueue) |
//! | Windows | `Emulated` | token passing over polling's IOCP backend (herdless's copy, with a fix), sockets, threads only |
//!
//! # Using it
//!
//! Make a [`Group`] before starting workers ([`Group::new`]; [`Group::builder`] for settings:
//! 64 members unless [`GroupBuilder::max_members`] says otherwise); in each worker
//! [`Group::join`] it, [`Waiter::add`] the shared, non-blocking descriptor with
//! [`Interest::SHARED`], then loop: [`Waiter::wait`], one accept or read per event,
//! [`Waiter::consumed`] at once (its docs say exactly when, and what happens without it;
//! [`Waiter::found_nothing`] instead after a read that found nothing), then the work. Stop
//! threads with a [`Notifier`]; forked workers with a pipe's hang-up ([`Event::is_read_closed`]).
//! Four threads on one listener: `examples/quick_start.rs`, the README's quick start; threads
//! and forked workers with a clean stop: `examples/forked_workers.rs`.
//!
//! # Example
//!
//! A member of a group waits on a socket the group shares (with more members, each message
//! would wake one of them). A shared descriptor must be non-blocking: a wake-up can find
//! nothing (another member read the message first), and a blocking read would hang there, so
//! an exclusive registration of a blocking one is refused, with the fix in its message
//! ([`Error::BlockingDescriptor`]).
//!
//! ```
//! # #[cfg(unix)] {
//! use herdless::{Events, Group, Interest};
//! use std::io::{Read, Write};
//! use std::os::unix::net::UnixStream;
//! use std::time::Duration;
//!
//! let group = Group::new()?; // made before the threads start, or before fork
//! let (mut tx, mut rx) = UnixStream::pair()?;
//! rx.set_nonblocking(true)?; // shared: a wake-up may find nothing
//! let mut waiter = group.join()?; // one per thread or process
//! waiter.add(&rx, 0, Interest::SHARED)?; // 0: this registration's key, any number of yours
//! tx.write_all(b"job")?;
//! let mut events = Events::default();
//! waiter.wait(&mut events, Some(Duration::from_secs(5)))?;
//! let mut buf = [0; 64];
//! let n = rx.read(&mut buf)?;
//! waiter.consumed(0)?; // read: the next message may go to another member
//! assert_eq!(&buf[..n], b"job"); // then the work
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! An [`Event`] says what the descriptor is ready for (mio's names: [`Event::is_readable`],
//! [`Event::is_read_closed`], [`Event::is_error`], ...) under its registration's key; a read
//! that finds nothing is reported with [`Waiter::found_nothing`], counted in
//! [`Group::stats`].

#![warn(missing_docs, missing_debug_implementations, unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod contract;
mod doorbell;
mod emulated;
mod error;
mod group;
mod inner;
mod interest;
#[cfg(all(unix, not(loom)))]
mod line;
mod liveness;
mod members;
#[cfg(all(unix, not(loom)))]
mod named;
#[cfg(all(unix, not(loom)))]
mod nest;
mod pid;
#[cfg(all(unix, not(loom)))]
mod poll;
mod registry;
mod ring;
mod shared;
mod source;
mod stats;
mod sync;
mod sys;
#[cfg(feature = "tokio")]
pub mod tokio;
mod turn;
mod waiter;

pub use contract::{
    Backend, Origin, Rotation, ADAPTIVE_BATCH, DEFAULT_MAX_EXCLUSIVE, DEFAULT_MAX_MEMBERS,
    MAX_EXCLUSIVE_LIMIT, MAX_MEMBERS_LIMIT,
};
pub use error::{Error, RawSource, Result};
pub use group::{Group, GroupBuilder};
pub use interest::{Event, Events, Interest};
#[cfg(all(unix, not(loom)))]
pub use line::{join_line, line_name, LINE_MEMBERS, LINE_SOURCES};
#[cfg(all(unix, not(loom)))]
pub use poll::{poll, poll_consumed, PollFd, PollWaiter, POLLEXCL, POLLONE};
pub use source::AsSource;
pub use stats::MemberStats;
pub use waiter::{Notifier, Waiter};

/// Hooks for herdless's own fault tests (feature `fault-injection`, which its test fixtures turn
/// on): not part of the API, absent from a default build, free to change in any release.
#[cfg(all(unix, not(loom), feature = "fault-injection"))]
#[doc(hidden)]
pub use members::testing;
