//! The group: the set of waiters that share descriptors, and the backend they all use.
//!
//! A group is built once, before threads are spawned or workers forked; every member then
//! `join`s it and gets its own [`Waiter`] with its own kernel poll instance. The group owns what
//! the members share: the member slots and statistics, and, for the emulation, the token and the
//! door bells (see `emulated`). Cloning a `Group` is cheap; a clone, or the copy a forked child
//! inherits, is the same group. A *named* group (`GroupBuilder::name`, `Group::open`) lives in
//! shared memory that any process opens by name (`named`), so that exec'd workers and
//! programs started on their own share it too; this module keeps one per name and process.

use std::sync::Arc;

use crate::contract::{
    Backend, Origin, Rotation, DEFAULT_MAX_EXCLUSIVE, DEFAULT_MAX_MEMBERS, MAX_EXCLUSIVE_LIMIT,
    MAX_MEMBERS_LIMIT,
};
use crate::error::{Error, Result};
use crate::inner::{region_for, GroupInner};
use crate::shared::{Settings, SharedState};
use crate::stats::{member_stats, MemberStats};
use crate::waiter::Waiter;

/// Builds a [`Group`]. See [`Group::builder`].
///
/// ```
/// use herdless::{Backend, Group, Rotation};
/// let group = Group::builder()
///     .backend(Backend::Auto) // Native on Linux, Emulated elsewhere
///     .rotate_every(1)        // strict turns at any cost; 0: the kernel's first-come order
///     .max_members(500)       // the workers that will join (default 64, at most 16 384)
///     .build()?;
/// assert_eq!((group.rotate_every(), group.max_members()), (1, 500));
/// assert_eq!(group.rotation(), Rotation::Every(1));
/// # Ok::<(), herdless::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct GroupBuilder {
    backend: Backend,
    rotation: Rotation,
    max_members: usize,
    max_exclusive: usize,
    name: Option<String>,
    mode: u32,
}

impl GroupBuilder {
    /// Chooses the backend (default [`Backend::Auto`]). Example: see [`GroupBuilder`].
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// After a member has been handed `n` events of an exclusive descriptor, it goes to the back
    /// of the line, whatever the load: `1` is strict turn-taking at any cost, `0` never rotates
    /// (the kernel's raw behaviour: the first idle waiter in registration order takes
    /// everything). The same as `.rotation(Rotation::Every(n))`; left unset, the group uses
    /// [`Rotation::Adaptive`]. Example: see [`GroupBuilder`].
    pub fn rotate_every(mut self, n: u32) -> Self {
        self.rotation = Rotation::Every(n);
        self
    }

    /// When members go to the back of the line (default [`Rotation::Adaptive`]). Example: see
    /// [`Rotation`].
    pub fn rotation(mut self, rotation: Rotation) -> Self {
        self.rotation = rotation;
        self
    }

    /// How many members may join (default 64, at most [`MAX_MEMBERS_LIMIT`], 16 384): set it
    /// to the number of workers you start, or [`Group::join`] fails with [`Error::GroupFull`]
    /// for the 65th. A slot costs one cache line of shared memory and no descriptor: a process
    /// holds descriptors for its own members only, and a join costs the same in a large group
    /// as in a small one. Example: see [`GroupBuilder`].
    pub fn max_members(mut self, n: usize) -> Self {
        self.max_members = n;
        self
    }

    /// How many distinct exclusive descriptors the members of an emulated group may have
    /// registered at once (default [`DEFAULT_MAX_EXCLUSIVE`], 1024; at most
    /// [`MAX_EXCLUSIVE_LIMIT`]): past it, an exclusive [`Waiter::add`] fails with
    /// [`Error::TooManySources`]. A descriptor no member has registered any more frees its
    /// place, so a group whose services come and go lives for ever within it. Each place costs
    /// 128 bytes of shared memory and a bit per member slot. The native backend keeps no such
    /// table: the setting is ignored there.
    ///
    /// ```
    /// use herdless::{Backend, Group};
    /// let group = Group::builder()
    ///     .backend(Backend::Emulated)
    ///     .max_exclusive_descriptors(4096) // servers that each poll several queues of their own
    ///     .build()?;
    /// assert_eq!(group.max_exclusive_descriptors(), Some(4096));
    /// # Ok::<(), herdless::Error>(())
    /// ```
    pub fn max_exclusive_descriptors(mut self, n: usize) -> Self {
        self.max_exclusive = n;
        self
    }

