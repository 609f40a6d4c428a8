//! Door bells: one per member, rung to wake a member that sleeps in its poller.
//!
//! The emulation wakes a member for two reasons: it has been handed the token and must start
//! watching the group's exclusive descriptors, or a `Notifier` wants its `wait` to return. On
//! Unix a member's bell is a non-blocking, close-on-exec Unix datagram socket that the member
//! binds when it joins, to an address made of the group's incarnation (a random number in the
//! shared preamble), its slot and the slot's generation; the member adds it to its own poller.
//! Any process of the group rings any member by sending one byte to that address from one
//! unbound socket of its own, so members that were forked, exec'd or started on their own all
//! reach each other, and a process holds a descriptor or two per member it runs plus one to ring
//! with, whatever the group's size. On Linux a member also has an eventfd that threads of its
//! own process ring instead (a write, without the socket's address lookup and buffer: about a
//! fifth of a strict turn's hand-off at 500 threads); the table that maps a slot to it is this
//! process's alone, so a forked child, whose inherited numbers may have been closed and reused,
//! rings by address. On Linux the addresses are abstract (nothing in the file
//! system, gone with the socket); elsewhere they are socket files in the temporary directory.
//! The generation in the address keeps a ring meant for a slot's earlier occupant from waking
//! the next one. On other systems (Windows: threads only) a bell is the `notify` of the member's
//! poller (`crate::emulated::poller`); under the model checker (`--cfg loom`), a flag.

#[cfg(all(unix, not(loom)))]
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
#[cfg(all(unix, not(loom)))]
use std::os::unix::net::UnixDatagram;
#[cfg(all(unix, not(loom)))]
use std::sync::atomic::{AtomicI32, Ordering::SeqCst};

#[cfg(all(unix, not(loom)))]
use crate::error::Error;
use crate::error::Result;

/// The door bells of one group, as one process sees them: the socket it rings with, and the
/// bells of its own members.
#[cfg(all(unix, not(loom)))]
pub(crate) struct Doorbells {
    /// The group's incarnation, the first part of every bell's address.
    incarnation: u64,
    /// Unbound and non-blocking: every ring of this process goes out through it.
    ringer: UnixDatagram,
    /// Per slot, the descriptor of this process's member's bell (-1 if the slot's member is
    /// not of this process): what `drain` reads. Numbers only; the member owns the socket.
    own: Box<[AtomicI32]>,
    /// Per slot, the eventfd of this process's member (-1 if none): what `drain` reads first.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    own_local: Box<[AtomicI32]>,
    /// Per slot, the eventfd a thread of this process rings the slot's member through: (its
    /// generation, the process that made it, the descriptor). Written under the write lock, and
    /// a ring writes to the descriptor under a read lock, so the member never closes it under a
    /// ringer, while any number of threads ring at once (under one lock they failed to take it
    /// and rang by address instead, three rings in four under strict turns at 500 threads).
    /// Only ever `try_read` and `try_write`: a fork while another thread held it leaves it held
    /// in the child, whose rings then go by address.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    local: std::sync::RwLock<Vec<Option<(u32, u32, libc::c_int)>>>,
}

/// A member's door bell, bound to its address until dropped.
#[cfg(all(unix, not(loom)))]
pub(crate) struct Bell {
    socket: UnixDatagram,
    /// The eventfd threads of the member's process ring (see the module docs); in
    /// `Doorbells::local` if `registered`.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    local: std::os::fd::OwnedFd,
    #[cfg(any(target_os = "linux", target_os = "android"))]
    registered: bool,
    /// The socket file to remove when the bell goes (where addresses are files).
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    path: std::path::PathBuf,
}

#[cfg(all(unix, not(loom)))]
impl Bell {
    /// What the member's poller watches: the socket, and where there is one the eventfd.
    pub(crate) fn watch(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let local = Some(self.local.as_fd());
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let local = None;
        std::iter::once(self.socket.as_fd()).chain(local)
    }
}

