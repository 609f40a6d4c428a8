//! Exclusive epoll registrations held by herdless, per epoll instance.
//!
//! The process keeps one table (`TABLE`): for each epoll instance (by descriptor number) that
//! has had an `EPOLLEXCLUSIVE` registration moved to herdless, the registrations herdless
//! holds (`Reg`: the program's events and `epoll_data`) and the instance's `Live` part, whose
//! `Member` is the herdless waiter:
//!
//! - **Add.** `EPOLL_CTL_ADD` with `EPOLLEXCLUSIVE` is first made in the kernel's epoll, as the
//!   program asked, so that every error is the kernel's own (EBADF, EEXIST, EINVAL for a bad
//!   combination, EPERM for a regular file, ELOOP). Then, if the descriptor is non-blocking and
//!   level-triggered, and on the line of the instance's other herdless registrations, it is
//!   added to the waiter (exclusive, the descriptor's number as key) and deleted from the
//!   kernel's epoll. Anything herdless refuses stays where the kernel put it: the program gets
//!   what it gets without the preload (`HERDLESS_PRELOAD_DEBUG=1` says why on stderr).
//! - **Ctl of a held descriptor**: `EPOLL_CTL_ADD` again is EEXIST, `EPOLL_CTL_MOD` EINVAL (as
//!   the kernel answers for an exclusive entry), `EPOLL_CTL_DEL` deletes it from the waiter.
//! - **Wait.** The waiter has the kernel's epoll itself registered (readable, key `REAL_KEY`),
//!   so one blocking herdless wait sees both: a held descriptor's event is returned with the
//!   program's `epoll_data` and what a zero-timeout `poll` finds on it now; the kernel epoll's
//!   readiness is collected with a zero-timeout `epoll_wait` into the room left. The wait
//!   coming back is the consumed point of the last one's events (herdless's rule), which is
//!   "rotation after the program's next `epoll_wait` on that instance".
//! - **Threads.** A `Member` is used by one thread at a time (its mutex). A thread that changes
//!   registrations (ctl, close, dup2) while another waits on the instance raises `wanting` and
//!   notifies the waiter, whose wait comes back empty, lets go of the mutex and waits again
//!   once the change is done. Two threads in `epoll_wait` on one instance take turns at the
//!   member (`Live::turn`): the second sleeps until the first's call returns, or its own
//!   timeout ends (it returns 0 then).
//! - **close and dup2** of a held descriptor delete it from the waiter before the number is
//!   closed; of an instance, drop the instance (the member leaves its line).
//! - **fork.** `pthread_atfork` keeps the table locked across `fork`. The child keeps the
//!   registrations and lets the parent's members go (never touched: they are the parent's);
//!   its first use of an instance joins the line afresh and adds them again, so a forked
//!   worker is a member of its own.

use std::collections::HashMap;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use herdless::{Error, Interest, Notifier, PollWaiter};
use libc::{c_int, epoll_event};

use crate::real::real;

/// The key of the kernel's epoll instance in its own waiter (keys of held descriptors are
/// their numbers, never this).
const REAL_KEY: usize = usize::MAX;

/// The event bits herdless can watch for a held registration; any other bit but the implicit
/// ones (EPOLLEXCLUSIVE, EPOLLWAKEUP, EPOLLERR, EPOLLHUP) keeps it in the kernel's epoll.
const WATCHABLE: u32 =
    (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDNORM | libc::EPOLLWRNORM) as u32;
const IMPLICIT: u32 =
    (libc::EPOLLEXCLUSIVE | libc::EPOLLWAKEUP | libc::EPOLLERR | libc::EPOLLHUP) as u32;

/// True once some registration was ever moved to herdless in this process: until then every
/// call goes straight to the C library without looking at the table.
pub(crate) static ACTIVE: AtomicBool = AtomicBool::new(false);

/// A registration herdless holds: what the program asked for and its `epoll_data`.
#[derive(Debug, Clone, Copy)]
struct Reg {
    events: u32,
    data: u64,
}

/// One epoll instance with registrations held by herdless.
struct Instance {
    /// The held registrations, by descriptor (the program's copy, kept for a forked child).
    regs: HashMap<RawFd, Reg>,
    /// The line all of them are on (`herdless::line_name`).
    line: String,
    live: Arc<Live>,
}

