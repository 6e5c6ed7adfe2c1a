//! The warm pools of the resource classes that have one (`[executor.class.warm]`), applied by
//! the leader: per class a Deployment `tenantci-warm-<class>` of pause Pods sized and placed
//! like the class's executors ([`prewarm_spec`]), at priority -10 (`tenant::prewarm`'s
//! PriorityClass), so an executor preempts one at once and the Deployment's replacement rents
//! the next node in the background. Its replicas follow [`warm::decide`] over [`WarmDemand`].
//!
//! [`WarmDemand`] is what the webhook receiver (announcements), the scheduler (claims) and
//! the worker (hits and misses) tell the pool; it is in memory, so a new leader starts with
//! no history: its pools keep the sizes the previous leader applied until demand or the idle
//! time moves them. Nothing here deletes a pool whose class left the config.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::Api;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::sizing::ExecutorSettings;
use crate::sizing::class::ExecutorClass;
use crate::sizing::demand::WarmDemand;
use crate::sizing::resources::{PROXY_CPU, PROXY_MEMORY, Resources};
use crate::sizing::warm;
use crate::task::registry::Registry;
use tenantci_runner::tenant::prewarm::{PrewarmSpec, TolerationSpec};
use tenantci_runner::tenant::{apply, prewarm};

/// How often the leader looks at demand and applies the pools.
pub const TICK: Duration = Duration::from_millis(500);
/// How soon an apiserver that was away is asked for the PriorityClass again.
const PRIORITY_CLASS_RETRY: Duration = Duration::from_secs(30);

/// Whether the apiserver's answer `e` settles the PriorityClass: a refusal (forbidden,
/// invalid) stays one until someone changes RBAC; 429, 5xx and no answer pass.
fn settles(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code != 429 && (400..500).contains(&s.code))
}

/// The label of a pool's pause Pods (not `tenantci.io/class`: they are not executors).
pub const WARM_CLASS_LABEL: &str = "tenantci.io/warm-class";

/// The name of the ClusterRole and ClusterRoleBinding that let the dispatcher in `namespace`
/// read the pause PriorityClass (manifests/dispatch/pause/rbac.yaml): cluster-scoped, so the
/// namespace is in the name and two dispatchers never share one binding.
pub fn read_rbac_name(namespace: &str) -> String {
    format!("tenantci-dispatcher-pause:{namespace}")
}

/// The Deployment of `class`'s pool.
pub fn deployment_name(class: &str) -> String {
    format!("tenantci-warm-{class}")
}

/// Whether the pause PriorityClass was settled: applied, or refused by the apiserver. It is
/// cluster-scoped, so a dispatcher whose identity is namespaced (its Role) may not apply it,
/// and neither a retry nor a warning every term changes that: one refusal (and at most one
/// warning) per process, so this outlives the terms. An apiserver that was away settles
/// nothing: tried again.
#[derive(Default)]
pub struct PriorityClassTried(AtomicBool);

impl PriorityClassTried {
    /// True the first time only: whether this term should try the PriorityClass.
    fn first_attempt(&self) -> bool {
        !self.0.swap(true, Ordering::SeqCst)
    }

