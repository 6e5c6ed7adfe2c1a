//! A dispatcher under test: the testkit's world ([`tenantci_testkit::world`]: the simulator
//! with its Gitea and OpenSandbox doubles, a real nats-server with the generated users,
//! `tenantci dispatch run` children killable with SIGKILL), with the test binary, a watch on
//! the executor Pods, and the constructors the tests name. An executor is played by the test
//! through the facade using only the executor Secret's files (tenantci_testkit::executor).
//!
//! Boundary: what only these tests need stays here: the binary's path, the in-cluster objects
//! rendered from the repository's manifests, the ServiceAccount's impersonating kubeconfig.

use std::ops::{Deref, DerefMut};
use std::path::Path;

use tenantci_testkit::opensandbox::OpenSandbox;
use tenantci_testkit::world::{self, Options, PodWatch};

pub use tenantci_testkit::world::{
    DISPATCHER_ENTRY, Dispatcher, FACADE_ID, NAMESPACE, PROXY_IMAGE, TD, WEBHOOK_SECRET,
    store_contains,
};

use crate::util::{bin, scratch};

/// The dispatcher's own namespace on the `--kubeconfig` path (init's default there, and the
/// manifests'): its ServiceAccount, Lease, ConfigMap and Secret; executors stay in
/// [`NAMESPACE`].
pub const DISPATCHER_NAMESPACE: &str = "tenantci-system";

/// Everything one test's dispatchers share: the testkit's world, and what the tests read
/// beside it.
pub struct World {
    /// First, so it stops before the simulator does.
    pub watch: PodWatch,
    /// The simulator's OpenSandbox double (the VM backend's Lifecycle API).
    pub opensandbox: OpenSandbox,
    inner: world::World,
}

impl Deref for World {
    type Target = world::World;
    fn deref(&self) -> &world::World {
        &self.inner
    }
}

impl DerefMut for World {
    fn deref_mut(&mut self) -> &mut world::World {
        &mut self.inner
    }
}

/// The options every test world starts from: this test binary, a scratch directory, the
/// OpenSandbox double.
fn options() -> Options {
    Options::new(bin()).dir(scratch()).opensandbox()
}

impl World {
    /// A world whose dispatcher inputs are made by the test with the library (namespace,
    /// registration, keys, facade PKI), with short timings; the dispatcher uses the
    /// tenant-admin kubeconfig.
    pub async fn start(pod_capacity: u32) -> World {
        Self::made_by_test(options(), pod_capacity).await
    }

    /// As [`World::start`], the simulator started with `sim_flags` too (its rented nodes:
    /// `--node-boot 1s`).
    pub async fn start_with_sim_flags(pod_capacity: u32, sim_flags: &[&str]) -> World {
        Self::made_by_test(options().sim_flags(sim_flags), pod_capacity).await
    }

    /// As [`World::start`], with the simulator's SPIRE stand-in for trust domain [`TD`].
    pub async fn start_with_spire(pod_capacity: u32) -> World {
        Self::made_by_test(options().spire(), pod_capacity).await
    }

    /// As [`World::start`], on a three-node JetStream cluster (`NatsCluster`) whose topology
    /// `tenantci queue init --replicas 3` created; dispatchers get every server's URL.
    pub async fn start_clustered(pod_capacity: u32) -> World {
        let mut w = Self::made_by_test(options().nats_cluster(), pod_capacity).await;
        w.init_clustered_queue(pod_capacity);
        w
    }

    /// As [`World::start`], on a NATS server that speaks TLS only, its certificate from a
    /// private CA that dispatchers trust through `nats.ca_file` (`tls://` URL).
    pub async fn start_tls_nats(pod_capacity: u32) -> World {
        let mut w = Self::made_by_test(options().tls_nats(), pod_capacity).await;
        w.base_mut().nats.ca_file = Some(w.nats.ca_file());
        w
    }

    /// A world whose dispatcher inputs come from `tenantci dispatch init` (its scoped
    /// credential, RBAC, registration, keys and facade PKI), with init's default timings.
    pub async fn start_via_init() -> World {
        let mut inner = options().start().await;
        inner.init(&world::World::test_init_flags());
        Self::watched(inner).await
    }

