//! What executor identity adds to a VM start (issue 15): a VM sandbox runs no SPIRE agent, so
//! with identity on the dispatcher mints each VM task's X509-SVID at the SPIRE Server API
//! before it creates the sandbox. One run on one `tenantci sim --spire --opensandbox`; this
//! process plays the dispatcher. Prints Markdown on stdout, progress on stderr;
//! `scripts/bench-vm-svid.sh` builds it and writes docs/benchmarks/vm-svid.md.
//!
//! Rows, each timed around the call(s) with `Instant`:
//! - (a) `desired::desired` + one Lifecycle API create at the double, no identity (baseline);
//! - (b) one `mint_x509_svid` on a kept-alive channel (one `ServerApi`, as the dispatcher has);
//! - (c) one mint on a new `ServerApi` (TCP connect, mTLS handshake, HTTP/2, then the mint);
//! - (d) the client side of a mint alone: a P-256 key and its CSR;
//! - (e) (b) then the create of (a) with the SVID in the env: a VM start with identity.
//!
//! Every created sandbox is deleted right after, untimed, so each create meets the same store.
//!
//! `table` holds the figures and the Markdown.
//!
//! Usage: bench_vm_svid TENANTCI_BIN [N=200]   (BENCH_KEEP=1 keeps the directory with sim.log)

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use rcgen::KeyPair;
use tenantci_core::opensandbox::LifecycleClient;
use tenantci_core::spiffe::server_api::{self, ServerApi};
use tenantci_core::spiffe::{SourceSpec, SpiffeId, SvidSource};
use tenantci_dispatch::backend::vm::desired::{self, SvidFiles};
use tenantci_dispatch::backend::vm::{Vm, settings};
use tenantci_dispatch::task::spec::{ExecutorIdentity, ExecutorSpec};
use tenantci_dispatch::task_id::TaskId;
use tenantci_testkit::opensandbox::OpenSandbox;
use tenantci_testkit::sim::SimProcess;
use tenantci_testkit::spire::{Spire, admin_entry_yaml};

mod table;

const TRUST_DOMAIN: &str = "example.org";
const CLUSTER: &str = "ci";
/// The dispatcher's SPIFFE ID as `dispatch init` derives it for namespace dynamic-runner.
const DISPATCHER_ID: &str = "spiffe://example.org/ns/dynamic-runner/sa/tenantci-dispatcher";
const DISPATCHER_ENTRY: &str = "bench-vm-svid-dispatcher";
const IMAGE: &str =
    "gitea/act_runner@sha256:0000000000000000000000000000000000000000000000000000000000000000";
/// Untimed calls per row before the measured rounds (first connections, lazy statics).
pub const WARM_UP: usize = 20;
pub const ROWS: usize = 5;

fn progress(msg: &str) {
    eprintln!("bench_vm_svid: {msg}");
}

/// The dispatcher's side of a VM start, as this bench plays it.
struct Bench {
    sandboxes: LifecycleClient,
    source: Arc<dyn SvidSource>,
    server_address: String,
    server_id: SpiffeId,
    /// The one channel of (b) and (e), as the dispatcher keeps one `ServerApi` for its life.
    kept: ServerApi,
    vm: Vm,
    spec: ExecutorSpec,
    /// The SVID's TTL: the sandbox's lifetime, as the dispatcher asks (3h10m by default).
    ttl: Duration,
    tasks: i64,
}

impl Bench {
    /// The next task's spec, with its SPIFFE ID when `identity`.
    fn next_task(&mut self, identity: bool) -> ExecutorSpec {
        self.tasks += 1;
        let mut spec = self.spec.clone();
        spec.task_id = TaskId::new(self.tasks);
        spec.assignment_id = format!("task-{}-attempt-1", self.tasks);
        spec.identity = identity.then(|| ExecutorIdentity {
            spiffe_id: format!(
                "spiffe://{TRUST_DOMAIN}/gitea/bench/vm-svid/job{}",
                self.tasks
            ),
            facade_id: DISPATCHER_ID.into(),
        });
        spec
    }

