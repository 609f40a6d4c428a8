//! Signal sets and the calling thread's signal mask on Linux, for the poll-shaped wait
//! (`crate::poll::signals`) and the nested waiter's thread (`crate::nest`): the calls through
//! nix (`pthread_sigmask`, and the signalfd in `poll::signals`), the sets computed here.

use nix::sys::signal::{SigSet, SigmaskHow};
use std::ffi::{c_int, c_ulong};

/// A signal set as C's `sigset_t` holds it on Linux (glibc, musl and bionic alike): signal `n`
/// is bit `(n - 1) % BITS` of word `(n - 1) / BITS`, words of an `unsigned long`. nix's
/// `SigSet` makes the calls, but only knows the standard signals one by one (not the real-time
/// ones, which a wait blocks and watches too): the sets are computed here, bit by bit.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(transparent)]
pub(crate) struct Bits([c_ulong; WORDS]);

const WORDS: usize = std::mem::size_of::<libc::sigset_t>() / std::mem::size_of::<c_ulong>();
// sigset_t is a whole number of words, aligned no more strictly than one.
const _: () = assert!(
    std::mem::size_of::<libc::sigset_t>() % std::mem::size_of::<c_ulong>() == 0
        && std::mem::align_of::<libc::sigset_t>() <= std::mem::align_of::<c_ulong>()
);

impl Bits {
    pub(crate) const EMPTY: Bits = Bits([0; WORDS]);

    /// The bits of `set`, which must be one of herdless's own (every word written: made by
    /// `to_set`, then filled by the kernel), not one of nix's `SigSet::empty`, `SigSet::all` or
    /// `thread_get_mask`, whose words the C library or the kernel did not write are
    /// uninitialised.
    pub(crate) fn of(set: &SigSet) -> Bits {
        let mut bits = Bits::EMPTY;
        *bits.as_sigset_mut() = *set.as_ref();
        bits
    }

    /// The same memory as a `sigset_t`, for the calls that fill one.
    fn as_sigset_mut(&mut self) -> &mut libc::sigset_t {
        // SAFETY: `Bits` is its array of words (repr(transparent)), and sigset_t is plain data
        // of exactly that size, aligned no more strictly than the words (asserted above), and any bit pattern is a valid value of either type; the
        // borrow is unique and lives as long as `self`'s.
        unsafe { &mut *(self as *mut Bits).cast::<libc::sigset_t>() }
    }

    pub(crate) fn to_set(mut self) -> SigSet {
        let raw = *self.as_sigset_mut();
        // SAFETY: an initialised sigset_t: every word was written (zeroed, then bits set or
        // cleared here, or filled by the kernel); nix asks no more.
        unsafe { SigSet::from_sigset_t_unchecked(raw) }
    }

    fn word_and_bit(sig: c_int) -> Option<(usize, c_ulong)> {
        let bits = c_ulong::BITS as usize;
        let n = usize::try_from(sig).ok()?.checked_sub(1)?;
        (n / bits < WORDS).then(|| (n / bits, 1 << (n % bits)))
    }

    pub(crate) fn add(&mut self, sig: c_int) {
        if let Some((word, bit)) = Bits::word_and_bit(sig) {
            self.0[word] |= bit;
        }
    }

    pub(crate) fn remove(&mut self, sig: c_int) {
        if let Some((word, bit)) = Bits::word_and_bit(sig) {
            self.0[word] &= !bit;
        }
    }

    pub(crate) fn has(&self, sig: c_int) -> bool {
        Bits::word_and_bit(sig).is_some_and(|(word, bit)| self.0[word] & bit != 0)
    }

    /// The signals of `self` that are not in `other`.
    pub(crate) fn minus(&self, other: &Bits) -> Bits {
        let mut out = *self;
        for (o, y) in out.0.iter_mut().zip(other.0) {
            *o &= !y;
        }
        out
    }
}

/// What `sigfillset` gives, built from zero: every signal but the C library's own, those from
/// 32 up to `SIGRTMIN()` (glibc's SIGCANCEL and SIGSETXID, musl's three). (glibc's
/// sigemptyset and sigfillset write only the words the kernel uses, so nix's `SigSet::empty`
/// and `SigSet::all` leave the others uninitialised: herdless makes its sets itself.)
pub(crate) fn full() -> Bits {
    let mut set = Bits::EMPTY;
    for sig in (1..32).chain(libc::SIGRTMIN()..=max_signal()) {
        set.add(sig);
    }
    set
}

pub(crate) fn io_error(e: nix::Error) -> std::io::Error {
    std::io::Error::from_raw_os_error(e as i32)
}

/// Changes the calling thread's mask (`how` with `set`; none: only reads it) and returns the
/// mask it had (in a set that starts empty: the kernel writes only the words it uses).
pub(crate) fn change_mask(how: SigmaskHow, set: Option<&Bits>) -> std::io::Result<Bits> {
    let mut old = Bits::EMPTY.to_set();
    let set = set.map(|s| s.to_set());
    nix::sys::signal::pthread_sigmask(how, set.as_ref(), Some(&mut old)).map_err(io_error)?;
    Ok(Bits::of(&old))
}

/// Is a signal of `watched` pending (for the calling thread or its process: `sigpending`) whose
/// action is a handler (not SIG_DFL, not SIG_IGN)? Neither call is in nix (its `sigaction`
/// always installs an action: this only reads them).
pub(crate) fn handler_pending_among(watched: &Bits) -> bool {
    let mut pending = Bits::EMPTY;
    let mut action = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: sigpending only fills the live set it is given; sigaction with a NULL new action
    // only reads the current one into the live struct, zeroed before (plain data: all-zero is
    // a valid value), so it is initialised whether or not the call wrote it; signal numbers
    // from 1 to SIGRTMAX.
    unsafe {
        libc::sigpending(pending.as_sigset_mut()) == 0
            && (1..=max_signal()).any(|sig| {
                pending.has(sig)
                    && watched.has(sig)
                    && libc::sigaction(sig, std::ptr::null(), action.as_mut_ptr()) == 0
                    && ![libc::SIG_DFL, libc::SIG_IGN]
                        .contains(&action.assume_init_ref().sa_sigaction)
            })
    }
}

pub(crate) fn max_signal() -> c_int {
    libc::SIGRTMAX()
}
