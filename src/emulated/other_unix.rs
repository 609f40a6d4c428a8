//! macOS and the BSDs: descriptors whose `fstat` gives no identity.
//!
//! The emulation tells descriptors apart by the open file behind them (device and inode, the
//! same in every process and every duplicate). Linux gives every descriptor those. FreeBSD does
//! not: its sockets, kqueues, eventfds and POSIX message queues (`mq_getfd_np`) all report device
//! 0 and inode 0 (their `fo_stat` clears the struct and fills only the mode and a few fields;
//! older macOS kernels did the same for sockets). Left alone, every such descriptor would have
//! one identity: two listening sockets would share one token, and a member could not register a
//! second one exclusive.
//!
//! So where `fstat` gives no identity, a socket is known by its type and its names (a bound or
//! connected socket's local and peer addresses are unique on the system, but for sockets bound
//! to the same address with `SO_REUSEPORT`, which then share one identity), and anything else,
//! or an unnamed socket (unbound, or one end of a `socketpair`), is refused as exclusive with a
//! reason. None of this can run on this project's Linux CI: the socket naming is unit-tested on
//! Linux, the rest is type-checked for macOS and FreeBSD only.
// On Linux only the unit tests call `socket_identity`; the rest is for the other systems.
#![cfg_attr(any(target_os = "linux", target_os = "android"), allow(dead_code))]

use crate::error::{Error, RawSource, Result};

/// Does this `fstat` give no identity (device and inode both 0)?
pub(super) fn has_no_identity(st: &libc::stat) -> bool {
    st.st_dev == 0 && st.st_ino == 0
}

/// The identity of a descriptor whose `fstat` gave none: a named socket's, or `None`.
pub(super) fn identity_without_inode(fd: RawSource, st: &libc::stat) -> Option<u64> {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFSOCK => socket_identity(fd),
        _ => None,
    }
}

/// Refuses as exclusive a descriptor that has no identity this system lets the emulation share.
pub(super) fn refuse_anonymous(fd: RawSource) -> Result<()> {
    // SAFETY: stat is plain data; fstat fills it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat only reads the descriptor number and writes the live struct.
    if unsafe { libc::fstat(fd, &mut st) } == -1 || !has_no_identity(&st) {
        return Ok(()); // `identify` has answered for a descriptor that is not open
    }
    if identity_without_inode(fd, &st).is_some() {
        return Ok(());
    }
    Err(Error::UnwatchableDescriptor {
        fd,
        reason: match st.st_mode & libc::S_IFMT {
            libc::S_IFSOCK => {
                "an unnamed socket (unbound, or one end of a socketpair) has no identity on this \
                 system that the emulation can share between members: bind it, or register it \
                 without exclusive"
            }
            _ => {
                "this system gives the descriptor no identity (no device, no inode: a kqueue, an \
                 eventfd or a message queue) that the emulation can share between members: \
                 register it without exclusive"
            }
        },
    })
}

/// A socket's identity from its type, local name and peer name; `None` if it has no name.
pub(super) fn socket_identity(fd: RawSource) -> Option<u64> {
    let local = name(fd, false);
    let peer = name(fd, true);
    if local.is_none() && peer.is_none() {
        return None;
    }
    let mut kind: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the live `kind`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut kind as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return None;
    }
    // FNV-1a: the same in every process of the group (forked from one program).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    feed(&kind.to_ne_bytes());
    for part in [&local, &peer] {
        let bytes = part.as_ref().map_or(&[][..], |(ss, len)| {
            // SAFETY: the first `len` bytes of the live sockaddr_storage were written by the
            // kernel; `len` is at most its size.
            unsafe {
                std::slice::from_raw_parts((ss as *const libc::sockaddr_storage).cast(), *len)
            }
        });
        feed(&bytes.len().to_ne_bytes());
        feed(bytes);
    }
    Some(h.max(1))
}

/// The socket's local (or peer) address, if it has one that names it.
fn name(fd: RawSource, peer: bool) -> Option<(libc::sockaddr_storage, usize)> {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let addr = (&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr>();
    // SAFETY: the kernel writes at most `len` bytes into the live storage.
    let r = unsafe {
        match peer {
            true => libc::getpeername(fd, addr, &mut len),
            false => libc::getsockname(fd, addr, &mut len),
        }
    };
    let len = (len as usize).min(std::mem::size_of::<libc::sockaddr_storage>());
    if r != 0 || unnamed(&ss, len) {
        return None;
    }
    Some((ss, len))
}

/// Is this address no name at all (port 0, or an empty Unix path)?
fn unnamed(ss: &libc::sockaddr_storage, len: usize) -> bool {
    match libc::c_int::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in, which fits in the storage.
            let sin =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            sin.sin_port == 0
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6, which fits in the storage.
            let sin6 =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_port == 0
        }
        libc::AF_UNIX => {
            // SAFETY: an AF_UNIX address is a sockaddr_un, which fits in the storage.
            let sun =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_un>() };
            let path_at = std::mem::size_of_val(sun) - std::mem::size_of_val(&sun.sun_path);
            len <= path_at || sun.sun_path[0] == 0
        }
        libc::AF_UNSPEC => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::socket_identity;
    use std::net::{TcpListener, TcpStream, UdpSocket};
    use std::os::fd::AsRawFd;

    #[test]
    fn named_sockets_have_their_own_identity() {
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        let b = TcpListener::bind("127.0.0.1:0").unwrap();
        let (ia, ib) = (
            socket_identity(a.as_raw_fd()),
            socket_identity(b.as_raw_fd()),
        );
        assert!(ia.is_some() && ib.is_some());
        assert_ne!(ia, ib, "two listeners, one identity");
        let dup = a.try_clone().unwrap();
        assert_eq!(
            socket_identity(dup.as_raw_fd()),
            ia,
            "a duplicate is the same socket"
        );
        let client = TcpStream::connect(a.local_addr().unwrap()).unwrap();
        let (server, _) = a.accept().unwrap();
        let (ic, is) = (
            socket_identity(client.as_raw_fd()),
            socket_identity(server.as_raw_fd()),
        );
        assert!(ic.is_some() && is.is_some());
        assert_ne!(ic, is, "the two ends of a connection, one identity");
        assert_ne!(is, ia, "an accepted socket and its listener, one identity");
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(socket_identity(udp.as_raw_fd()).is_some());
    }

    #[test]
    fn unnamed_sockets_have_none() {
        let (x, y) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(socket_identity(x.as_raw_fd()), None);
        assert_eq!(socket_identity(y.as_raw_fd()), None);
        // SAFETY: a fresh socket, owned and closed below.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
        assert!(raw >= 0);
        assert_eq!(
            socket_identity(raw),
            None,
            "an unbound UDP socket has a name"
        );
        // SAFETY: closes the socket made above.
        unsafe { libc::close(raw) };
    }
}
