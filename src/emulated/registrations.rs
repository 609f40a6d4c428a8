//! The emulated waiter's registrations and its poller: add, modify, delete; which exclusive
//! descriptors are in the poller (`match_poller`: those this member leads and nobody holds);
//! forgetting a registration whose number was closed or reused, and rebuilding the poller when
//! a stale kernel entry may live on (see `crate::registry`).

#[cfg(unix)]
use std::sync::Arc;

use super::poller;

use super::identity::{identify, refuse_anonymous};
use super::{EmulatedWaiter, Protocol, Registration};
use crate::error::{Error, RawSource, Result};
use crate::interest::Interest;
use crate::registry;

impl EmulatedWaiter {
    pub(crate) fn add(
        &mut self,
        group: &Protocol<'_>,
        fd: RawSource,
        key: usize,
        interest: Interest,
    ) -> Result<()> {
        let identity = identify(fd)?;
        let file = registry::file_id(fd).ok_or(Error::BadDescriptor { fd })?;
        if let Some(old) = self.registrations.get(&fd) {
            if old.identity == identity && old.file == file {
                return Err(Error::AlreadyRegistered { fd, registered: fd });
            }
            // The old descriptor was closed and its number reused: forget the old one.
            self.forget(group, fd);
        }
        if let Some(registered) = self.registrations.duplicate_of(fd, file, interest) {
            return Err(Error::AlreadyRegistered { fd, registered });
        }
        self.rebuild_if_due(group)?;
        let source = match interest.is_exclusive() {
            true => {
                refuse_anonymous(fd)?;
                // Ask the poller before answering: an exclusive descriptor enters the poller
                // only later, when this member leads it, and a refusal then would fail every
                // wait of the group. A trial registration now refuses it here instead.
                let trial = registry::token(fd, self.next_seq) as usize;
                self.poller_add(fd, trial, interest)?;
                self.poller_delete(fd);
                // Another descriptor of the same identity registered exclusive (one token per
                // file and member), where `duplicate_of` cannot tell (no device and inode: a
                // socket known by its names, on FreeBSD).
                let registrations = &self.registrations;
                let same = self.exclusive_fds.iter().find(|&other| {
                    registrations[other]
                        .source
                        .is_some_and(|s| group.source(s).is_for(identity))
                });
                if let Some(&registered) = same {
                    return Err(Error::AlreadyRegistered { fd, registered });
                }
                Some(group.join_source(identity, self.me)?)
            }
            false => None,
        };
        match source {
            None => self.poller_add(fd, registry::token(fd, self.next_seq) as usize, interest)?,
            Some(s) => {
                self.sources.push(s);
                self.exclusive_fds.push(fd);
            }
        }
        self.registrations.insert(
            fd,
            Registration {
                key,
                identity,
                file,
                interest,
                seq: self.next_seq,
                source,
                in_poller: source.is_none(),
                handed: 0,
                turn_started_ns: 0,
                taken: 0,
                claims_at_add: source.map_or(0, |s| group.source(s).hold().count),
                queued: false,
                suspect: None,
                claims_seen: 0,
            },
        );
        self.next_seq += 1;
        Ok(())
    }

    pub(crate) fn modify(
        &mut self,
        group: &Protocol<'_>,
        fd: RawSource,
        key: usize,
        interest: Interest,
    ) -> Result<()> {
        let old = self
            .registrations
            .registered(fd)
            .map(|r| (r.key, r.interest))?;
        // Check the new registration before touching the old one (a look: it takes no
        // source slot, which would never be given back).
        if interest.is_exclusive() {
            group.sources.room(identify(fd)?)?;
        }
        registry::replace(
            self,
            old,
            (key, interest),
            |w| w.delete(group, fd),
            |w, key, interest| w.add(group, fd, key, interest),
        )
    }

    /// Forgets `fd`; closed or reused since it was added, it is forgotten all the same (see
    /// `crate::registry`).
    pub(crate) fn delete(&mut self, group: &Protocol<'_>, fd: RawSource) -> Result<()> {
        self.forget(group, fd).ok_or(Error::NotRegistered { fd })?;
        self.rebuild_if_due(group)
    }

    pub(super) fn release_source(&mut self, tk: &Protocol<'_>, source: usize) {
        self.holding.retain(|&(s, _, hold)| {
            if s == source {
                tk.release(s, hold);
            }
            s != source
        });
    }

    /// After a look at sources it just started watching: were they ready at once?
    pub(super) fn note_backlog(&self, tk: &Protocol<'_>) {
        for fd in &self.exclusive_fds {
            let reg = &self.registrations[fd];
            let Some(s) = reg.source else { continue };
            if reg.in_poller {
                let key = registry::token(*fd, reg.seq) as usize;
                let ready = self.raw_events.iter().any(|ev| ev.key == key);
                tk.note_ready_on_arm(s, ready);
            }
        }
    }