#[cfg(all(unix, not(loom), not(any(target_os = "linux", target_os = "android"))))]
impl Drop for Bell {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(all(unix, not(loom)))]
impl Doorbells {
    pub(crate) fn new(incarnation: u64, slots: usize) -> Result<Doorbells> {
        let ringer = UnixDatagram::unbound()
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .map_err(|e| Error::io("creating the socket that rings door bells", e))?;
        Ok(Doorbells {
            incarnation,
            ringer,
            own: (0..slots).map(|_| AtomicI32::new(-1)).collect(),
            #[cfg(any(target_os = "linux", target_os = "android"))]
            own_local: (0..slots).map(|_| AtomicI32::new(-1)).collect(),
            #[cfg(any(target_os = "linux", target_os = "android"))]
            local: std::sync::RwLock::new(vec![None; slots]),
        })
    }

    /// Binds the bell of the member that joins `slot` as occupant `generation`.
    pub(crate) fn bind(&self, slot: u32, generation: u32) -> Result<Bell> {
        #[cfg_attr(
            not(any(target_os = "linux", target_os = "android")),
            allow(unused_mut)
        )]
        let mut bell = bind_bell(self.incarnation, slot, generation)
            .map_err(|e| Error::io("binding the member's door bell", e))?;
        self.own[slot as usize].store(bell.socket.as_raw_fd(), SeqCst);
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            let fd = bell.local.as_raw_fd();
            self.own_local[slot as usize].store(fd, SeqCst);
            if let Ok(mut local) = self.local.try_write() {
                local[slot as usize] = Some((generation, crate::pid::current(), fd));
                bell.registered = true;
            }
        }
        Ok(bell)
    }

    /// The member of `slot` leaves: its bell is no longer this process's to drain or ring.
    pub(crate) fn unbind(&self, slot: u32, bell: Bell) {
        self.own[slot as usize].store(-1, SeqCst);
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            self.own_local[slot as usize].store(-1, SeqCst);
            // Out of the table before the eventfd is closed (a ringer writes under a read lock).
            // The write lock was taken in this process when the bell was registered, so only a
            // live thread of it can hold the lock now.
            if bell.registered {
                loop {
                    if let Ok(mut local) = self.local.try_write() {
                        local[slot as usize] = None;
                        break;
                    }
                    std::thread::yield_now();
                }
            }
        }
        drop(bell);
    }

    /// Wakes the member of `slot`, occupant `generation`: through its eventfd if it is a member
    /// of this process, else by address. A full bell is rung already; a bell nobody has bound
    /// belongs to a member that is gone (or not yet there, and it looks at the shared state
    /// once bound).
    pub(crate) fn ring(&self, slot: u32, generation: u32) {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Ok(local) = self.local.try_read() {
            // (A slot out of range comes from a damaged group's memory: it has no bell.)
            if let Some(&Some((g, pid, fd))) = local.get(slot as usize) {
                if g == generation && pid == crate::pid::current() {
                    // The member's eventfd stays open while its entry is in the table and a
                    // lock is held.
                    if let Ok(fd) = crate::sys::unix::by_number(fd) {
                        let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
                    }
                    return;
                }
            }
        }
        let _ = send_ring(&self.ringer, self.incarnation, slot, generation);
    }

    /// Empties the bell of `slot` (a member of this process) after it woke its member: the
    /// eventfd first, and the socket only if the eventfd had nothing (a ring left in the
    /// socket keeps it readable and wakes the member again).
    pub(crate) fn drain(&self, slot: u32) {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            let fd = self
                .own_local
                .get(slot as usize)
                .map_or(-1, |fd| fd.load(SeqCst));
            // This process's member's non-blocking eventfd (the member drains its own bell, so
            // it is open).
            let drained = crate::sys::unix::by_number(fd)
                .is_ok_and(|fd| rustix::io::read(fd, &mut [0u8; 8]) == Ok(8));
            if drained {
                return;
            }
        }
        let fd = self.own.get(slot as usize).map_or(-1, |fd| fd.load(SeqCst));
        if fd >= 0 {
            drain_socket(fd);
        }
    }
}