    /// Makes it a **named group**: [`build`](Self::build) creates the group under `name`, or
    /// opens the one that exists, which must have the builder's settings (a backend left at
    /// `Auto` takes the group's). Any process of a user the group's [mode](Self::mode) lets in
    /// then opens it by name ([`Group::open`]), with no common parent: workers that were
    /// forked, forked and exec'd, or started by a supervisor all join the same group, with the
    /// same guarantees. A group nobody has open and whose members are all gone is re-made
    /// fresh by the next creator; [`Group::origin`] says which of the three `build` did.
    /// [`Group::remove`] removes the group once nobody uses it (and refuses while anyone
    /// does), [`Group::remove_forced`] in any case: a name is one group at a time.
    ///
    /// A name is 1 to 242 characters (18 on macOS) of letters, digits, `.`, `_` and `-`; it
    /// names the POSIX shared-memory object `/herdless.<name>` (on Linux, the file
    /// `/dev/shm/herdless.<name>`). Unix only.
    ///
    /// ```
    /// # #[cfg(unix)] {
    /// use herdless::Group;
    /// let name = format!("doc.builder.{}", std::process::id());
    /// // The supervisor, or whichever worker comes first:
    /// let group = Group::builder().name(&name).max_members(8).build()?;
    /// // Any other process (exec'd, or started on its own) of the same user:
    /// let same = Group::open(&name)?;
    /// assert_eq!((same.name(), same.max_members()), (Some(name.as_str()), 8));
    /// Group::remove(&name)?; // no member is alive, and no other process has it open
    /// # }
    /// # Ok::<(), herdless::Error>(())
    /// ```
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// The permission bits of a named group this builder creates (default `0o600`: the
    /// creating user only; `0o660` lets the user's group in too). Applied exactly, whatever
    /// the umask. Example: see [`GroupBuilder::name`].
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = mode;
        self
    }

    /// Builds the group (for a named group: creates it, or opens the one that exists).
    ///
    /// # Errors
    ///
    /// [`Error::BackendUnavailable`] if `Native` was asked for where the kernel has no exclusive
    /// wake-ups; [`Error::InvalidSetting`] for a member count or mode out of range;
    /// [`Error::Io`] if the shared memory or the door bells cannot be made. For a named group
    /// also [`Error::InvalidGroupName`], [`Error::GroupSettingsDiffer`] (a group of that name
    /// exists with other settings), [`Error::IncompatibleGroup`] (made by another version of
    /// herdless), [`Error::CorruptGroup`], [`Error::PermissionDenied`] (another user's group),
    /// and [`Error::Unsupported`] outside Unix.
    ///
    /// Example: see [`GroupBuilder`]; what it did, [`Group::origin`].
    pub fn build(self) -> Result<Group> {
        if self.max_members == 0 || self.max_members > MAX_MEMBERS_LIMIT {
            return Err(Error::InvalidSetting {
                reason: format!(
                    "max_members must be between 1 and {MAX_MEMBERS_LIMIT}, not {}",
                    self.max_members
                ),
            });
        }
        let backend = match self.backend {
            Backend::Emulated => Backend::Emulated,
            Backend::Native => match crate::sys::native::probe() {
                Ok(()) => Backend::Native,
                Err(reason) => {
                    return Err(Error::BackendUnavailable {
                        backend: Backend::Native,
                        reason,
                    })
                }
            },
            Backend::Auto => match crate::sys::native::probe() {
                Ok(()) => Backend::Native,
                Err(_) => Backend::Emulated,
            },
        };
        if self.max_exclusive == 0 || self.max_exclusive > MAX_EXCLUSIVE_LIMIT {
            return Err(Error::InvalidSetting {
                reason: format!(
                    "max_exclusive_descriptors must be between 1 and {MAX_EXCLUSIVE_LIMIT}, not {}",
                    self.max_exclusive
                ),
            });
        }
        let settings = Settings {
            backend,
            rotation: self.rotation,
            capacity: self.max_members,
            sources: match backend {
                Backend::Emulated => self.max_exclusive,
                _ => 0,
            },
        };
        if let Some(name) = &self.name {
            if self.mode > 0o777 {
                return Err(Error::InvalidSetting {
                    reason: format!(
                        "mode must be permission bits (0o000 to 0o777), not {:#o}",
                        self.mode
                    ),
                });
            }
            #[cfg(all(unix, not(loom)))]
            let create = Some(crate::named::Create {
                settings,
                asked_backend: self.backend,
                max_exclusive: self.max_exclusive,
                mode: self.mode,
                group: None,
            });
            #[cfg(not(all(unix, not(loom))))]
            let create = None;
            return named_group(name, create, None);
        }
        let shared = SharedState::new(settings, region_for(&settings))?;
        let live = crate::liveness::Liveness::new(self.max_members)?;
        GroupInner::new(shared, live, None).map(|inner| Group {
            inner: Arc::new(inner),
            origin: Origin::Created,
        })
    }
}

