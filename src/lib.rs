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
//! Build a [`Group`] before starting workers ([`GroupBuilder::max_members`]: 64 unless you say
//! otherwise); in each worker [`Group::join`] it, [`Waiter::add`] the shared, non-blocking
//! descriptor with [`Interest::exclusive`], then loop: [`Waiter::wait`], one accept or read per
//! event, [`Waiter::consumed`] at once (its docs say exactly when, and what happens without
//! it; [`Waiter::found_nothing`] instead after a read that found nothing), then the work. Stop threads with a [`Notifier`]; forked workers with a pipe's hang-up.
//! Four threads on one listener: `examples/quick_start.rs`, the README's quick start; threads
//! and forked workers with a clean stop: `examples/forked_workers.rs`.
//!
//! # Example, on a pipe
//!
//! A shared descriptor must be non-blocking: a wake-up can find nothing (another member read
//! the message first), and a blocking read would hang there. So an `exclusive` registration of
//! a blocking one is refused, with the fix in its message ([`Error::BlockingDescriptor`]). A
//! read that finds nothing is reported with [`Waiter::found_nothing`], which counts it in
//! [`Group::stats`] and consumes the event.
//!
//! ```
//! # #[cfg(unix)] {
//! use herdless::{Error, Events, Group, Interest};
//! use nix::fcntl::{fcntl, FcntlArg, OFlag};
//! use std::fs::File;
//! use std::io::{ErrorKind, Read, Write};
//! use std::os::fd::AsRawFd;
//! use std::time::Duration;
//!
//! let group = Group::builder().build()?; // built before threads or fork
//! let (rx, tx) = nix::unistd::pipe()?; // (nix 0.29; any pipe will do)
//! let (mut rx, mut tx) = (File::from(rx), File::from(tx));
//! let mut waiter = group.join()?; // one per thread or process
//! let shared = Interest::READABLE.exclusive().one_event_round_robin();
//! let refused = waiter.add(&rx, 0, shared);
//! assert!(matches!(refused, Err(Error::BlockingDescriptor { .. }))); // blocking: refused
//! fcntl(rx.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
//! waiter.add(&rx, 0, shared)?;
//! tx.write_all(b"job")?;
//! let mut events = Events::with_capacity(16);
//! waiter.wait(&mut events, Some(Duration::from_secs(5)))?;
//! for event in events.iter() {
//!     let mut buf = [0; 64];
//!     match rx.read(&mut buf) {
//!         Ok(n) => {
//!             waiter.consumed(event.key)?; // the readiness is consumed: the group may go on
//!             assert_eq!(&buf[..n], b"job"); // then the work
//!         }
//!         Err(e) if e.kind() == ErrorKind::WouldBlock => waiter.found_nothing(event.key)?,
//!         Err(e) => return Err(e.into()),
//!     }
//! }
//! assert_eq!(group.stats()[0].empty_wakeups, 0); // alone, it never finds nothing
//! waiter.delete(&rx)?;
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs, missing_debug_implementations, unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod contract;
/// Kernel wake-up counters: the lab's measuring tool (`examples/herd`), not part of the API
/// that herdless promises; hidden from these docs and free to change. Linux counts per thread
/// (`RUSAGE_THREAD`); other Unix systems per process, which equals the thread's figure only in a
/// single-threaded worker; elsewhere nothing (`None`). `counters::asleep_in_wait` reads
/// `/proc` and exists on Linux only.
#[doc(hidden)]
pub mod counters;
mod doorbell;
mod emulated;
mod error;
mod group;
mod inner;
mod interest;
mod liveness;
mod members;
#[cfg(all(unix, not(loom)))]
mod named;
mod pid;
#[path = "../platform/mod.rs"]
mod platform;
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
pub use source::AsSource;
pub use stats::MemberStats;
pub use waiter::{Notifier, Waiter};

#[doc(hidden)]
pub use members::testing as __testing;