    async fn mint(&self, api: &ServerApi, spec: &ExecutorSpec) -> SvidFiles {
        let id = SpiffeId::new(&spec.identity.as_ref().unwrap().spiffe_id).unwrap();
        api.mint_x509_svid(&id, self.ttl)
            .await
            .unwrap_or_else(|e| panic!("mint for {id}: {e}"))
            .into()
    }

    /// Creates the sandbox; its id, for the untimed delete.
    async fn create(&self, spec: &ExecutorSpec, svid: Option<&SvidFiles>) -> String {
        let req = desired::desired(spec, &self.vm, 1, svid);
        self.sandboxes.create(&req).await.unwrap().id
    }

    /// One call of `row`, timed; a created sandbox is deleted after the clock stopped.
    async fn once(&mut self, row: usize) -> Duration {
        let spec = self.next_task(row != 0);
        let start = Instant::now();
        let created = match row {
            0 => Some(self.create(&spec, None).await),
            1 => {
                self.mint(&self.kept, &spec).await;
                None
            }
            2 => {
                // Dropped at the end of the arm: its connection goes with it, so the next one
                // is new again.
                let fresh = ServerApi::new(
                    &self.server_address,
                    self.source.clone(),
                    self.server_id.clone(),
                )
                .unwrap();
                self.mint(&fresh, &spec).await;
                None
            }
            3 => {
                std::hint::black_box(key_and_csr(&spec.identity.as_ref().unwrap().spiffe_id));
                None
            }
            _ => {
                let svid = self.mint(&self.kept, &spec).await;
                Some(self.create(&spec, Some(&svid)).await)
            }
        };
        let took = start.elapsed();
        if let Some(id) = created {
            self.sandboxes.delete(&id).await.unwrap();
        }
        took
    }
}

/// What `mint_x509_svid` does before it sends anything: a fresh P-256 key and the CSR core
/// sends (`server_api::csr`).
fn key_and_csr(id: &str) -> Vec<u8> {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    server_api::csr(&SpiffeId::new(id).unwrap(), &key).unwrap()
}

/// Creates the dispatcher's admin ClusterStaticEntry and waits until the stand-in serves it;
/// its Workload API endpoint.
async fn dispatcher_entry(sim: &SimProcess, spire: &Spire) -> String {
    let kube = tenantci_testkit::kube::kube_client(&sim.tenant_admin(CLUSTER)).await;
    let yaml = admin_entry_yaml(
        DISPATCHER_ENTRY,
        DISPATCHER_ID,
        &format!("spiffe://{TRUST_DOMAIN}/spire/agent/k8s_psat/{CLUSTER}/node-uid-1"),
        "pod-uid-of-the-dispatcher",
    );
    let obj: DynamicObject = serde_yaml::from_str(&yaml).unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("spire.spiffe.io", "v1alpha1", "ClusterStaticEntry"),
        "clusterstaticentries",
    );
    Api::<DynamicObject>::all_with(kube, &ar)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap();
    spire
        .served(&reqwest::Client::new(), CLUSTER, DISPATCHER_ENTRY)
        .await;
    spire.endpoint(CLUSTER, DISPATCHER_ENTRY)
}

#[tokio::main]
async fn main() {
    tenantci_core::tls::ensure_crypto_provider();
    let argv: Vec<String> = std::env::args().collect();
    let bin = PathBuf::from(argv.get(1).expect("usage: bench_vm_svid TENANTCI_BIN [N]"));
    let n: usize = argv.get(2).and_then(|a| a.parse().ok()).unwrap_or(200);
    let tmp = tempfile::tempdir_in("/var/tmp")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let state = tmp.path().join("state");
    let sim = start_sim(&bin, tmp.path(), &state);
    let spire = Spire::from_state_dir(&state);
    let opensandbox = OpenSandbox::from_state_dir(&state);
    let mut bench = build_bench(&sim, &spire, &opensandbox).await;
    let times = measure(&mut bench, n).await;
    table::print(n, &times);
    drop(bench);
    drop(sim);
    if std::env::var_os("BENCH_KEEP").is_some() {
        progress(&format!("kept {}", tmp.keep().display()));
    }
}

