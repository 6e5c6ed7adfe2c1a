//! The simulator's scheduler and node autoscaler as one pure planning step: given the pods,
//! the nodes and the PriorityClasses, decide what to bind, what to preempt, and whether to
//! rent or release a node. The simulator's controller loop applies the plan to its store.
//!
//! Modelled on kube-scheduler and cluster-autoscaler, as far as tenantci depends on them:
//! pods are placed in priority order (then age); a pod fits a Ready node when its requests fit
//! the node's allocatable minus what bound pods request, its nodeSelector matches the node's
//! labels and it tolerates the node's NoSchedule/NoExecute taints. A pod that fits nowhere may
//! preempt lower-priority pods on one node (unless its preemptionPolicy is Never). A pod that
//! still fits nowhere makes the autoscaler rent a node, unless its priority is below the cutoff
//! (-10) or `max_nodes` is reached, or a node already booting will take it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::quantity::{Bytes, MilliCpu, Quantity};

/// cluster-autoscaler's default `expendable-pods-priority-cutoff`: pods below never rent.
pub const AUTOSCALER_PRIORITY_CUTOFF: i32 = -10;

/// What the planner needs to know about a pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodView {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// Its resolved priority ([`resolve_priority`]).
    pub priority: i32,
    /// `preemptionPolicy: Never`: it preempts no one.
    pub preempt_never: bool,
    /// Its effective CPU request ([`pod_requests`]).
    pub cpu: MilliCpu,
    /// Its effective memory request.
    pub memory: Bytes,
    /// Its nodeSelector.
    pub node_selector: BTreeMap<String, String>,
    /// Its tolerations, as stored.
    pub tolerations: Vec<Value>,
    /// The node it is bound to, if any.
    pub node_name: Option<String>,
    /// Succeeded and Failed pods hold no resources.
    pub terminal: bool,
    /// Creation order (the store's resourceVersion or a timestamp): older first.
    pub age_key: u64,
}

/// What the planner needs to know about a node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    /// The node's name.
    pub name: String,
    /// Whether its Ready condition is True.
    pub ready: bool,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its taints, as stored.
    pub taints: Vec<Value>,
    /// Its allocatable CPU.
    pub cpu: MilliCpu,
    /// Its allocatable memory.
    pub memory: Bytes,
    /// How long the node has had no non-terminal pods (None while it has some).
    pub idle_for: Option<Duration>,
}

/// What bounds the autoscaler, and what a node it rents offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The most nodes at once.
    pub max_nodes: usize,
    /// How long a node may be idle before it is released.
    pub node_idle: Duration,
    /// Allocatable of a node about to be rented (from the node image).
    pub new_node_cpu: MilliCpu,
    /// Allocatable memory of a node about to be rented.
    pub new_node_memory: Bytes,
    /// Labels a rented node comes up with (a pod whose nodeSelector they do not satisfy
    /// would never fit one, so it rents nothing).
    pub new_node_labels: BTreeMap<String, String>,
}

/// One step of a plan, for the controller to apply to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Set spec.nodeName, PodScheduled, phase Running.
    Bind {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
        /// The node it goes to.
        node: String,
    },
    /// Delete these pods so `for_pod` fits on `node` (it is bound in the same plan).
    Preempt {
        /// The pods deleted, as (namespace, name).
        victims: Vec<(String, String)>,
        /// The node they are deleted from.
        node: String,
        /// The pod they make room for, as (namespace, name).
        for_pod: (String, String),
    },
    /// Rent one node (created NotReady, Ready after the boot time).
    RentNode,
    /// Release an idle node.
    ReleaseNode {
        /// The node released.
        name: String,
    },
}

/// Effective requests as kube-scheduler computes them (KEP-753), per resource: sidecars
/// (init containers with `restartPolicy: Always`) run beside the containers, so they add to
/// the containers' sum; a plain init container runs alone beside the sidecars started before
/// it; the Pod needs the larger of the two. The quantities are added exactly and the Pod's
/// total rounded up once, as kube-scheduler does (CPU by `MilliValue`, memory by `Value`).
pub fn pod_requests(pod: &Value) -> (MilliCpu, Bytes) {
    let cpu = pod_request(&pod["spec"], "cpu");
    let memory = pod_request(&pod["spec"], "memory");
    (MilliCpu(cpu.milli_value()), Bytes(memory.value()))
}

