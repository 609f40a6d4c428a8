//! The soak's client: one thread of the supervisor that sends `--rate` requests per second
//! while the run is loaded, in turn to each active queue, on a fixed schedule (a stall of the
//! machine is not made up for with a burst). Each request takes the ledger's next id and is
//! stamped there (queue, time) just before its non-blocking `mq_send`; a full queue refuses it
//! (marked refused in the ledger, not sent again). The supervisor switches the traffic on and
//! off and changes the active queues under the same lock the client sends under, so once a
//! queue is retired nothing more is sent to it and its descriptor is never used after it
//! closed.

use std::os::fd::RawFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::ledger::{now_ns, Ledger, REFUSED};
use super::queues;

/// What the client sends to, as the supervisor sets it.
#[derive(Default)]
struct Board {
    on: bool,
    ended: bool,
    /// Active queues: number and the supervisor's descriptor.
    queues: Vec<(u64, RawFd)>,
    turn: usize,
    error: Option<String>,
}

#[derive(Default)]
pub struct Traffic {
    board: Mutex<Board>,
}

impl Traffic {
    fn board(&self) -> std::sync::MutexGuard<'_, Board> {
        self.board.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_on(&self, on: bool) {
        self.board().on = on;
    }

    /// Ends the client thread.
    pub fn end(&self) {
        let mut board = self.board();
        board.on = false;
        board.ended = true;
    }

    pub fn activate(&self, queue: u64, fd: RawFd) {
        self.board().queues.push((queue, fd));
    }

    /// Stops sending to `queue`; after this returns nothing more is sent to it.
    pub fn retire(&self, queue: u64) {
        self.board().queues.retain(|&(q, _)| q != queue);
    }

    pub fn active(&self) -> Vec<u64> {
        self.board().queues.iter().map(|&(q, _)| q).collect()
    }

    /// The error that stopped the client, if one did.
    pub fn error(&self) -> Option<String> {
        self.board().error.clone()
    }

    /// The client thread's body: until `end`.
    pub fn run(&self, ledger: &Ledger, rate: u32, deadline: Duration) {
        let period = Duration::from_secs_f64(1.0 / f64::from(rate));
        let mut next = Instant::now();
        loop {
            let now = Instant::now();
            if now < next {
                std::thread::sleep((next - now).min(Duration::from_millis(10)));
                continue;
            }
            next += period;
            if now > next + Duration::from_millis(100) {
                next = now; // a stall: go on from now, no burst
            }
            let mut board = self.board();
            if board.ended {
                return;
            }
            if !board.on || board.queues.is_empty() || board.error.is_some() {
                continue;
            }
            let (queue, fd) = board.queues[board.turn % board.queues.len()];
            board.turn = board.turn.wrapping_add(1);
            let Some(id) = ledger.take_id() else {
                board.error = Some(format!(
                    "the ledger's {} records are used",
                    ledger.records()
                ));
                continue;
            };
            let record = ledger.record(id as u64).expect("an id the table has");
            let sent = now_ns();
            record.stamp(queue, sent);
            match queues::send(fd, id as u64, sent + deadline.as_nanos() as u64) {
                Ok(true) => {}
                Ok(false) => record.flag(REFUSED),
                Err(e) => {
                    record.flag(REFUSED);
                    board.error = Some(format!("send to queue {queue}: {e}"));
                }
            }
        }
    }
}