/// The part of an instance a waiting thread holds while it waits.
#[derive(Default)]
struct Live {
    /// The waiter and its copy of the registrations; None until built (in a forked child,
    /// until its first use).
    member: Mutex<Option<Member>>,
    /// Wakes the member's wait (set when it is built).
    notifier: Mutex<Option<Notifier>>,
    /// Threads that want `member` to change registrations: a waiting thread gives it up, and
    /// no wait takes it while one is there.
    wanting: AtomicUsize,
    /// True while a thread's `epoll_wait` has the member: one wait at a time, the others
    /// sleep on `freed` until it is done or their own timeout ends.
    busy: Mutex<bool>,
    /// Signalled when a wait lets the member go and when a change is done.
    freed: std::sync::Condvar,
}

/// A thread's turn at the member of an instance (`Live::busy`), given back when dropped.
struct Turn<'a>(&'a Live);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        *lock(&self.0.busy) = false;
        self.0.freed.notify_all();
    }
}

impl Live {
    /// Waits for the turn at the member until `deadline`: None once it has passed.
    fn turn(&self, deadline: Option<Instant>) -> Option<Turn<'_>> {
        let mut busy = lock(&self.busy);
        loop {
            if !*busy && self.wanting.load(SeqCst) == 0 {
                *busy = true;
                return Some(Turn(self));
            }
            busy = match deadline {
                None => self.freed.wait(busy).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    let woken = self.freed.wait_timeout(busy, left);
                    woken.unwrap_or_else(|e| e.into_inner()).0
                }
            };
        }
    }
}

/// The herdless waiter of an instance.
struct Member {
    poll: PollWaiter,
    regs: HashMap<RawFd, Reg>,
}

/// Every instance of the process, and the process they belong to.
struct Table {
    pid: libc::pid_t,
    instances: HashMap<RawFd, Instance>,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

thread_local! {
    /// The table's guard, held from `fork`'s prepare handler to its parent or child handler.
    static FORK_GUARD: std::cell::RefCell<Option<MutexGuard<'static, Option<Table>>>> =
        const { std::cell::RefCell::new(None) };
}

extern "C" fn before_fork() {
    let guard = lock(&TABLE);
    let _ = FORK_GUARD.try_with(|g| *g.borrow_mut() = Some(guard));
}

extern "C" fn after_fork() {
    let _ = FORK_GUARD.try_with(|g| g.borrow_mut().take());
}

/// The table of this process: a forked child lets its parent's members go (leaked, never
/// touched: their waiters are the parent's) and keeps the registrations, re-added at the
/// first use of each instance.
fn table() -> MutexGuard<'static, Option<Table>> {
    let mut guard = lock(&TABLE);
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    let table = guard.get_or_insert_with(|| Table {
        pid: me,
        instances: HashMap::new(),
    });
    if table.pid != me {
        table.pid = me;
        for instance in table.instances.values_mut() {
            std::mem::forget(std::mem::take(&mut instance.live));
        }
    }
    guard
}

fn debug(what: std::fmt::Arguments<'_>) {
    if std::env::var_os("HERDLESS_PRELOAD_DEBUG").is_some_and(|v| v != "0") {
        // SAFETY: getpid and gettid cannot fail.
        let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
        eprintln!("libherdless_preload[{pid}/{tid}]: {what}");
    }
}

/// Sets errno and returns -1.
pub(crate) fn fail(errno: c_int) -> c_int {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = errno };
    -1
}

/// The errno of a herdless error.
pub(crate) fn errno_of(e: &Error) -> c_int {
    match e {
        Error::Interrupted => libc::EINTR,
        Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        Error::BadDescriptor { .. } => libc::EBADF,
        Error::InvalidInterest { .. }
        | Error::BlockingDescriptor { .. }
        | Error::InvalidSetting { .. } => libc::EINVAL,
        Error::UnwatchableDescriptor { .. } => libc::EPERM,
        Error::AlreadyRegistered { .. } => libc::EEXIST,
        Error::NotRegistered { .. } => libc::ENOENT,
        Error::GroupFull { .. } | Error::TooManySources { .. } => libc::ENOSPC,
        Error::BackendUnavailable { .. } => libc::ENOSYS,
        Error::LineRefused { .. } | Error::PermissionDenied { .. } => libc::EACCES,
        Error::LinesDiffer { .. } | Error::Unsupported { .. } => libc::ENOTSUP,
        _ => libc::EIO,
    }
}

