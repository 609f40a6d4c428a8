//! What keeps a soak bounded and tidy however it ends. SIGINT and SIGTERM (Ctrl-C) set a flag
//! the supervisor's loop looks at every few milliseconds: it then ends the run as it would at
//! its end (servers stopped, queues unlinked, the group removed) and reports it interrupted. A
//! watchdog thread per backend run sets the same flag once the run overruns its bound, and if
//! the supervisor still has not finished 30 s later, removes every name the run made (kept in a
//! list here as they are made) and exits the process with status 2; the servers die with it
//! (`PR_SET_PDEATHSIG`).

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

static STOP: AtomicBool = AtomicBool::new(false);
static OVERRAN: AtomicBool = AtomicBool::new(false);

/// The names this run made and has not removed yet: (is a group, name).
static NAMES: Mutex<Vec<(bool, String)>> = Mutex::new(Vec::new());

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, SeqCst);
}

/// Catches SIGINT and SIGTERM from now on.
pub fn catch_stop_signals() -> nix::Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_stop),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { sigaction(signal, &action) }?;
    }
    Ok(())
}

/// Whether the run must end now: Ctrl-C, SIGTERM or the watchdog.
pub fn must_stop() -> bool {
    STOP.load(SeqCst)
}

/// Why it must, for the report.
pub fn why() -> &'static str {
    match OVERRAN.load(SeqCst) {
        true => "the run overran its time bound",
        false => "interrupted (SIGINT or SIGTERM)",
    }
}

pub fn remember(group: bool, name: &str) {
    names().push((group, name.to_owned()));
}

pub fn forget(name: &str) {
    names().retain(|(_, n)| n != name);
}

fn names() -> std::sync::MutexGuard<'static, Vec<(bool, String)>> {
    NAMES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Ends the run if it takes longer than `bound`.
pub struct Watchdog {
    cancel: Sender<()>,
    thread: JoinHandle<()>,
}

impl Watchdog {
    pub fn start(bound: Duration) -> Watchdog {
        let (cancel, cancelled) = channel::<()>();
        let thread = std::thread::spawn(move || {
            if cancelled.recv_timeout(bound) != Err(RecvTimeoutError::Timeout) {
                return;
            }
            eprintln!(
                "herd soak: the run overran {:.0} s; ending it",
                bound.as_secs_f64()
            );
            OVERRAN.store(true, SeqCst);
            STOP.store(true, SeqCst);
            if cancelled.recv_timeout(Duration::from_secs(30)) != Err(RecvTimeoutError::Timeout) {
                return;
            }
            eprintln!("herd soak: the supervisor is stuck; removing its names and exiting");
            for (group, name) in names().iter() {
                if *group {
                    let _ = herdless::Group::remove(name);
                } else if let Ok(name) = std::ffi::CString::new(name.as_str()) {
                    // SAFETY: a valid NUL-terminated name.
                    unsafe { libc::mq_unlink(name.as_ptr()) };
                }
            }
            std::process::exit(2);
        });
        Watchdog { cancel, thread }
    }

    pub fn stop(self) {
        let _ = self.cancel.send(());
        let _ = self.thread.join();
    }
}
