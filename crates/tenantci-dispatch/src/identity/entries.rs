//! The per-task SPIRE registration entries, pure: which `ClusterStaticEntry`
//! (`spire.spiffe.io/v1alpha1`) each scheduled executor Pod must have, and what to write or
//! delete to get there. The pod backend's `registrar` (`backend::pod::registrar`) carries the
//! plan out.
//!
//! One entry per executor Pod, written once the Pod is scheduled: its parent is the SPIRE agent
//! of the Pod's node (`identity.parent_template` with the node's UID), and its selectors pin
//! the Pod (`k8s:pod-uid`) and the executor's uid (`unix:uid:2000`), so the SVID of the task's
//! SPIFFE ID is issued to that Pod's processes and no other. An entry whose Pod is gone (or
//! was replaced by a later attempt: same name, new UID) is deleted or rewritten, so entries
//! disappear with their executors, also those a killed dispatcher left behind.
//!
//! Names: ClusterStaticEntry is cluster-scoped, and a task id is unique only per Gitea, so
//! the entry is named `<namespace>.<pod name>`: two dispatchers in different namespaces
//! never touch each other's entries. The labels scope the list to this dispatcher's namespace.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::identity::Parsed;
use crate::task_id::TaskId;
use tenantci_core::spiffe::id::Values;

/// The API group of SPIRE's controller-manager resources.
pub const GROUP: &str = "spire.spiffe.io";
/// Their API version.
pub const VERSION: &str = "v1alpha1";
/// `GROUP/VERSION`, as `apiVersion` and discovery name it.
pub const API_VERSION: &str = "spire.spiffe.io/v1alpha1";
/// The kind of a per-task entry.
pub const KIND: &str = "ClusterStaticEntry";
/// Its resource name in API paths.
pub const PLURAL: &str = "clusterstaticentries";

/// The label marking what a tenantci dispatcher wrote.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub const MANAGED_BY: &str = "tenantci-dispatcher";
/// The dispatch namespace whose executor the entry is for.
pub const NAMESPACE_LABEL: &str = "tenantci.io/dispatch-namespace";
/// The Gitea task whose executor the entry is for.
pub const TASK_LABEL: &str = "tenantci.io/task-id";

/// The executor's unix uid (the Pod's `runAsUser`): the second selector.
pub const UNIX_UID_SELECTOR: &str = "unix:uid:2000";

/// The SVIDs' lifetime. Shorter than Gitea's 3 h task limit, so an SVID outlives its task by
/// at most this (the entry is deleted at the end, and SPIRE issues no new one); SPIRE's agent
/// rotates at half of it, which the facade and the proxy follow.
pub const SVID_TTL: &str = "1h";

/// The label selector of this dispatcher's entries.
pub fn selector(namespace: &str) -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY},{NAMESPACE_LABEL}={namespace}")
}

/// The entry of executor Pod `pod_name` in `namespace`.
pub fn entry_name(namespace: &str, pod_name: &str) -> String {
    format!("{namespace}.{pod_name}")
}

/// An executor Pod that is scheduled, as its entry needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledPod {
    /// The Gitea task it runs.
    pub task: TaskId,
    /// Its name; the entry is named after it ([`entry_name`]).
    pub pod_name: String,
    /// Its UID, pinned by the `k8s:pod-uid` selector.
    pub pod_uid: String,
    /// The node it is scheduled on, whose UID renders the entry's parent.
    pub node_name: String,
    /// The task's SPIFFE ID (the Pod's `tenantci.io/spiffe-id` annotation).
    pub spiffe_id: String,
}

/// An entry as listed: enough to tell whether it is its Pod's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveEntry {
    /// The entry's name.
    pub name: String,
    /// Its `resourceVersion`, to replace it with; None when the listing gave none.
    pub resource_version: Option<String>,
    /// Its `spec.spiffeID`; empty when absent.
    pub spiffe_id: String,
    /// Its `spec.selectors`.
    pub selectors: Vec<String>,
}

