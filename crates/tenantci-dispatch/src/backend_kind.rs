//! A backend's name, and what the layers below `backend` need to know about one, as data.
//!
//! The lowest floor, so the queue, the claim ledger, the registry, the resource classes and
//! the metrics can key by backend without knowing which backends exist. Which ones exist is
//! `backend::catalog`'s list, where each backend registers its [`BackendFacts`] (a name read
//! from a record is learnt at run time, [`BackendKind::learn`]); nothing on this floor names
//! one.

use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Which backend an assignment runs on: its name, which is also its durable consumer's name,
/// the last word of its subject (`ci.runner.<name>`), its `[capacity]` key and its metrics
/// label. Copy and cheap: the name is a `&'static str`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackendKind(&'static str);

/// At most this many distinct names are learnt from records (ledger entries, assignments,
/// config) in one process: a backend's name is one of a few, so more is a damaged input, and
/// each learnt name is kept for the process's life.
const MAX_LEARNT: usize = 32;

static LEARNT: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

impl BackendKind {
    /// A backend's own name; only its folder under `backend/` constructs one (the layering
    /// check refuses this call elsewhere outside tests).
    pub const fn new(name: &'static str) -> Self {
        BackendKind(name)
    }

    /// The name read from a record or a file: a DNS label of at most 16 characters. Kept for
    /// the process's life (at most 32 names, `MAX_LEARNT`), so the kind stays `Copy`.
    pub fn learn(name: &str) -> Result<Self, String> {
        let valid = !name.is_empty()
            && name.len() <= 16
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid {
            return Err(format!(
                "`{}` is not a backend name (lower-case letters, digits and `-`, at most 16)",
                name.escape_debug()
            ));
        }
        let mut learnt = LEARNT.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(known) = learnt.iter().find(|k| **k == name) {
            return Ok(BackendKind(known));
        }
        if learnt.len() >= MAX_LEARNT {
            return Err(format!(
                "`{name}` would be backend name number {} seen by this process; no build has that many",
                MAX_LEARNT + 1
            ));
        }
        let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
        learnt.push(leaked);
        Ok(BackendKind(leaked))
    }

    /// The name: `pod`, `vm`.
    pub fn name(self) -> &'static str {
        self.0
    }

    /// The durable consumer's name: the backend's name.
    pub fn consumer(self) -> &'static str {
        self.0
    }

    /// The subject its assignments are published on.
    pub fn subject(self) -> String {
        format!("ci.runner.{}", self.0)
    }
}

impl fmt::Debug for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BackendKind({})", self.0)
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BackendKind::learn(s)
    }
}

impl Serialize for BackendKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

impl<'de> Deserialize<'de> for BackendKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(d)?;
        BackendKind::learn(&name).map_err(serde::de::Error::custom)
    }
}

/// The words a backend's messages use for its executors.
#[derive(Debug, Clone, Copy)]
pub struct Nouns {
    /// One task's executor: "executor Pod and Secret", "VM sandbox".
    pub executor: &'static str,
    /// Several: "executors", "VM sandboxes".
    pub executors: &'static str,
    /// Where they are listed: "the apiserver", "the Lifecycle API".
    pub source: &'static str,
    /// What happened when one vanished: "the executor's Pod and Secret were deleted".
    pub gone: &'static str,
    /// How recovery describes an executor lost after it fetched its task when part of it is
    /// left.
    pub lost_partly: &'static str,
    /// The same, when nothing of it is left.
    pub lost_whole: &'static str,
}

/// What the rest of the dispatcher knows about a backend, registered by the backend itself
/// (`backend::catalog`): the layers below `backend` get it as data, never by naming one.
#[derive(Debug, Clone, Copy)]
pub struct BackendFacts {
    /// Its name.
    pub kind: BackendKind,
    /// The `runs-on` label that routes a task to it; None for the default backend, which
    /// takes every task no other backend's label selects.
    pub label: Option<&'static str>,
    /// What turns it on, for the sentence that refuses a job asking for it while it is off.
    pub turned_on_by: &'static str,
    /// Its concurrent executors when `[capacity]` does not say.
    pub default_capacity: u32,
    /// True: off unless `[capacity]` names it, and absent from a config written by default.
    pub opt_in: bool,
    /// The config section of its own that turns it on (`vm` for `[vm]`); None: none.
    pub section: Option<&'static str>,
    /// Its executors run on the tenant cluster's rented nodes: a resource class on it must
    /// fit a node, and may keep nodes warm with pause Pods.
    pub rented_nodes: bool,
    /// Its words for messages.
    pub nouns: Nouns,
}