/// One resource's effective request of a Pod spec, exact. A request the simulator cannot read
/// counts as none (kube-apiserver would have refused the Pod).
fn pod_request(spec: &Value, resource: &str) -> Quantity {
    let request =
        |c: &Value| Quantity::from_json(&c["resources"]["requests"][resource]).unwrap_or_default();
    let list = |key: &str| spec[key].as_array().cloned().unwrap_or_default();
    let mut sidecars = Quantity::ZERO;
    let mut init_peak = Quantity::ZERO;
    for c in list("initContainers") {
        if c["restartPolicy"] == "Always" {
            sidecars += request(&c);
            init_peak = init_peak.max(sidecars);
        } else {
            init_peak = init_peak.max(sidecars + request(&c));
        }
    }
    let containers: Quantity = list("containers").iter().map(request).sum();
    (containers + sidecars).max(init_peak)
}

fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

impl PodView {
    /// Reads a stored Pod; `priority` is resolved by the caller from priorityClassName.
    pub fn from_json(pod: &Value, priority: i32, age_key: u64) -> Self {
        let (cpu, memory) = pod_requests(pod);
        let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
        PodView {
            namespace: pod["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string(),
            name: pod["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            priority,
            preempt_never: pod["spec"]["preemptionPolicy"] == "Never",
            cpu,
            memory,
            node_selector: string_map(&pod["spec"]["nodeSelector"]),
            tolerations: pod["spec"]["tolerations"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
            node_name: pod["spec"]["nodeName"].as_str().map(str::to_string),
            terminal: matches!(phase, "Succeeded" | "Failed"),
            age_key,
        }
    }

    fn key(&self) -> (String, String) {
        (self.namespace.clone(), self.name.clone())
    }

    fn tolerates(&self, taint: &Value) -> bool {
        let effect = taint["effect"].as_str().unwrap_or_default();
        if effect == "PreferNoSchedule" {
            return true;
        }
        self.tolerations.iter().any(|t| {
            let key_ok = match t["key"].as_str() {
                None | Some("") => t["operator"] == "Exists",
                Some(k) => Some(k) == taint["key"].as_str(),
            };
            let value_ok = t["operator"] == "Exists"
                || t["value"].as_str().unwrap_or_default()
                    == taint["value"].as_str().unwrap_or_default();
            let effect_ok = t["effect"]
                .as_str()
                .is_none_or(|e| e.is_empty() || e == effect);
            key_ok && value_ok && effect_ok
        })
    }

    /// Placement constraints other than resources.
    fn can_run_on(&self, node: &NodeView) -> bool {
        self.node_selector
            .iter()
            .all(|(k, v)| node.labels.get(k) == Some(v))
            && node.taints.iter().all(|t| self.tolerates(t))
    }
}

/// Resolves a pod's priority as the Priority admission plugin does: its PriorityClass's
/// value when the class exists, else `spec.priority`, else 0 (no global default).
pub fn resolve_priority(pod: &Value, classes: &BTreeMap<String, i32>) -> i32 {
    pod["spec"]["priorityClassName"]
        .as_str()
        .and_then(|n| classes.get(n).copied())
        .or_else(|| pod["spec"]["priority"].as_i64().map(|p| p as i32))
        .unwrap_or(0)
}

struct Room {
    cpu: MilliCpu,
    memory: Bytes,
}

impl Room {
    fn fits(&self, pod: &PodView) -> bool {
        pod.cpu <= self.cpu && pod.memory <= self.memory
    }
    fn take(&mut self, pod: &PodView) {
        self.cpu = self.cpu - pod.cpu;
        self.memory = self.memory - pod.memory;
    }
    fn give(&mut self, pod: &PodView) {
        self.cpu += pod.cpu;
        self.memory += pod.memory;
    }
}

/// One planning pass: bind (preempting where priority allows), rent nodes for what still does
/// not fit, release idle nodes. Pure: the node controller carries the actions out.
pub fn plan(pods: &[PodView], nodes: &[NodeView], limits: &Limits) -> Vec<Action> {
    let live: Vec<&PodView> = pods.iter().filter(|p| !p.terminal).collect();
    let mut cluster = Placement::new(nodes, &live);
    let mut pending: Vec<&PodView> = live
        .iter()
        .copied()
        .filter(|p| p.node_name.is_none())
        .collect();
    pending.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.age_key.cmp(&b.age_key)));
    let unplaced: Vec<&PodView> = pending
        .into_iter()
        .filter(|pod| !cluster.bind(pod, nodes) && !cluster.preempt_for(pod, nodes))
        .collect();
    let mut actions = cluster.actions;
    actions.extend(rent_nodes(&unplaced, nodes, limits));
    for n in nodes {
        let empty = !cluster.bound.contains_key(n.name.as_str());
        if n.ready && empty && n.idle_for.is_some_and(|d| d >= limits.node_idle) {
            actions.push(Action::ReleaseNode {
                name: n.name.clone(),
            });
        }
    }
    actions
}

/// Room left on each ready node, the pods bound to each (for preemption), and what this
/// pass has decided so far.
struct Placement<'a> {
    room: BTreeMap<&'a str, Room>,
    bound: BTreeMap<&'a str, Vec<&'a PodView>>,
    evicted: Vec<(String, String)>,
    actions: Vec<Action>,
}

