//! One worker of `herd accept` (forked, or forked and exec'd: `--spawn exec`): registers the
//! shared listener when the parent says so, then waits, accepts and counts until the parent's
//! stop byte. Once registered it records its own resource usage (voluntary context switches,
//! CPU time), so the parent charges the run only what came after: an exec'd worker's start-up
//! (exec, loading, opening the named group) is not a wake-up of the run. The raw setups make exactly the
//! experiments' system calls (their own epoll, `EPOLLIN`, with or without `EPOLLEXCLUSIVE`, accept
//! until `EAGAIN`, nginx's DEL + ADD every 16 accepts); the herdless setups take one connection
//! per wake-up and call `consumed` right after the accept, before the work, as a server should
//! (`found_nothing` when the accept found none, which the group counts as an empty wake-up).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use herdless::{Events, Group, Interest};

use crate::net::{self, accept_one, Epoll};
use herdless_fixtures::{self as fixtures, busy_for, SharedCounters};

/// What a worker counts, one slot each per worker in the shared counters.
#[derive(Clone, Copy)]
pub enum Counter {
    /// Returns from the wait with an event for the listener.
    Wakeups = 0,
    /// Connections accepted.
    Accepts = 1,
    /// Wake-ups whose first accept found nothing (EAGAIN).
    Empty = 2,
    /// The worker process's voluntary context switches when it was ready (registered).
    ReadySwitches = 3,
    /// Its CPU time (user + system, µs) at that moment.
    ReadyCpuUs = 4,
}

/// Counters per worker.
pub const COUNTERS: usize = 5;

/// The epoll data of the listener and of the control pipe (the parent's stop byte).
const LISTENER: u64 = 0;
const CONTROL: u64 = 1;

/// How a raw worker registers the listener.
#[derive(Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct RawMode {
    pub exclusive: bool,
    /// nginx 1.21.6: delete and re-add the listener every this many accepts.
    pub readd_every: Option<u64>,
}

/// How a worker waits.
pub enum Mode<'a> {
    Raw(RawMode),
    Herdless(&'a Group),
}

/// Everything one worker needs, set up by the parent before `fork`.
pub struct Worker<'a> {
    /// Registration rank: the worker's place in the order the parent lets workers register.
    pub rank: usize,
    pub listener: BorrowedFd<'a>,
    /// Read end of the worker's control pipe: one go byte, later the stop byte.
    pub control: OwnedFd,
    /// Write end of the pipe the worker acknowledges its registration on.
    pub ack: RawFd,
    pub counters: &'a SharedCounters,
    pub work: Duration,
    pub mode: Mode<'a>,
}

impl Worker<'_> {
    fn bump(&self, c: Counter) {
        self.counters
            .get(self.rank * COUNTERS + c as usize)
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    fn set(&self, c: Counter, value: u64) {
        self.counters
            .get(self.rank * COUNTERS + c as usize)
            .store(value, std::sync::atomic::Ordering::SeqCst);
    }

    /// Registered: records the usage so far, then acknowledges.
    fn ready(&self) -> io::Result<()> {
        let (switches, cpu_us) = crate::exec::self_usage();
        self.set(Counter::ReadySwitches, switches);
        self.set(Counter::ReadyCpuUs, cpu_us);
        fixtures::write_all(self.ack, &[1])
    }

    /// Waits for the go byte, registers, acknowledges, then serves until the stop byte.
    pub fn run(&self) -> Result<(), Box<dyn std::error::Error>> {
        let mut go = [0u8; 1];
        fixtures::read_exact(self.control.as_raw_fd(), &mut go)?;
        match self.mode {
            Mode::Raw(mode) => {
                let epoll = self.register_raw(mode)?;
                self.ready()?;
                self.serve_raw(&epoll, mode)
            }
            Mode::Herdless(group) => {
                let mut waiter = group.join()?;
                let shared = Interest::READABLE.exclusive().one_event_round_robin();
                waiter.add(&self.listener, LISTENER as usize, shared)?;
                waiter.add(&self.control, CONTROL as usize, Interest::READABLE)?;
                self.ready()?;
                self.serve_herdless(&mut waiter)
            }
        }
    }

    fn register_raw(&self, mode: RawMode) -> io::Result<Epoll> {
        let epoll = Epoll::new()?;
        epoll.add(self.listener.as_raw_fd(), listener_flags(mode), LISTENER)?;
        epoll.add(self.control.as_raw_fd(), libc::EPOLLIN as u32, CONTROL)?;
        Ok(epoll)
    }

    fn serve_raw(&self, epoll: &Epoll, mode: RawMode) -> Result<(), Box<dyn std::error::Error>> {
        let mut events = net::event_buffer(8);
        let mut accepted = 0u64;
        loop {
            let n = epoll.wait(&mut events, -1)?;
            if events[..n].iter().any(|e| e.u64 == CONTROL) {
                return Ok(());
            }
            if n == 0 {
                continue;
            }
            self.bump(Counter::Wakeups);
            let mut this_wakeup = 0;
            while let Some(conn) = accept_one(self.listener.as_raw_fd())? {
                self.bump(Counter::Accepts);
                this_wakeup += 1;
                accepted += 1;
                busy_for(self.work);
                drop(conn);
                if mode.readd_every.is_some_and(|k| accepted % k == 0) {
                    // nginx's ngx_reorder_accept_events: the entry goes to the queue's tail.
                    epoll.delete(self.listener.as_raw_fd())?;
                    epoll.add(self.listener.as_raw_fd(), listener_flags(mode), LISTENER)?;
                }
            }
            if this_wakeup == 0 {
                self.bump(Counter::Empty);
            }
        }
    }

    fn serve_herdless(
        &self,
        waiter: &mut herdless::Waiter,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let mut events = Events::with_capacity(1);
        loop {
            waiter.wait(&mut events, None)?;
            let Some(event) = events.iter().next() else {
                continue;
            };
            if event.key == CONTROL as usize {
                return Ok(());
            }
            self.bump(Counter::Wakeups);
            match accept_one(self.listener.as_raw_fd())? {
                Some(conn) => {
                    waiter.consumed(LISTENER as usize)?;
                    self.bump(Counter::Accepts);
                    busy_for(self.work);
                    drop(conn);
                }
                None => {
                    // Counted in the group's stats too, and consumed.
                    waiter.found_nothing(LISTENER as usize)?;
                    self.bump(Counter::Empty);
                }
            }
        }
    }
}

fn listener_flags(mode: RawMode) -> u32 {
    let exclusive = if mode.exclusive {
        libc::EPOLLEXCLUSIVE as u32
    } else {
        0
    };
    libc::EPOLLIN as u32 | exclusive
}
