//! The soak's ledger: one table that the supervisor and every exec'd server map (a `memfd` the
//! supervisor makes and hands to each server it execs, mapped `MAP_SHARED`, atomics only), so
//! that each request's fate is written where it happens and survives the process that wrote
//! it, SIGKILL included:
//!
//! - the client stamps a request (its queue, the time it was sent) just before `mq_send`, and
//!   marks it refused if the queue was full;
//! - the server that receives it counts the read right after `mq_receive`, before anything else
//!   (then the time of the read), so a second read of one request shows as a count of 2;
//! - each server has a slot: its state, the supervisor's order to leave, its counters, the error
//!   that stopped it, and a *receiving* mark it sets just before `mq_receive` and clears once
//!   the read is counted. A server SIGKILLed with the mark set may have taken one request with
//!   it (the only way a request can leave a queue unrecorded), which is how the report tells a
//!   request a killed server took from one the library lost;
//! - the supervisor marks the requests it finds left in a queue at its end (stranded).
//!
//! Layout, in 64-bit words: a header, then `slots` server slots, then `records` request records.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use herdless_fixtures::SharedCounters;

/// Header words.
const MAGIC: usize = 0;
const PHASE: usize = 1;
const NEXT_ID: usize = 2;
const INJECTION: usize = 3;
const HEADER_WORDS: usize = 8;
const MAGIC_VALUE: u64 = 0x6865_7264_736f_616b; // "herdsoak"

/// Words per server slot, and the slot's fields.
const SLOT_WORDS: usize = 32;
const PID: usize = 0;
const STATE: usize = 1;
const LEAVE: usize = 2;
const RECEIVING: usize = 3;
const READS: usize = 4;
const EMPTY: usize = 5;
const TIMEOUTS: usize = 6;
const INTERRUPTED: usize = 7;
const WAITS: usize = 8;
const SIGNALS: usize = 9;
const BAD_IDS: usize = 10;
const ERROR_LEN: usize = 11;
const INJECTED: usize = 12;
const ERROR_TEXT: usize = 13;
/// The longest error text a slot keeps, in bytes (the rest of the slot).
const ERROR_BYTES: usize = (SLOT_WORDS - ERROR_TEXT) * 8;

/// Words per request record, and the record's fields.
const RECORD_WORDS: usize = 4;
const SENT_NS: usize = 0;
const READ_NS: usize = 1;
const READ_COUNT: usize = 2;
const META: usize = 3;

/// Flags in a record's meta word, below the queue number (`queue << 8`).
pub const REFUSED: u64 = 1;
pub const STRANDED: u64 = 2;
pub const UNSERVED: u64 = 4;

/// What the servers are told about the run: traffic and signals on, off, or the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Load = 0,
    Quiet = 1,
    End = 2,
}

/// A server's state in its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Unused = 0,
    Starting = 1,
    Ready = 2,
    Left = 3,
    Failed = 4,
}

impl State {
    fn of(v: u64) -> State {
        match v {
            1 => State::Starting,
            2 => State::Ready,
            3 => State::Left,
            4 => State::Failed,
            _ => State::Unused,
        }
    }
}

pub struct Ledger {
    words: SharedCounters,
    slots: usize,
    records: usize,
    /// The memfd behind the table (the supervisor's; a server closes its copy once mapped).
    file: Option<OwnedFd>,
}

impl Ledger {
    fn words_for(slots: usize, records: usize) -> usize {
        HEADER_WORDS + slots * SLOT_WORDS + records * RECORD_WORDS
    }

    /// The supervisor's: a fresh zeroed table for `slots` servers and `records` requests.
    pub fn create(slots: usize, records: usize) -> io::Result<Ledger> {
        let len = Ledger::words_for(slots, records);
        let file = crate::exec::memfd(len)?;
        let words = SharedCounters::in_file(file.as_fd(), len)?;
        words.get(MAGIC).store(MAGIC_VALUE, SeqCst);
        Ok(Ledger {
            words,
            slots,
            records,
            file: Some(file),
        })
    }

    /// An exec'd server's: maps the table it inherited as descriptor `fd`.
    ///
    /// # Safety
    /// As [`crate::exec::inherited`]: `fd` was left open for this process alone, taken once.
    pub unsafe fn inherited(fd: RawFd, slots: usize, records: usize) -> io::Result<Ledger> {
        let len = Ledger::words_for(slots, records);
        // SAFETY: the caller's promise.
        let words = unsafe { crate::exec::inherited_counters(fd, len) }?;
        if words.get(MAGIC).load(SeqCst) != MAGIC_VALUE {
            return Err(io::Error::other("the inherited ledger is not the soak's"));
        }
        Ok(Ledger {
            words,
            slots,
            records,
            file: None,
        })
    }

    /// The descriptor to hand to an exec'd server.
    pub fn fd(&self) -> RawFd {
        self.file.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    pub fn records(&self) -> usize {
        self.records
    }

    pub fn phase(&self) -> Phase {
        match self.words.get(PHASE).load(SeqCst) {
            0 => Phase::Load,
            1 => Phase::Quiet,
            _ => Phase::End,
        }
    }

    pub fn set_phase(&self, phase: Phase) {
        self.words.get(PHASE).store(phase as u64, SeqCst);
    }

    /// The next request id (`None` once the table is full).
    pub fn take_id(&self) -> Option<usize> {
        let id = self.words.get(NEXT_ID).fetch_add(1, SeqCst) as usize;
        (id < self.records).then_some(id)
    }

    /// How many ids were handed out (at most `records`).
    pub fn ids_taken(&self) -> usize {
        (self.words.get(NEXT_ID).load(SeqCst) as usize).min(self.records)
    }

    /// True for the first caller only: the server that injects `--inject`'s fault.
    pub fn claim_injection(&self) -> bool {
        let word = self.words.get(INJECTION);
        word.compare_exchange(0, 1, SeqCst, SeqCst).is_ok()
    }

    pub fn slot(&self, i: usize) -> Slot<'_> {
        assert!(i < self.slots, "slot {i} of {}", self.slots);
        Slot(Words {
            all: &self.words,
            base: HEADER_WORDS + i * SLOT_WORDS,
        })
    }