/// The interest of a held registration.
fn interest_of(events: u32) -> Interest {
    let read = events & (libc::EPOLLIN | libc::EPOLLRDNORM) as u32 != 0;
    let write = events & (libc::EPOLLOUT | libc::EPOLLWRNORM) as u32 != 0;
    let interest = match (read, write) {
        (true, true) => Interest::READABLE.add(Interest::WRITABLE),
        (false, true) => Interest::WRITABLE,
        _ => Interest::READABLE,
    };
    interest.exclusive()
}

/// The member of `live`, for a change of registrations: a thread waiting on it is woken and
/// gives it up; waits start again once the change is done (the guard dropped).
fn member_for_change(live: &Live) -> Change<'_> {
    live.wanting.fetch_add(1, SeqCst);
    if let Some(n) = lock(&live.notifier).clone() {
        let _ = n.notify();
    }
    Change {
        guard: Some(lock(&live.member)),
        live,
    }
}

/// The member held for a change; dropped, it lets the waits go on.
struct Change<'a> {
    guard: Option<MutexGuard<'a, Option<Member>>>,
    live: &'a Live,
}

impl std::ops::Deref for Change<'_> {
    type Target = Option<Member>;
    fn deref(&self) -> &Option<Member> {
        self.guard.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for Change<'_> {
    fn deref_mut(&mut self) -> &mut Option<Member> {
        self.guard.as_mut().expect("held until dropped")
    }
}

impl Drop for Change<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        self.live.wanting.fetch_sub(1, SeqCst);
        let _busy = lock(&self.live.busy); // no wait between its check and its sleep
        self.live.freed.notify_all();
    }
}

/// A new member for the instance `epfd`, on the line of `first`, with `regs` added.
fn build(epfd: RawFd, first: RawFd, regs: &HashMap<RawFd, Reg>) -> herdless::Result<Member> {
    // SAFETY: both are open descriptors of the program for the length of these calls (the
    // caller's ctl or wait on them); borrowed as numbers only.
    let (ep, fd) = unsafe { (BorrowedFd::borrow_raw(epfd), BorrowedFd::borrow_raw(first)) };
    let waiter = herdless::join_line(&fd)?;
    let mut member = Member {
        poll: PollWaiter::new(waiter),
        regs: HashMap::new(),
    };
    member
        .poll
        .waiter_mut()
        .add(&ep, REAL_KEY, Interest::READABLE)?;
    for (&fd, &reg) in regs {
        member.add(fd, reg)?;
    }
    Ok(member)
}

impl Member {
    fn add(&mut self, fd: RawFd, reg: Reg) -> herdless::Result<()> {
        // SAFETY: an open descriptor of the program, borrowed as a number for this call.
        let source = unsafe { BorrowedFd::borrow_raw(fd) };
        self.poll
            .waiter_mut()
            .add(&source, fd as usize, interest_of(reg.events))?;
        self.regs.insert(fd, reg);
        Ok(())
    }

    /// Deletes `fd` (still open: close and dup2 call this first); a descriptor herdless no
    /// longer knows is no error.
    fn delete(&mut self, fd: RawFd) {
        if self.regs.remove(&fd).is_some() {
            // SAFETY: borrowed as a number for this call; a closed one is answered EBADF.
            let source = unsafe { BorrowedFd::borrow_raw(fd) };
            let _ = self.poll.waiter_mut().delete(&source);
        }
    }
}