    /// A term ended with the PriorityClass unsettled: the next one tries again.
    fn unsettled(&self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// The leader's applier of every warm pool.
pub struct WarmPools {
    /// The tenant cluster.
    pub client: kube::Client,
    /// The executors' namespace, where the pools' Deployments go.
    pub namespace: String,
    /// `[executor]`: the classes (those with a warm pool get one) and the size and placement
    /// their pause Pods copy.
    pub executor: ExecutorSettings,
    /// What each class's pool is sized from.
    pub demand: Arc<WarmDemand>,
    /// Whether the pause PriorityClass was settled already in this process.
    pub priority_class: Arc<PriorityClassTried>,
    /// The term's registry: each class's running executors.
    pub registry: Arc<Registry>,
    /// Each pool's size and warm slot-seconds.
    pub metrics: Arc<Metrics>,
}

impl WarmPools {
    /// The pause Deployment of `class` with `slots` replicas (pure).
    pub fn desired(&self, class: &ExecutorClass, slots: u32) -> Deployment {
        let spec = prewarm_spec(
            &self.executor.of_class(class),
            &self.namespace,
            slots as i32,
        );
        let mut d = prewarm::desired_deployment(&spec);
        let name = deployment_name(&class.name);
        d.metadata.name = Some(name.clone());
        let select = |labels: &mut Option<BTreeMap<String, String>>| {
            let l = labels.get_or_insert_with(Default::default);
            l.insert("app.kubernetes.io/name".into(), name.clone());
            l.insert(WARM_CLASS_LABEL.into(), class.name.clone());
        };
        select(&mut d.metadata.labels);
        select(&mut d.spec.selector.match_labels);
        let template = &mut d.spec.template;
        select(
            &mut template
                .metadata
                .get_or_insert_with(Default::default)
                .labels,
        );
        d
    }

    /// Until `stop`: every [`TICK`], each pool sized by the decision and applied when it
    /// changed; an apiserver that refuses is logged and tried again next tick.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let classes: Vec<ExecutorClass> = self
            .executor
            .classes
            .iter()
            .filter(|c| c.warm.is_some())
            .cloned()
            .collect();
        // When the PriorityClass is (still) to be tried: now for the process's first term.
        let mut priority_class_due =
            (!classes.is_empty() && self.priority_class.first_attempt()).then(Instant::now);
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut applied: BTreeMap<String, u32> = BTreeMap::new();
        let mut last = Instant::now();
        loop {
            if let Some(due) = priority_class_due
                && due <= Instant::now()
            {
                let settled = self.apply_priority_class().await;
                priority_class_due = (!settled).then(|| Instant::now() + PRIORITY_CLASS_RETRY);
            }
            let held = last.elapsed().as_secs_f64();
            last = Instant::now();
            for c in &classes {
                self.tick(c, &deployments, &mut applied, held).await;
            }
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = stop.wait_for(|s| *s) => {
                    if priority_class_due.is_some() {
                        self.priority_class.unsettled();
                    }
                    return;
                }
            }
        }
    }

    /// The pause PriorityClass (see [`PriorityClassTried`]); whether that settled it: found,
    /// applied, or refused with one warning saying who must create it. An apiserver away or
    /// overloaded settles nothing.
    ///
    /// Read first: with a warm pool the dispatcher's RBAC may `get` this one class by name but
    /// not write it (manifests/dispatch/pause/rbac.yaml: applied by `dispatch init` when the
    /// config has a warm pool, or the kustomize component manifests/components/warm-pool), so
    /// one the operator created is found and no warning is due (issue 45: the warning came on
    /// every start, the class there or not).
    async fn apply_priority_class(&self) -> bool {
        let pcs: Api<PriorityClass> = Api::all(self.client.clone());
        let read = pcs.get_opt(prewarm::NAME).await;
        if let Ok(Some(_)) = read {
            tracing::info!(
                "the pause PriorityClass `{}` exists; the warm pools' Pods use it",
                prewarm::NAME
            );
            return true;
        }
        let Err(e) = apply::apply(&pcs, &prewarm::desired_priority_class(), false).await else {
            tracing::info!("applied the pause PriorityClass `{}`", prewarm::NAME);
            return true;
        };
        if !settles(&e) {
            tracing::warn!(error = %e, "cannot reach the apiserver for the pause PriorityClass `{}`; trying again in {}s", prewarm::NAME, PRIORITY_CLASS_RETRY.as_secs());
            return false;
        }
        match read {
            Ok(_) => {
                tracing::warn!(error = %e, "the pause PriorityClass `{}` does not exist and the dispatcher may not create it: the warm pools' Pods are not created until it does (create it with `tenantci tenant prewarm` or the tenant-admin kubeconfig). Not tried again until the dispatcher restarts", prewarm::NAME)
            }
            Err(_) => {
                let grant = read_rbac_name(&self.namespace);
                tracing::warn!(error = %e, "the dispatcher may neither read nor create the pause PriorityClass `{}`: the warm pools' Pods need it. Grant the read: re-run `tenantci dispatch init` with this config (with a warm pool it applies the ClusterRole and binding `{grant}`), or, for the in-cluster Deployment, add the kustomize component manifests/components/warm-pool; create the class with `tenantci tenant prewarm` if it is missing. Not tried again until the dispatcher restarts", prewarm::NAME)
            }
        }
        true
    }

    async fn tick(
        &self,
        c: &ExecutorClass,
        deployments: &Api<Deployment>,
        applied: &mut BTreeMap<String, u32>,
        held: f64,
    ) {
        let Some(w) = &c.warm else { return };
        let running = self.registry.class_count(&c.name) as u32;
        let Some(demand) = self.demand.demand(&c.name, running) else {
            return;
        };
        let before = applied.get(&c.name).copied();
        self.metrics
            .warm(&c.name, demand.warm, held * f64::from(demand.warm));
        let slots = warm::decide(&demand, &w.limits(c.capacity));
        if before == Some(slots) {
            return;
        }
        match apply::apply(deployments, &self.desired(c, slots), false).await {
            Ok(_) => {
                tracing::info!(class = %c.name, slots, ?demand, "warm pool sized");
                applied.insert(c.name.clone(), slots);
                self.demand.applied(&c.name, slots);
            }
            Err(e) => {
                tracing::warn!(class = %c.name, error = %e, "cannot apply the warm pool's Deployment at the tenant apiserver; trying again at the next tick (500 ms)")
            }
        }
    }
}

