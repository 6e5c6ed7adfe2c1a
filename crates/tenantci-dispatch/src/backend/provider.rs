//! What a backend registers in `catalog`: its facts and how it is built for a run
//! ([`Provider`]), from what the run has ([`Inputs`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::pod::registrar::Registrar;
use super::vm::sandboxes::Sandboxes;
use super::{Backend, BackendFacts, BackendKind};
use crate::metrics::Metrics;
use crate::task::ledger::Ledger;

/// What building a backend may use: what every dispatcher has, and what the built-in
/// backends' own config sections prepared (None: that section is absent).
pub struct Inputs {
    /// The tenant cluster.
    pub kube: kube::Client,
    /// The executors' namespace (`[cluster] namespace`).
    pub namespace: String,
    /// A watching backend's pass without a change seen (`[cluster] resync`).
    pub resync: Duration,
    /// The claim ledger.
    pub ledger: Ledger,
    /// The dispatcher's metrics.
    pub metrics: Arc<Metrics>,
    /// The capacities `[capacity]` sets explicitly, by backend name.
    pub capacity: BTreeMap<BackendKind, u32>,
    /// Executor identity on: the pod backend's SPIRE entries.
    pub registrar: Option<Registrar>,
    /// `[vm]` set: the VM backend's sandboxes.
    pub sandboxes: Option<Sandboxes>,
}

/// A backend as registered: its facts, and how it is built.
pub trait Provider: Sync {
    /// What the rest of the dispatcher knows about it.
    fn facts(&self) -> &'static BackendFacts;

    /// Its executors for this run; None when its configuration leaves it off.
    fn build(&self, inputs: &mut Inputs) -> Option<Arc<dyn Backend>>;
}
