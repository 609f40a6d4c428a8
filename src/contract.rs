//! The contract's own words besides errors and interests: which backend delivers the wake-ups,
//! when members take turns, how many members a group may have, and how a group came to be.
//!
//! With `error.rs` and `interest.rs` this is the contract layer, the vocabulary every other room
//! of the crate speaks: the three import nothing of the crate but one another, so the backends
//! (`sys/`, `emulated/`) and the shared state below the handles can use them without
//! reaching up to `group.rs` or `waiter.rs`.

/// Which mechanism delivers exclusive, fair wake-ups.
///
/// | OS      | `Auto` resolves to | `Native` | `Emulated` |
/// |---------|--------------------|----------|------------|
/// | Linux   | `Native` (`EPOLLEXCLUSIVE` + rotation) if the kernel takes the flag, else `Emulated` | yes | yes |
/// | others  | `Emulated` (token passing over `polling`) | error | yes |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The best backend this system supports.
    Auto,
    /// The kernel's own exclusive wake-ups (Linux `EPOLLEXCLUSIVE`), rotated by delete and re-add.
    Native,
    /// Userspace token passing (Leader/Followers) on top of the `polling` crate.
    Emulated,
}

/// When a member of a group goes to the back of the line of an exclusive descriptor.
///
/// The default is [`Rotation::Adaptive`], the rule *turns by the event, batches under a
/// backlog*: a member goes to the back after every event while events come one at a time
/// (strict turns, as `Every(1)`), but while the descriptor has a backlog (it is still ready
/// after the member's read) the member keeps taking its events, up to [`ADAPTIVE_BATCH`] in a
/// row, before it goes to the back. The backend measures, never guesses: both ask the
/// descriptor itself (a zero-timeout `poll`) once the event is consumed (the emulation on
/// Windows uses the backlog average it keeps for its spinning decision instead). Both backends
/// also take longer batches in a *stream*, where handing each event to another thread would
/// wake a cold thread per event: there a turn lasts about 300 µs (at most 96 events), and ends
/// sooner for a member ahead of its share of the group's events (natively, a member behind it
/// takes its turn on until it has caught up, up to three turns' events; and the member whose
/// turn ends reads on while the member it rang wakes, until that member takes an event, for
/// 24 µs of the stream at most and at most 24 events). Natively a stream is events
/// closer than 20 µs apart on average that overlap (a member was handed the next while another
/// still held its own: a producer that does not wait for its readers); events that come one at
/// a time never overlap, however close together: strict turns. The emulation, where one member
/// holds a descriptor at a time, counts a backlog that the member takes closer than 20 µs apart
/// as a stream, and in a stream taken closer than 10 µs apart it does not ask the descriptor
/// (the turn ends by its length or the share rule; when such a stream stops, the next event is
/// still the last member's); a member slow to come back to `wait` (four times in a row later
/// than 100 µs after its wait returned) takes strict turns there. Natively, a member that works
/// on its events (away from `wait` 5 µs or more per event after its `consumed`: the shortest of
/// its last 8 absences) ends its turn at each of them, backlog or stream, so that the next event
/// goes to another member while it works; it stands aside only while it is ahead of its share
/// with 4 or more members in their wait. (The emulation keeps a stream's token through the work
/// of a member quicker than 100 µs: there one member at a time takes a stream, work and all.)
/// With nobody to hand to (no
/// other member inside `wait`), no backend rotates at all. See `docs/internals.md`,
/// "Rotation". (Both backends ask one module for this rule, `src/turn.rs`; a test there checks
/// that these numbers are its own.)
///
/// ```
/// use herdless::{Group, Rotation};
/// let adaptive = Group::builder().build()?; // the default
/// assert_eq!(adaptive.rotation(), Rotation::Adaptive);
/// let strict = Group::builder().rotation(Rotation::Every(1)).build()?; // = .rotate_every(1)
/// assert_eq!(strict.rotate_every(), 1);
/// # Ok::<(), herdless::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Rotation {
    /// Strict turns while events come one at a time, batches of up to [`ADAPTIVE_BATCH`]
    /// events per member while the descriptor has a backlog, and longer ones in a stream (the
    /// default).
    #[default]
    Adaptive,
    /// After `n` events, always: `Every(1)` is strict turns at any cost, `Every(0)` never
    /// rotates (the kernel's raw first-come order, the `EPOLLEXCLUSIVE` monopoly).
    Every(u32),
}

/// What [`GroupBuilder::build`](crate::GroupBuilder::build) (or [`Group::open`](crate::Group::open))
/// did to get the group, as [`Group::origin`](crate::Group::origin) tells: made a new one, joined
/// the one that existed, or re-made one that nobody used. A supervisor that must start from a
/// clean slate, or a server that must not be the first, reads it.
///
/// ```
/// # #[cfg(unix)] {
/// use herdless::{Group, Origin};
/// let name = format!("doc.origin.{}", std::process::id());
/// let first = Group::builder().name(&name).build()?;
/// assert_eq!(first.origin(), Origin::Created); // no group had the name
/// let again = Group::builder().name(&name).build()?;
/// assert_eq!(again.origin(), Origin::Opened); // the one that exists (here: this process's)
/// drop((first, again)); // nobody has it open now, and no member is alive
/// let fresh = Group::builder().name(&name).build()?;
/// assert_eq!(fresh.origin(), Origin::Remade); // made anew, with this builder's settings
/// drop(fresh);
/// Group::remove(&name)?;
/// # }
/// assert_eq!(herdless::Group::builder().build()?.origin(), herdless::Origin::Created);
/// # Ok::<(), herdless::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// A new group: an anonymous one, or a name no group had (or whose creator died before it
    /// set the group up).
    Created,
    /// The group that existed under the name, with its members: `Group::open` always, and a
    /// builder whose name was taken (also a second open of a name in one process, which
    /// returns the group the process has open).
    Opened,
    /// A group existed under the name, but nobody had it open and none of its members was
    /// alive: it was made anew, with the builder's settings and no members.
    Remade,
}

/// The most events a member takes in a row under [`Rotation::Adaptive`] while the descriptor
/// has a backlog: over a run of a few thousand events per member it keeps Jain's fairness
/// index above 0.99 (see `docs/lab.md`), and it saves a rotation on 15 of every 16 events.
pub const ADAPTIVE_BATCH: u32 = 16;

/// The default number of member slots.
pub const DEFAULT_MAX_MEMBERS: usize = 64;
/// The most member slots a group may have.
pub const MAX_MEMBERS_LIMIT: usize = 16384;

/// How many distinct exclusive descriptors the members of an emulated group may have
/// registered at once, unless `GroupBuilder::max_exclusive_descriptors` says otherwise (the
/// native backend keeps no such table: its kernel is the limit).
pub const DEFAULT_MAX_EXCLUSIVE: usize = 1024;
/// The most distinct exclusive descriptors an emulated group may watch at once.
pub const MAX_EXCLUSIVE_LIMIT: usize = 65536;
