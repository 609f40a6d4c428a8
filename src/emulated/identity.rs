//! Which open file a descriptor is, for the emulation: one token per open file (and per
//! direction of a pipe), whatever the descriptor number, the duplicate or the process. Also what
//! has no identity the members could share (regular files and directories, anonymous inodes,
//! on macOS and the BSDs what `other_unix` names), refused as exclusive with a typed error.

#[cfg(unix)]
use crate::error::Error;
use crate::error::{RawSource, Result};

/// The identity of the open file behind `fd` and its direction (non-zero), shared by every
/// process and every duplicate of it; refuses what no backend can watch.
#[cfg(unix)]
pub(super) fn identify(fd: RawSource) -> Result<u64> {
    let st = crate::sys::unix::fstat(fd).map_err(|e| match e.raw_os_error() {
        Some(libc::EBADF) => Error::BadDescriptor { fd },
        _ => Error::io("inspecting a descriptor", e),
    })?;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG if !is_message_queue(fd) => {
            return Err(Error::UnwatchableDescriptor {
                fd,
                reason: "a regular file is always ready; readiness polling does not apply: read \
                         it without waiting for it",
            })
        }
        libc::S_IFDIR => {
            return Err(Error::UnwatchableDescriptor {
                fd,
                reason: "a directory cannot be polled; watch a pipe, a socket or a queue instead",
            })
        }
        _ => {}
    }
    // macOS and the BSDs: a descriptor whose fstat gives no identity (see `other_unix`).
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    if super::other_unix::has_no_identity(&st) {
        if let Some(id) = super::other_unix::identity_without_inode(fd, &st) {
            return Ok(id);
        }
    }
    // The two ends of a pipe (or FIFO) share one device and inode: the access mode tells them
    // apart, and it is the same in every duplicate and every process.
    let mode = match crate::sys::unix::status_flags(fd) {
        Err(_) => 0,
        Ok(flags) => (flags & libc::O_ACCMODE) as u64,
    };
    let mix = |mut x: u64| {
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    };
    Ok(mix(mix(mix(st.st_dev as u64) ^ st.st_ino as u64) ^ mode).max(1))
}

/// Anonymous-inode descriptors (eventfd, timerfd, signalfd, epoll, pidfd) all share one inode,
/// so the emulation cannot tell two of them apart across members: refused as exclusive.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn refuse_anonymous(fd: RawSource) -> Result<()> {
    let target = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap_or_default();
    if target.to_string_lossy().starts_with("anon_inode:") {
        return Err(Error::UnwatchableDescriptor {
            fd,
            reason: "an anonymous-inode descriptor (eventfd, timerfd, signalfd, epoll) has no \
                     identity the emulation can share between members: register it without \
                     exclusive, or use the native backend",
        });
    }
    Ok(())
}

/// macOS and the BSDs: what has no identity there (see `other_unix`).
#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
pub(super) use super::other_unix::refuse_anonymous;

#[cfg(not(unix))]
pub(super) fn refuse_anonymous(_fd: RawSource) -> Result<()> {
    Ok(())
}

/// Is `fd` a POSIX message queue? (Linux shows them as regular files of the mqueue file
/// system, and they are pollable.)
#[cfg(any(target_os = "linux", target_os = "android"))]
fn is_message_queue(fd: RawSource) -> bool {
    const MQUEUE_MAGIC: i64 = 0x1980_0202;
    crate::sys::unix::by_number(fd)
        .and_then(|fd| Ok(rustix::fs::fstatfs(fd)?))
        // (The field's type varies by target: i64 here, 32 bits on some.)
        .is_ok_and(|fs| {
            #[allow(clippy::unnecessary_cast)]
            let kind = fs.f_type as i64;
            kind == MQUEUE_MAGIC
        })
}

/// Elsewhere no queue looks like a regular file: macOS has no POSIX message queues, and a
/// FreeBSD queue's descriptor (`mq_getfd_np`) is a FIFO-like file with no identity, which
/// `other_unix` refuses as exclusive.
#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
fn is_message_queue(_fd: RawSource) -> bool {
    false
}

/// On Windows members are threads of one process: the socket number is the identity.
#[cfg(windows)]
pub(super) fn identify(fd: RawSource) -> Result<u64> {
    #[cfg(not(loom))]
    super::windows::check_socket(fd)?;
    Ok(fd.wrapping_add(1).max(1))
}