/// Step 1: starts `tenantci sim` with the SPIRE and OpenSandbox doubles in `dir`.
fn start_sim(bin: &Path, dir: &Path, state: &Path) -> SimProcess {
    progress("starting tenantci sim --spire --opensandbox");
    let mut sim_cmd = Command::new(bin);
    sim_cmd.stderr(std::fs::File::create(dir.join("sim.log")).unwrap());
    // No nodes and nothing saved to disk: the simulator serves only the two doubles and the
    // ClusterStaticEntry the bench creates.
    SimProcess::start(
        sim_cmd,
        state,
        &[CLUSTER],
        &[
            "--spire",
            TRUST_DOMAIN,
            "--opensandbox",
            "--max-nodes",
            "0",
            "--in-memory",
        ],
    )
}

/// Step 2: the dispatcher's SVID source and the `Bench` that calls with it.
async fn build_bench(sim: &SimProcess, spire: &Spire, opensandbox: &OpenSandbox) -> Bench {
    let endpoint = dispatcher_entry(sim, spire).await;
    let source = SourceSpec::WorkloadApi
        .open(Some(&endpoint), Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("the dispatcher's SVID from {endpoint}: {}", e.render()));
    let server_id = SpiffeId::new(&spire.server_id).unwrap();
    let kept = ServerApi::new(&spire.server_address, source.clone(), server_id.clone()).unwrap();
    let vm = Vm {
        opensandbox_url: opensandbox.url.clone(),
        api_key_file: opensandbox.api_key_file.clone(),
        image: None,
        cpu: settings::defaults::cpu(),
        memory: settings::defaults::memory(),
        timeout: settings::defaults::timeout(),
    };
    Bench {
        sandboxes: opensandbox.client(),
        source,
        server_address: spire.server_address.clone(),
        server_id,
        kept,
        ttl: Duration::from_secs(vm.timeout_seconds()),
        vm,
        spec: ExecutorSpec {
            namespace: "dynamic-runner".into(),
            task_id: TaskId::new(0),
            attempt: 1,
            assignment_id: String::new(),
            // As long as a real capability (64 hex digits): the env's size is the real one.
            capability: "c0ffee00".repeat(8),
            facade_url: "https://127.0.0.1:8443".into(),
            // The trust domain's CA certificate stands in for the facade's: a real PEM of
            // about the size identity off puts into the env instead of the SVID.
            facade_ca_pem: std::fs::read_to_string(&spire.bundle_file).unwrap(),
            gitea: tenantci_dispatch::task::spec::GiteaForExecutors {
                url: "http://127.0.0.1:3000".into(),
                ca_pem: None,
            },
            labels: vec!["self-hosted".into(), "vm".into()],
            runner_name: "tenantci".into(),
            executor: tenantci_dispatch::sizing::ExecutorSettings::with_images(IMAGE, IMAGE),
            identity: None,
            class: None,
            cache_grant: None,
        },
        tasks: 0,
    }
}

/// Step 3: the untimed warm-up, then `n` timed rounds of every row.
async fn measure(bench: &mut Bench, n: usize) -> [Vec<Duration>; ROWS] {
    progress(&format!("warm-up: {WARM_UP} untimed calls per row"));
    for row in 0..ROWS {
        for _ in 0..WARM_UP {
            bench.once(row).await;
        }
    }
    let mut times: [Vec<Duration>; ROWS] = Default::default();
    for round in 0..n {
        if round % 50 == 0 {
            progress(&format!("round {}/{n}", round + 1));
        }
        // The rows take turns going first, so drift and whatever one call leaves behind (a
        // closing connection, a deleted sandbox) fall on every row alike.
        for k in 0..ROWS {
            let row = (round + k) % ROWS;
            let took = bench.once(row).await;
            times[row].push(took);
        }
    }
    times
}