    /// As [`World::start`], against the Gitea double playing Forgejo (`sim --forgejo`).
    pub async fn start_forgejo(pod_capacity: u32) -> World {
        Self::made_by_test(options().forgejo(), pod_capacity).await
    }

    /// As [`World::start_with_spire`], against the double playing Forgejo.
    pub async fn start_forgejo_with_spire(pod_capacity: u32) -> World {
        Self::made_by_test(options().forgejo().spire(), pod_capacity).await
    }

    /// A world whose dispatcher inputs come from `tenantci dispatch init --kubeconfig` with the
    /// tenant-admin kubeconfig and no state dir (the path for any cluster): the config names no
    /// kubeconfig, and every dispatcher runs as the `tenantci-dispatcher` ServiceAccount of
    /// [`DISPATCHER_NAMESPACE`], its Lease there, its executors in [`NAMESPACE`].
    ///
    /// kube's in-cluster config reads the token from a fixed path under /var/run/secrets, and
    /// the simulator authenticates client certificates only; so the ServiceAccount identity
    /// reaches it the way an apiserver's authorizer sees it: `KUBECONFIG` (which kube's
    /// inferred config reads first, as in a Pod it reads the token) impersonates the
    /// ServiceAccount with its groups, and the RBAC init applied decides every request.
    pub async fn start_via_kubeconfig_init() -> World {
        let mut inner = options().start().await;
        inner.init_with_kubeconfig(&world::World::test_init_flags());
        Self::as_service_account(inner).await
    }

    /// As [`World::start_via_kubeconfig_init`], with `--apply-secret`: every dispatcher runs
    /// from the ConfigMap and Secret init applied, projected as the Deployment projects them,
    /// with the Deployment's environment (`dispatch::mounted`).
    pub async fn start_from_in_cluster_objects() -> World {
        let mut inner = options().start().await;
        let mut flags = world::World::test_init_flags();
        flags.push("--apply-secret".into());
        inner.init_with_kubeconfig(&flags);
        let rendered = crate::ship::kustomize("manifests/dispatch");
        let deployment = crate::ship::of_kind(&rendered, "Deployment")[0];
        let deployment = serde_json::to_value(deployment).unwrap();
        let k = tenantci_testkit::kube::Kubectl::new(&inner.tenant_admin, inner.dir.path());
        let pod_dir = inner.dir.path().join("pod-volume");
        let m = super::mounted::mount(&k, DISPATCHER_NAMESPACE, &deployment, &pod_dir);
        m.assert_every_file_resolves();
        inner.set_base(m.config());
        Self::as_service_account(inner).await
    }

    async fn made_by_test(options: Options, pod_capacity: u32) -> World {
        let mut inner = options.start().await;
        inner.write_inputs(pod_capacity).await;
        Self::watched(inner).await
    }

    async fn as_service_account(mut inner: world::World) -> World {
        let sa = inner.dir.path().join("service-account.kubeconfig");
        let as_sa = impersonating(&inner.tenant_admin, DISPATCHER_NAMESPACE);
        std::fs::write(&sa, as_sa).unwrap();
        inner.push_dispatcher_env("KUBECONFIG", &sa.display().to_string());
        Self::watched(inner).await
    }

    async fn watched(inner: world::World) -> World {
        World {
            watch: PodWatch::start(inner.kube.clone()).await,
            opensandbox: OpenSandbox::from_state_dir(&inner.state_dir()),
            inner,
        }
    }
}

/// `admin` (a kubeconfig file) impersonating the dispatcher's ServiceAccount in `namespace`.
fn impersonating(admin: &Path, namespace: &str) -> String {
    let mut kc: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(admin).unwrap()).unwrap();
    let user = &mut kc["users"][0]["user"];
    user["as"] = format!("system:serviceaccount:{namespace}:tenantci-dispatcher").into();
    user["as-groups"] = serde_yaml::to_value([
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{namespace}"),
        "system:authenticated".to_string(),
    ])
    .unwrap();
    serde_yaml::to_string(&kc).unwrap()
}
