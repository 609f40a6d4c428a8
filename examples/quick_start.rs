//! Quick start: four worker threads share one TCP listener, each connection wakes one, in turn.
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use herdless::{Events, Group, Interest};

fn main() -> std::io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?; // a wake-up may find nothing: never block in accept
    let group = Group::new()?; // before the workers start
    let (listener, stopping) = (&listener, &AtomicBool::new(false));
    std::thread::scope(|s| {
        for worker in 0..4 {
            let mut waiter = group.join()?; // one Waiter per worker
            waiter.add(listener, 0, Interest::SHARED)?; // borrowed; 0: this registration's key
            s.spawn(move || -> std::io::Result<()> {
                let mut events = Events::default();
                loop {
                    waiter.wait(&mut events, None)?;
                    let accepted = listener.accept();
                    waiter.consumed(0)?; // right after the accept: the next worker is in line
                    match accepted {
                        Ok(_) if stopping.load(SeqCst) => return Ok(()), // this one's stop
                        Ok((mut conn, _)) => writeln!(conn, "served by worker {worker}")?,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {} // an empty wake-up
                        Err(e) => return Err(e),
                    }
                }
            });
        }
        for _ in 0..8 {
            let mut reply = String::new();
            TcpStream::connect(listener.local_addr()?)?.read_to_string(&mut reply)?;
            print!("{reply}"); // in turn, when every worker is back in wait in time
        }
        stopping.store(true, SeqCst); // then one connection per worker, each stopping one
        (0..4).try_for_each(|_| TcpStream::connect(listener.local_addr()?).map(drop))
    })
}
