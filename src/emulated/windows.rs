//! Windows: what the emulation checks before its IOCP poller may watch a socket.
//!
//! On Windows the poller (`super::poller`: herdless's copy of polling 3.11's IOCP backend, with
//! its closed-socket deadlock fixed) watches sockets only, and accepts any number as one: a
//! handle that is not an open socket is added without complaint and then never reported. So
//! herdless asks Winsock itself (`getsockopt(SO_TYPE)`, one cheap call) before it registers or
//! arms a socket, and refuses what is not one with the same typed errors as on Unix:
//! `BadDescriptor` for a handle that is not open, `UnwatchableDescriptor` for an open handle that
//! is not a socket.
//!
//! A registered socket closed without `delete` is forgotten, as the kernel forgets a closed
//! descriptor on Unix (`crate::registry`'s lifecycle): the poller drops its own entry when it
//! sees the close (an AFD `LOCAL_CLOSE`, without reporting it), and before each kernel wait the
//! member checks every registration it watches or is about to watch (those in its poller, and
//! its exclusive ones, which it arms when it leads them) and forgets those whose number is no
//! longer an open socket: closed, or reused by a handle of another kind. Never reported: a wait
//! goes on serving the other registrations. What this cannot see (on Windows a socket has no
//! file identity to compare, unlike `registry::FileId` on Unix): a number closed and reused by
//! another socket before the member's next wait keeps the old registration, which then watches
//! the new socket; delete a socket before closing it where numbers are reused that fast.

use windows_sys::Win32::Foundation::{GetHandleInformation, HANDLE};
use windows_sys::Win32::Networking::WinSock::{
    getsockopt, WSAGetLastError, SOCKET, SOL_SOCKET, SO_TYPE, WSAENOTSOCK, WSANOTINITIALISED,
};

use super::protocol::Protocol;
use super::EmulatedWaiter;
use crate::error::{Error, RawSource, Result};

/// Is `fd` an open socket? The typed refusal if not.
pub(super) fn check_socket(fd: RawSource) -> Result<()> {
    let mut kind: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as i32;
    // SAFETY: getsockopt only reads the handle number and writes at most `len` bytes into the
    // live `kind`; a handle that is not a socket makes it fail with WSAENOTSOCK, which
    // WSAGetLastError (no arguments) reads back at once, on the same thread.
    let (r, error) = unsafe {
        let r = getsockopt(
            fd as SOCKET,
            SOL_SOCKET,
            SO_TYPE,
            (&mut kind as *mut i32).cast(),
            &mut len,
        );
        (r, if r == 0 { 0 } else { WSAGetLastError() })
    };
    if r == 0 {
        return Ok(());
    }
    match error {
        // Winsock never started in this process: no socket can be open in it.
        WSANOTINITIALISED => Err(Error::BadDescriptor { fd }),
        WSAENOTSOCK if handle_is_open(fd) => Err(Error::UnwatchableDescriptor {
            fd,
            reason: "not a socket: on Windows the poller watches sockets only; register a socket",
        }),
        WSAENOTSOCK => Err(Error::BadDescriptor { fd }),
        code => Err(Error::io(
            "inspecting a socket",
            std::io::Error::from_raw_os_error(code),
        )),
    }
}

/// Is `fd` an open handle of any kind?
fn handle_is_open(fd: RawSource) -> bool {
    let mut flags = 0u32;
    // SAFETY: GetHandleInformation only reads the handle number and writes the live `flags`;
    // a handle that is not open makes it fail.
    unsafe { GetHandleInformation(fd as usize as HANDLE, &mut flags) != 0 }
}

impl EmulatedWaiter {
    /// Before a kernel wait: forgets the registrations the member watches or may arm now (in
    /// the poller, or exclusive) whose number is no longer an open socket (closed without
    /// `delete`), deleting them from the poller first (see the module's text).
    pub(super) fn forget_closed_sockets(&mut self, tk: &Protocol<'_>) {
        while let Some(fd) = self
            .registrations
            .iter()
            .find(|(&fd, reg)| (reg.in_poller || reg.source.is_some()) && check_socket(fd).is_err())
            .map(|(&fd, _)| fd)
        {
            let _ = self.forget(tk, fd);
        }
    }
}