/// After a reap: every member of the group whose bell is marked rung is rung again. A ringer
/// marks a bell (the slot's `rung`) before it writes to it, so that a bell is rung once until
/// its member drains it; one killed between the two left a mark with no ring behind it, and the
/// member it meant to wake would sleep on, skipped by every later ring, until its next event.
/// The dead ringer is gone now: whoever rings after its reap writes, and a second ring only
/// wakes a member for the same look at the shared state. (Both backends mark their bells.)
pub(crate) fn ring_marked(shared: &crate::shared::SharedState, bells: &Doorbells) {
    for m in 0..shared.high() {
        let slot = shared.member(m);
        if slot.rung.load(std::sync::atomic::Ordering::SeqCst) != 0 {
            bells.ring(m, slot.generation());
        }
    }
}

/// A bell's address on Linux: an abstract name, `herdless/<incarnation>/<slot>/<generation>/`
/// and two bytes that spread the names over the kernel's table of abstract names. That table
/// has 256 buckets chosen by a 16-bit ones' complement sum of the name, in which names that
/// differ only in a few digits fall into a few dozen buckets: at 8 192 members a bind or a
/// ring from another process walked a chain of about 300 names, against 33 spread.
#[cfg(all(any(target_os = "linux", target_os = "android"), not(loom)))]
fn bell_address(
    incarnation: u64,
    slot: u32,
    generation: u32,
) -> std::io::Result<std::os::unix::net::SocketAddr> {
    use std::io::Write;
    #[cfg(target_os = "android")]
    use std::os::android::net::SocketAddrExt;
    #[cfg(target_os = "linux")]
    use std::os::linux::net::SocketAddrExt;
    // Written into a buffer on the stack: a ring allocates nothing.
    let mut name = [0u8; 64];
    let mut w = &mut name[..];
    write!(w, "herdless/{incarnation:016x}/{slot}/{generation}/")?;
    let mut len = 64 - w.len();
    // The spreading word at an even offset of the address (after its 2-byte family and the
    // abstract name's leading NUL, so at an odd offset of the name), where the sum adds it whole.
    if len % 2 == 0 {
        name[len] = b'/';
        len += 1;
    }
    let spread = (slot.wrapping_mul(40_503) ^ generation.wrapping_mul(0x2545)) as u16;
    name[len..len + 2].copy_from_slice(&spread.to_ne_bytes());
    std::os::unix::net::SocketAddr::from_abstract_name(&name[..len + 2])
}

#[cfg(all(any(target_os = "linux", target_os = "android"), not(loom)))]
fn bind_bell(incarnation: u64, slot: u32, generation: u32) -> std::io::Result<Bell> {
    use rustix::event::{eventfd, EventfdFlags};
    let socket = UnixDatagram::bind_addr(&bell_address(incarnation, slot, generation)?)?;
    socket.set_nonblocking(true)?;
    Ok(Bell {
        socket,
        local: eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?,
        registered: false,
    })
}

#[cfg(all(any(target_os = "linux", target_os = "android"), not(loom)))]
fn send_ring(
    ringer: &UnixDatagram,
    incarnation: u64,
    slot: u32,
    generation: u32,
) -> std::io::Result<usize> {
    ringer.send_to_addr(&[1], &bell_address(incarnation, slot, generation)?)
}

/// Empties a bell in one system call: up to 16 datagrams (a bell is rung once until drained,
/// so there is rarely more than one); any left keep it readable and wake the member again.
#[cfg(all(any(target_os = "linux", target_os = "android"), not(loom)))]
fn drain_socket(fd: libc::c_int) {
    const BATCH: usize = 16;
    let mut byte = 0u8;
    let mut iov = libc::iovec {
        iov_base: (&mut byte as *mut u8).cast(),
        iov_len: 1,
    };
    // SAFETY: mmsghdr is plain data, for which all-zero is a valid value; then every header
    // points at one live iovec over one live byte (each datagram is truncated into it). The
    // call (which rustix does not wrap) does not wait, and reads our own bell by number (one
    // closed meanwhile gives EBADF).
    unsafe {
        let mut msgs: [libc::mmsghdr; BATCH] = std::mem::zeroed();
        for m in &mut msgs {
            m.msg_hdr.msg_iov = &mut iov;
            m.msg_hdr.msg_iovlen = 1;
        }
        libc::recvmmsg(
            fd,
            msgs.as_mut_ptr(),
            BATCH as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
}

/// A bell's address elsewhere: a socket file in the temporary directory.
#[cfg(all(unix, not(loom), not(any(target_os = "linux", target_os = "android"))))]
fn bell_path(incarnation: u64, slot: u32, generation: u32) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        ".herdless-{incarnation:016x}-{slot}-{generation}.bell"
    ))
}

