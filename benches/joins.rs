//! What a join costs in a large group: a member joins and leaves a group of 64 slots and one of
//! 16 384, each half full (its other members joined in forked processes of 512 members each,
//! so that no process runs out of descriptors), both backends. A join takes the group's next
//! fresh slot (or the one given up last) without looking at the others, so the two should cost
//! the same; before, a join looked for dead members in every slot first (one `fcntl` each: a
//! 4 096-member group took 93 s to fill). A program that prints figures:
//! `cargo bench --bench joins` (docs/lab.md).

#[cfg(target_os = "linux")]
fn main() {
    use herdless::Backend;
    let backends = [Backend::Native, Backend::Emulated];
    println!("join + leave of one member, in a group half full (median of 5 runs of 200)");
    println!("| backend | 64 slots | 16 384 slots | ratio |");
    println!("|---------|----------|--------------|-------|");
    for backend in backends {
        if herdless::Group::builder().backend(backend).build().is_err() {
            println!("SKIPPED: {backend:?}: not available here");
            continue;
        }
        let small = linux::join_cost(backend, 64);
        let large = linux::join_cost(backend, 16_384);
        println!(
            "| {backend:?} | {:.1} µs | {:.1} µs | {:.2} |",
            small.as_secs_f64() * 1e6,
            large.as_secs_f64() * 1e6,
            large.as_secs_f64() / small.as_secs_f64()
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("SKIPPED: the join benchmark forks members and runs on Linux only");
}

#[cfg(target_os = "linux")]
mod linux {
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    use herdless::{Backend, Group};
    use herdless_fixtures::Blocking;

    /// Members per forked process that fills the group (4 descriptors each at most).
    const PER_PROCESS: usize = 512;

    /// The median time of one join and leave in a group of `slots`, half of them taken by
    /// members of forked processes.
    pub fn join_cost(backend: Backend, slots: usize) -> Duration {
        let group = Group::builder()
            .backend(backend)
            .max_members(slots)
            .build()
            .expect("a group");
        let (ready_rx, ready_tx) =
            herdless_fixtures::pipe(Blocking::Both).expect("a pipe for the fillers' word");
        let (stop_rx, stop_tx) =
            herdless_fixtures::pipe(Blocking::Both).expect("a pipe to stop the fillers");
        let half = slots / 2;
        let mut fillers = Vec::new();
        let mut left = half;
        while left > 0 {
            let n = left.min(PER_PROCESS);
            left -= n;
            // SAFETY: the child joins, says so, blocks until the parent closes the stop pipe,
            // and leaves with _exit (no destructor of the parent's state).
            match unsafe { libc::fork() } {
                -1 => panic!("fork: {}", std::io::Error::last_os_error()),
                0 => {
                    // The parent's ends: the stop pipe's hang-up must reach this child.
                    // SAFETY: closes the child's copies of descriptors it never uses again (it
                    // leaves with _exit, dropping nothing).
                    unsafe {
                        libc::close(stop_tx.as_raw_fd());
                        libc::close(ready_rx.as_raw_fd());
                    }
                    let members: Vec<_> = (0..n).map(|_| group.join().expect("join")).collect();
                    let _ = herdless_fixtures::write_all(ready_tx.as_raw_fd(), &[1]);
                    let mut byte = [0u8; 1];
                    let _ = herdless_fixtures::read_exact(stop_rx.as_raw_fd(), &mut byte);
                    drop(members);
                    // SAFETY: see above.
                    unsafe { libc::_exit(0) }
                }
                pid => fillers.push(pid),
            }
        }
        for _ in &fillers {
            let mut byte = [0u8; 1];
            herdless_fixtures::read_exact(ready_rx.as_raw_fd(), &mut byte).expect("a filler");
        }
        let mut runs: Vec<Duration> = (0..5)
            .map(|_| {
                let start = Instant::now();
                for _ in 0..200 {
                    drop(group.join().expect("join"));
                }
                start.elapsed() / 200
            })
            .collect();
        drop(stop_tx);
        for pid in fillers {
            let mut status = 0;
            // SAFETY: reaps our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        }
        runs.sort();
        runs[2]
    }
}
