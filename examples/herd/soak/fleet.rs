//! The soak's servers as the supervisor sees them: each one exec'd (`crate::exec::spawn`, the
//! ledger's memfd its only inherited descriptor) with a ledger slot of its own, watched through
//! its slot (starting, ready, failed) and its exit status, signalled by pid while it is a child
//! not yet reaped (so the pid is still its own): SIGKILL, SIGSTOP and SIGCONT, or told to leave
//! through its slot. Reaping sorts each exit into what was asked for (killed, left) and what
//! was not (failed, with the server's own error, or ended otherwise). Whatever is still running
//! when the fleet is dropped is killed and reaped.

use std::os::unix::process::ExitStatusExt;
use std::process::Child;
use std::time::Instant;

use super::ledger::{Ledger, State};
use super::server::ServerSpec;
use super::Fault;

/// One live server.
pub struct Server {
    pub slot: usize,
    pub home: u64,
    pub queues: Vec<u64>,
    pub pid: u32,
    child: Child,
    pub started: Instant,
    pub ready_at: Option<Instant>,
    /// SIGKILL sent.
    pub killed: bool,
    /// Told to leave, at.
    pub leaving: Option<Instant>,
    /// SIGSTOPped; SIGCONT is due then.
    pub stopped_until: Option<Instant>,
    /// The last SIGSTOP.
    pub last_stopped: Option<Instant>,
}

impl Server {
    /// Ready, and neither killed nor told to leave (it may be stopped for the moment).
    pub fn serving(&self) -> bool {
        self.ready_at.is_some() && !self.killed && self.leaving.is_none()
    }
}

/// How a reaped server ended.
pub enum Exit {
    /// By our SIGKILL; `Some(q)` if it died in the middle of a receive from queue q.
    Killed { receiving: Option<u64> },
    /// Left when told to.
    Left,
    /// Failed with its own error (exit status 3).
    Failed(String),
    /// Ended some other way.
    Unexpected(String),
}

pub struct Fleet<'a> {
    ledger: &'a Ledger,
    group: String,
    inject: Option<Fault>,
    pub live: Vec<Server>,
    next_slot: usize,
}

impl<'a> Fleet<'a> {
    pub fn new(ledger: &'a Ledger, group: &str, inject: Option<Fault>) -> Fleet<'a> {
        Fleet {
            ledger,
            group: group.to_owned(),
            inject,
            live: Vec::new(),
            next_slot: 0,
        }
    }

    /// Servers started so far.
    pub fn started(&self) -> usize {
        self.next_slot
    }

    /// Execs a server for `home`, serving `queues` (number, name).
    pub fn start(&mut self, home: u64, queues: Vec<(u64, String)>) -> Result<(), String> {
        let slot = self.next_slot;
        if slot >= self.ledger.slots() {
            return Err(format!(
                "the ledger has room for {} servers, all used",
                self.ledger.slots()
            ));
        }
        self.next_slot += 1;
        self.ledger.slot(slot).set_state(State::Starting);
        let numbers = queues.iter().map(|q| q.0).collect();
        let spec = ServerSpec {
            slot,
            group: self.group.clone(),
            queues,
            ledger: self.ledger.fd(),
            slots: self.ledger.slots(),
            records: self.ledger.records(),
            supervisor: std::process::id(),
            // Every server; the first to read a request injects it (`--inject`).
            inject: self.inject,
        };
        let child = crate::exec::spawn(&crate::exec::Job::Soak(spec), &[self.ledger.fd()])
            .map_err(|e| format!("exec of a server: {e}"))?;
        let pid = child.id();
        self.ledger
            .slot(slot)
            .pid()
            .store(u64::from(pid), std::sync::atomic::Ordering::SeqCst);
        self.live.push(Server {
            slot,
            home,
            queues: numbers,
            pid,
            child,
            started: Instant::now(),
            ready_at: None,
            killed: false,
            leaving: None,
            stopped_until: None,
            last_stopped: None,
        });
        Ok(())
    }

    /// Notes the servers that became ready since the last look.
    pub fn note_ready(&mut self, now: Instant) {
        for s in &mut self.live {
            if s.ready_at.is_none() && self.ledger.slot(s.slot).state() == State::Ready {
                s.ready_at = Some(now);
            }
        }
    }

    fn signal(server: &Server, signal: libc::c_int) {
        // SAFETY: our own child, not reaped yet (it is still in `live`), so the pid is its own.
        unsafe { libc::kill(server.pid as libc::pid_t, signal) };
    }

    pub fn kill(&mut self, i: usize) {
        Fleet::signal(&self.live[i], libc::SIGKILL);
        self.live[i].killed = true;
        self.live[i].stopped_until = None;
    }

    pub fn stop(&mut self, i: usize, until: Instant) {
        Fleet::signal(&self.live[i], libc::SIGSTOP);
        self.live[i].stopped_until = Some(until);
        self.live[i].last_stopped = Some(Instant::now());
    }

    /// SIGCONT to every stopped server whose time is up (all of them with `all`).
    pub fn resume_due(&mut self, now: Instant, all: bool) {
        for s in &mut self.live {
            if s.stopped_until.is_some_and(|t| all || t <= now) {
                Fleet::signal(s, libc::SIGCONT);
                s.stopped_until = None;
            }
        }
    }

    /// Tells server `i` to leave (it sees it within one 50 ms wait).
    pub fn tell_to_leave(&mut self, i: usize, now: Instant) {
        let s = &mut self.live[i];
        if s.leaving.is_none() {
            self.ledger
                .slot(s.slot)
                .leave()
                .store(1, std::sync::atomic::Ordering::SeqCst);
            s.leaving = Some(now);
        }
    }

    /// Reaps every server that ended, and says how each ended.
    pub fn reap(&mut self) -> Vec<(Server, Exit)> {
        let mut ended = Vec::new();
        let mut i = 0;
        while i < self.live.len() {
            let status = match self.live[i].child.try_wait() {
                Ok(Some(status)) => status,
                Ok(None) => {
                    i += 1;
                    continue;
                }
                Err(e) => {
                    let s = self.live.remove(i);
                    ended.push((s, Exit::Unexpected(format!("waitpid: {e}"))));
                    continue;
                }
            };
            let s = self.live.remove(i);
            let slot = self.ledger.slot(s.slot);
            let exit = if s.killed && status.signal() == Some(libc::SIGKILL) {
                let q = slot.receiving().load(std::sync::atomic::Ordering::SeqCst);
                Exit::Killed {
                    receiving: q.checked_sub(1),
                }
            } else if status.code() == Some(0) && slot.state() == State::Left {
                Exit::Left
            } else if status.code() == Some(3) && slot.state() == State::Failed {
                Exit::Failed(slot.error())
            } else {
                Exit::Unexpected(format!("{status}"))
            };
            ended.push((s, exit));
        }
        ended
    }
}

impl Drop for Fleet<'_> {
    fn drop(&mut self) {
        for s in &mut self.live {
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
    }
}