/// The pause pods that keep rented nodes warm for executors (`tenant prewarm
/// --dispatch-config`): in the dispatch namespace, each requesting what one whole executor Pod
/// requests (runner plus sidecar) with the executors' placement, so one preempted pause pod
/// frees exactly one executor's place.
pub fn prewarm_spec(
    executor: &crate::sizing::ExecutorSettings,
    namespace: &str,
    replicas: i32,
) -> PrewarmSpec {
    let r = &executor.resources;
    PrewarmSpec {
        namespace: namespace.to_string(),
        replicas,
        cpu: Resources::milli(&r.cpu) + Resources::milli(PROXY_CPU),
        memory: Resources::milli(&r.memory) + Resources::milli(PROXY_MEMORY),
        node_selector: executor.node_selector.clone(),
        tolerations: executor
            .tolerations
            .iter()
            .filter_map(|t| {
                Some(TolerationSpec {
                    key: t.key.clone().filter(|k| !k.is_empty())?,
                    value: (t.operator.as_deref() != Some("Exists"))
                        .then(|| t.value.clone().unwrap_or_default()),
                    effect: t.effect.clone().unwrap_or_default(),
                })
            })
            .collect(),
        labels: BTreeMap::new(),
        image: tenantci_runner::tenant::prewarm::DEFAULT_IMAGE.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sizing::class::WarmPool;

    #[test]
    fn the_priority_class_is_tried_once_per_process_not_once_per_term() {
        let d = PriorityClassTried::default();
        assert!(d.first_attempt(), "the first term tries");
        assert!(!d.first_attempt(), "a later term does not");
        assert!(!d.first_attempt());
        d.unsettled();
        assert!(
            d.first_attempt(),
            "unless a term ended with the apiserver away"
        );
    }

    #[test]
    fn a_refusal_settles_the_priority_class_and_an_apiserver_away_does_not() {
        let answer = |code| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        assert!(settles(&answer(403)), "forbidden: RBAC must change");
        assert!(settles(&answer(422)));
        assert!(!settles(&answer(429)), "throttled");
        assert!(!settles(&answer(503)));
        assert!(!settles(&kube::Error::LinesCodecMaxLineLengthExceeded));
    }

    #[test]
    fn announcements_and_claims_move_the_demand() {
        let mut c = crate::sizing::class::tests::class("small", "500m", "512Mi", 4);
        c.warm = Some(WarmPool {
            min: 1,
            max: 4,
            idle: Duration::from_secs(60).into(),
            window: Duration::from_secs(60).into(),
        });
        let other = crate::sizing::class::tests::class("large", "1", "1Gi", 1);
        let d = WarmDemand::new(&[c, other]);
        assert_eq!(d.has_warm_slot("large"), None, "no pool: not counted");
        d.announced("small");
        d.announced("small");
        d.claimed("small");
        let now = d.demand("small", 1).unwrap();
        assert_eq!((now.announced, now.recent_arrivals, now.running), (1, 2, 1));
        d.claimed("small");
        d.claimed("small");
        assert_eq!(
            d.demand("small", 0).unwrap().recent_arrivals,
            3,
            "unannounced claim"
        );
        assert_eq!(d.has_warm_slot("small"), Some(false));
        d.applied("small", 2);
        assert_eq!(d.has_warm_slot("small"), Some(true));
    }

    #[test]
    fn a_pause_pod_holds_one_whole_executor_pod() {
        let mut x = crate::sizing::ExecutorSettings::with_images("i", "p");
        x.tolerations = vec![k8s_openapi::api::core::v1::Toleration {
            key: Some("rented".into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }];
        let p = prewarm_spec(&x, "dynamic-runner", 2);
        assert_eq!(p.namespace, "dynamic-runner");
        assert_eq!(tenantci_core::quantity::format_cpu(p.cpu), "1810m");
        assert_eq!(tenantci_core::quantity::format_memory(p.memory), "1760Mi");
        assert_eq!(p.tolerations.len(), 1);
        assert_eq!(p.tolerations[0].value, None);
    }
}
