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

use std::hash::{Hash, Hasher};

use rustix::net::SocketAddrAny;

use crate::error::{Error, RawSource, Result};
use crate::sys::unix::Stat;

/// Does this `fstat` give no identity (device and inode both 0)?
pub(super) fn has_no_identity(st: &Stat) -> bool {
    st.st_dev == 0 && st.st_ino == 0
}

/// The identity of a descriptor whose `fstat` gave none: a named socket's, or `None`.
pub(super) fn identity_without_inode(fd: RawSource, st: &Stat) -> Option<u64> {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFSOCK => socket_identity(fd),
        _ => None,
    }
}

/// Refuses as exclusive a descriptor that has no identity this system lets the emulation share.
pub(super) fn refuse_anonymous(fd: RawSource) -> Result<()> {
    let Ok(st) = crate::sys::unix::fstat(fd) else {
        return Ok(()); // `identify` has answered for a descriptor that is not open
    };
    if !has_no_identity(&st) {
        return Ok(());
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
    let fd = crate::sys::unix::by_number(fd).ok()?;
    let local = rustix::net::getsockname(fd).ok().filter(named);
    let peer = rustix::net::getpeername(fd).ok().flatten().filter(named);
    if local.is_none() && peer.is_none() {
        return None;
    }
    let kind = rustix::net::sockopt::socket_type(fd).ok()?;
    // FNV-1a: the same in every process of the group (forked from one program).
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    h.write(&kind.as_raw().to_ne_bytes());
    for part in [&local, &peer] {
        // The address's bytes as the kernel wrote them, their length first (none: empty).
        match part {
            Some(addr) => addr.hash(&mut h),
            None => h.write_usize(0),
        }
    }
    Some(h.finish().max(1))
}

/// FNV-1a over the bytes fed to it.
struct Fnv(u64);

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Does this address name the socket (not port 0, not an empty Unix path)?
fn named(addr: &SocketAddrAny) -> bool {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketAddrV4, SocketAddrV6};
    match addr.address_family() {
        AddressFamily::INET => SocketAddrV4::try_from(addr.clone()).is_ok_and(|a| a.port() != 0),
        AddressFamily::INET6 => SocketAddrV6::try_from(addr.clone()).is_ok_and(|a| a.port() != 0),
        AddressFamily::UNIX => SocketAddrUnix::try_from(addr.clone())
            .is_ok_and(|a| a.path_bytes().is_some_and(|p| !p.is_empty())),
        AddressFamily::UNSPEC => false,
        _ => true,
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
        use rustix::net::{socket, AddressFamily, SocketType};
        let udp = socket(AddressFamily::INET, SocketType::DGRAM, None).unwrap();
        assert_eq!(
            socket_identity(udp.as_raw_fd()),
            None,
            "an unbound UDP socket has a name"
        );
    }
}
