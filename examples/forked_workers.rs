//! Workers share one TCP listener; each connection wakes one worker, in turn. Threads first,
//! then (on Unix) forked worker processes, each stopped cleanly: the threads by a flag and
//! their notifiers, the processes by the hang-up of a pipe they all watch.
//! `cargo run --example forked_workers`
use std::io::{self, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use herdless::{Events, Group, Interest, Waiter};

const LISTENER: usize = 0; // the keys a worker registers its descriptors under
const STOP: usize = 1;
const WORKERS: usize = 4;

/// One worker: wait, accept one connection, say it was consumed, answer.
fn serve(waiter: &mut Waiter, listener: &TcpListener, stop: &AtomicBool) -> io::Result<u64> {
    let (mut events, mut served) = (Events::default(), 0);
    loop {
        waiter.wait(&mut events, None)?; // also ended by a Notifier, or the stop pipe
                                         // The stop pipe's write end closed: its hang-up, which stays until the pipe is gone.
        if stop.load(SeqCst) || events.iter().any(|e| e.key == STOP && e.is_read_closed()) {
            return Ok(served);
        }
        for event in events.iter().filter(|e| e.key == LISTENER) {
            let accepted = listener.accept();
            // Right after the accept, before the work, also when it found nothing: this
            // worker goes to the back of the line and the group watches the listener again.
            waiter.consumed(event.key)?;
            match accepted {
                Ok((mut conn, _)) => {
                    conn.write_all(b"hello\n")?; // the work: the listener is not held meanwhile
                    served += 1;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {} // an empty wake-up
                Err(e) => return Err(e),
            }
        }
    }
}

fn clients(listener: &TcpListener, n: usize) -> io::Result<()> {
    for _ in 0..n {
        TcpStream::connect(listener.local_addr()?)?.read_to_end(&mut Vec::new())?;
    }
    Ok(())
}

fn with_threads(listener: &TcpListener) -> io::Result<()> {
    // Before the workers start; 64 members unless max_members says otherwise.
    let group = Group::builder().max_members(WORKERS).build()?;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let mut workers = Vec::new();
        for _ in 0..WORKERS {
            let mut waiter = group.join()?; // one Waiter per worker
            waiter.add(listener, LISTENER, Interest::SHARED)?;
            let notifier = waiter.notifier(); // wakes this waiter from another thread
            let stop = &stop;
            workers.push((
                notifier,
                s.spawn(move || serve(&mut waiter, listener, stop)),
            ));
        }
        clients(listener, 40)?;
        stop.store(true, SeqCst); // clean shutdown: set the flag, then wake every worker
        for (notifier, _) in &workers {
            notifier.notify()?; // a worker that ended already (on an error): nobody to wake
        }
        let served: Vec<u64> = (workers.into_iter())
            .map(|(_, worker)| worker.join().expect("worker panicked"))
            .collect::<io::Result<_>>()?;
        println!("threads served {served:?}"); // [10, 10, 10, 10] when all 4 were waiting
        Ok(())
    })
}

#[cfg(unix)]
fn with_processes(listener: &TcpListener) -> io::Result<()> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let group = Group::builder().max_members(WORKERS).build()?; // before fork
    let mut ends = [0; 2];
    // SAFETY: pipe fills two fresh descriptors, owned at once. (libc = "0.2" in Cargo.toml)
    if unsafe { libc::pipe(ends.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors that nothing else owns.
    let [stop_r, stop_w] = ends.map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
    let mut pids = Vec::new();
    for _ in 0..WORKERS {
        // SAFETY: no other thread runs now; the child leaves by _exit.
        match unsafe { libc::fork() } {
            -1 => return Err(io::Error::last_os_error()),
            0 => {
                drop(stop_w); // only the parent holds the write end
                let served = (|| -> io::Result<u64> {
                    let mut waiter = group.join()?; // in the child, after fork
                    waiter.add(listener, LISTENER, Interest::SHARED)?;
                    waiter.add(&stop_r, STOP, Interest::READABLE)?; // not exclusive: wakes all
                    serve(&mut waiter, listener, &AtomicBool::new(false))
                })();
                println!("process {} served {served:?}", std::process::id());
                // SAFETY: leaves the child without running the parent's destructors.
                unsafe { libc::_exit(served.is_err() as i32) }
            }
            pid => pids.push(pid),
        }
    }
    clients(listener, 40)?;
    drop(stop_w); // clean shutdown: the hang-up wakes every worker, on both backends
    for pid in pids {
        // SAFETY: reaps our own child.
        unsafe { libc::waitpid(pid, &mut 0, 0) };
    }
    Ok(())
}

fn main() -> io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?; // a wake-up may find nothing: never block in accept
    with_threads(&listener)?;
    #[cfg(unix)]
    with_processes(&listener)?;
    Ok(())
}
