//! Windows: what the emulation checks before `polling`'s IOCP backend may watch a socket.
//!
//! On Windows `polling` watches sockets only, and accepts any number as one: a handle that is not
//! an open socket is added without complaint and then never reported. So herdless asks Winsock
//! itself (`getsockopt(SO_TYPE)`, one cheap call) before it registers or arms a socket, and
//! refuses what is not one with the same typed errors as on Unix: `BadDescriptor` for a handle
//! that is not open, `UnwatchableDescriptor` for an open handle that is not a socket.
//!
//! The same check runs on every socket in the member's poller before each kernel wait: a socket
//! closed while registered (without `delete`) is deleted from the poller and forgotten, as the
//! kernel forgets a closed descriptor on Unix. This keeps herdless clear of a deadlock in
//! polling 3.11's IOCP backend, which locks a socket's state twice when it sees the close itself
//! (`patches/polling` holds the fix, used by herdless's own builds only). What remains: a socket
//! closed by another thread while a member already sleeps in the kernel wait, or closed and its
//! handle number reused by a new socket before the next wait; with an unfixed polling, delete a
//! socket before closing it.

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
    // live `kind`; a handle that is not a socket makes it fail with WSAENOTSOCK.
    let r = unsafe {
        getsockopt(
            fd as SOCKET,
            SOL_SOCKET,
            SO_TYPE,
            (&mut kind as *mut i32).cast(),
            &mut len,
        )
    };
    if r == 0 {
        return Ok(());
    }
    // SAFETY: reads this thread's last Winsock error; no arguments.
    match unsafe { WSAGetLastError() } {
        // Winsock never started in this process: no socket can be open in it.
        WSANOTINITIALISED => Err(Error::BadDescriptor { fd }),
        WSAENOTSOCK if handle_is_open(fd) => Err(Error::UnwatchableDescriptor {
            fd,
            reason: "not a socket: on Windows the poller watches sockets only",
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
    /// Before a kernel wait: forgets the sockets in the poller that are no longer open (closed
    /// without `delete`), deleting them from the poller first (see the module's text).
    pub(super) fn forget_closed_sockets(&mut self, tk: &Protocol<'_>) {
        while let Some(fd) = self
            .registrations
            .iter()
            .find(|(&fd, reg)| reg.in_poller && check_socket(fd).is_err())
            .map(|(&fd, _)| fd)
        {
            let _ = self.forget(tk, fd);
        }
    }
}
