//! Async accept without the herd: [`Acceptor`], a herdless waiter in its own thread that hands
//! accepted connections to a Tokio runtime (feature `tokio`).
//!
//! # Why a thread, and not the runtime's own epoll
//!
//! The obvious integration registers an exclusive epoll (or the listener with
//! `EPOLLEXCLUSIVE`) inside the runtime's epoll, through `AsyncFd`. It herds. In Linux's
//! `fs/eventpoll.c`, `ep_poll_callback` is the function the listener's wait queue calls for
//! every epoll watching it. It queues the item on the epoll's ready list, and only **if a thread
//! is asleep in `epoll_wait` on that very epoll** (`waitqueue_active(&ep->wq)`) and the item is
//! `EPOLLEXCLUSIVE` does it set `ewake = 1`; its return value is `ewake`, and `__wake_up_common`
//! stops after the first exclusive entry that returns non-zero. A nested epoll has nobody
//! asleep in it (the runtime thread sleeps in the *outer* epoll, reached through
//! `ep->poll_wait` and `ep_poll_safewake`), so its callback returns 0, the kernel goes on to
//! the next exclusive entry, and every worker's runtime is woken for every connection: the
//! herd, with the flag set. `tests/tokio_acceptor.rs` measures it with 4 forked workers: the
//! nesting costs about one kernel wake-up per connection *and worker* (3.9–4.0 per connection),
//! the acceptor's threads one per connection natively (two emulated: the token's hand-off).
//!
//! So the [`Acceptor`] keeps the exclusive wait where the kernel honours it: one thread per
//! acceptor sleeps in its herdless [`Waiter`] (native or emulated), accepts one connection per
//! turn from the non-blocking listener, calls [`Waiter::consumed`] at once (its turn ends, the
//! next member of the group is next), and sends the `std` stream through a bounded
//! `tokio::sync::mpsc` channel. The thread waits for room in the channel *before* it waits on
//! the listener, so a worker whose runtime does not keep up stops taking connections and leaves
//! them to the others. The runtime never polls the exclusive descriptor itself.

use std::future::Future;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::JoinHandle;

use ::tokio::net::TcpStream;
use ::tokio::sync::mpsc;

use crate::{Events, Group, Interest, Notifier, Waiter};

/// What the acceptor thread hands over: a connection, or the error that stopped one.
type Handoff = io::Result<(std::net::TcpStream, SocketAddr)>;

/// The key of the listener in the acceptor thread's waiter.
const LISTENER: usize = 0;

/// The default number of accepted connections that may wait in the channel for the runtime.
pub const DEFAULT_BACKLOG: usize = 16;

/// Counters of an acceptor thread, as [`Acceptor::stats`] reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AcceptorStats {
    /// Connections accepted and handed to the runtime.
    pub accepted: u64,
    /// Returns of the thread's wait with the listener's event.
    pub wakeups: u64,
    /// Such returns whose accept found nothing (another process was quicker).
    pub empty_wakeups: u64,
    /// Voluntary context switches of the acceptor thread since it started
    /// (`getrusage(RUSAGE_THREAD)`, read by the thread itself): every kernel-level wake-up of
    /// the thread, seen by user space or not. `None` where the system has no per-thread
    /// counter (anything but Linux and Android).
    pub kernel_wakeups: Option<u64>,
}

/// What the acceptor thread and its handle share.
#[derive(Default)]
struct Shared {
    /// Drop: stop at once.
    stop: AtomicBool,
    /// [`Acceptor::close`]: stop taking turns, hand over what it was given, then end.
    closing: AtomicBool,
    accepted: AtomicU64,
    wakeups: AtomicU64,
    empty_wakeups: AtomicU64,
    /// Voluntary switches of the thread, plus one (0: not known).
    kernel_wakeups: AtomicU64,
}

