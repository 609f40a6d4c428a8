//! What the soak reads from the kernel about a process and about the machine's shared objects:
//! open descriptors (`/proc/<pid>/fd`), resident memory of its own (`VmRSS` less `RssShmem` of
//! `/proc/<pid>/status`: anonymous and file pages; shared memory is left out, since the soak's
//! own ledger, a record per request, is shared memory every process touches and grows by
//! design, and the group's object has a fixed size),
//! the `/dev/shm` objects it maps (`/proc/<pid>/maps`), its kernel wake-ups (voluntary context
//! switches of every thread, `/proc/<pid>/task/*/status`), and the `/dev/shm` objects that
//! exist. `None` when the process is gone.

use std::collections::BTreeSet;

use serde::Serialize;

/// Open descriptors of `pid`.
pub fn descriptors(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

/// Resident memory of `pid` besides shared memory (`VmRSS` − `RssShmem`), in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = format!("/proc/{pid}/status");
    let shared = status_field(&status, "RssShmem:")?;
    Some(status_field(&status, "VmRSS:")?.saturating_sub(shared))
}

/// Distinct `/dev/shm` objects `pid` has mapped.
pub fn shm_mapped(pid: u32) -> Option<u64> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let objects: BTreeSet<&str> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|path| path.starts_with("/dev/shm/"))
        .collect();
    Some(objects.len() as u64)
}

/// Voluntary context switches of every thread of `pid` so far: its kernel wake-ups.
pub fn wakeups(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0;
    for task in tasks.flatten() {
        let status = task.path().join("status");
        total += status_field(&status.to_string_lossy(), "voluntary_ctxt_switches:")?;
    }
    Some(total)
}

fn status_field(path: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(path).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// A process's figures at one moment.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct ProcessFigures {
    pub descriptors: u64,
    pub rss_kib: u64,
    pub shm_mapped: u64,
}

impl ProcessFigures {
    pub fn of(pid: u32) -> Option<ProcessFigures> {
        Some(ProcessFigures {
            descriptors: descriptors(pid)?,
            rss_kib: rss_kib(pid)?,
            shm_mapped: shm_mapped(pid)?,
        })
    }
}

/// Min, mean and max of one figure over several processes.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Spread {
    pub processes: usize,
    pub min: u64,
    pub mean: f64,
    pub max: u64,
}

impl Spread {
    pub fn of(values: impl IntoIterator<Item = u64>) -> Spread {
        let values: Vec<u64> = values.into_iter().collect();
        if values.is_empty() {
            return Spread::default();
        }
        Spread {
            processes: values.len(),
            min: *values.iter().min().expect("not empty"),
            mean: values.iter().sum::<u64>() as f64 / values.len() as f64,
            max: *values.iter().max().expect("not empty"),
        }
    }
}

/// The servers' figures (each a spread over the live servers) and the supervisor's.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Census {
    pub server_descriptors: Spread,
    pub server_rss_kib: Spread,
    pub server_shm_mapped: Spread,
    pub supervisor: ProcessFigures,
    /// The queue descriptors the supervisor held then (one per queue not yet unlinked).
    pub supervisor_queues: u64,
    pub shm: ShmObjects,
}

impl Census {
    /// The figures of `servers` and of this process, which holds `queues` queue descriptors.
    pub fn take(servers: &[u32], queues: usize, own_prefix: &str) -> Census {
        let figures: Vec<ProcessFigures> = servers
            .iter()
            .filter_map(|&p| ProcessFigures::of(p))
            .collect();
        Census {
            server_descriptors: Spread::of(figures.iter().map(|f| f.descriptors)),
            server_rss_kib: Spread::of(figures.iter().map(|f| f.rss_kib)),
            server_shm_mapped: Spread::of(figures.iter().map(|f| f.shm_mapped)),
            supervisor: ProcessFigures::of(std::process::id()).unwrap_or_default(),
            supervisor_queues: queues as u64,
            shm: ShmObjects::count(own_prefix),
        }
    }

    /// The supervisor's descriptors besides its queues' (which come and go with the churn).
    pub fn supervisor_descriptors(&self) -> u64 {
        self.supervisor
            .descriptors
            .saturating_sub(self.supervisor_queues)
    }
}

/// Objects in `/dev/shm`: this run's, every herdless group's (other programs' included), all.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct ShmObjects {
    pub this_run: u64,
    pub herdless: u64,
    pub all: u64,
}

impl ShmObjects {
    /// `own_prefix`: the start of this run's object names (`herdless.lab.soak.<pid>.`).
    pub fn count(own_prefix: &str) -> ShmObjects {
        let names: Vec<String> = std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        ShmObjects {
            this_run: names.iter().filter(|n| n.starts_with(own_prefix)).count() as u64,
            herdless: names.iter().filter(|n| n.starts_with("herdless.")).count() as u64,
            all: names.len() as u64,
        }
    }
}
