//! The Events a real cluster records for a Pod that waits for a node, as `kubectl describe pod`
//! shows them: the scheduler's `FailedScheduling` (Warning, `default-scheduler`) the first
//! time a pass leaves it unbound, and cluster-autoscaler's `TriggeredScaleUp` (Normal) when a
//! pass rents a node for it. One of each per Pod, as the real components deduplicate theirs
//! into a count.
//!
//! Boundary: records; decides nothing (the scheduler's `plan` does). Messages follow the
//! upstream wording for the cases the simulator models: nodes not ready yet, none at all.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::store::Store;

/// Which Pods already have which event.
#[derive(Default)]
pub struct Recorded {
    seen: HashSet<(String, String, &'static str)>,
}

/// A Pod left unbound by a pass.
pub struct Waiting<'a> {
    /// The Pod's namespace.
    pub namespace: &'a str,
    /// The Pod's name.
    pub name: &'a str,
    /// The Pod's uid (the Event's `involvedObject`).
    pub uid: &'a str,
}

impl Recorded {
    /// Records the events of this pass: every Pod in `waiting` failed scheduling on `nodes`
    /// nodes of which `not_ready` boot; with `rented` nodes rented now (`total` after, at most
    /// `max`), each triggered the scale-up.
    pub fn pass(
        &mut self,
        store: &Store,
        waiting: &[Waiting<'_>],
        nodes: usize,
        not_ready: usize,
        scale: Option<(usize, usize, usize)>,
    ) {
        for w in waiting {
            let failed = if nodes == 0 {
                "no nodes available to schedule pods".to_string()
            } else if not_ready > 0 {
                format!(
                    "0/{nodes} nodes are available: {not_ready} node(s) had untolerated taint {{node.kubernetes.io/not-ready: }}. preemption: 0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling."
                )
            } else {
                format!(
                    "0/{nodes} nodes are available: {nodes} Insufficient cpu, {nodes} Insufficient memory. preemption: 0/{nodes} nodes are available: {nodes} No preemption victims found for incoming pod."
                )
            };
            self.record(
                store,
                w,
                "FailedScheduling",
                "Warning",
                "default-scheduler",
                failed,
            );
            if let Some((before, after, max)) = scale {
                let msg =
                    format!("pod triggered scale-up: [{{rented {before}->{after} (max: {max})}}]");
                self.record(
                    store,
                    w,
                    "TriggeredScaleUp",
                    "Normal",
                    "cluster-autoscaler",
                    msg,
                );
            }
        }
    }

    /// Forgets Pods that are gone (their events stay, as the apiserver keeps them for an hour).
    pub fn retain(&mut self, live: &HashSet<(String, String)>) {
        self.seen
            .retain(|(ns, name, _)| live.contains(&(ns.clone(), name.clone())));
    }

    fn record(
        &mut self,
        store: &Store,
        w: &Waiting<'_>,
        reason: &'static str,
        kind: &str,
        component: &str,
        message: String,
    ) {
        let key = (w.namespace.to_string(), w.name.to_string(), reason);
        if self.seen.contains(&key) {
            return;
        }
        let name = format!("{}.{}", w.name, &super::ids::uuid()[..8]);
        if store
            .create(
                "events",
                w.namespace,
                &name,
                event(w, &name, reason, kind, component, &message),
            )
            .is_ok()
        {
            self.seen.insert(key);
        }
    }
}

fn event(
    w: &Waiting<'_>,
    name: &str,
    reason: &str,
    kind: &str,
    component: &str,
    message: &str,
) -> Value {
    let now = super::ids::now();
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": w.namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": w.namespace, "name": w.name, "uid": w.uid},
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1
    })
}