    /// Makes the poller hold exactly the exclusive descriptors this member must watch now: those
    /// it leads whose last event has been consumed. Returns whether it added any.
    pub(super) fn match_poller(&mut self, tk: &Protocol<'_>) -> Result<bool> {
        #[cfg(all(windows, not(loom)))]
        self.forget_closed_sockets(tk);
        let me = self.me;
        let mut changes = std::mem::take(&mut self.changes);
        let mut watching = false;
        for &fd in &self.exclusive_fds {
            let Some(reg) = self.registrations.get_mut(&fd) else {
                continue;
            };
            let Some(s) = reg.source else { continue };
            // The claims won so far, read as the source is found free: any readiness seen
            // from now on is checked against it (`Protocol::confirm_claim`).
            let watch = tk.to_watch(s, me);
            let want = watch.is_some();
            if let Some(claims) = watch {
                reg.claims_seen = claims;
            }
            // A number that no longer names its file is never watched (its entry may be
            // stale, and would report the old file's readiness, for which this member would
            // claim the source): forgotten below, its token passed on. Before each wait in
            // which the member watches it: an entry staying in the poller is asked of the
            // poller where it can tell (`poller::entry_is_live`), else of the file; one going
            // out is answered by its delete (`apply`).
            let stale = match (want, reg.in_poller) {
                (true, true) => {
                    let event = poller_event(registry::token(fd, reg.seq) as usize, reg.interest);
                    !poller::entry_is_live(&self.poller, fd, event)
                        .unwrap_or_else(|| registry::still_names(fd, reg.file))
                }
                (true, false) => !registry::still_names(fd, reg.file),
                (false, _) => false,
            };
            if stale {
                changes.push((fd, false));
                self.stale.push(fd);
                continue;
            }
            if want != reg.in_poller {
                changes.push((fd, want));
            }
            watching |= want;
        }
        self.watching_free = watching;
        let stale = std::mem::take(&mut self.stale);
        for &fd in &stale {
            self.forget(tk, fd);
        }
        self.stale = stale;
        self.stale.clear();
        changes.retain(|(fd, _)| self.registrations.contains_key(fd));
        self.rebuild_if_due(tk)?;
        let result = self.apply(tk, &changes);
        changes.clear();
        self.changes = changes;
        result
    }

