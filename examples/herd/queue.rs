//! The shared descriptor a lab workload pushes messages through: a pipe or a POSIX message
//! queue, carrying 8-byte message ids. One `Producer` sends (blocking when full); every waiter
//! receives one message per wake-up from the shared, non-blocking `Consumer` side; `finish`
//! tells every waiter to stop (end of file on a pipe, one sentinel per waiter on a queue).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::mqueue::{mq_open, mq_receive, mq_send, mq_unlink, MQ_OFlag, MqAttr, MqdT};
use nix::sys::stat::Mode;

/// The id that tells a message-queue waiter to stop.
const END: u64 = u64::MAX;

/// Which kind of shared descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Pipe,
    Mq,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Pipe => "pipe",
            Kind::Mq => "mq",
        })
    }
}

/// What a waiter found when it tried to receive.
pub enum Received {
    Message(u64),
    /// Nothing there: an empty wake-up.
    Empty,
    /// The producer is done.
    End,
}

/// The producer's side of a queue.
pub enum Producer {
    Pipe(OwnedFd),
    Mq(MqdT),
}

/// The waiters' side of a queue: non-blocking, shared by every waiter.
pub enum Consumer {
    Pipe(OwnedFd),
    Mq {
        read: MqdT,
        name: String,
        depth: i64,
    },
}

/// Opens a fresh queue of `kind`.
pub fn open(kind: Kind) -> io::Result<(Producer, Consumer)> {
    match kind {
        Kind::Pipe => {
            let (read, write) = nix::unistd::pipe()?;
            nix::fcntl::fcntl(
                read.as_raw_fd(),
                nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
            )?;
            Ok((Producer::Pipe(write), Consumer::Pipe(read)))
        }
        Kind::Mq => open_mq(),
    }
}

impl Producer {
    /// Sends one id, blocking while the queue is full.
    pub fn send(&self, id: u64) -> io::Result<()> {
        match self {
            Producer::Pipe(fd) => {
                let n = nix::unistd::write(fd, &id.to_ne_bytes())?;
                assert_eq!(n, 8, "pipe writes of 8 bytes are atomic");
                Ok(())
            }
            Producer::Mq(mq) => Ok(mq_send(mq, &id.to_ne_bytes(), 0)?),
        }
    }

    /// Tells `waiters` waiters to stop: end of file on a pipe, one sentinel each on a queue.
    pub fn finish(self, waiters: usize) -> io::Result<()> {
        match self {
            Producer::Pipe(fd) => {
                drop(fd);
                Ok(())
            }
            Producer::Mq(mq) => {
                for _ in 0..waiters {
                    mq_send(&mq, &END.to_ne_bytes(), 0)?;
                }
                Ok(())
            }
        }
    }
}

impl Consumer {
    /// The descriptor the waiters register.
    pub fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Consumer::Pipe(read) => read.as_fd(),
            Consumer::Mq { read, .. } => read.as_fd(),
        }
    }

    /// Receives one id without blocking.
    pub fn receive(&self) -> io::Result<Received> {
        let mut buf = [0u8; 8];
        let n = match self {
            Consumer::Pipe(read) => nix::unistd::read(read.as_raw_fd(), &mut buf),
            Consumer::Mq { read, .. } => mq_receive(read, &mut buf, &mut 0),
        };
        match n {
            Ok(8) => match u64::from_ne_bytes(buf) {
                END => Ok(Received::End),
                id => Ok(Received::Message(id)),
            },
            Ok(0) => Ok(Received::End),
            Ok(n) => Err(io::Error::other(format!("short message of {n} bytes"))),
            Err(nix::errno::Errno::EAGAIN) => Ok(Received::Empty),
            Err(e) => Err(e.into()),
        }
    }

    /// What the queue is, for the report.
    pub fn describe(&self) -> String {
        match self {
            Consumer::Pipe(_) => "pipe (64 KiB buffer)".into(),
            Consumer::Mq { depth, .. } => format!("POSIX message queue, depth {depth}"),
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if let Consumer::Mq { name, .. } = self {
            let _ = mq_unlink(name.as_str());
        }
    }
}

/// Opens a fresh message queue as deep as the system allows (root may exceed msg_max).
fn open_mq() -> io::Result<(Producer, Consumer)> {
    let name = format!("/herdless-lab-{}", std::process::id());
    let _ = mq_unlink(name.as_str());
    let mut last = None;
    for depth in [8192, 1024, 256, 64, 10] {
        let attr = MqAttr::new(0, depth, 8, 0);
        let flags = MQ_OFlag::O_CREAT | MQ_OFlag::O_EXCL | MQ_OFlag::O_WRONLY;
        match mq_open(
            name.as_str(),
            flags,
            Mode::S_IRUSR | Mode::S_IWUSR,
            Some(&attr),
        ) {
            Ok(write) => {
                let read = mq_open(
                    name.as_str(),
                    MQ_OFlag::O_RDONLY | MQ_OFlag::O_NONBLOCK,
                    Mode::empty(),
                    None,
                )?;
                return Ok((Producer::Mq(write), Consumer::Mq { read, name, depth }));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(io::Error::other(format!(
        "cannot create a POSIX message queue: {}",
        last.map(|e| e.desc()).unwrap_or("unknown")
    )))
}