/// Accepts connections of a listener shared with other processes or threads of a [`Group`],
/// one per turn, without the herd, and hands them to the Tokio runtime it is polled from.
///
/// One thread per acceptor waits in a herdless [`Waiter`] (see the module documentation for
/// why the runtime must not poll the exclusive descriptor itself). Build the group before
/// forking the workers; in each worker, make one acceptor from the shared listener and accept
/// from any Tokio runtime with IO enabled.
///
/// ```
/// # #[cfg(unix)] {
/// use herdless::{tokio::Acceptor, Group};
/// use std::io::{Read, Write};
///
/// let group = Group::builder().rotate_every(1).build()?; // before fork, in the parent
/// let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// let addr = listener.local_addr()?;
/// // In each worker (here only one):
/// let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
/// let mut acceptor = Acceptor::new(&group, listener.try_clone()?)?;
/// let client = std::thread::spawn(move || {
///     let mut stream = std::net::TcpStream::connect(addr)?;
///     let mut reply = [0u8; 2];
///     stream.read_exact(&mut reply)?;
///     Ok::<_, std::io::Error>(reply)
/// });
/// runtime.block_on(async {
///     let (stream, _peer) = acceptor.accept().await?;
///     stream.writable().await?;
///     stream.try_write(b"ok")?;
///     Ok::<_, std::io::Error>(())
/// })?;
/// assert_eq!(&client.join().unwrap()?, b"ok");
/// drop(acceptor); // wakes the thread, which leaves the group; joined here
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Acceptor {
    rx: mpsc::Receiver<Handoff>,
    shared: Arc<Shared>,
    notifier: Notifier,
    thread: Option<JoinHandle<()>>,
    local_addr: SocketAddr,
    /// The process that started the thread: a copy inherited across `fork` has no thread.
    pid: u32,
}

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acceptor")
            .field("local_addr", &self.local_addr)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Acceptor {
    /// Joins `group` in a new thread, registers `listener` there (exclusive, one event per
    /// wait, turns after every accept) and starts accepting, with room for
    /// [`DEFAULT_BACKLOG`] connections between the thread and the runtime.
    ///
    /// The listener is made non-blocking. It may be a copy (`try_clone`, or inherited across
    /// `fork`) of a listener that other members of the group wait on.
    ///
    /// # Errors
    ///
    /// As [`Group::join`] and [`Waiter::add`] (the group is full, the listener is closed),
    /// or [`crate::Error::Io`] if the thread cannot be started.
    pub fn new(group: &Group, listener: TcpListener) -> crate::Result<Acceptor> {
        Self::with_backlog(group, listener, DEFAULT_BACKLOG)
    }

    /// As [`new`](Self::new), with room for `backlog` accepted connections between the thread
    /// and the runtime. Once that many wait, the thread stops taking turns (the other members
    /// of the group take the connections) until the runtime accepts one.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidSetting`] for a backlog of 0; otherwise as [`new`](Self::new).
    pub fn with_backlog(
        group: &Group,
        listener: TcpListener,
        backlog: usize,
    ) -> crate::Result<Acceptor> {
        if backlog == 0 {
            return Err(crate::Error::InvalidSetting {
                reason: "an acceptor's backlog must be at least 1".into(),
            });
        }
        let io_err = |context: &'static str| move |source| crate::Error::Io { context, source };
        listener
            .set_nonblocking(true)
            .map_err(io_err("making the listener non-blocking"))?;
        let local_addr = listener
            .local_addr()
            .map_err(io_err("reading the listener's address"))?;
        let (tx, rx) = mpsc::channel(backlog);
        let shared = Arc::new(Shared::default());
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let group = group.clone();
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("herdless-acceptor".into())
            .spawn(move || {
                let start = thread_switches();
                let waiter = group
                    .join()
                    .and_then(|mut w| w.add(&listener, LISTENER, Interest::SHARED).map(|()| w));
                let waiter = match waiter {
                    Ok(w) => {
                        let _ = ready_tx.send(Ok(w.notifier()));
                        w
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                Pump {
                    waiter,
                    listener,
                    tx,
                    shared: thread_shared,
                    start,
                }
                .run();
            })
            .map_err(io_err("starting the acceptor thread"))?;
        let notifier = match ready_rx.recv() {
            Ok(Ok(notifier)) => notifier,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(crate::Error::Io {
                    context: "starting the acceptor thread",
                    source: io::Error::other("the acceptor thread ended before it joined"),
                });
            }
        };
        Ok(Acceptor {
            rx,
            shared,
            notifier,
            thread: Some(thread),
            local_addr,
            pid: std::process::id(),
        })
    }

    /// Waits for the next connection, taken on this acceptor's turn.
    ///
    /// Cancel-safe: a connection is taken out of the channel only when the future completes.
    ///
    /// # Errors
    ///
    /// An accept error of the listener (for example, too many open files), or a failed wait of
    /// the thread's waiter, as the `io::Error` it is; an error of kind
    /// [`io::ErrorKind::NotConnected`] once the acceptor was [closed](Self::close) and every
    /// connection it had taken was handed out, or if its thread ended; an error of kind
    /// [`io::ErrorKind::Other`] when called outside a Tokio runtime with IO enabled.
    pub async fn accept(&mut self) -> io::Result<(TcpStream, SocketAddr)> {
        std::future::poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// Polls for the next connection: the building block of [`accept`](Self::accept) and of
    /// the `Stream` implementation.
    ///
    /// # Errors
    ///
    /// As [`accept`](Self::accept).
    pub fn poll_accept(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<(TcpStream, SocketAddr)>> {
        match self.poll_handoff(cx) {
            Poll::Ready(Some(r)) => Poll::Ready(r),
            Poll::Ready(None) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the acceptor is closed: every connection it took was handed out",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_handoff(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<io::Result<(TcpStream, SocketAddr)>>> {
        if ::tokio::runtime::Handle::try_current().is_err() {
            return Poll::Ready(Some(Err(io::Error::other(
                "herdless::tokio::Acceptor polled outside a Tokio runtime",
            ))));
        }
        self.rx.poll_recv(cx).map(|handoff| {
            handoff.map(|r| {
                r.and_then(|(stream, peer)| {
                    stream.set_nonblocking(true)?;
                    Ok((TcpStream::from_std(stream)?, peer))
                })
            })
        })
    }

    /// Stops taking turns: the thread hands out what it was given (the connection of the turn
    /// it is in, or of an exclusive wake-up that came with the close: at most one accept after
    /// the close), leaves the group's line for the listener and ends. It does not go on
    /// taking connections that are queued at the listener: on a busy listener the other
    /// members of the group take them. Connections already taken stay to be accepted; after
    /// them [`accept`](Self::accept) returns `NotConnected` and the `Stream` ends. This is the
    /// graceful way for a worker to leave (a restart that drops nothing, as long as another
    /// member serves the listener). Dropping the acceptor instead closes the connections it
    /// took but that were not accepted yet.
    pub fn close(&self) {
        self.closer().close();
    }

    /// A handle that [closes](Self::close) this acceptor from anywhere (another task or
    /// thread) while a task waits in [`accept`](Self::accept).
    pub fn closer(&self) -> Closer {
        Closer {
            shared: self.shared.clone(),
            notifier: self.notifier.clone(),
        }
    }

    /// The listener's local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The acceptor thread's counters so far.
    pub fn stats(&self) -> AcceptorStats {
        let kernel = self.shared.kernel_wakeups.load(SeqCst);
        AcceptorStats {
            accepted: self.shared.accepted.load(SeqCst),
            wakeups: self.shared.wakeups.load(SeqCst),
            empty_wakeups: self.shared.empty_wakeups.load(SeqCst),
            kernel_wakeups: kernel.checked_sub(1),
        }
    }
}

/// Closes an [`Acceptor`] from another task or thread: see [`Acceptor::close`]. Cheap to
/// clone; `Send + Sync`.
#[derive(Clone)]
pub struct Closer {
    shared: Arc<Shared>,
    notifier: Notifier,
}

impl std::fmt::Debug for Closer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Closer")
    }
}

impl Closer {
    /// As [`Acceptor::close`]. Closing twice, or after the acceptor is gone, does nothing.
    pub fn close(&self) {
        self.shared.closing.store(true, SeqCst);
        // A notification sent while the thread does not wait wakes its next wait.
        let _ = self.notifier.notify();
    }
}

impl futures_core::Stream for Acceptor {
    type Item = io::Result<(TcpStream, SocketAddr)>;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_handoff(cx)
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            // A copy inherited across fork: its thread is the parent's; leave it alone.
            if let Some(thread) = self.thread.take() {
                std::mem::forget(thread);
            }
            return;
        }
        self.shared.stop.store(true, SeqCst);
        // A thread waiting for room in the channel learns here that there will be none.
        self.rx.close();
        let _ = self.notifier.notify();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The acceptor thread: waits its turn, accepts, says so, hands over.
struct Pump {
    waiter: Waiter,
    listener: TcpListener,
    tx: mpsc::Sender<Handoff>,
    shared: Arc<Shared>,
    start: Option<u64>,
}

impl Pump {
    fn run(mut self) {
        let mut events = Events::with_capacity(1);
        'turns: loop {
            // Room in the channel first: a worker that cannot take a connection now does not
            // stand in the group's line for one.
            let Some(permit) = self.reserve() else {
                return;
            };
            // Did a wait of this turn end with no event (the close's notification)?
            let mut woken = false;
            loop {
                if self.shared.stop.load(SeqCst) {
                    return;
                }
                if self.shared.closing.load(SeqCst) {
                    self.leave_line(permit, woken);
                    return;
                }
                match self.waiter.wait(&mut events, None) {
                    Ok(0) => woken = true, // the notifier: look at the flags again
                    Ok(_) => break,
                    Err(e) => {
                        let _ = permit.send(Err(e.into()));
                        return;
                    }
                }
            }
            self.shared.wakeups.fetch_add(1, SeqCst);
            self.note_switches();
            let taken = self.accept();
            // The turn ends here, before the runtime sees the connection.
            if let Err(e) = self.waiter.consumed(LISTENER) {
                let _ = permit.send(Err(e.into()));
                return;
            }
            match taken {
                Ok(Some(conn)) => {
                    self.shared.accepted.fetch_add(1, SeqCst);
                    let _ = permit.send(Ok(conn));
                }
                Ok(None) => {
                    self.shared.empty_wakeups.fetch_add(1, SeqCst);
                    // The permit is dropped; the next turn reserves again.
                    continue 'turns;
                }
                Err(e) => {
                    let _ = permit.send(Err(e));
                }
            }
        }
    }

    /// One non-blocking accept; `None` when nothing is queued.
    fn accept(&self) -> io::Result<Option<(std::net::TcpStream, SocketAddr)>> {
        loop {
            match self.listener.accept() {
                Ok(conn) => return Ok(Some(conn)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                // Reset before it was taken, or a signal: try again.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionAborted | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits for room in the channel; `None` once the acceptor is dropped.
    fn reserve(&self) -> Option<mpsc::OwnedPermit<Handoff>> {
        block_on(self.tx.clone().reserve_owned()).ok()
    }

    /// Leaving after [`Acceptor::close`]: hands out what this thread was given and not yet
    /// handed out, then leaves the listener's line. Given can only be an exclusive wake-up that
    /// came with the close's notification (`woken`): natively it stays on this member's ready
    /// list, the kernel having woken nobody else for it, when the wait returned the
    /// notification's event in its place. A look (zero timeout) returns it, and it is accepted
    /// and handed out: at most one accept, after which other members take every connection.
    /// (Accepting until `WouldBlock` would go on taking connections on a listener that other
    /// members keep busy.) A turn whose wait returned the listener's event accepted it
    /// already; a close seen before the turn's wait was given nothing.
    fn leave_line(&mut self, permit: mpsc::OwnedPermit<Handoff>, woken: bool) {
        let mut events = Events::with_capacity(1);
        let given = woken
            && matches!(
                self.waiter.wait(&mut events, Some(std::time::Duration::ZERO)),
                Ok(n) if n > 0
            );
        if given {
            let taken = self.accept();
            let _ = self.waiter.consumed(LISTENER);
            match taken {
                Ok(Some(conn)) => {
                    self.shared.accepted.fetch_add(1, SeqCst);
                    let _ = permit.send(Ok(conn));
                }
                Ok(None) => {
                    self.shared.empty_wakeups.fetch_add(1, SeqCst);
                }
                Err(e) => {
                    let _ = permit.send(Err(e));
                }
            }
        }
        let _ = self.waiter.delete(&self.listener);
        self.note_switches();
    }

    fn note_switches(&self) {
        if !cfg!(any(target_os = "linux", target_os = "android")) {
            return;
        }
        if let (Some(start), Some(now)) = (self.start, thread_switches()) {
            self.shared
                .kernel_wakeups
                .store(now.saturating_sub(start) + 1, SeqCst);
        }
    }
}

/// Voluntary context switches of the calling thread so far (`getrusage(RUSAGE_THREAD)`): the
/// acceptor thread's kernel-level wake-ups, seen or not. Linux only (elsewhere `None`).
fn thread_switches() -> Option<u64> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: rusage is plain data, for which all-zero bytes are a valid value; getrusage
        // (which rustix does not wrap) gets RUSAGE_THREAD and a pointer to that live rusage,
        // which it fills or leaves.
        let (res, usage) = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            (libc::getrusage(libc::RUSAGE_THREAD, &mut usage), usage)
        };
        (res == 0).then_some(usage.ru_nvcsw as u64)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    None
}

/// Runs a future to completion on the calling thread (parked while it is pending). The
/// acceptor thread uses it only to wait for room in the channel: Tokio's channel works
/// without a runtime.
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let mut future = pin!(future);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}