#[cfg(all(unix, not(loom), not(any(target_os = "linux", target_os = "android"))))]
fn bind_bell(incarnation: u64, slot: u32, generation: u32) -> std::io::Result<Bell> {
    let path = bell_path(incarnation, slot, generation);
    // A file left by a member of this generation that was killed: nobody else binds it.
    let _ = std::fs::remove_file(&path);
    let socket = UnixDatagram::bind(&path)?;
    socket.set_nonblocking(true)?;
    Ok(Bell { socket, path })
}

#[cfg(all(unix, not(loom), not(any(target_os = "linux", target_os = "android"))))]
fn send_ring(
    ringer: &UnixDatagram,
    incarnation: u64,
    slot: u32,
    generation: u32,
) -> std::io::Result<usize> {
    ringer.send_to(&[1], bell_path(incarnation, slot, generation))
}

#[cfg(all(unix, not(loom), not(any(target_os = "linux", target_os = "android"))))]
fn drain_socket(fd: libc::c_int) {
    let Ok(fd) = crate::sys::unix::by_number(fd) else {
        return;
    };
    for _ in 0..16 {
        // Our own bell, without waiting.
        if rustix::net::recv(fd, &mut [0u8; 1], rustix::net::RecvFlags::DONTWAIT).is_err() {
            return;
        }
    }
}

#[cfg(all(test, unix, not(loom)))]
mod tests {
    use std::os::fd::AsRawFd;

    /// A bell and the ringing socket are non-blocking (a full bell never blocks its ringer) and
    /// close-on-exec (a program exec'd by a member does not inherit them); a ring reaches the
    /// bell of the occupant it names, not the next occupant of the slot, by address (as from
    /// another process) and from this process.
    #[test]
    fn bells_ring_their_own_occupant_and_are_close_on_exec() {
        let incarnation = fresh_incarnation();
        let bells = super::Doorbells::new(incarnation, 3).unwrap();
        let bell = bells.bind(1, 7).unwrap();
        let fds: Vec<i32> = bell.watch().map(|fd| fd.as_raw_fd()).collect();
        for fd in fds.into_iter().chain([bells.ringer.as_raw_fd()]) {
            let fl = crate::sys::unix::status_flags(fd).unwrap();
            let fd_flags = rustix::io::fcntl_getfd(crate::sys::unix::by_number(fd).unwrap());
            assert_ne!(fl & libc::O_NONBLOCK, 0, "a blocking bell");
            assert!(
                fd_flags.unwrap().contains(rustix::io::FdFlags::CLOEXEC),
                "a bell inherited across exec"
            );
        }
        bells.ring(1, 6); // an earlier occupant's generation: nobody
        assert!(!readable(&bell), "rang the wrong occupant");
        // By address, as another process rings.
        super::send_ring(&bells.ringer, incarnation, 1, 7).unwrap();
        super::send_ring(&bells.ringer, incarnation, 1, 7).unwrap();
        assert!(readable(&bell), "a ring by address was lost");
        bells.drain(1);
        assert!(!readable(&bell), "drain left a ring");
        // From a thread of the member's own process.
        bells.ring(1, 7);
        assert!(readable(&bell), "a ring from this process was lost");
        bells.drain(1);
        assert!(!readable(&bell), "drain left a ring");
        bells.unbind(1, bell);
        bells.ring(1, 7); // gone: no error, nothing to do
    }