/// `epoll_ctl(epfd, EPOLL_CTL_ADD, fd, event)` with EPOLLEXCLUSIVE in `event`.
pub(crate) fn add_exclusive(epfd: RawFd, fd: RawFd, event: *mut epoll_event) -> c_int {
    if table()
        .as_ref()
        .and_then(|t| t.instances.get(&epfd))
        .is_some_and(|i| i.regs.contains_key(&fd))
    {
        return fail(libc::EEXIST);
    }
    // SAFETY: the program's arguments, as it gave them.
    let rc = unsafe { (real().epoll_ctl)(epfd, libc::EPOLL_CTL_ADD, fd, event) };
    if rc != 0 {
        return rc; // the kernel's own answer, errno set
    }
    // SAFETY: the kernel just read it: a live epoll_event.
    let asked = unsafe { std::ptr::read_unaligned(event) };
    let reg = Reg {
        events: asked.events,
        data: asked.u64,
    };
    if let Err(why) = take(epfd, fd, reg) {
        debug(format_args!(
            "fd {fd} on epoll {epfd} stays with the kernel's EPOLLEXCLUSIVE: {why}"
        ));
        return 0;
    }
    debug(format_args!("fd {fd} on epoll {epfd}: held by herdless"));
    // Held by herdless now: the kernel's copy goes.
    // SAFETY: a registration this call just made.
    unsafe { (real().epoll_ctl)(epfd, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
    0
}

/// Moves the registration of `fd` into the instance's member; Err says why not.
fn take(epfd: RawFd, fd: RawFd, reg: Reg) -> Result<(), String> {
    if reg.events & !(WATCHABLE | IMPLICIT) != 0 {
        return Err(format!(
            "events {:#x}: only IN and OUT are taken",
            reg.events
        ));
    }
    // SAFETY: fcntl of a number; -1 for a closed one.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || flags & libc::O_NONBLOCK == 0 {
        return Err("a blocking descriptor (herdless takes non-blocking ones)".into());
    }
    // SAFETY: an open descriptor (the kernel just registered it), borrowed for this call.
    let line =
        herdless::line_name(&unsafe { BorrowedFd::borrow_raw(fd) }).map_err(|e| e.to_string())?;
    let live = {
        let mut guard = table();
        let Some(table) = guard.as_mut() else {
            return Err("no table".into()); // not reached: table() makes it
        };
        let instance = table.instances.entry(epfd).or_insert_with(|| Instance {
            regs: HashMap::new(),
            line: line.clone(),
            live: Arc::default(),
        });
        if instance.line != line && !instance.regs.is_empty() {
            return Err(format!(
                "on line {line}, and the instance's other ones on {}",
                instance.line
            ));
        }
        instance.line = line;
        instance.regs.insert(fd, reg);
        instance.live.clone()
    };
    ACTIVE.store(true, SeqCst);
    static ATFORK: Once = Once::new();
    // SAFETY: plain extern "C" handlers that only take and release the table's lock.
    ATFORK.call_once(|| unsafe {
        libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(after_fork));
    });
    let mut member = member_for_change(&live);
    let done = match member.as_mut() {
        Some(m) => m.add(fd, reg),
        None => build(epfd, fd, &HashMap::from([(fd, reg)])).map(|m| {
            *lock(&live.notifier) = Some(m.poll.waiter().notifier());
            *member = Some(m);
        }),
    };
    drop(member);
    done.map_err(|e| {
        if let Some(i) = table().as_mut().and_then(|t| t.instances.get_mut(&epfd)) {
            i.regs.remove(&fd);
        }
        e.to_string()
    })
}

/// Is `fd` held by herdless for the instance `epfd`?
pub(crate) fn holds(epfd: RawFd, fd: RawFd) -> bool {
    table()
        .as_ref()
        .and_then(|t| t.instances.get(&epfd))
        .is_some_and(|i| i.regs.contains_key(&fd))
}

/// `epoll_ctl(epfd, EPOLL_CTL_DEL, fd)` of a held descriptor.
pub(crate) fn delete(epfd: RawFd, fd: RawFd) -> c_int {
    let live = {
        let mut guard = table();
        let Some(i) = guard.as_mut().and_then(|t| t.instances.get_mut(&epfd)) else {
            return fail(libc::ENOENT);
        };
        if i.regs.remove(&fd).is_none() {
            return fail(libc::ENOENT);
        }
        i.live.clone()
    };
    if let Some(m) = member_for_change(&live).as_mut() {
        m.delete(fd);
    }
    0
}

/// The number `fd` is about to be closed (close, or dup2/dup3 onto it): an instance goes, a
/// held registration is deleted first.
pub(crate) fn closing(fd: RawFd) {
    let (gone, lives) = {
        let mut guard = table();
        let Some(table) = guard.as_mut() else { return };
        let gone = table.instances.remove(&fd);
        let lives: Vec<Arc<Live>> = table
            .instances
            .values_mut()
            .filter_map(|i| i.regs.remove(&fd).map(|_| i.live.clone()))
            .collect();
        (gone, lives)
    };
    for live in lives {
        if let Some(m) = member_for_change(&live).as_mut() {
            m.delete(fd);
        }
    }
    // The instance's member leaves its line here (or when a thread still waiting on it is
    // done with it).
    drop(gone);
}

/// A new epoll instance got the number `fd`: anything the table still had under it (a close
/// the library did not see, such as `close_range`) is forgotten.
pub(crate) fn created(fd: RawFd) {
    if let Some(t) = table().as_mut() {
        t.instances.remove(&fd);
    }
}

