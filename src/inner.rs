//! What a [`Group`](crate::Group) and its [`Waiter`](crate::Waiter)s share: the backend chosen,
//! the rotation, the shared memory with its member table, the liveness marks, and for the
//! emulation its door bells. Below both handles, so that neither imports the other to reach it
//! (`group.rs` builds it and hands it to `waiter.rs`); above the backends, which get from it
//! only what they need (the emulation: the protocol's view, [`GroupInner::protocol`]).

use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use crate::contract::{Backend, Rotation};
use crate::doorbell::Doorbells;
use crate::emulated::{EmulatedGroup, Protocol};
use crate::error::Error;
use crate::error::Result;
use crate::members::Members;
use crate::shared::{RegionSpec, Settings, SharedState};

/// What a group of these settings keeps in its shared memory after the member slots: its
/// backend's region (the emulation's source table, the native backend's hints).
pub(crate) fn region_for(settings: &Settings) -> RegionSpec {
    match settings.backend {
        Backend::Emulated => crate::emulated::region(settings),
        _ => crate::sys::native::region(settings),
    }
}

/// What all members of a group share.
pub(crate) struct GroupInner {
    pub(crate) backend: Backend,
    pub(crate) rotation: Rotation,
    /// Shared with the native waiters, which keep it for their rotation hints.
    pub(crate) shared: Arc<SharedState>,
    /// Each member's liveness mark, so that a dead member's slot is found and reused.
    pub(crate) live: crate::liveness::Liveness,
    /// The emulation's door bells (only for `Backend::Emulated`).
    pub(crate) emulation: Option<EmulatedGroup>,
    /// The native members' door bells, through which readiness is handed on (only for
    /// `Backend::Native`; shared with this process's native waiters).
    pub(crate) native_bells: Option<Arc<Doorbells>>,
    /// The name of a named group.
    pub(crate) name: Option<String>,
}

impl GroupInner {
    /// What a group's handles share, for the group in `shared` (backend, rotation and size as
    /// its preamble says), with its liveness marks.
    pub(crate) fn new(
        shared: SharedState,
        live: crate::liveness::Liveness,
        name: Option<String>,
    ) -> Result<GroupInner> {
        // The cached process id's fork handler is installed here, when the group is made
        // (before any fork, as the group's contract asks), not first in a forked child's join:
        // a child forked while another thread was installing it would wait on that `Once`
        // for ever (seen: the door bells ask for the id at every join).
        crate::pid::current();
        let settings = shared.settings();
        // A named group's region, written by another process, is checked before it is used.
        let region = match settings.backend {
            Backend::Emulated => crate::emulated::check_region(&shared),
            _ => crate::sys::native::check_region(&shared),
        };
        region.map_err(|reason| Error::CorruptGroup {
            name: name.clone().unwrap_or_default(),
            reason,
        })?;
        let emulation = match settings.backend {
            Backend::Emulated => Some(EmulatedGroup::new(&shared)?),
            _ => None,
        };
        let native_bells = match settings.backend {
            Backend::Native => Some(Arc::new(Doorbells::new(
                shared.incarnation(),
                settings.capacity,
            )?)),
            _ => None,
        };
        Ok(GroupInner {
            backend: settings.backend,
            rotation: settings.rotation,
            shared: Arc::new(shared),
            live,
            emulation,
            native_bells,
            name,
        })
    }

    /// The group's settings (as its shared preamble held them when it was opened).
    #[cfg_attr(any(not(unix), loom), allow(dead_code))] // named groups only
    pub(crate) fn settings(&self) -> Settings {
        self.shared.settings()
    }

    /// The emulation's view of this group (its protocol's shared state, door bells, liveness
    /// marks and turn setting), which the emulated backend works on. Emulated groups only.
    pub(crate) fn protocol(&self) -> Protocol<'_> {
        self.emulation
            .as_ref()
            .expect("an emulated waiter belongs to an emulated group")
            .protocol(&self.shared, &self.live, self.rotation)
    }

    /// The member table: every change of a member slot's state goes through it.
    pub(crate) fn members(&self) -> Members<'_> {
        Members::new(&self.shared, &self.live)
    }

    /// Clears out the slots of members of process `pid` (of every process: `None`) that died
    /// without leaving, and reaps whose reaper died, so that what they held is handed on and
    /// their slots can be joined again: the emulation frees their holds and passes their tokens
    /// on; natively a readiness on a dead member's ready list went with it, so an idle member
    /// looks (the next one in the group's hand-on order).
    pub(crate) fn reap_dead(&self, pid: Option<u32>) {
        match self.emulation {
            Some(_) => {
                self.protocol().reap_dead(pid);
            }
            None => {
                if self.reap_dead_natively(pid) {
                    self.ring_marked_bells();
                }
            }
        }
    }

    /// The native reap: what the dead members of `pid` took with them is handed on. Returns
    /// whether it reaped any.
    fn reap_dead_natively(&self, pid: Option<u32>) -> bool {
        let members = self.members();
        let me = std::process::id();
        let mut any = false;
        for m in 0..self.shared.high() {
            if pid.is_some_and(|p| self.shared.member(m).pid.load(SeqCst) != p) {
                continue;
            }
            let Some(seen) = members.dead(m, me) else {
                continue;
            };
            let reaped = members.reap(m, seen, me, |slot, _| {
                crate::sys::native::clear_out(&self.shared, slot)
            });
            if let (true, Some(bells)) = (reaped, &self.native_bells) {
                crate::sys::native::ring_idle(&self.shared, bells, None);
            }
            any |= reaped;
        }
        any
    }

    /// After a native reap: every member whose bell is marked rung is rung again (see
    /// `crate::doorbell::ring_marked`).
    fn ring_marked_bells(&self) {
        if let Some(bells) = &self.native_bells {
            crate::doorbell::ring_marked(&self.shared, bells);
        }
    }
}

/// The shared state of a new group of `capacity` members on `backend`, for the unit tests that
/// set the scene by hand (the emulation's source table of the default size).
#[cfg(all(test, not(loom)))]
pub(crate) fn test_state(backend: Backend, capacity: usize) -> SharedState {
    let sources = match backend {
        Backend::Emulated => crate::contract::DEFAULT_MAX_EXCLUSIVE,
        _ => 0,
    };
    test_state_with(backend, capacity, sources)
}

/// The same with a source table of `sources` slots (the models keep it small: the model
/// checker explores every interleaving of every access).
#[cfg(test)]
pub(crate) fn test_state_with(backend: Backend, capacity: usize, sources: usize) -> SharedState {
    let settings = Settings {
        backend,
        rotation: Rotation::Adaptive,
        capacity,
        sources,
    };
    SharedState::new(settings, region_for(&settings)).expect("a test group's shared state")
}