/// This process's open named groups, one per name: a second `open` of a name returns the same
/// group. Needed, not only thrifty: closing any descriptor of the shared object would drop every
/// record lock the process holds on it, its members' liveness locks among them.
#[cfg(all(unix, not(loom)))]
static NAMED: std::sync::Mutex<Vec<(String, std::sync::Weak<GroupInner>)>> =
    std::sync::Mutex::new(Vec::new());

/// Creates or opens the implicit group of a line (`crate::line`): a named group whose object,
/// when another process made it, `trust` checks first.
#[cfg(all(unix, not(loom)))]
pub(crate) fn open_line(
    name: &str,
    create: crate::named::Create,
    trust: &dyn Fn(&std::fs::File) -> Result<()>,
) -> Result<Group> {
    named_group(name, Some(create), Some(trust))
}

/// Opens (`create`: `None`) or creates-or-opens the named group; `trust` checks an object
/// another process made.
#[cfg(all(unix, not(loom)))]
fn named_group(
    name: &str,
    create: Option<crate::named::Create>,
    trust: Option<crate::named::Trust<'_>>,
) -> Result<Group> {
    use crate::named::{self, Request};
    let mut open = NAMED.lock().unwrap_or_else(|e| e.into_inner());
    open.retain(|(_, g)| g.strong_count() > 0);
    if let Some(inner) = open_here(&mut open, name) {
        if let Some(c) = &create {
            named::check_settings(name, &inner.settings(), c)?;
        }
        return Ok(Group {
            inner,
            origin: Origin::Opened,
        });
    }
    let segment = named::open(&Request {
        name,
        create,
        region: region_for,
        trust,
    })?;
    let capacity = segment.shared.capacity() as usize;
    let object = crate::named::object_name(name)?;
    let live = crate::liveness::Liveness::on_named(
        segment.file,
        capacity,
        (crate::named::open_lock_object, object),
    );
    let inner = Arc::new(GroupInner::new(
        segment.shared,
        live,
        Some(name.to_owned()),
    )?);
    open.push((name.to_owned(), Arc::downgrade(&inner)));
    Ok(Group {
        inner,
        origin: segment.origin,
    })
}

/// The group named `name` this process has open, if any and if it is still under the name:
/// one that was removed is forgotten (its handles keep it, and get `Error::GroupRemoved`).
#[cfg(all(unix, not(loom)))]
fn open_here(
    open: &mut Vec<(String, std::sync::Weak<GroupInner>)>,
    name: &str,
) -> Option<Arc<GroupInner>> {
    open.retain(|(n, g)| {
        g.upgrade().is_some_and(|inner| {
            n != name
                || !matches!(
                    inner.shared.check(inner.name.as_deref()),
                    Err(Error::GroupRemoved { .. })
                )
        })
    });
    open.iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, g)| g.upgrade())
}

