//! Rented nodes, the scheduler, the Deployment controller and `sim.tenantci.io/run-for`, as
//! one controller per tenant cluster. It wakes on every store change and on its own timers
//! (a node finishing its boot, a node idle long enough, a pod whose run-for elapsed), computes
//! a plan with the pure `scheduler::plan`, and writes the result to the store as the real
//! components would (binding, preemption by deletion, Node objects).
//!
//! A cluster starts with zero nodes. Capacity comes from the node image; allocatable keeps
//! `tenant::node_image`'s reserve (100m CPU, 256 MiB) for the kubelet, as docs/simulator.md says.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use super::api::ApiServer;
use super::quantity::{Bytes, MilliCpu, Quantity};
use super::scheduler::{self, Action, Limits, NodeView, PodView};
use super::store::Store;
use tenantci_core::node_image::{NodeImage, RESERVED_CPU_MILLI, RESERVED_MEMORY_MIB};

/// `sim.tenantci.io/run-for: 2s` moves a Running pod to Succeeded after that long.
pub const RUN_FOR_ANNOTATION: &str = "sim.tenantci.io/run-for";
/// The label on every Node the simulator rented (`"true"`).
pub const RENTED_LABEL: &str = "tenantci.io/rented";

/// How rented nodes behave: what they offer, how long they boot, when they go, how many at most.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    /// The node image: each node's capacity (allocatable keeps the kubelet's reserve).
    pub image: NodeImage,
    /// How long a rented node takes to become Ready.
    pub boot: Duration,
    /// How long a node stays with no live pod before it is released.
    pub idle: Duration,
    /// The most nodes the autoscaler rents at once.
    pub max_nodes: usize,
}

impl Default for NodeConfig {
    /// The runbook's node (2 vCPU, 2048 MiB), ready at once, released after 5 minutes idle.
    fn default() -> Self {
        NodeConfig {
            image: NodeImage::default(),
            boot: Duration::ZERO,
            idle: Duration::from_secs(300),
            max_nodes: 10,
        }
    }
}

#[derive(Default)]
struct Timers {
    /// Node name -> when it becomes Ready.
    boot_done: HashMap<String, Instant>,
    /// Node name -> since when it has had no live pods.
    empty_since: HashMap<String, Instant>,
    /// (ns, pod) -> when it succeeds.
    finish_at: HashMap<(String, String), Instant>,
    next_node: u64,
    /// The scheduling events already recorded per Pod.
    events: super::events::Recorded,
}

impl Timers {
    fn next_deadline(&self, idle: Duration) -> Option<Instant> {
        self.boot_done
            .values()
            .copied()
            .chain(self.empty_since.values().map(|t| *t + idle))
            .chain(self.finish_at.values().copied())
            .min()
    }
}

/// Runs until `stop` turns true.
pub async fn run(api: Arc<ApiServer>, cfg: NodeConfig, mut stop: watch::Receiver<bool>) {
    let store = &api.store;
    let mut timers = Timers::default();
    resume(store, &cfg, &mut timers, Instant::now());
    let Ok((_, mut rx)) = store.watch_from(store.resource_version()) else {
        return;
    };
    loop {
        reconcile(store, &cfg, &mut timers, Instant::now());
        let deadline = timers.next_deadline(cfg.idle);
        tokio::select! {
            _ = stop.changed() => return,
            ev = rx.recv() => {
                if matches!(ev, Err(tokio::sync::broadcast::error::RecvError::Closed)) {
                    return;
                }
                // Coalesce a burst of events into one pass.
                while rx.try_recv().is_ok() {}
            }
            _ = sleep_until(deadline) => {}
        }
    }
}