impl<'a> Placement<'a> {
    fn new(nodes: &'a [NodeView], live: &[&'a PodView]) -> Self {
        let mut room: BTreeMap<&str, Room> = nodes
            .iter()
            .map(|n| {
                (
                    n.name.as_str(),
                    Room {
                        cpu: n.cpu,
                        memory: n.memory,
                    },
                )
            })
            .collect();
        let mut bound: BTreeMap<&str, Vec<&PodView>> = BTreeMap::new();
        for p in live {
            if let Some(n) = p.node_name.as_deref()
                && let Some(r) = room.get_mut(n)
            {
                r.take(p);
                bound.entry(n).or_default().push(p);
            }
        }
        Placement {
            room,
            bound,
            evicted: Vec::new(),
            actions: Vec::new(),
        }
    }

    /// Binds `pod` to the first ready node it fits on.
    fn bind(&mut self, pod: &'a PodView, nodes: &'a [NodeView]) -> bool {
        let Some(node) = nodes
            .iter()
            .filter(|n| n.ready && pod.can_run_on(n))
            .find(|n| self.room[n.name.as_str()].fits(pod))
        else {
            return false;
        };
        self.room.get_mut(node.name.as_str()).unwrap().take(pod);
        self.bound.entry(node.name.as_str()).or_default().push(pod);
        self.actions.push(bind_action(pod, node));
        true
    }

    /// Evicts lower-priority pods from the first node where that makes `pod` fit, then binds.
    fn preempt_for(&mut self, pod: &'a PodView, nodes: &'a [NodeView]) -> bool {
        if pod.preempt_never {
            return false;
        }
        let Some((node, victims)) = nodes
            .iter()
            .filter(|n| n.ready && pod.can_run_on(n))
            .find_map(|n| {
                preemption_victims(
                    pod,
                    &self.room[n.name.as_str()],
                    self.bound.get(n.name.as_str()),
                    &self.evicted,
                )
                .map(|v| (n, v))
            })
        else {
            return false;
        };
        let r = self.room.get_mut(node.name.as_str()).unwrap();
        for v in &victims {
            r.give(v);
            self.evicted.push(v.key());
        }
        r.take(pod);
        let list = self.bound.entry(node.name.as_str()).or_default();
        list.retain(|b| !victims.iter().any(|v| v.key() == b.key()));
        list.push(pod);
        self.actions.push(Action::Preempt {
            victims: victims.iter().map(|v| v.key()).collect(),
            node: node.name.clone(),
            for_pod: pod.key(),
        });
        self.actions.push(bind_action(pod, node));
        true
    }
}

fn bind_action(pod: &PodView, node: &NodeView) -> Action {
    Action::Bind {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        node: node.name.clone(),
    }
}

/// The autoscaler: booting nodes absorb what they can; the rest rents new nodes, up to
/// `max_nodes`. Pods below the cutoff priority (pause pods at -10 are above it) never rent.
fn rent_nodes(unplaced: &[&PodView], nodes: &[NodeView], limits: &Limits) -> Vec<Action> {
    let mut actions = Vec::new();
    let mut booting: Vec<Room> = nodes
        .iter()
        .filter(|n| !n.ready)
        .map(|n| Room {
            cpu: n.cpu,
            memory: n.memory,
        })
        .collect();
    let mut total = nodes.len();
    let fresh = NodeView {
        name: String::new(),
        ready: true,
        labels: limits.new_node_labels.clone(),
        taints: Vec::new(),
        cpu: limits.new_node_cpu,
        memory: limits.new_node_memory,
        idle_for: None,
    };
    for pod in unplaced {
        if pod.priority < AUTOSCALER_PRIORITY_CUTOFF || !pod.can_run_on(&fresh) {
            continue;
        }
        if let Some(r) = booting.iter_mut().find(|r| r.fits(pod)) {
            r.take(pod);
            continue;
        }
        let mut new_room = Room {
            cpu: limits.new_node_cpu,
            memory: limits.new_node_memory,
        };
        if !new_room.fits(pod) || total >= limits.max_nodes {
            continue;
        }
        new_room.take(pod);
        booting.push(new_room);
        total += 1;
        actions.push(Action::RentNode);
    }
    actions
}