/// Removes the named group `name` (`Group::remove`, `Group::remove_forced`), through this
/// process's own descriptor of it if the process has it open.
#[cfg(all(unix, not(loom)))]
fn remove_named(name: &str, in_use: crate::named::InUse) -> Result<()> {
    use crate::named::{self, Own};
    let mut open = NAMED.lock().unwrap_or_else(|e| e.into_inner());
    let here = open_here(&mut open, name);
    match &here {
        None => named::remove(name, in_use, None)?,
        Some(inner) => {
            let me = std::process::id();
            let group = Group {
                inner: inner.clone(),
                origin: Origin::Opened,
            };
            // Counted before the lock files are held still (a liveness check may open one).
            let members = group
                .stats()
                .into_iter()
                .filter(|m| m.alive && m.pid == me)
                .map(|m| (m.member, m.pid))
                .collect();
            inner.live.with_files(|more_locks| {
                let own = Own {
                    file: inner.live.file(),
                    more_locks,
                    members,
                };
                named::remove(name, in_use, Some(own))
            })?;
        }
    }
    // This process's handles keep the removed group (and get GroupRemoved); the next open of
    // the name opens the group then under it.
    open.retain(|(n, _)| n != name);
    Ok(())
}

/// No named groups here: what a request for one gets.
#[cfg(not(all(unix, not(loom))))]
fn named_group(_name: &str, _create: Option<()>, _trust: Option<()>) -> Result<Group> {
    Err(Error::Unsupported {
        what: "a named group",
        reason: "named groups live in POSIX shared memory (Unix); on Windows build the group \
                 once and share it between threads",
    })
}

/// The set of waiters sharing descriptors. Cheap to clone, `Send + Sync`, and valid in a child
/// after `fork` (build it before spawning threads or forking workers). Workers that are exec'd,
/// or started on their own, share a *named* group instead: [`GroupBuilder::name`],
/// [`Group::open`].
///
/// ```
/// use herdless::{Backend, Group};
/// let group = Group::builder().backend(Backend::Emulated).rotate_every(1).build()?;
/// assert_eq!(group.backend(), Backend::Emulated);
/// assert_eq!((group.rotate_every(), group.max_members()), (1, 64));
/// let waiter = group.join()?; // in the thread, or the forked process, that will wait
/// assert_eq!(group.stats().len(), 1);
/// drop(waiter);
/// # Ok::<(), herdless::Error>(())
/// ```
///
/// Four threads on one listener: `examples/quick_start.rs` (the README's quick start); threads
/// and forked workers with a clean stop: `examples/forked_workers.rs`.
#[derive(Clone)]
pub struct Group {
    pub(crate) inner: Arc<GroupInner>,
    /// What the call that returned this handle did (a clone keeps it).
    origin: Origin,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("backend", &self.inner.backend)
            .field("rotation", &self.inner.rotation)
            .field("max_members", &self.inner.shared.capacity())
            .field("name", &self.inner.name)
            .field("origin", &self.origin)
            .finish()
    }
}

impl Group {
    /// A group with the default settings: `Backend::Auto`, [`Rotation::Adaptive`], 64
    /// members; `Group::builder().build()`. Make it before the threads start or the workers
    /// fork, then [`join`](Self::join) it in each.
    ///
    /// ```
    /// let group = herdless::Group::new()?;
    /// assert_eq!(group.max_members(), 64);
    /// let waiter = group.join()?;
    /// # drop(waiter);
    /// # Ok::<(), herdless::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`GroupBuilder::build`] for an anonymous group: [`Error::Io`] if the shared memory
    /// or the door bells cannot be made.
    pub fn new() -> Result<Group> {
        Group::builder().build()
    }

    /// Starts building a group: `Backend::Auto`, [`Rotation::Adaptive`], 64 members. Example:
    /// see [`GroupBuilder`].
    pub fn builder() -> GroupBuilder {
        GroupBuilder {
            backend: Backend::Auto,
            rotation: Rotation::Adaptive,
            max_members: DEFAULT_MAX_MEMBERS,
            max_exclusive: DEFAULT_MAX_EXCLUSIVE,
            name: None,
            mode: 0o600,
        }
    }

    /// Opens the named group `name` that another process created (with
    /// [`GroupBuilder::name`]), taking its settings: what a worker that must not create the
    /// group calls (one exec'd by a supervisor, or started on its own). A second call in the
    /// same process returns the same group (unless it was removed meanwhile: then the group
    /// now under the name). [`Group::origin`] is always [`Origin::Opened`]. Example: see
    /// [`GroupBuilder::name`].
    ///
    /// # Errors
    ///
    /// [`Error::GroupNotFound`] if there is no such group (or its creator has not set it up
    /// within 2 s); [`Error::InvalidGroupName`], [`Error::IncompatibleGroup`],
    /// [`Error::CorruptGroup`], [`Error::PermissionDenied`], [`Error::Io`]; and
    /// [`Error::Unsupported`] outside Unix.
    pub fn open(name: &str) -> Result<Group> {
        named_group(name, None, None)
    }

