//! The soak's server, an exec'd process of the lab binary (`crate::exec`, `Job::Soak`): it opens
//! the run's named group with `Group::open`, joins, opens its two service queues by name
//! (non-blocking) and registers both with `Interest::READABLE.exclusive().one_event_round_robin()`,
//! then serves in the usual loop: `wait(Some(50 ms))`, one `mq_receive` per event, the read
//! counted in the ledger at once, `consumed` right after (`found_nothing` on `EAGAIN`), and a
//! check of the supervisor's order to leave. While the run is loaded it has a 1 ms SIGALRM
//! interval timer (`ITIMER_REAL`) whose handler counts the signal: herdless ends a wait a
//! signal interrupts with `Events::interrupted()`, and the loop goes on.
//!
//! It dies with the supervisor (`PR_SET_PDEATHSIG`), ignores SIGINT (Ctrl-C is the supervisor's
//! to handle), and on an error writes it into its ledger slot and exits with status 3.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use herdless::{Events, Group, Interest};
use serde::{Deserialize, Serialize};

use super::ledger::{now_ns, Ledger, Phase, Slot, State};
use super::queues;
use super::Fault;

/// The usual server loop's wait.
pub const WAIT: Duration = Duration::from_millis(50);
/// The interval of the SIGALRM timer while the run is loaded.
const ALARM: Duration = Duration::from_millis(1);

/// What the supervisor tells an exec'd server.
#[derive(Serialize, Deserialize)]
pub struct ServerSpec {
    pub slot: usize,
    pub group: String,
    /// The queues it serves (its home's two, less one already unlinked): number and name.
    pub queues: Vec<(u64, String)>,
    /// The ledger's inherited descriptor and its shape.
    pub ledger: RawFd,
    pub slots: usize,
    pub records: usize,
    /// The supervisor's pid: a server whose parent is already gone exits at once.
    pub supervisor: u32,
    pub inject: Option<Fault>,
}

/// SIGALRMs handled in this process.
static SIGNALS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_alarm(_: libc::c_int) {
    SIGNALS.fetch_add(1, SeqCst);
}

/// Runs the server; returns its exit status.
pub fn exec_server(spec: ServerSpec) -> i32 {
    // SAFETY: prctl with an option and a signal number; it changes only this process.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    // SAFETY: getppid cannot fail.
    if unsafe { libc::getppid() } as u32 != spec.supervisor {
        return 4; // the supervisor died before the line above: nobody to serve
    }
    // SAFETY: the supervisor left this descriptor open for this process alone; taken once.
    let ledger = match unsafe { Ledger::inherited(spec.ledger, spec.slots, spec.records) } {
        Ok(ledger) => ledger,
        Err(e) => {
            eprintln!("herd soak server: the ledger: {e}");
            return 2;
        }
    };
    let slot = ledger.slot(spec.slot);
    match serve(&spec, &ledger, &slot) {
        Ok(()) => {
            slot.set_state(State::Left);
            0
        }
        Err(e) => {
            slot.set_error(&e);
            slot.set_state(State::Failed);
            3
        }
    }
}