    /// Adds to or deletes from the poller, as `match_poller` found needed; returns whether it added any.
    pub(super) fn apply(
        &mut self,
        tk: &Protocol<'_>,
        changes: &[(RawSource, bool)],
    ) -> Result<bool> {
        let mut added = false;
        for &(fd, want) in changes {
            let Some(reg) = self.registrations.get(&fd) else {
                continue;
            };
            let (interest, key) = (reg.interest, registry::token(fd, reg.seq) as usize);
            if want {
                match self.poller_add(fd, key, interest) {
                    Ok(()) => {}
                    // Closed while registered, its number taken by a descriptor already in
                    // the poller (the library's own, say) or by one that cannot be watched (on
                    // Windows, a handle of another kind), or closed while being added: forget
                    // it, as the kernel did.
                    Err(Error::BadDescriptor { .. })
                    | Err(Error::AlreadyRegistered { .. })
                    | Err(Error::UnwatchableDescriptor { .. }) => {
                        let _ = self.forget(tk, fd);
                        continue;
                    }
                    #[cfg(all(windows, not(loom)))]
                    Err(_) if super::windows::check_socket(fd).is_err() => {
                        let _ = self.forget(tk, fd);
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            } else if !self.poller_delete(fd) {
                // Its number was closed or reused since it was added: stale, forgotten (its
                // token passed on), and its entry may live on (see `forget`).
                self.rebuild_due = true;
                if let Some(reg) = self.registrations.get_mut(&fd) {
                    reg.in_poller = false; // deleted as far as the kernel lets it be
                }
                let _ = self.forget(tk, fd);
                continue;
            }
            if let Some(reg) = self.registrations.get_mut(&fd) {
                reg.in_poller = want;
            }
            added |= want;
        }
        Ok(added)
    }

    /// Forgets a registration (deleted, or its descriptor closed): out of the poller, out of its
    /// source's line, its claim released and its token passed on.
    ///
    /// A registration in the poller whose number was closed or reused cannot be deleted from it
    /// (the kernel deletes an entry only through a number that names its file): its entry may
    /// live on, its file open elsewhere. An exclusive one would take the group's wake-ups, so
    /// the poller is rebuilt before the next kernel wait (`rebuild_due`); another is left until
    /// it fires, when its token names no live registration.
    pub(super) fn forget(&mut self, tk: &Protocol<'_>, fd: RawSource) -> Option<()> {
        let reg = self.registrations.remove(fd)?;
        if reg.in_poller && !self.poller_delete(fd) && reg.source.is_some() {
            self.rebuild_due = true;
        }
        if let Some(s) = reg.source {
            self.sources.retain(|&x| x != s);
            self.exclusive_fds.retain(|&x| x != fd);
            self.release_source(tk, s);
            tk.drop_source(s, self.me, None);
        }
        Some(())
    }

    /// Adds `fd` to the poller under `key` (its registration's token, see `crate::registry`).
    pub(super) fn poller_add(&self, fd: RawSource, key: usize, interest: Interest) -> Result<()> {
        #[cfg(all(windows, not(loom)))]
        super::windows::check_socket(fd)?;
        // (The caller may close it while registered: `poller::add` says what then.)
        poller::add(&self.poller, fd, poller_event(key, interest))
            .map_err(|e| registry::refusal(fd, e, "adding a descriptor to the member's poller"))
    }

    /// Deletes `fd` from the poller. Returns false if the kernel refused as for a number closed
    /// or naming another file since it was added (its entry may live on: see `forget`).
    pub(super) fn poller_delete(&self, fd: RawSource) -> bool {
        let res = poller::delete(&self.poller, fd);
        !res.is_err_and(|e| registry::maybe_stale(&e))
    }

    /// Rebuilds the poller if a stale entry may be in it (`rebuild_due`).
    pub(super) fn rebuild_if_due(&mut self, tk: &Protocol<'_>) -> Result<()> {
        if std::mem::take(&mut self.rebuild_due) {
            self.rebuild(tk)?;
        }
        Ok(())
    }

    /// Replaces the member's poller with a new one holding its door bell and the registrations
    /// it watches now, and forgets those whose number no longer names their file. Dropping the
    /// old poller removes every stale entry in it, the only way to remove one whose number was
    /// closed or reused while its file stays open elsewhere (see `crate::registry`). The death
    /// watches are opened again by the next pass of `wait`. One `epoll_ctl` and one `fstat`
    /// per registration in the poller; done only when a stale entry may exist. (Windows: its
    /// own check forgets closed sockets, `windows::forget_closed_sockets`; nothing to rebuild.)
    #[cfg(unix)]
    pub(super) fn rebuild(&mut self, tk: &Protocol<'_>) -> Result<()> {
        let poller = Arc::new(
            poller::Poller::new().map_err(|e| Error::io("rebuilding the member's poller", e))?,
        );
        #[cfg(not(loom))]
        if let Some(bell) = &self.bell {
            for fd in bell.watch() {
                // The bell is this waiter's, and `leave` deletes it from the poller (this new
                // one, by then) before it drops it.
                let key = super::DOORBELL_KEY;
                poller::add(
                    &poller,
                    std::os::fd::AsRawFd::as_raw_fd(&fd),
                    poller::Event::new(key, true, false),
                )
                .map_err(|e| Error::io("watching the member's door bell", e))?;
            }
        }
        self.deaths.clear(&self.poller);
        let old = std::mem::replace(&mut self.poller, poller);
        let mut gone = Vec::new();
        let watched: Vec<RawSource> = self
            .registrations
            .iter()
            .filter(|(_, r)| r.in_poller)
            .map(|(&fd, _)| fd)
            .collect();
        for fd in watched {
            let reg = &self.registrations[&fd];
            let key = registry::token(fd, reg.seq) as usize;
            let live = registry::still_names(fd, reg.file)
                && self.poller_add(fd, key, reg.interest).is_ok();
            if !live {
                gone.push(fd);
            }
        }
        drop(old); // every stale entry goes with the old poller
        for fd in gone {
            if let Some(reg) = self.registrations.get_mut(&fd) {
                reg.in_poller = false; // not in the new poller: nothing to delete
            }
            let _ = self.forget(tk, fd);
        }
        // The queue's entries were found by the old poller: looked at again before use.
        self.polls += 1;
        self.rebuild_due = false;
        Ok(())
    }

    #[cfg(not(unix))]
    pub(super) fn rebuild(&mut self, _tk: &Protocol<'_>) -> Result<()> {
        Ok(())
    }
}

/// The poller's event for a registration's entry: its token (`registry::token`) and interest.
pub(super) fn poller_event(key: usize, interest: Interest) -> poller::Event {
    let mut ev = poller::Event::new(key, interest.is_readable(), interest.is_writable());
    ev.set_priority(interest.is_priority());
    ev
}