    /// Removes the named group `name`, once nobody uses it: refused while any member is alive
    /// (in any process, the caller's included) or another process has the group open, so a
    /// supervisor that clears stale groups at start-up never splits a service that is running.
    /// Then the name is free, and the next creator makes a new group under it
    /// ([`Origin::Created`]). A group only the caller's own process has open, with no member,
    /// is removed: the caller's `Group` handles of it then refuse to [`join`](Self::join)
    /// ([`Error::GroupRemoved`]), so the name is never two groups, not even in one process. An
    /// object under the name that is not a valid group (another version's, garbage) is removed
    /// too, if nobody holds a lock on it.
    ///
    /// A process that opened the name in the instant before the removal (it waits for the
    /// object's setup lock, which the removal holds) opens the name again after it: it joins,
    /// or makes, the group then under the name, never the removed one.
    ///
    /// ```
    /// # #[cfg(unix)] {
    /// use herdless::{Error, Group, Origin};
    /// let name = format!("doc.remove.{}", std::process::id());
    /// let group = Group::builder().name(&name).build()?;
    /// let waiter = group.join()?;
    /// match Group::remove(&name) {
    ///     Err(Error::GroupInUse { members, .. }) => {
    ///         assert_eq!(members, vec![(0, std::process::id())]) // (slot, process) of each
    ///     }
    ///     other => panic!("expected GroupInUse, got {other:?}"),
    /// }
    /// drop(waiter); // the last member left
    /// Group::remove(&name)?;
    /// assert!(matches!(group.join(), Err(Error::GroupRemoved { .. }))); // the old handle
    /// assert_eq!(Group::builder().name(&name).build()?.origin(), Origin::Created);
    /// Group::remove(&name)?;
    /// # }
    /// # Ok::<(), herdless::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::GroupInUse`] (nothing changed) naming the live members (slot and process) and
    /// a process that has the group open; [`Error::GroupNotFound`] if there is no group of
    /// that name, [`Error::PermissionDenied`], [`Error::InvalidGroupName`], [`Error::Io`] (the
    /// setup lock held for more than 10 s: a process stopped while it opened the group), and
    /// [`Error::Unsupported`] outside Unix.
    pub fn remove(name: &str) -> Result<()> {
        #[cfg(all(unix, not(loom)))]
        return remove_named(name, crate::named::InUse::Refuse);
        #[cfg(not(all(unix, not(loom))))]
        named_group(name, None, None).map(drop)
    }

    /// Removes the named group `name` whoever uses it: what [`Group::remove`] does, without
    /// its refusal. The group's live members, in every process, get [`Error::GroupRemoved`] on
    /// their next [`Waiter::wait`] or [`Waiter::add`] (a member asleep in `wait` hears of it
    /// when that wait returns, at its next event or timeout) and [`Group::join`] fails the
    /// same way; a member that gets it drops its `Waiter` and `Group` and opens the name again
    /// (the group then under it: one the supervisor made, or one it makes). So the removed
    /// group serves nobody for long, and the name is never two working groups. For a
    /// supervisor that restarts a service whose old servers must not linger.
    ///
    /// ```
    /// # #[cfg(unix)] {
    /// use herdless::{Error, Events, Group, Origin};
    /// use std::time::Duration;
    /// let name = format!("doc.remove_forced.{}", std::process::id());
    /// let old = Group::builder().name(&name).build()?;
    /// let mut member = old.join()?;
    /// Group::remove_forced(&name)?; // the member is alive: Group::remove would refuse
    /// let got = member.wait(&mut Events::default(), Some(Duration::ZERO));
    /// assert!(matches!(got, Err(Error::GroupRemoved { .. })));
    /// drop((member, old)); // the member leaves, and opens the name again
    /// let new = Group::builder().name(&name).build()?;
    /// assert_eq!(new.origin(), Origin::Created);
    /// let _member = new.join()?;
    /// # drop(_member); Group::remove(&name)?;
    /// # }
    /// # Ok::<(), herdless::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Group::remove`], but never [`Error::GroupInUse`].
    pub fn remove_forced(name: &str) -> Result<()> {
        #[cfg(all(unix, not(loom)))]
        return remove_named(name, crate::named::InUse::Force);
        #[cfg(not(all(unix, not(loom))))]
        named_group(name, None, None).map(drop)
    }

