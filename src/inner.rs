//! What a [`Group`](crate::Group) and its [`Waiter`](crate::Waiter)s share: the backend chosen,
//! the rotation, the shared memory with its member table, the liveness marks, and for the
//! emulation its door bells. Below both handles, so that neither imports the other to reach it
//! (`group.rs` builds it and hands it to `waiter.rs`); above the backends, which get from it
//! only what they need (the emulation: the protocol's view, [`GroupInner::protocol`]).

#[cfg(all(unix, not(loom)))]
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use crate::contract::{Backend, Rotation};
use crate::doorbell::Doorbells;
use crate::emulated::{EmulatedGroup, Protocol};
use crate::error::Result;
use crate::members::Members;
use crate::shared::{Settings, SharedState};

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
        let emulation = match settings.backend {
            Backend::Emulated => Some(EmulatedGroup::new(shared.incarnation(), settings.capacity)?),
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

    /// The group's settings (as its shared preamble holds them).
    #[cfg_attr(any(not(unix), loom), allow(dead_code))] // named groups only
    pub(crate) fn settings(&self) -> Settings {
        Settings {
            backend: self.backend,
            rotation: self.rotation,
            capacity: self.shared.capacity() as usize,
        }
    }

    /// Is the group still in service? A named group that was removed answers
    /// `Error::GroupRemoved`, one whose first word was overwritten `Error::CorruptGroup`
    /// ([`crate::named::preamble_verdict`]); anonymous groups are not looked at. One load of a
    /// word no member writes: checked at `join`, `add` and `wait`.
    pub(crate) fn in_service(&self) -> Result<()> {
        #[cfg(all(unix, not(loom)))]
        if let Some(name) = &self.name {
            let magic = self.shared.header().preamble.magic.load(SeqCst);
            return crate::named::preamble_verdict(magic, name);
        }
        Ok(())
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

    /// Finds members whose process died without leaving (and reaps whose reaper died) and
    /// clears their slots out (the emulation also frees what they held and passes their tokens
    /// on), so that the slots can be joined again.
    pub(crate) fn reap_dead_members(&self) {
        let members = self.members();
        let me = std::process::id();
        for m in 0..self.shared.high() {
            let Some(seen) = members.dead(m, me) else {
                continue;
            };
            match self.backend {
                Backend::Emulated => self.protocol().reap(m, seen),
                // The kernel forgot the dead process's epoll entries: nothing to clear. But a
                // readiness on its ready list went with it: an idle member looks (the next one
                // in the group's hand-on order).
                _ => {
                    let reaped = members.reap(m, seen, me, |_, _| {});
                    if let (true, Some(bells)) = (reaped, &self.native_bells) {
                        crate::platform::ring_idle(&self.shared, bells, None);
                    }
                    reaped
                }
            };
        }
    }
}
