//! Quick start: four worker threads share one TCP listener; each connection wakes one worker,
//! and the workers take the connections in turn. `cargo run --example quick_start`
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};

use herdless::{Events, Group, Interest};

fn main() -> std::io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?; // a wake-up may find nothing: never block in accept
    let group = Group::builder().max_members(4).build()?; // before the workers start
    std::thread::scope(|s| {
        let mut stops = Vec::new();
        for worker in 0..4 {
            let mut waiter = group.join()?; // one Waiter per worker
            waiter.add(&listener, 0, Interest::READABLE.exclusive())?;
            stops.push(waiter.notifier()); // ends this waiter's wait from another thread
            let listener = &listener;
            s.spawn(move || -> std::io::Result<()> {
                let mut events = Events::default();
                while waiter.wait(&mut events, None)? > 0 {
                    let accepted = listener.accept();
                    waiter.consumed(0)?; // right after the accept: the next worker is in line
                    match accepted {
                        Ok((mut conn, _)) => writeln!(conn, "served by worker {worker}")?,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {} // an empty wake-up
                        Err(e) => return Err(e),
                    }
                }
                Ok(()) // 0 events: its notifier woke it, stop
            });
        }
        for _ in 0..8 {
            let mut reply = String::new();
            TcpStream::connect(listener.local_addr()?)?.read_to_string(&mut reply)?;
            print!("{reply}"); // in turn, when every worker is back in wait in time
        }
        stops.iter().try_for_each(|stop| Ok(stop.notify()?))
    })
}