/// `epoll_wait` on `epfd` if herdless holds registrations of it; None otherwise (the C
/// library's call then). `timeout` None waits without end.
pub(crate) fn wait(
    epfd: RawFd,
    out: *mut epoll_event,
    max: c_int,
    timeout: Option<Duration>,
) -> Option<c_int> {
    let live = table()
        .as_ref()
        .and_then(|t| t.instances.get(&epfd))
        .map(|i| i.live.clone())?;
    // The kernel's EINVAL or EFAULT (its bound on maxevents: INT_MAX / sizeof(epoll_event)).
    let bound = c_int::MAX as usize / std::mem::size_of::<epoll_event>();
    if max <= 0 || max as usize > bound || out.is_null() {
        return None;
    }
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let Some(_turn) = live.turn(deadline) else {
            return Some(0); // another thread's wait had the member until this one's timeout
        };
        let mut guard = lock(&live.member);
        if guard.is_none() {
            // A forked child's first use: join afresh with the registrations kept.
            let regs = table()
                .as_ref()
                .and_then(|t| t.instances.get(&epfd))
                .map(|i| i.regs.clone())
                .unwrap_or_default();
            // No registration left to hold: the kernel's epoll has them all.
            let &first = regs.keys().next()?;
            match build(epfd, first, &regs) {
                Ok(m) => {
                    *lock(&live.notifier) = Some(m.poll.waiter().notifier());
                    *guard = Some(m);
                }
                Err(e) => {
                    debug(format_args!(
                        "epoll {epfd}: joining the line in this process: {e}"
                    ));
                    return Some(fail(errno_of(&e)));
                }
            }
        }
        let Some(member) = guard.as_mut() else {
            return None; // not reached: built above
        };
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        // One event per held registration at most, the kernel epoll's and the signal watch's.
        let capacity = (max as usize).min(member.regs.len() + 2);
        if let Err(e) = member.poll.wait(capacity, left) {
            return Some(fail(errno_of(&e)));
        }
        let mut n = 0usize;
        let mut kernel = false;
        for event in member.poll.events() {
            if event.key == REAL_KEY {
                kernel = true;
                continue;
            }
            let fd = event.key as RawFd;
            let Some(reg) = member.regs.get(&fd) else {
                continue;
            };
            if n < max as usize {
                let bits = revents(fd, reg.events, &event);
                // SAFETY: n < max: inside the program's array of `max` events.
                unsafe {
                    out.add(n).write_unaligned(epoll_event {
                        events: bits,
                        u64: reg.data,
                    })
                };
                n += 1;
            }
        }
        if kernel && n < max as usize {
            // SAFETY: the rest of the program's array; zero timeout.
            let got = unsafe { (real().epoll_wait)(epfd, out.add(n), max - n as c_int, 0) };
            n += got.max(0) as usize;
        }
        if n > 0 || deadline.is_some_and(|d| Instant::now() >= d) {
            return Some(n as c_int);
        }
        // Nothing for the program (a notification, a readiness taken meanwhile): again.
    }
}

/// The epoll bits of a held descriptor's event: what a zero-timeout poll() finds on it now
/// (poll's and epoll's bits are one on Linux), or what herdless saw if it was taken meanwhile.
fn revents(fd: RawFd, asked: u32, event: &herdless::Event) -> u32 {
    let mut pfd = libc::pollfd {
        fd,
        events: (asked & WATCHABLE) as i16,
        revents: 0,
    };
    // SAFETY: one live pollfd, zero timeout (the C library's poll: we are inside).
    let found = match unsafe { (real().poll)(&mut pfd, 1, 0) } {
        1 => pfd.revents as u16 as u32,
        _ => 0,
    };
    if found != 0 {
        return found & (asked | (libc::EPOLLERR | libc::EPOLLHUP) as u32);
    }
    [
        (event.is_readable(), libc::EPOLLIN),
        (event.is_writable(), libc::EPOLLOUT),
        (event.is_read_closed(), libc::EPOLLHUP),
        (event.is_error(), libc::EPOLLERR),
    ]
    .iter()
    .filter(|(set, _)| *set)
    .fold(0, |bits, (_, bit)| bits | *bit as u32)
        & (asked | (libc::EPOLLERR | libc::EPOLLHUP) as u32)
}
