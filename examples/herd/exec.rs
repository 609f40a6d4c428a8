//! Exec'd workers (`--spawn exec`): the lab re-executes itself (`std::env::current_exe()`) for
//! every worker, as a supervisor starts server executables. What a forked worker inherits for
//! free has to be handed over explicitly:
//!
//! - the group: a **named** group, one unique name per run (`RunGroup`, removed at the end of
//!   the run, also on an error or a panic), that the worker opens with `Group::open`;
//! - descriptors (the shared listener or pipe, the control, acknowledgement and report pipes):
//!   inherited, their close-on-exec flag cleared in the child between fork and exec, their
//!   numbers in the worker's spec; a POSIX message queue is opened by name by the worker;
//! - shared counters: a `memfd` the worker maps (`Counters`), where a forked worker uses an
//!   anonymous shared mapping.
//!
//! The worker's spec travels as JSON in one environment variable ([`WORKER_ENV`]); `main` looks
//! for it before parsing the command line and runs the worker instead.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use herdless::Group;
use herdless_fixtures::SharedCounters;
use serde::{Deserialize, Serialize};

/// The environment variable that makes the lab binary a worker: its spec, as JSON.
pub const WORKER_ENV: &str = "HERDLESS_LAB_WORKER";

/// How the workers of a process topology are started.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Spawn {
    /// `fork` only: the child runs the lab's code it inherited (anonymous group, anonymous
    /// shared counters).
    Fork,
    /// `fork` + `exec` of the lab itself: the worker opens a named group and inherits only the
    /// descriptors it is given.
    Exec,
}

/// What an exec'd worker runs: one variant per experiment.
#[derive(Serialize, Deserialize)]
#[serde(tag = "experiment", rename_all = "kebab-case")]
pub enum Job {
    Accept(crate::accept::ExecSpec),
    Herd(crate::herd_bench::ExecSpec),
    Rpc(crate::rpc::ServerSpec),
    Soak(crate::soak::ServerSpec),
}

/// If this process is an exec'd worker, runs it and returns its exit status.
pub fn worker_main() -> Option<i32> {
    let spec = std::env::var(WORKER_ENV).ok()?;
    let job: Job = match serde_json::from_str(&spec) {
        Ok(job) => job,
        Err(e) => {
            eprintln!("herd worker: bad {WORKER_ENV}: {e}");
            return Some(2);
        }
    };
    Some(match job {
        Job::Accept(spec) => crate::accept::exec_worker(spec),
        Job::Herd(spec) => crate::herd_bench::exec_worker(spec),
        Job::Rpc(spec) => crate::rpc::exec_server(spec),
        Job::Soak(spec) => crate::soak::exec_server(spec),
    })
}

/// Starts the lab binary as a worker running `job`, with `inherit` left open across exec (every
/// other descriptor of the lab is close-on-exec). stdin is closed; stdout and stderr are the
/// lab's.
pub fn spawn(job: &Job, inherit: &[RawFd]) -> io::Result<Child> {
    let spec = serde_json::to_string(job).map_err(io::Error::other)?;
    let mut command = Command::new(std::env::current_exe()?);
    command.env(WORKER_ENV, spec).stdin(Stdio::null());
    let fds = inherit.to_vec();
    // SAFETY: the hook runs in the child between fork and exec and calls fcntl only, which is
    // async-signal-safe; it allocates nothing (the list was made before the fork).
    unsafe {
        command.pre_exec(move || {
            for &fd in &fds {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    command.spawn()
}

/// Takes a descriptor this exec'd worker inherited, by number.
///
/// # Safety
/// `fd` must be a descriptor the parent left open for this process alone, taken once.
pub unsafe fn inherited(fd: RawFd) -> OwnedFd {
    // Close-on-exec again: nothing this worker starts should hold it.
    // SAFETY: fcntl on a descriptor of this process.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    // SAFETY: the caller's promise: ours alone, taken once.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// A group name of this run's own: the lab, its pid, a tag and a sequence number.
pub fn unique_name(tag: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "lab.{tag}.{}.{}",
        std::process::id(),
        NEXT.fetch_add(1, SeqCst)
    )
}

/// A named group made for one run; its name is removed when the run ends, however it ends.
pub struct RunGroup {
    pub group: Group,
}

impl RunGroup {
    /// Builds the named group from `builder` (which must not be named yet) under a fresh name.
    pub fn build(tag: &str, builder: herdless::GroupBuilder) -> herdless::Result<RunGroup> {
        let name = unique_name(tag);
        let group = builder.name(&name).build()?;
        Ok(RunGroup { group })
    }

    pub fn name(&self) -> &str {
        self.group.name().expect("a named group")
    }
}

impl Drop for RunGroup {
    fn drop(&mut self) {
        // By force: a run that failed half-way may leave workers behind.
        let _ = Group::remove_forced(self.name());
    }
}

/// Counters shared with forked or exec'd workers: an anonymous shared mapping, or a memfd that
/// exec'd workers map too.
pub struct Counters {
    pub counters: SharedCounters,
    /// The memfd behind the counters, for `--spawn exec`.
    pub file: Option<OwnedFd>,
}

impl Counters {
    pub fn new(len: usize, spawn: Spawn) -> io::Result<Counters> {
        if spawn == Spawn::Fork {
            return Ok(Counters {
                counters: SharedCounters::new(len)?,
                file: None,
            });
        }
        let file = memfd(len)?;
        Ok(Counters {
            counters: SharedCounters::in_file(file.as_fd(), len)?,
            file: Some(file),
        })
    }

    pub fn fd(&self) -> Option<RawFd> {
        self.file.as_ref().map(AsRawFd::as_raw_fd)
    }
}

/// A zero-filled memfd of `len` counters, close-on-exec.
pub fn memfd(len: usize) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated name and flags; returns a fresh descriptor or -1.
    let fd = unsafe { libc::memfd_create(c"herd-counters".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    let file = unsafe { OwnedFd::from_raw_fd(fd) };
    let bytes = (len.max(1) * std::mem::size_of::<u64>()) as libc::off_t;
    // SAFETY: ftruncate on our own descriptor; new bytes read as zero.
    if unsafe { libc::ftruncate(file.as_raw_fd(), bytes) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// In an exec'd worker: maps the counters file it inherited (and closes the descriptor).
///
/// # Safety
/// As [`inherited`].
pub unsafe fn inherited_counters(fd: RawFd, len: usize) -> io::Result<SharedCounters> {
    // SAFETY: the caller's promise.
    let file = unsafe { inherited(fd) };
    SharedCounters::in_file(file.as_fd(), len)
}

/// Voluntary context switches and CPU time (user + system, µs) of this whole process so far.
pub fn self_usage() -> (u64, u64) {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid `who` and a live out-parameter.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    (u.ru_nvcsw as u64, cpu_us(&u))
}

/// User plus system CPU time of a resource-usage record, in µs.
pub fn cpu_us(u: &libc::rusage) -> u64 {
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    tv(u.ru_utime) + tv(u.ru_stime)
}
