//! The operation sequence against a simple model, with property-based tests: random sequences
//! of add, modify, delete, write, drain, wait, join and leave on real pipes, where the model
//! says what each call must answer and which keys a wait must hand out.

// Linux only: real pipes through tests/common, and tests/common uses pipe2, gettid and /proc.
#![cfg(any(target_os = "linux", target_os = "android"))]

mod common;

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use common::*;
use herdless::{Backend, Error, Events, Group, Interest, Waiter};
use proptest::prelude::*;

const PIPES: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    Add {
        pipe: usize,
        key: usize,
        exclusive: bool,
    },
    Modify {
        pipe: usize,
        key: usize,
        exclusive: bool,
    },
    Delete {
        pipe: usize,
    },
    Write {
        pipe: usize,
    },
    Drain {
        pipe: usize,
    },
    Wait,
    JoinOther,
    LeaveOther,
}

fn op() -> impl Strategy<Value = Op> {
    let pipe = 0..PIPES;
    prop_oneof![
        (pipe.clone(), 0..4usize, any::<bool>()).prop_map(|(pipe, key, exclusive)| Op::Add {
            pipe,
            key,
            exclusive
        }),
        (pipe.clone(), 0..4usize, any::<bool>()).prop_map(|(pipe, key, exclusive)| Op::Modify {
            pipe,
            key,
            exclusive
        }),
        pipe.clone().prop_map(|pipe| Op::Delete { pipe }),
        pipe.clone().prop_map(|pipe| Op::Write { pipe }),
        pipe.prop_map(|pipe| Op::Drain { pipe }),
        Just(Op::Wait),
        Just(Op::JoinOther),
        Just(Op::LeaveOther),
    ]
}

/// What the model knows: the waiting member's registrations (pipe → key) and which pipes hold
/// data. A second member registers every pipe exclusively while joined, but never waits, so
/// it never takes an event.
struct Model {
    registered: BTreeMap<usize, usize>,
    has_data: [bool; PIPES],
}

fn interest(exclusive: bool) -> Interest {
    if exclusive {
        Interest::READABLE.exclusive()
    } else {
        Interest::READABLE
    }
}

fn run(backend: Backend, ops: &[Op]) -> Result<(), TestCaseError> {
    let group = Group::builder().backend(backend).build().unwrap();
    let pipes: Vec<(OwnedFd, OwnedFd)> = (0..PIPES).map(|_| pipe()).collect();
    let mut waiter = group.join().unwrap();
    let mut other: Option<Waiter> = None;
    let mut model = Model {
        registered: BTreeMap::new(),
        has_data: [false; PIPES],
    };
    let mut events = Events::with_capacity(8);
    for op in ops {
        match *op {
            Op::Add {
                pipe,
                key,
                exclusive,
            } => {
                let res = waiter.add(&pipes[pipe].0, key, interest(exclusive));
                match model.registered.entry(pipe) {
                    Entry::Occupied(_) => prop_assert!(
                        matches!(res, Err(Error::AlreadyRegistered { .. })),
                        "{res:?}"
                    ),
                    Entry::Vacant(slot) => {
                        prop_assert!(res.is_ok(), "{res:?}");
                        slot.insert(key);
                    }
                }
            }
            Op::Modify {
                pipe,
                key,
                exclusive,
            } => {
                let res = waiter.modify(&pipes[pipe].0, key, interest(exclusive));
                match model.registered.get_mut(&pipe) {
                    Some(registered_key) => {
                        prop_assert!(res.is_ok(), "{res:?}");
                        *registered_key = key;
                    }
                    None => {
                        prop_assert!(matches!(res, Err(Error::NotRegistered { .. })), "{res:?}")
                    }
                }
            }
            Op::Delete { pipe } => {
                let res = waiter.delete(&pipes[pipe].0);
                if model.registered.remove(&pipe).is_some() {
                    prop_assert!(res.is_ok(), "{res:?}");
                } else {
                    prop_assert!(matches!(res, Err(Error::NotRegistered { .. })), "{res:?}");
                }
            }
            Op::Write { pipe } => {
                write_msg(pipes[pipe].1.as_raw_fd(), 0);
                model.has_data[pipe] = true;
            }
            Op::Drain { pipe } => {
                while let Some(Some(_)) = read_msg(pipes[pipe].0.as_raw_fd()) {}
                model.has_data[pipe] = false;
            }
            Op::Wait => {
                waiter.wait(&mut events, Some(Duration::ZERO)).unwrap();
                let got: BTreeSet<usize> = events.iter().map(|e| e.key).collect();
                let want: BTreeSet<usize> = model
                    .registered
                    .iter()
                    .filter(|(pipe, _)| model.has_data[**pipe])
                    .map(|(_, key)| *key)
                    .collect();
                prop_assert_eq!(got, want);
            }
            Op::JoinOther => {
                if other.is_none() {
                    let mut w = group.join().unwrap();
                    for (r, _) in &pipes {
                        w.add(r, 9, Interest::READABLE.exclusive()).unwrap();
                    }
                    other = Some(w);
                }
            }
            Op::LeaveOther => other = None,
        }
    }
    Ok(())
}

fn sequences_follow_the_model(backend: Backend) {
    let config = ProptestConfig {
        cases: 96,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ops in proptest::collection::vec(op(), 1..40))| {
        run(backend, &ops)?;
    });
}

every_backend!(sequences_follow_the_model);