/// Picks up objects saved by an earlier run (`persist`): new nodes are numbered after the
/// rented ones, a node that was booting boots again from now, and a running pod's run-for
/// starts again from now (the timers were in the stopped process).
fn resume(store: &Store, cfg: &NodeConfig, timers: &mut Timers, now: Instant) {
    let (nodes, _) = store.list("nodes", None);
    for n in &nodes {
        let name = n["metadata"]["name"].as_str().unwrap_or_default();
        if let Some(i) = name
            .strip_prefix("rented-")
            .and_then(|i| i.parse::<u64>().ok())
        {
            timers.next_node = timers.next_node.max(i);
        }
        let ready = n["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        if !ready && n["metadata"]["labels"][RENTED_LABEL] == "true" {
            timers.boot_done.insert(name.to_string(), now + cfg.boot);
        }
    }
    let (pods, _) = store.list("pods", None);
    for p in pods.iter().filter(|p| p["status"]["phase"] == "Running") {
        if let Some(d) = p["metadata"]["annotations"][RUN_FOR_ANNOTATION]
            .as_str()
            .and_then(|d| tenantci_core::duration::parse(d).ok())
        {
            let key = (
                p["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
            timers.finish_at.insert(key, now + d);
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending::<()>().await,
    }
}

/// PriorityClass name -> (value, preemptionPolicy is Never).
fn priority_classes(store: &Store) -> BTreeMap<String, (i32, bool)> {
    let (classes, _) = store.list("priorityclasses.scheduling.k8s.io", None);
    classes
        .iter()
        .filter_map(|pc| {
            let name = pc["metadata"]["name"].as_str()?.to_string();
            Some((
                name,
                (
                    pc["value"].as_i64()? as i32,
                    pc["preemptionPolicy"] == "Never",
                ),
            ))
        })
        .collect()
}

fn reconcile(store: &Store, cfg: &NodeConfig, timers: &mut Timers, now: Instant) {
    deployments(store);
    finish_runs(store, timers, now);
    boot_nodes(store, timers, now);

    let classes = priority_classes(store);
    let values: BTreeMap<String, i32> = classes.iter().map(|(k, (v, _))| (k.clone(), *v)).collect();
    let (pods, _) = store.list("pods", None);
    let views: Vec<PodView> = pods
        .iter()
        .map(|p| {
            let rv = p["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let mut view = PodView::from_json(p, scheduler::resolve_priority(p, &values), rv);
            // Admission copies the class's preemptionPolicy into the pod.
            let class = p["spec"]["priorityClassName"]
                .as_str()
                .and_then(|n| classes.get(n));
            view.preempt_never |= class.is_some_and(|(_, never)| *never);
            view
        })
        .collect();
    let (nodes, _) = store.list("nodes", None);
    let node_views: Vec<NodeView> = nodes
        .iter()
        .map(|n| node_view(n, &views, timers, now))
        .collect();
    let (new_node_cpu, new_node_memory) = allocatable(&cfg.image);
    let limits = Limits {
        max_nodes: cfg.max_nodes,
        node_idle: cfg.idle,
        new_node_cpu,
        new_node_memory,
        new_node_labels: BTreeMap::from([
            ("kubernetes.io/os".into(), "linux".into()),
            ("kubernetes.io/arch".into(), "amd64".into()),
        ]),
    };
    let actions = scheduler::plan(&views, &node_views, &limits);
    record_events(store, &pods, &node_views, &actions, cfg.max_nodes, timers);
    for action in actions {
        match action {
            Action::Bind {
                namespace,
                name,
                node,
            } => bind(store, &namespace, &name, &node, timers, now),
            Action::Preempt { victims, .. } => {
                for (ns, name) in victims {
                    let _ = store.delete("pods", &ns, &name, |cur| cur.map(|_| ()).ok_or(()));
                }
            }
            Action::RentNode => rent(store, cfg, timers, now),
            Action::ReleaseNode { name } => {
                let _ = store.delete("nodes", "", &name, |cur| cur.map(|_| ()).ok_or(()));
                timers.empty_since.remove(&name);
            }
        }
    }
}

/// The events of the Pods this pass leaves waiting (`events`).
fn record_events(
    store: &Store,
    pods: &[Arc<Value>],
    nodes: &[NodeView],
    actions: &[Action],
    max_nodes: usize,
    timers: &mut Timers,
) {
    let bound: HashSet<(&str, &str)> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Bind {
                namespace, name, ..
            } => Some((namespace.as_str(), name.as_str())),
            _ => None,
        })
        .collect();
    let text = |p: &'_ Value, k: &str| p["metadata"][k].as_str().unwrap_or_default().to_string();
    let live: HashSet<(String, String)> = pods
        .iter()
        .map(|p| (text(p, "namespace"), text(p, "name")))
        .collect();
    let waiting: Vec<&Value> = pods
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| p["spec"]["nodeName"].as_str().is_none_or(str::is_empty))
        .filter(|p| p["status"]["phase"].as_str().is_none_or(|s| s == "Pending"))
        .filter(|p| {
            let m = &p["metadata"];
            !bound.contains(&(
                m["namespace"].as_str().unwrap_or_default(),
                m["name"].as_str().unwrap_or_default(),
            ))
        })
        .collect();
    for p in &waiting {
        unschedulable(store, p);
    }
    let waiting: Vec<super::events::Waiting<'_>> = waiting
        .iter()
        .map(|p| super::events::Waiting {
            namespace: p["metadata"]["namespace"].as_str().unwrap_or_default(),
            name: p["metadata"]["name"].as_str().unwrap_or_default(),
            uid: p["metadata"]["uid"].as_str().unwrap_or_default(),
        })
        .collect();
    let rented = actions
        .iter()
        .filter(|a| matches!(a, Action::RentNode))
        .count();
    let scale = (rented > 0).then(|| (nodes.len(), nodes.len() + rented, max_nodes));
    let not_ready = nodes.iter().filter(|n| !n.ready).count();
    timers
        .events
        .pass(store, &waiting, nodes.len(), not_ready, scale);
    timers.events.retain(&live);
}

/// As kube-scheduler does for a Pod it could not place: its `PodScheduled` condition False
/// with reason `Unschedulable`, once (the transition time stays that of the first failure).
fn unschedulable(store: &Store, pod: &Value) {
    let already = pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "PodScheduled" && c["reason"] == "Unschedulable")
    });
    if already {
        return;
    }
    let m = &pod["metadata"];
    let (ns, name) = (
        m["namespace"].as_str().unwrap_or_default(),
        m["name"].as_str().unwrap_or_default(),
    );
    let _ = store.update("pods", ns, name, |cur| {
        let mut p = cur.cloned().ok_or(())?;
        if p["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty())
        {
            return Err(());
        }
        p["status"]["phase"] = json!("Pending");
        p["status"]["conditions"] = json!([{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0 nodes are available to place it: waiting for a node",
            "lastTransitionTime": super::ids::now(),
        }]);
        Ok(p)
    });
}