/// The lowest-priority pods on a node whose removal lets `pod` fit; None when impossible.
fn preemption_victims<'a>(
    pod: &PodView,
    room: &Room,
    bound: Option<&Vec<&'a PodView>>,
    already: &[(String, String)],
) -> Option<Vec<&'a PodView>> {
    let mut lower: Vec<&PodView> = bound?
        .iter()
        .copied()
        .filter(|b| b.priority < pod.priority && !already.contains(&b.key()))
        .collect();
    lower.sort_by(|a, b| a.priority.cmp(&b.priority).then(b.age_key.cmp(&a.age_key)));
    let mut freed = Room {
        cpu: room.cpu,
        memory: room.memory,
    };
    let mut victims = Vec::new();
    for v in lower {
        if freed.fits(pod) {
            break;
        }
        freed.give(v);
        victims.push(v);
    }
    freed.fits(pod).then_some(victims)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, prio: i32, cpu: i128, node: Option<&str>) -> PodView {
        PodView {
            namespace: "ns".into(),
            name: name.into(),
            priority: prio,
            preempt_never: prio < 0,
            cpu: MilliCpu(cpu),
            memory: Bytes(1 << 20),
            node_selector: BTreeMap::new(),
            tolerations: vec![],
            node_name: node.map(str::to_string),
            terminal: false,
            age_key: 0,
        }
    }

    fn node(name: &str, ready: bool) -> NodeView {
        NodeView {
            name: name.into(),
            ready,
            labels: BTreeMap::new(),
            taints: vec![],
            cpu: MilliCpu(1900),
            memory: Bytes(1792 << 20),
            idle_for: None,
        }
    }

    fn limits() -> Limits {
        Limits {
            max_nodes: 3,
            node_idle: Duration::from_secs(60),
            new_node_cpu: MilliCpu(1900),
            new_node_memory: Bytes(1792 << 20),
            new_node_labels: BTreeMap::new(),
        }
    }

    #[test]
    fn a_pod_that_fits_nowhere_rents_one_node() {
        let a = plan(&[pod("a", 0, 1000, None)], &[], &limits());
        assert_eq!(a, vec![Action::RentNode]);
    }

    #[test]
    fn a_booting_node_absorbs_the_next_pod() {
        let a = plan(&[pod("a", 0, 1000, None)], &[node("n1", false)], &limits());
        assert!(a.is_empty(), "{a:?}");
    }

    #[test]
    fn pods_below_the_cutoff_never_rent_but_minus_ten_does() {
        assert!(plan(&[pod("a", -11, 100, None)], &[], &limits()).is_empty());
        assert_eq!(
            plan(&[pod("a", -10, 100, None)], &[], &limits()),
            vec![Action::RentNode]
        );
    }

    #[test]
    fn max_nodes_caps_rental() {
        let l = Limits {
            max_nodes: 1,
            ..limits()
        };
        let mut picky = pod("picky", 0, 100, None);
        picky.node_selector = BTreeMap::from([("pool".into(), "gpu".into())]);
        assert!(
            plan(&[picky], &[], &l).is_empty(),
            "a selector no rented node satisfies rents nothing"
        );
        let a = plan(&[pod("a", 0, 1500, None), pod("b", 0, 1500, None)], &[], &l);
        assert_eq!(a, vec![Action::RentNode]);
    }

    #[test]
    fn a_job_preempts_a_pause_pod_and_binds_at_once() {
        let pause = pod("pause", -10, 1500, Some("n1"));
        let job = pod("job", 0, 1500, None);
        let a = plan(&[pause, job], &[node("n1", true)], &limits());
        assert_eq!(
            a[0],
            Action::Preempt {
                victims: vec![("ns".into(), "pause".into())],
                node: "n1".into(),
                for_pod: ("ns".into(), "job".into())
            }
        );
        assert_eq!(
            a[1],
            Action::Bind {
                namespace: "ns".into(),
                name: "job".into(),
                node: "n1".into()
            }
        );
    }

    #[test]
    fn preemption_policy_never_does_not_preempt() {
        let low = pod("low", -20, 1500, Some("n1"));
        let mut p = pod("p", 0, 1500, None);
        p.preempt_never = true;
        let a = plan(&[low, p], &[node("n1", true)], &limits());
        assert_eq!(a, vec![Action::RentNode]);
    }

    #[test]
    fn node_selector_and_taints_are_honoured() {
        let mut tainted = node("n1", true);
        tainted.taints =
            vec![serde_json::json!({"key": "dedicated", "value": "ci", "effect": "NoSchedule"})];
        let mut tolerant = pod("t", 0, 100, None);
        tolerant.tolerations = vec![
            serde_json::json!({"key": "dedicated", "operator": "Equal", "value": "ci", "effect": "NoSchedule"}),
        ];
        let a = plan(
            &[tolerant.clone()],
            std::slice::from_ref(&tainted),
            &limits(),
        );
        assert_eq!(
            a,
            vec![Action::Bind {
                namespace: "ns".into(),
                name: "t".into(),
                node: "n1".into()
            }]
        );
        let plain = pod("p", 0, 100, None);
        assert_eq!(
            plan(&[plain], &[tainted], &limits()),
            vec![Action::RentNode]
        );
        let mut picky = pod("s", 0, 100, None);
        picky.node_selector = BTreeMap::from([("pool".into(), "gpu".into())]);
        let mut labelled = node("n2", true);
        labelled.labels = BTreeMap::from([("pool".into(), "gpu".into())]);
        let a = plan(&[picky], &[node("n1", true), labelled], &limits());
        assert_eq!(
            a,
            vec![Action::Bind {
                namespace: "ns".into(),
                name: "s".into(),
                node: "n2".into()
            }]
        );
    }

    #[test]
    fn idle_ready_nodes_are_released() {
        let mut idle = node("n1", true);
        idle.idle_for = Some(Duration::from_secs(61));
        assert_eq!(
            plan(&[], &[idle], &limits()),
            vec![Action::ReleaseNode { name: "n1".into() }]
        );
    }

    #[test]
    fn init_containers_count_as_kube_scheduler_counts_them() {
        let p = serde_json::json!({"spec": {
            "containers": [{"resources": {"requests": {"cpu": "100m"}}}, {"resources": {"requests": {"cpu": "200m"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]
        }});
        let (cpu, mem) = pod_requests(&p);
        assert_eq!(cpu, MilliCpu(500));
        assert_eq!(mem, Bytes(1 << 30));
    }

    #[test]
    fn sidecars_add_to_the_containers() {
        let p = serde_json::json!({"spec": {
            "containers": [{"resources": {"requests": {"cpu": "1800m", "memory": "1728Mi"}}}],
            "initContainers": [
                {"restartPolicy": "Always", "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}}},
                {"resources": {"requests": {"cpu": "1900m"}}}
            ]
        }});
        let (cpu, mem) = pod_requests(&p);
        assert_eq!(
            cpu,
            MilliCpu(1910),
            "the init container runs beside the sidecar"
        );
        assert_eq!(mem, Bytes(1760 << 20));
    }

    /// kube-scheduler adds a Pod's quantities exactly and rounds the total up once: two
    /// containers of 0.4 millicores need 1m, not 2m; two of half a byte need 1 byte.
    #[test]
    fn requests_are_summed_exactly_then_rounded_up() {
        let p = serde_json::json!({"spec": {"containers": [
            {"resources": {"requests": {"cpu": "0.0004", "memory": "0.5"}}},
            {"resources": {"requests": {"cpu": "400u", "memory": 0.5}}}
        ]}});
        assert_eq!(pod_requests(&p), (MilliCpu(1), Bytes(1)));
        let p = serde_json::json!({"spec": {"containers": [
            {"resources": {"requests": {"cpu": "1n", "memory": "1.5Gi"}}},
            {"resources": {"requests": {"cpu": " 1.5 ", "memory": "100.035Ki"}}}
        ]}});
        assert_eq!(
            pod_requests(&p),
            (MilliCpu(1501), Bytes((3 << 29) + 102_436))
        );
    }

    #[test]
    fn priority_comes_from_the_class() {
        let classes = BTreeMap::from([("tenantci-pause".to_string(), -10)]);
        let p = serde_json::json!({"spec": {"priorityClassName": "tenantci-pause"}});
        assert_eq!(resolve_priority(&p, &classes), -10);
        let defaulted =
            serde_json::json!({"spec": {"priorityClassName": "tenantci-pause", "priority": 0}});
        assert_eq!(
            resolve_priority(&defaulted, &classes),
            -10,
            "the class wins over a defaulted 0"
        );
        assert_eq!(
            resolve_priority(&serde_json::json!({"spec": {}}), &classes),
            0
        );
    }
}
