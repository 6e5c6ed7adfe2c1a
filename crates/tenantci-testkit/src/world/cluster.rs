//! A [`World`]'s executor objects in the simulated cluster (Secrets, Pods: waited for,
//! listed, deleted as an operator or a wiped apiserver would) and its NATS side (the pod
//! consumer's acks, the JetStream store on disk, the clustered queue's topology).

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams};

use super::{NAMESPACE, World};
use crate::executor::Executor;
use crate::wait::eventually;

/// The simulator's request counter, as each of its lines starts.
const COUNTER: &str = "apiserver_request_total{";

/// The tenant apiserver's requests so far, by (verb, resource), subresources summed in: the
/// simulator's `apiserver_request_total` (`GET /metrics`), read with `kube`.
pub async fn apiserver_requests(kube: &kube::Client) -> BTreeMap<(String, String), u64> {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = kube
        .request_text(req)
        .await
        .expect("the apiserver's /metrics");
    let mut out = BTreeMap::new();
    for rest in text.lines().filter_map(|l| l.strip_prefix(COUNTER)) {
        let Some((labels, count)) = rest.rsplit_once(' ') else {
            continue;
        };
        let label = |name: &str| {
            let pair = labels
                .split(',')
                .find(|p| p.starts_with(&format!("{name}=")))?;
            Some(pair.split('"').nth(1)?.to_string())
        };
        let (Some(verb), Some(resource)) = (label("verb"), label("resource")) else {
            continue;
        };
        *out.entry((verb, resource)).or_default() += count.trim().parse::<u64>().unwrap_or(0);
    }
    out
}

impl World {
    /// The tenant apiserver's requests so far, by (verb, resource) ([`apiserver_requests`]).
    pub async fn apiserver_requests(&self) -> BTreeMap<(String, String), u64> {
        apiserver_requests(&self.kube).await
    }

    /// The tenant apiserver restarts as far as its clients can tell (the simulator's SIGUSR1):
    /// every open watch ends, and a watch from a version served before answers 410 Gone.
    pub fn restart_apiserver(&self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        kill(Pid::from_raw(self.sim().pid() as i32), Signal::SIGUSR1).unwrap();
    }

    /// The executors' Secrets (not the dispatcher's own, which `init --apply-secret` made).
    pub async fn secrets(&self) -> Vec<Secret> {
        let own = tenantci_dispatch::init::in_cluster::SECRET;
        let all = self.secrets_api().list(&Default::default()).await.unwrap();
        let executors = all.items.into_iter();
        executors
            .filter(|s| s.metadata.name.as_deref() != Some(own))
            .collect()
    }

    /// Every Pod in [`NAMESPACE`] (executors and any other).
    pub async fn pods(&self) -> Vec<Pod> {
        self.pods_api()
            .list(&Default::default())
            .await
            .unwrap()
            .items
    }

    /// Waits until the executor objects of `task` exist, then returns an executor for it that
    /// goes straight to the facade (`from_objects`).
    pub async fn executor(&self, task: i64) -> Executor {
        let (secret, pod) = self.objects(task).await;
        Executor::from_objects(&secret, &pod)
    }

    /// Waits until the executor Secret and Pod of `task` exist.
    pub async fn objects(&self, task: i64) -> (Secret, Pod) {
        let (secrets, pods) = (self.secrets_api(), self.pods_api());
        let name = format!("gitea-task-{task}");
        eventually("the executor Secret and Pod", || async {
            Some((
                secrets.get_opt(&name).await.unwrap()?,
                pods.get_opt(&name).await.unwrap()?,
            ))
        })
        .await
    }

    /// Deletes `task`'s executor Pod and Secret, as someone (or a restored apiserver) might
    /// while no dispatcher leads.
    pub async fn delete_executor(&self, task: i64) {
        let (dp, name) = (DeleteParams::default(), format!("gitea-task-{task}"));
        self.pods_api().delete(&name, &dp).await.unwrap();
        self.secrets_api().delete(&name, &dp).await.unwrap();
    }

    /// Deletes only `task`'s executor Pod (its Secret stays), as a node drain or an operator
    /// might before its runner fetched the task.
    pub async fn delete_pod(&self, task: i64) {
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        let name = format!("gitea-task-{task}");
        self.pods_api().delete(&name, &now).await.unwrap();
    }

