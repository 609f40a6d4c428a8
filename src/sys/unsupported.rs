//! The native backend where there is none: kqueue, event ports and IOCP have no exclusive
//! wake-up flag (FreeBSD declined one), so `Backend::Native` is refused with this reason and
//! `Backend::Auto` resolves to the emulation. The types are uninhabited: no value of them can
//! exist, so their methods can never run.

use std::time::Duration;

use crate::error::{RawSource, Result};
use crate::interest::{Events, Interest};
use crate::shared::MemberSlot;

pub(crate) fn probe() -> std::result::Result<(), String> {
    Err(format!(
        "{} has no kernel flag for exclusive wake-ups; use Backend::Emulated (or Auto)",
        std::env::consts::OS
    ))
}

pub(crate) enum NativeWaiter {}

/// No native member exists here to hand readiness on to.
pub(crate) fn ring_idle(
    _shared: &crate::shared::SharedState,
    _bells: &crate::doorbell::Doorbells,
    _except: Option<u32>,
) -> bool {
    false
}

/// What a member does about a death (see the Linux backend's).
pub(crate) type OnDeath<'a> = &'a dyn Fn(Option<u32>);

/// No native group is built here: its region is empty.
pub(crate) fn region(_settings: &crate::shared::Settings) -> crate::shared::RegionSpec {
    crate::shared::RegionSpec {
        len: 0,
        set_up: |_| {},
        #[cfg(loom)]
        make: |_| Box::new(()),
    }
}

/// No native group is opened here.
pub(crate) fn check_region(
    _shared: &crate::shared::SharedState,
) -> std::result::Result<(), String> {
    Err(probe().unwrap_err())
}

/// No native member is reaped here.
pub(crate) fn clear_out(_shared: &crate::shared::SharedState, _m: u32) {}

#[derive(Clone)]
pub(crate) enum NativeNotifier {}

impl NativeWaiter {
    pub(crate) fn new(
        _shared: std::sync::Arc<crate::shared::SharedState>,
        _rotation: crate::contract::Rotation,
        _bells: std::sync::Arc<crate::doorbell::Doorbells>,
        _me: u32,
        _generation: u32,
    ) -> Result<NativeWaiter> {
        Err(crate::Error::BackendUnavailable {
            backend: crate::Backend::Native,
            reason: probe().unwrap_err(),
        })
    }
    pub(crate) fn add(&mut self, _: RawSource, _: usize, _: Interest) -> Result<()> {
        match *self {}
    }
    pub(crate) fn modify(&mut self, _: RawSource, _: usize, _: Interest) -> Result<()> {
        match *self {}
    }
    pub(crate) fn delete(&mut self, _: RawSource) -> Result<()> {
        match *self {}
    }
    pub(crate) fn wait(
        &mut self,
        _: &MemberSlot,
        _: &mut Events,
        _: Option<Duration>,
        _: OnDeath<'_>,
    ) -> Result<usize> {
        match *self {}
    }
    pub(crate) fn consumed(&mut self, _: usize) -> Result<()> {
        match *self {}
    }
    pub(crate) fn notifier(&self) -> NativeNotifier {
        match *self {}
    }
}

impl NativeNotifier {
    pub(crate) fn notify(&self) -> Result<()> {
        match *self {}
    }
}