    /// What the call that returned this handle did: [`Origin::Created`] a new group (every
    /// anonymous group), [`Origin::Opened`] the group that existed under the name
    /// ([`Group::open`] always), or [`Origin::Remade`] a group nobody used. A clone keeps it.
    /// Example: see [`Origin`].
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// The group's name, for a named group.
    pub fn name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// The backend in force (`Auto` already resolved). Example: see [`Group`].
    pub fn backend(&self) -> Backend {
        self.inner.backend
    }

    /// The rotation setting as a number of events: `n` for [`Rotation::Every`]`(n)`, and `1`
    /// for [`Rotation::Adaptive`], whose turns are one event each whenever events come one at a
    /// time (its batches under a backlog are not a fixed number; [`Group::rotation`] tells the
    /// two apart). Example: see [`Group`].
    pub fn rotate_every(&self) -> u32 {
        match self.inner.rotation {
            Rotation::Every(n) => n,
            Rotation::Adaptive => 1,
        }
    }

    /// The rotation rule the group was built with. Example: see [`Rotation`].
    pub fn rotation(&self) -> Rotation {
        self.inner.rotation
    }

    /// How many members may join. Example: see [`Group`].
    pub fn max_members(&self) -> usize {
        self.inner.shared.capacity() as usize
    }

    /// How many distinct exclusive descriptors the group's members may have registered at
    /// once: [`GroupBuilder::max_exclusive_descriptors`] for an emulated group; `None` for a
    /// native one, which keeps no such table. Example: see
    /// [`GroupBuilder::max_exclusive_descriptors`].
    pub fn max_exclusive_descriptors(&self) -> Option<usize> {
        match self.inner.backend {
            Backend::Emulated => Some(self.inner.shared.settings().sources),
            _ => None,
        }
    }

    /// Joins the group: one Waiter per thread or process, each with its own kernel poll
    /// instance. Call it in the thread or process that will wait (after `fork`, in the child).
    ///
    /// # Errors
    ///
    /// [`Error::GroupFull`] when every slot is taken; [`Error::GroupRemoved`] for a named
    /// group that was removed ([`Group::remove`], [`Group::remove_forced`]): open the name
    /// again; [`Error::Io`] if the poll instance cannot be made.
    ///
    /// Example: see [`Group`]; with threads and forked workers, `examples/forked_workers.rs`.
    pub fn join(&self) -> Result<Waiter> {
        Waiter::join(self.inner.clone())
    }

    /// Per-member counters of every member that ever joined, readable from any thread, and from
    /// any process of the group (a parent reads its forked members' figures after they exit).
    /// What each field counts, and what no field can see (the wake-ups the kernel swallows):
    /// [`MemberStats`]. Empty wake-ups count what the members report with
    /// [`Waiter::found_nothing`]; a member reads its own counters with [`Waiter::stats`].
    ///
    /// ```
    /// # #[cfg(unix)] {
    /// use herdless::{Events, Group, Interest};
    /// use std::io::Write;
    /// use std::os::unix::net::UnixStream;
    /// use std::time::Duration;
    ///
    /// let group = Group::new()?;
    /// let mut waiter = group.join()?;
    /// let (mut tx, rx) = UnixStream::pair()?;
    /// rx.set_nonblocking(true)?; // shared: a wake-up may find nothing
    /// waiter.add(&rx, 0, Interest::SHARED)?;
    /// tx.write_all(b"x")?;
    /// waiter.wait(&mut Events::default(), Some(Duration::from_secs(5)))?;
    /// let me = &group.stats()[0];
    /// assert_eq!((me.member, me.pid, me.alive), (waiter.member(), std::process::id(), true));
    /// assert_eq!(me.events, 1);
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> Vec<MemberStats> {
        let shared = &self.inner.shared;
        let me = std::process::id();
        (0..shared.capacity())
            .filter(|&i| shared.member(i).life().state() != crate::members::state::FREE)
            .map(|i| member_stats(&self.inner, i, me))
            .collect()
    }
}