    /// Deletes every executor Pod and Secret, as a restored or wiped apiserver loses them.
    pub async fn lose_every_executor(&self) {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        let lp = ListParams::default();
        self.pods_api().delete_collection(&dp, &lp).await.unwrap();
        self.secrets_api()
            .delete_collection(&dp, &lp)
            .await
            .unwrap();
        self.all_cleaned_up().await;
    }

    /// Waits until every executor Pod and Secret is gone.
    pub async fn all_cleaned_up(&self) {
        eventually("executor Pods and Secrets to be deleted", || async {
            (self.pods().await.is_empty() && self.secrets().await.is_empty()).then_some(())
        })
        .await
    }

    fn pods_api(&self) -> Api<Pod> {
        Api::namespaced(self.kube.clone(), NAMESPACE)
    }

    fn secrets_api(&self) -> Api<Secret> {
        Api::namespaced(self.kube.clone(), NAMESPACE)
    }

    /// Waits until the pod backend's consumer has no assignment delivered and not acked, nor
    /// one waiting: every start so far is acked, and the queue will redeliver none of them.
    pub async fn pod_assignments_acked(&self) {
        use tenantci_dispatch::backend::pod;
        use tenantci_dispatch::queue::depth::depth_now;
        let js = async_nats::jetstream::new(self.nats.client("ci-admin").await);
        eventually("every pod assignment acked", || async {
            (depth_now(&js, pod::KIND).await? == 0).then_some(())
        })
        .await
    }

    /// Stores a marker on the `vm` subject as ci-producer and returns it. No dispatcher
    /// consumes `vm` in a world without the VM backend, so the marker stays, and with it the
    /// stream's message block: nats-server drops the bytes of a block whose messages were all
    /// acked, and a search of the store for secrets must see the acked assignments' bytes.
    pub async fn pin_store(&self) -> String {
        let marker = format!("positive-control-{:016x}", rand::random::<u64>());
        let js = async_nats::jetstream::new(self.nats.client("ci-producer").await);
        let subject = tenantci_dispatch::backend::vm::KIND.subject();
        js.publish(subject, marker.clone().into())
            .await
            .unwrap()
            .await
            .expect("the stream stores the marker");
        marker
    }

    /// Stops nats-server (SIGTERM: JetStream writes its store out) and returns every file
    /// of the store, to search for secrets in clear. Panics when there is none.
    pub fn stop_nats_and_read_store(&mut self) -> Vec<(PathBuf, Vec<u8>)> {
        self.nats.stop();
        let files: Vec<_> = crate::snapshot::files(&self.nats.store_dir())
            .into_iter()
            .filter(|(p, _)| p.is_file())
            .collect();
        assert!(
            !files.is_empty(),
            "no files in the JetStream store {}",
            self.nats.store_dir().display()
        );
        files
    }

    /// On a world with [`super::Options::nats_cluster`]: points the dispatchers at every
    /// server and makes the topology with `tenantci queue init --replicas 3`.
    pub fn init_clustered_queue(&mut self, pod_capacity: u32) {
        let urls: Vec<String> = std::iter::once(&self.nats)
            .chain(&self.peers)
            .map(|s| s.url.clone())
            .collect();
        let url = urls.join(",");
        self.base_mut().nats.url = url.clone();
        let password = self.nats.password_file("ci-admin");
        let capacity = pod_capacity.to_string();
        // Until the cluster has elected its JetStream meta leader, init exits 3.
        crate::wait::eventually_blocking("queue init --replicas 3", || {
            let o = self
                .command()
                .args(["queue", "init", "--nats", &url, "--user", "ci-admin"])
                .arg("--password-file")
                .arg(&password)
                .args(["--replicas", "3", "--pod-capacity", &capacity])
                .output()
                .unwrap();
            o.status.success().then_some(())
        });
    }
}

/// Whether any file of a store snapshot ([`World::stop_nats_and_read_store`]) holds `needle`.
pub fn store_contains(store: &[(PathBuf, Vec<u8>)], needle: &str) -> bool {
    store.iter().any(|(_, bytes)| {
        bytes
            .windows(needle.len())
            .any(|win| win == needle.as_bytes())
    })
}