fn node_view(n: &Value, pods: &[PodView], timers: &mut Timers, now: Instant) -> NodeView {
    let name = n["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let ready = n["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    let q = |k: &str| Quantity::from_json(&n["status"]["allocatable"][k]).unwrap_or_default();
    let busy = pods
        .iter()
        .any(|p| !p.terminal && p.node_name.as_deref() == Some(name.as_str()));
    let idle_for = if busy || !ready {
        timers.empty_since.remove(&name);
        None
    } else {
        let since = *timers.empty_since.entry(name.clone()).or_insert(now);
        Some(now.saturating_duration_since(since))
    };
    NodeView {
        labels: n["metadata"]["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default(),
        taints: n["spec"]["taints"].as_array().cloned().unwrap_or_default(),
        cpu: MilliCpu(q("cpu").milli_value()),
        memory: Bytes(q("memory").value()),
        ready,
        idle_for,
        name,
    }
}

/// What a rented node's kubelet reports as allocatable: the image's capacity less the reserve
/// the node image keeps for the kubelet (docs/runbooks/prewarm.md), never below zero. Counted
/// here, not by the product's sizing code, so a sizing mistake shows as a pod that does not fit.
fn allocatable(img: &NodeImage) -> (MilliCpu, Bytes) {
    let cpu = MilliCpu(i128::from(img.vcpu) * 1000) - MilliCpu(RESERVED_CPU_MILLI);
    let memory = Bytes(i128::from(img.mem_mib) << 20) - Bytes(RESERVED_MEMORY_MIB << 20);
    (cpu.max(MilliCpu(0)), memory.max(Bytes(0)))
}

fn rent(store: &Store, cfg: &NodeConfig, timers: &mut Timers, now: Instant) {
    timers.next_node += 1;
    let name = format!("rented-{}", timers.next_node);
    let img = &cfg.image;
    let (cpu, memory) = allocatable(img);
    let mut capacity =
        json!({"cpu": img.vcpu.to_string(), "memory": format!("{}Mi", img.mem_mib), "pods": "110"});
    let mut allocatable = json!({"cpu": cpu.to_quantity_string(), "memory": format!("{}Mi", memory.0 >> 20), "pods": "110"});
    if let Some(root) = img.rootfs_mib {
        capacity["ephemeral-storage"] = json!(format!("{root}Mi"));
        allocatable["ephemeral-storage"] = json!(format!("{root}Mi"));
    }
    let node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": super::ids::uuid(),
            "creationTimestamp": super::ids::now(),
            "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                RENTED_LABEL: "true"
            }
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "False", "reason": "Booting",
                             "message": "rented node is booting from the guest image", "lastTransitionTime": super::ids::now()}],
            "addresses": [{"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.32.0-tenantci-sim", "operatingSystem": "linux", "architecture": "amd64"}
        }
    });
    if store.create("nodes", "", &name, node).is_ok() {
        timers.boot_done.insert(name, now + cfg.boot);
    }
}