    /// Request `id`'s record, if `id` is one the table has.
    pub fn record(&self, id: u64) -> Option<Record<'_>> {
        let id = usize::try_from(id).ok().filter(|&i| i < self.records)?;
        Some(Record(Words {
            all: &self.words,
            base: HEADER_WORDS + self.slots * SLOT_WORDS + id * RECORD_WORDS,
        }))
    }
}

/// The words of one slot or record: field `i` is word `base + i` of the table.
struct Words<'a> {
    all: &'a SharedCounters,
    base: usize,
}

impl Words<'_> {
    fn word(&self, field: usize) -> &AtomicU64 {
        self.all.get(self.base + field)
    }
}

/// One server's slot.
pub struct Slot<'a>(Words<'a>);

impl Slot<'_> {
    fn word(&self, field: usize) -> &AtomicU64 {
        self.0.word(field)
    }

    pub fn state(&self) -> State {
        State::of(self.word(STATE).load(SeqCst))
    }

    pub fn set_state(&self, state: State) {
        self.word(STATE).store(state as u64, SeqCst);
    }

    pub fn pid(&self) -> &AtomicU64 {
        self.word(PID)
    }

    /// The supervisor's order to leave (1).
    pub fn leave(&self) -> &AtomicU64 {
        self.word(LEAVE)
    }

    /// The queue number + 1 while a receive is in progress (0 otherwise).
    pub fn receiving(&self) -> &AtomicU64 {
        self.word(RECEIVING)
    }

    /// Requests this server received and counted.
    pub fn reads(&self) -> &AtomicU64 {
        self.word(READS)
    }

    /// Receives that found nothing (`EAGAIN`).
    pub fn empty(&self) -> &AtomicU64 {
        self.word(EMPTY)
    }

    /// Waits that returned no event after their whole 50 ms (less 1 ms): the loop's own timeouts.
    pub fn timeouts(&self) -> &AtomicU64 {
        self.word(TIMEOUTS)
    }

    /// Waits a signal ended early (`Events::interrupted`).
    pub fn interrupted(&self) -> &AtomicU64 {
        self.word(INTERRUPTED)
    }

    pub fn waits(&self) -> &AtomicU64 {
        self.word(WAITS)
    }

    /// SIGALRMs whose handler ran.
    pub fn signals(&self) -> &AtomicU64 {
        self.word(SIGNALS)
    }

    /// Messages whose id is not in the table (must stay 0).
    pub fn bad_ids(&self) -> &AtomicU64 {
        self.word(BAD_IDS)
    }

    /// The id + 1 of the request this server lost on purpose (`--inject lose`), or 0: such a
    /// loss is never put down to a killed server.
    pub fn injected(&self) -> &AtomicU64 {
        self.word(INJECTED)
    }

    /// Keeps `text` (cut to the slot's room) as the error that stopped this server.
    pub fn set_error(&self, text: &str) {
        let mut bytes = text.as_bytes().to_vec();
        bytes.truncate(ERROR_BYTES);
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.word(ERROR_TEXT + i)
                .store(u64::from_ne_bytes(word), SeqCst);
        }
        self.word(ERROR_LEN).store(bytes.len() as u64, SeqCst);
    }

    pub fn error(&self) -> String {
        let len = (self.word(ERROR_LEN).load(SeqCst) as usize).min(ERROR_BYTES);
        let bytes: Vec<u8> = (0..len.div_ceil(8))
            .flat_map(|i| self.word(ERROR_TEXT + i).load(SeqCst).to_ne_bytes())
            .take(len)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// One request's record.
pub struct Record<'a>(Words<'a>);

impl Record<'_> {
    fn word(&self, field: usize) -> &AtomicU64 {
        self.0.word(field)
    }

    /// The client's: before the send, the queue and the time (CLOCK_MONOTONIC ns, never 0).
    pub fn stamp(&self, queue: u64, sent_ns: u64) {
        self.word(META).store(queue << 8, SeqCst);
        self.word(SENT_NS).store(sent_ns, SeqCst);
    }

    /// A server's, right after `mq_receive`: counts the read, then keeps the first read's time.
    pub fn mark_read(&self, read_ns: u64) {
        self.word(READ_COUNT).fetch_add(1, SeqCst);
        let _ = self
            .word(READ_NS)
            .compare_exchange(0, read_ns, SeqCst, SeqCst);
    }

    pub fn flag(&self, flag: u64) {
        self.word(META).fetch_or(flag, SeqCst);
    }

    pub fn sent_ns(&self) -> u64 {
        self.word(SENT_NS).load(SeqCst)
    }

    pub fn read_ns(&self) -> u64 {
        self.word(READ_NS).load(SeqCst)
    }

    pub fn reads(&self) -> u64 {
        self.word(READ_COUNT).load(SeqCst)
    }

    pub fn queue(&self) -> u64 {
        self.word(META).load(SeqCst) >> 8
    }

    pub fn flags(&self) -> u64 {
        self.word(META).load(SeqCst) & 0xff
    }
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process of the machine.
pub fn now_ns() -> u64 {
    // SAFETY: timespec is plain data; clock_gettime fills it.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock and a live out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}
