//! Micro-benchmarks of herdless's hot paths, with divan, per backend (native where the system
//! has one, emulated everywhere):
//!
//! - `wait_read_consumed`: one waiter, `rotate_every(0)`: write a message, `wait` (ready at
//!   once), read it, `consumed`. The cost herdless adds to one event, without a context switch.
//! - `rotation`: the same with `rotate_every(1)`. With one waiter there is nobody to hand a
//!   turn to, so no rotation happens (native: no epoll DEL + ADD; emulated: the token's release
//!   and a pass that finds nobody): its difference from the first is what strict turns cost
//!   a lone waiter.
//! - `adaptive`: the same under the default, `Rotation::Adaptive`.
//! - `hand_off`: two waiter threads share one exclusive round-robin pipe, `rotate_every(1)`;
//!   the bench writes a message and waits for the ack. Every message wakes the other thread:
//!   the full wake-up, hand-off and rotation path.
//! - `hand_off_adaptive`: the same under `Rotation::Adaptive`. A ping-pong has no backlog (each
//!   message is read before the next is written) and its events never overlap (no stream), so
//!   both backends keep strict turns: the difference from `hand_off` is the rule's own cost.
//!
//! Runs are short by default (300 ms per benchmark); `cargo bench --bench hot_paths --
//! --max-time 5` measures longer. The benchmarks use pipes, so they exist on Unix only.

use std::time::Duration;

fn main() {
    divan::Divan::default()
        .max_time(Duration::from_millis(300))
        .config_with_args()
        .main();
}

#[cfg(unix)]
mod unix {
    use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
    use std::time::Duration;

    use divan::Bencher;
    use herdless::{Backend, Events, Group, Interest, Rotation, Waiter};
    use herdless_fixtures::Blocking;

    /// Every backend this system has.
    fn backends() -> Vec<Backend> {
        let mut all = vec![Backend::Emulated];
        if Group::builder().backend(Backend::Native).build().is_ok() {
            all.insert(0, Backend::Native);
        }
        all
    }

    const TIMEOUT: Option<Duration> = Some(Duration::from_secs(5));
    const ROUND_ROBIN: Interest = Interest::READABLE.exclusive().one_event_round_robin();

    #[divan::bench(args = backends())]
    fn wait_read_consumed(bencher: Bencher, backend: Backend) {
        one_waiter(bencher, backend, Rotation::Every(0));
    }

    #[divan::bench(args = backends())]
    fn rotation(bencher: Bencher, backend: Backend) {
        one_waiter(bencher, backend, Rotation::Every(1));
    }

    #[divan::bench(args = backends())]
    fn adaptive(bencher: Bencher, backend: Backend) {
        one_waiter(bencher, backend, Rotation::Adaptive);
    }

    /// One waiter in the bench thread: write, wait, read, consumed.
    fn one_waiter(bencher: Bencher, backend: Backend, rotation: Rotation) {
        let group = Group::builder()
            .backend(backend)
            .rotation(rotation)
            .build()
            .expect("group");
        let (rx, tx) = pipe(true);
        let mut waiter = group.join().expect("join");
        waiter.add(&rx, 0, ROUND_ROBIN).expect("add");
        let mut events = Events::with_capacity(1);
        bencher.bench_local(|| {
            write_byte(tx.as_raw_fd());
            let n = waiter.wait(&mut events, TIMEOUT).expect("wait");
            assert_eq!(n, 1, "the message was not delivered");
            read_byte(rx.as_raw_fd());
            waiter.consumed(0).expect("consumed");
        });
        waiter.delete(&rx).expect("delete");
    }

    #[divan::bench(args = backends())]
    fn hand_off(bencher: Bencher, backend: Backend) {
        two_waiters(bencher, backend, Rotation::Every(1));
    }

    #[divan::bench(args = backends())]
    fn hand_off_adaptive(bencher: Bencher, backend: Backend) {
        two_waiters(bencher, backend, Rotation::Adaptive);
    }

    /// Two waiter threads; the bench thread writes a message and waits for the ack.
    fn two_waiters(bencher: Bencher, backend: Backend, rotation: Rotation) {
        let group = Group::builder()
            .backend(backend)
            .rotation(rotation)
            .max_members(2)
            .build()
            .expect("group");
        let (rx, tx) = pipe(true);
        let (ack_rx, ack_tx) = pipe(false);
        let members: Vec<_> = (0..2)
            .map(|_| {
                let mut waiter = group.join().expect("join");
                waiter.add(&rx, 0, ROUND_ROBIN).expect("add");
                let (rx, ack) = (rx.as_raw_fd(), ack_tx.as_raw_fd());
                std::thread::spawn(move || member(waiter, rx, ack))
            })
            .collect();
        bencher.bench_local(|| {
            write_byte(tx.as_raw_fd());
            read_byte(ack_rx.as_raw_fd());
        });
        drop(tx); // EOF: both members stop
        for m in members {
            m.join().expect("member thread");
        }
    }

    /// A member: wait, read one message, consumed, ack; until EOF.
    fn member(mut waiter: Waiter, rx: RawFd, ack: RawFd) {
        let mut events = Events::with_capacity(1);
        loop {
            waiter.wait(&mut events, None).expect("wait");
            if events.is_empty() {
                continue;
            }
            let mut byte = [0u8; 1];
            // SAFETY: reads one byte into a live buffer from the non-blocking shared pipe.
            let n = unsafe { libc::read(rx, byte.as_mut_ptr().cast(), 1) };
            if n == 0 {
                break; // EOF
            }
            waiter.consumed(0).expect("consumed");
            if n == 1 {
                write_byte(ack);
            }
        }
        // SAFETY: the shared pipe's read end is open until the bench joins this thread.
        let _ = waiter.delete(&unsafe { BorrowedFd::borrow_raw(rx) });
    }

    /// A pipe (read end, write end); the read end non-blocking if asked.
    fn pipe(nonblocking_read: bool) -> (OwnedFd, OwnedFd) {
        let blocking = if nonblocking_read {
            Blocking::WriteEnd
        } else {
            Blocking::Both
        };
        herdless_fixtures::pipe(blocking).expect("pipe")
    }

    fn write_byte(fd: RawFd) {
        // SAFETY: writes one byte from a live buffer.
        let n = unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) };
        assert_eq!(n, 1, "write");
    }

    fn read_byte(fd: RawFd) {
        let mut byte = [0u8; 1];
        // SAFETY: reads one byte into a live buffer.
        let n = unsafe { libc::read(fd, byte.as_mut_ptr().cast(), 1) };
        assert_eq!(n, 1, "read");
    }
}
