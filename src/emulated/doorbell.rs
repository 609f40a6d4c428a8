//! Door bells: one per member, rung to wake a member that sleeps in its poller.
//!
//! The emulation wakes a member for two reasons: it has been handed the token and must start
//! watching the group's exclusive descriptors, or a `Notifier` wants its `wait` to return. On
//! Unix a member's bell is a non-blocking, close-on-exec Unix datagram socket that the member
//! binds when it joins, to an address made of the group's incarnation (a random number in the
//! shared preamble), its slot and the slot's generation; the member adds it to its own poller.
//! Any process of the group rings any member by sending one byte to that address from one
//! unbound socket of its own, so members that were forked, exec'd or started on their own all
//! reach each other, and a process holds one descriptor per member it runs plus one to ring
//! with, whatever the group's size. On Linux the addresses are abstract (nothing in the file
//! system, gone with the socket); elsewhere they are socket files in the temporary directory.
//! The generation in the address keeps a ring meant for a slot's earlier occupant from waking
//! the next one. On other systems (Windows: threads only) a bell is the member's
//! `polling::Poller::notify`; under the model checker (`--cfg loom`), a flag.

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
}

/// A member's door bell, bound to its address until dropped.
#[cfg(all(unix, not(loom)))]
pub(crate) struct Bell {
    socket: UnixDatagram,
    /// The socket file to remove when the bell goes (where addresses are files).
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    path: std::path::PathBuf,
}

#[cfg(all(unix, not(loom)))]
impl Bell {
    /// What the member's poller watches.
    pub(crate) fn watch(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
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
        })
    }

    /// Binds the bell of the member that joins `slot` as occupant `generation`.
    pub(crate) fn bind(&self, slot: u32, generation: u32) -> Result<Bell> {
        let bell = bind_bell(self.incarnation, slot, generation)
            .map_err(|e| Error::io("binding the member's door bell", e))?;
        self.own[slot as usize].store(bell.socket.as_raw_fd(), SeqCst);
        Ok(bell)
    }

    /// The member of `slot` leaves: its bell is no longer this process's to drain.
    pub(crate) fn unbind(&self, slot: u32, bell: Bell) {
        self.own[slot as usize].store(-1, SeqCst);
        drop(bell);
    }

    /// Wakes the member of `slot`, occupant `generation`. A full bell is rung already; a bell
    /// nobody has bound belongs to a member that is gone (or not yet there, and it looks at the
    /// shared state once bound).
    pub(crate) fn ring(&self, slot: u32, generation: u32) {
        let _ = send_ring(&self.ringer, self.incarnation, slot, generation);
    }

    /// Empties the bell of `slot` (a member of this process) after it woke its member.
    pub(crate) fn drain(&self, slot: u32) {
        let fd = self.own[slot as usize].load(SeqCst);
        if fd >= 0 {
            drain_socket(fd);
        }
    }
}

/// A bell's address on Linux: an abstract name, `herdless/<incarnation>/<slot>/<generation>`.
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
    write!(w, "herdless/{incarnation:016x}/{slot}/{generation}")?;
    let len = 64 - w.len();
    std::os::unix::net::SocketAddr::from_abstract_name(&name[..len])
}

#[cfg(all(any(target_os = "linux", target_os = "android"), not(loom)))]
fn bind_bell(incarnation: u64, slot: u32, generation: u32) -> std::io::Result<Bell> {
    let socket = UnixDatagram::bind_addr(&bell_address(incarnation, slot, generation)?)?;
    socket.set_nonblocking(true)?;
    Ok(Bell { socket })
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
    // SAFETY: mmsghdr is plain data; all-zero is a valid starting value.
    let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    for m in &mut msgs {
        m.msg_hdr.msg_iov = &mut iov;
        m.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: every header points at one live iovec over one live byte (each datagram is
    // truncated into it); the call does not wait, and reads our own bell.
    unsafe {
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
    let mut byte = 0u8;
    for _ in 0..16 {
        // SAFETY: reads into one live byte from our own bell, without waiting.
        let n = unsafe { libc::recv(fd, (&mut byte as *mut u8).cast(), 1, libc::MSG_DONTWAIT) };
        if n < 0 {
            return;
        }
    }
}

#[cfg(all(test, unix, not(loom)))]
mod tests {
    use std::os::fd::AsRawFd;

    /// A bell and the ringing socket are non-blocking (a full bell never blocks its ringer) and
    /// close-on-exec (a program exec'd by a member does not inherit them); a ring reaches the
    /// bell of the occupant it names, not the next occupant of the slot.
    #[test]
    fn bells_ring_their_own_occupant_and_are_close_on_exec() {
        let incarnation = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let bells = super::Doorbells::new(incarnation, 3).unwrap();
        let bell = bells.bind(1, 7).unwrap();
        for fd in [bell.socket.as_raw_fd(), bells.ringer.as_raw_fd()] {
            // SAFETY: fcntl reads the flags of our own descriptor.
            let (fl, fd_flags) = unsafe {
                (
                    libc::fcntl(fd, libc::F_GETFL),
                    libc::fcntl(fd, libc::F_GETFD),
                )
            };
            assert_ne!(fl & libc::O_NONBLOCK, 0, "a blocking bell");
            assert_ne!(
                fd_flags & libc::FD_CLOEXEC,
                0,
                "a bell inherited across exec"
            );
        }
        let mut byte = [0u8; 1];
        bells.ring(1, 6); // an earlier occupant's generation: nobody
        assert!(
            bell.socket.recv(&mut byte).is_err(),
            "rang the wrong occupant"
        );
        bells.ring(1, 7);
        bells.ring(1, 7);
        assert_eq!(bell.socket.recv(&mut byte).unwrap(), 1);
        bells.drain(1);
        assert!(bell.socket.recv(&mut byte).is_err(), "drain left a ring");
        bells.unbind(1, bell);
        bells.ring(1, 7); // gone: no error, nothing to do
    }
}

/// The door bells of every slot of one group: each member's poller, for its `notify`.
#[cfg(all(not(unix), not(loom)))]
pub(crate) struct Doorbells {
    pollers: std::sync::Mutex<Vec<Option<std::sync::Arc<polling::Poller>>>>,
}

#[cfg(all(not(unix), not(loom)))]
impl Doorbells {
    pub(crate) fn new(_incarnation: u64, slots: usize) -> Result<Doorbells> {
        Ok(Doorbells {
            pollers: std::sync::Mutex::new(vec![None; slots]),
        })
    }

    /// Records the poller of the member that joined `slot`.
    pub(crate) fn install(&self, slot: u32, poller: std::sync::Arc<polling::Poller>) {
        self.pollers.lock().unwrap_or_else(|e| e.into_inner())[slot as usize] = Some(poller);
    }

    pub(crate) fn ring(&self, slot: u32, _generation: u32) {
        let pollers = self.pollers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = &pollers[slot as usize] {
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
        self.rung[slot as usize].store(1, std::sync::atomic::Ordering::SeqCst);
    }
    pub(crate) fn drain(&self, slot: u32) {
        self.rung[slot as usize].store(0, std::sync::atomic::Ordering::SeqCst);
    }
    /// Has the bell of `slot` rung since it was last drained?
    #[cfg(test)]
    pub(crate) fn is_rung(&self, slot: u32) -> bool {
        self.rung[slot as usize].load(std::sync::atomic::Ordering::SeqCst) != 0
    }
}