fn serve(spec: &ServerSpec, ledger: &Ledger, slot: &Slot<'_>) -> Result<(), String> {
    install_signals().map_err(|e| format!("signals: {e}"))?;
    let group = Group::open(&spec.group).map_err(|e| format!("open group {}: {e}", spec.group))?;
    let mut waiter = group.join().map_err(|e| format!("join: {e}"))?;
    let mut queues = Vec::new();
    for (no, name) in &spec.queues {
        let fd = match crate::queue::open_mq_reader(name) {
            Ok(fd) => fd,
            // A draining queue the supervisor unlinked since it exec'd this server (it never
            // unlinks one that gets traffic): not this server's any more.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("open queue {no} ({name}): {e}")),
        };
        let shared = Interest::READABLE.exclusive().one_event_round_robin();
        waiter
            .add(&fd, queues.len(), shared)
            .map_err(|e| format!("add queue {no} ({name}): {e}"))?;
        queues.push((*no, fd));
    }
    if queues.is_empty() {
        return Ok(()); // all retired meanwhile: nothing to serve, it leaves
    }
    slot.set_state(State::Ready);
    let mut alarm = Alarm { on: false };
    let mut inject = spec.inject;
    let mut events = Events::with_capacity(1);
    loop {
        alarm
            .follow(ledger.phase())
            .map_err(|e| format!("setitimer: {e}"))?;
        let began = Instant::now();
        let n = waiter
            .wait(&mut events, Some(WAIT))
            .map_err(|e| format!("wait: {e}"))?;
        slot.waits().fetch_add(1, SeqCst);
        slot.signals().store(SIGNALS.load(SeqCst), SeqCst);
        if n == 0 && events.interrupted() {
            slot.interrupted().fetch_add(1, SeqCst);
        } else if n == 0 && began.elapsed() + Duration::from_millis(1) >= WAIT {
            // The loop's own timeout; an empty return before it is the library's.
            slot.timeouts().fetch_add(1, SeqCst);
        }
        for event in events.iter() {
            let (no, fd) = &queues[event.key];
            // Set before the receive, cleared once the read is counted: a server killed in
            // between may have taken one request of queue `no` with it.
            slot.receiving().store(no + 1, SeqCst);
            let received = queues::receive(fd.as_raw_fd());
            match received {
                Ok(Some((id, _deadline))) => {
                    let fault = inject.take().filter(|_| ledger.claim_injection());
                    match (ledger.record(id), fault) {
                        (Some(_), Some(Fault::Lose)) => {
                            slot.injected().store(id + 1, SeqCst); // not counted as read
                        }
                        (Some(record), Some(Fault::Duplicate)) => {
                            record.mark_read(now_ns());
                            record.mark_read(now_ns());
                        }
                        (Some(record), None) => record.mark_read(now_ns()),
                        (None, _) => {
                            slot.bad_ids().fetch_add(1, SeqCst);
                        }
                    }
                    slot.reads().fetch_add(1, SeqCst);
                    slot.receiving().store(0, SeqCst);
                    waiter
                        .consumed(event.key)
                        .map_err(|e| format!("consumed: {e}"))?;
                }
                Ok(None) => {
                    slot.receiving().store(0, SeqCst);
                    slot.empty().fetch_add(1, SeqCst);
                    waiter
                        .found_nothing(event.key)
                        .map_err(|e| format!("found_nothing: {e}"))?;
                }
                Err(e) => return Err(format!("receive from queue {no}: {e}")),
            }
        }
        if slot.leave().load(SeqCst) != 0 || ledger.phase() == Phase::End {
            break;
        }
    }
    alarm.set(false).map_err(|e| format!("setitimer: {e}"))?;
    drop(waiter); // leaves the group, then the queues close
    drop(queues);
    Ok(())
}

/// SIGALRM counted by a handler (`SA_RESTART`: other calls go on; herdless's wait returns
/// early all the same); SIGINT ignored.
fn install_signals() -> nix::Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let alarm = SigAction::new(
        SigHandler::Handler(on_alarm),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    let ignore = SigAction::new(SigHandler::SigIgn, SaFlags::empty(), SigSet::empty());
    // SAFETY: the handler only adds to an atomic, which is async-signal-safe.
    unsafe { sigaction(Signal::SIGALRM, &alarm) }?;
    // SAFETY: ignoring a signal installs no code.
    unsafe { sigaction(Signal::SIGINT, &ignore) }?;
    Ok(())
}

/// The 1 ms SIGALRM interval timer, on while the run is loaded.
struct Alarm {
    on: bool,
}

impl Alarm {
    fn follow(&mut self, phase: Phase) -> std::io::Result<()> {
        let want = phase == Phase::Load;
        match want == self.on {
            true => Ok(()),
            false => self.set(want),
        }
    }

    fn set(&mut self, on: bool) -> std::io::Result<()> {
        let step = match on {
            true => libc::timeval {
                tv_sec: 0,
                tv_usec: ALARM.as_micros() as libc::suseconds_t,
            },
            false => libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            },
        };
        let timer = libc::itimerval {
            it_interval: step,
            it_value: step,
        };
        // SAFETY: a valid timer and a live itimerval; no old value asked for.
        if unsafe { libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        self.on = on;
        Ok(())
    }
}