impl LiveEntry {
    /// From a listed object; None when it has no name.
    pub fn from_object(obj: &Value) -> Option<LiveEntry> {
        let spec = &obj["spec"];
        Some(LiveEntry {
            name: obj["metadata"]["name"].as_str()?.to_string(),
            resource_version: obj["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_string),
            spiffe_id: spec["spiffeID"].as_str().unwrap_or_default().to_string(),
            selectors: spec["selectors"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// Whether this is the entry `pod` needs (same Pod UID and SPIFFE ID; a Pod never moves to
    /// another node, so its parent cannot have changed).
    fn serves(&self, pod: &ScheduledPod) -> bool {
        self.spiffe_id == pod.spiffe_id && self.selectors == selectors(&pod.pod_uid)
    }
}

fn selectors(pod_uid: &str) -> Vec<String> {
    vec![format!("k8s:pod-uid:{pod_uid}"), UNIX_UID_SELECTOR.into()]
}

/// What to do about the entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write `pod`'s entry: create it, or (`replace` names the live version) rewrite the
    /// entry of an earlier attempt of the same name.
    Write {
        /// The Pod the entry is for.
        pod: ScheduledPod,
        /// The live entry's `resourceVersion` to replace; None: create a new entry.
        replace: Option<String>,
    },
    /// Delete the entry `name`: its Pod is gone.
    Delete {
        /// The entry's name.
        name: String,
    },
}

/// The writes and deletes that give every scheduled Pod in `pods` its entry and leave no
/// other entry of this dispatcher (`live`): one whose Pod is gone, ended, or not yet
/// scheduled after a replacement (that entry names the old Pod's UID and serves nobody).
pub fn plan(namespace: &str, pods: &[ScheduledPod], live: &[LiveEntry]) -> Vec<Action> {
    let live_by_name: BTreeMap<&str, &LiveEntry> =
        live.iter().map(|e| (e.name.as_str(), e)).collect();
    let mut actions = Vec::new();
    let mut wanted = BTreeSet::new();
    for pod in pods {
        let name = entry_name(namespace, &pod.pod_name);
        match live_by_name.get(name.as_str()) {
            Some(e) if e.serves(pod) => {}
            found => actions.push(Action::Write {
                pod: pod.clone(),
                replace: found.map(|e| e.resource_version.clone().unwrap_or_default()),
            }),
        }
        wanted.insert(name);
    }
    actions.extend(
        live.iter()
            .filter(|e| !wanted.contains(&e.name))
            .map(|e| Action::Delete {
                name: e.name.clone(),
            }),
    );
    actions
}

/// The entry object for `pod` on the node whose UID is `node_uid`. An error says why no
/// parent ID can be rendered (the node's UID makes no SPIFFE ID path segment).
pub fn desired(
    identity: &Parsed,
    namespace: &str,
    pod: &ScheduledPod,
    node_uid: &str,
) -> Result<Value, String> {
    let td = identity.trust_domain.to_string();
    let parent = identity
        .parent_template
        .render(&Values {
            trust_domain: Some(&td),
            cluster: identity.cluster.as_deref(),
            node_uid: Some(node_uid),
            ..Values::default()
        })
        .map_err(|e| {
            format!(
                "no parent ID for the entry of task {} (node {}): {}",
                pod.task,
                pod.node_name,
                e.message()
            )
        })?;
    let mut entry = json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": entry_name(namespace, &pod.pod_name),
            "labels": {
                MANAGED_BY_LABEL: MANAGED_BY,
                NAMESPACE_LABEL: namespace,
                TASK_LABEL: pod.task.to_string(),
            },
        },
        "spec": {
            "spiffeID": pod.spiffe_id,
            "parentID": parent.to_string(),
            "selectors": selectors(&pod.pod_uid),
            "x509SVIDTTL": SVID_TTL,
        },
    });
    // The controller manager of that class takes the entry; SPIRE's hardened chart ignores
    // classless ones.
    if let Some(class) = &identity.class_name {
        entry["spec"]["className"] = class.clone().into();
    }
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(task: TaskId, uid: &str) -> ScheduledPod {
        ScheduledPod {
            task,
            pod_name: format!("gitea-task-{task}"),
            pod_uid: uid.into(),
            node_name: "node-a".into(),
            spiffe_id: format!("spiffe://example.org/gitea/acme/w/job{task}"),
        }
    }

    fn live_for(p: &ScheduledPod) -> LiveEntry {
        LiveEntry {
            name: entry_name("ns", &p.pod_name),
            resource_version: Some("7".into()),
            spiffe_id: p.spiffe_id.clone(),
            selectors: selectors(&p.pod_uid),
        }
    }

    #[test]
    fn the_api_version_is_group_and_version() {
        assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
    }

    #[test]
    fn a_scheduled_pod_without_entry_gets_one_and_an_entry_in_place_is_left_alone() {
        let (a, b) = (pod(TaskId::new(1), "uid-a"), pod(TaskId::new(2), "uid-b"));
        let live = [live_for(&a)];
        let actions = plan("ns", &[a.clone(), b.clone()], &live);
        assert_eq!(
            actions,
            [Action::Write {
                pod: b,
                replace: None
            }]
        );
    }

    #[test]
    fn a_replaced_attempt_s_entry_is_rewritten_for_the_new_pod() {
        let old = pod(TaskId::new(1), "uid-old");
        let new = pod(TaskId::new(1), "uid-new");
        let actions = plan("ns", std::slice::from_ref(&new), &[live_for(&old)]);
        assert_eq!(
            actions,
            [Action::Write {
                pod: new,
                replace: Some("7".into())
            }]
        );
        // Not scheduled yet: the old entry names a Pod that is gone, so it is deleted.
        let actions = plan("ns", &[], &[live_for(&old)]);
        assert_eq!(
            actions,
            [Action::Delete {
                name: "ns.gitea-task-1".into()
            }]
        );
    }

    #[test]
    fn an_entry_whose_pod_is_gone_is_deleted() {
        let gone = pod(TaskId::new(3), "uid-c");
        let actions = plan("ns", &[], &[live_for(&gone)]);
        assert_eq!(
            actions,
            [Action::Delete {
                name: "ns.gitea-task-3".into()
            }]
        );
    }

    #[test]
    fn the_entry_pins_the_pod_and_names_the_node_s_agent() {
        let identity = crate::identity::settings::tests::identity()
            .parse()
            .unwrap();
        let obj = desired(&identity, "ns", &pod(TaskId::new(4), "uid-d"), "node-uid-9").unwrap();
        assert_eq!(obj["metadata"]["name"], "ns.gitea-task-4");
        assert_eq!(obj["metadata"]["labels"][TASK_LABEL], "4");
        assert_eq!(
            obj["spec"]["parentID"],
            "spiffe://example.org/spire/agent/k8s_psat/ci/node-uid-9"
        );
        assert_eq!(
            obj["spec"]["selectors"],
            json!(["k8s:pod-uid:uid-d", "unix:uid:2000"])
        );
        assert_eq!(
            obj["spec"]["spiffeID"],
            "spiffe://example.org/gitea/acme/w/job4"
        );
        let live = LiveEntry::from_object(&obj).unwrap();
        assert!(live.serves(&pod(TaskId::new(4), "uid-d")));
        assert!(!live.serves(&pod(TaskId::new(4), "uid-other")));
        let e = desired(&identity, "ns", &pod(TaskId::new(4), "uid-d"), "a b").unwrap_err();
        assert!(e.contains("task 4") && e.contains("node-a"), "{e}");
    }
}