    /// Threads of the member's process that ring it at once all ring its eventfd: none falls
    /// back to the socket's address (which costs a lookup and a buffer), however many ring
    /// together.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn rings_at_once_from_threads_all_go_through_the_eventfd() {
        let bells = super::Doorbells::new(fresh_incarnation(), 2).unwrap();
        let bell = bells.bind(1, 3).unwrap();
        assert!(bell.registered, "the bell's eventfd is in the table");
        let (threads, rings) = (4, 2_000);
        let start = std::sync::Barrier::new(threads);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    start.wait();
                    for _ in 0..rings {
                        bells.ring(1, 3);
                    }
                });
            }
        });
        let by_address = crate::sys::unix::poll_one_now(bell.socket.as_raw_fd(), libc::POLLIN);
        assert_eq!(by_address, 0, "a ring went by address");
        let mut count = [0u8; 8];
        let local = crate::sys::unix::by_number(bell.local.as_raw_fd()).unwrap();
        assert_eq!(rustix::io::read(local, &mut count), Ok(8));
        assert_eq!(u64::from_ne_bytes(count), (threads * rings) as u64);
        bells.unbind(1, bell);
    }

    /// An incarnation no other live test's bells have (this process's id, and a count in it):
    /// their abstract addresses do not meet.
    fn fresh_incarnation() -> u64 {
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let made = MADE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        (u64::from(std::process::id()) << 32) | made
    }

    /// Is any of the bell's descriptors readable now?
    fn readable(bell: &super::Bell) -> bool {
        bell.watch()
            .any(|fd| crate::sys::unix::poll_one_now(fd.as_raw_fd(), libc::POLLIN) != 0)
    }
}

/// The door bells of every slot of one group: each member's poller, for its `notify`.
#[cfg(all(not(unix), not(loom)))]
pub(crate) struct Doorbells {
    pollers: std::sync::Mutex<Vec<Option<std::sync::Arc<crate::emulated::poller::Poller>>>>,
}

#[cfg(all(not(unix), not(loom)))]
impl Doorbells {
    pub(crate) fn new(_incarnation: u64, slots: usize) -> Result<Doorbells> {
        Ok(Doorbells {
            pollers: std::sync::Mutex::new(vec![None; slots]),
        })
    }

    /// Records the poller of the member that joined `slot`.
    pub(crate) fn install(
        &self,
        slot: u32,
        poller: std::sync::Arc<crate::emulated::poller::Poller>,
    ) {
        self.pollers.lock().unwrap_or_else(|e| e.into_inner())[slot as usize] = Some(poller);
    }

    pub(crate) fn ring(&self, slot: u32, _generation: u32) {
        let pollers = self.pollers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(Some(p)) = pollers.get(slot as usize) {
            let _ = p.notify();
        }
    }

    pub(crate) fn drain(&self, _slot: u32) {}
}

/// Under the model checker: a bell is a flag, so loom can see every ring and every drain.
#[cfg(loom)]
pub(crate) struct Doorbells {
    rung: Vec<crate::sync::AtomicU32>,
}

#[cfg(loom)]
impl Doorbells {
    pub(crate) fn new(_incarnation: u64, slots: usize) -> Result<Doorbells> {
        Ok(Doorbells {
            rung: (0..slots).map(|_| crate::sync::AtomicU32::new(0)).collect(),
        })
    }
    pub(crate) fn ring(&self, slot: u32, _generation: u32) {
        if let Some(r) = self.rung.get(slot as usize) {
            r.store(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    pub(crate) fn drain(&self, slot: u32) {
        if let Some(r) = self.rung.get(slot as usize) {
            r.store(0, std::sync::atomic::Ordering::SeqCst);
        }
    }
    /// Has the bell of `slot` rung since it was last drained?
    #[cfg(test)]
    pub(crate) fn is_rung(&self, slot: u32) -> bool {
        self.rung[slot as usize].load(std::sync::atomic::Ordering::SeqCst) != 0
    }
}