fn boot_nodes(store: &Store, timers: &mut Timers, now: Instant) {
    let done: Vec<String> = timers
        .boot_done
        .iter()
        .filter(|(_, t)| **t <= now)
        .map(|(n, _)| n.clone())
        .collect();
    for name in done {
        timers.boot_done.remove(&name);
        let _ = store.update("nodes", "", &name, |cur| {
            let mut n = cur.cloned().ok_or(())?;
            n["status"]["conditions"] = json!([{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status", "lastTransitionTime": super::ids::now()}]);
            Ok::<_, ()>(n)
        });
    }
}

fn bind(store: &Store, ns: &str, name: &str, node: &str, timers: &mut Timers, now: Instant) {
    let updated = store.update("pods", ns, name, |cur| {
        let mut p = cur.cloned().ok_or(())?;
        if p["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty()) {
            return Err(());
        }
        let t = super::ids::now();
        p["spec"]["nodeName"] = json!(node);
        let statuses: Vec<Value> = p["spec"]["containers"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| json!({"name": c["name"], "image": c["image"], "imageID": "", "ready": true, "started": true,
                                    "restartCount": 0, "state": {"running": {"startedAt": t}}}))
                    .collect()
            })
            .unwrap_or_default();
        p["status"] = json!({
            "phase": "Running",
            "qosClass": p["status"]["qosClass"],
            "hostIP": "127.0.0.1",
            "podIP": "10.244.0.10",
            "startTime": t,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": t},
                {"type": "Initialized", "status": "True", "lastTransitionTime": t},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": t},
                {"type": "Ready", "status": "True", "lastTransitionTime": t}
            ],
            "containerStatuses": statuses,
        });
        Ok(p)
    });
    if let Ok((p, _)) = updated
        && let Some(d) = p["metadata"]["annotations"][RUN_FOR_ANNOTATION]
            .as_str()
            .and_then(|d| tenantci_core::duration::parse(d).ok())
    {
        timers
            .finish_at
            .insert((ns.to_string(), name.to_string()), now + d);
    }
}

fn finish_runs(store: &Store, timers: &mut Timers, now: Instant) {
    let due: Vec<(String, String)> = timers
        .finish_at
        .iter()
        .filter(|(_, t)| **t <= now)
        .map(|(k, _)| k.clone())
        .collect();
    for (ns, name) in due {
        timers.finish_at.remove(&(ns.clone(), name.clone()));
        let _ = store.update("pods", &ns, &name, |cur| {
            let mut p = cur.cloned().ok_or(())?;
            let t = super::ids::now();
            p["status"]["phase"] = json!("Succeeded");
            if let Some(cs) = p["status"]["containerStatuses"].as_array_mut() {
                for c in cs {
                    c["ready"] = json!(false);
                    c["state"] = json!({"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": t}});
                }
            }
            Ok::<_, ()>(p)
        });
    }
}

/// The Deployment controller: `replicas` pods of the template, owned by the Deployment.
fn deployments(store: &Store) {
    let (deploys, _) = store.list("deployments.apps", None);
    let (pods, _) = store.list("pods", None);
    for d in deploys {
        let ns = d["metadata"]["namespace"].as_str().unwrap_or("default");
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        let uid = d["metadata"]["uid"].as_str().unwrap_or_default();
        let want = d["spec"]["replicas"].as_i64().unwrap_or(1).max(0) as usize;
        let mut owned: Vec<&Arc<Value>> = pods
            .iter()
            .filter(|p| {
                p["metadata"]["namespace"] == ns
                    && p["metadata"]["ownerReferences"]
                        .as_array()
                        .is_some_and(|o| o.iter().any(|r| r["uid"] == uid))
                    && !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
            })
            .collect();
        owned.sort_by_key(|p| {
            p["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        });
        for _ in owned.len()..want {
            create_pod_from_template(store, &d, ns, name, uid);
        }
        for extra in owned.iter().skip(want).rev() {
            let pn = extra["metadata"]["name"].as_str().unwrap_or_default();
            let _ = store.delete("pods", ns, pn, |cur| cur.map(|_| ()).ok_or(()));
        }
        // Pods created in this pass are Pending: not ready, but they count as replicas.
        let ready = owned
            .iter()
            .take(want)
            .filter(|p| p["status"]["phase"] == "Running")
            .count();
        let replicas = want;
        let _ = store.update("deployments.apps", ns, name, |cur| {
            let mut dd = cur.cloned().ok_or(())?;
            dd["status"] = json!({
                "observedGeneration": dd["metadata"]["generation"].as_i64().unwrap_or(1),
                "replicas": replicas,
                "updatedReplicas": replicas,
                "readyReplicas": ready,
                "availableReplicas": ready,
            });
            Ok::<_, ()>(dd)
        });
    }
}

fn create_pod_from_template(store: &Store, d: &Value, ns: &str, name: &str, uid: &str) {
    let template = &d["spec"]["template"];
    let suffix = super::ids::name_suffix();
    let pod_name = format!("{name}-{suffix}");
    let mut meta = template["metadata"].clone();
    if !meta.is_object() {
        meta = json!({});
    }
    meta["name"] = json!(pod_name);
    meta["namespace"] = json!(ns);
    meta["uid"] = json!(super::ids::uuid());
    meta["creationTimestamp"] = json!(super::ids::now());
    meta["generateName"] = json!(format!("{name}-"));
    meta["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": uid,
                                      "controller": true, "blockOwnerDeletion": true}]);
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": template["spec"],
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    });
    let _ = store.create("pods", ns, &pod_name, pod);
}
