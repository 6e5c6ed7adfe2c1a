//! A dispatcher's world, shared by the integration tests and the benchmarks: the simulator
//! (`tenantci sim --gitea`, optionally with its OpenSandbox double, SPIRE stand-in or Forgejo
//! mode), a real nats-server (one, a TLS one or a three-node cluster), the tenant-admin kube
//! client, the dispatcher's inputs (made with the library or by `tenantci dispatch init`) and
//! `tenantci dispatch run` children ([`Dispatcher`]).
//!
//! Boundary: this module starts and drives processes and the doubles' APIs; what a test
//! asserts or a benchmark measures stays with the caller. The `tenantci` binary is the
//! caller's ([`Options::new`]): only the binary's own tests know its path.
//!
//! Every dispatcher listens on port 0 and reports its addresses on stdout. Those started with
//! [`World::dispatcher`] are given a fixed facade URL per instance name, a [`Forward`] pointed
//! at whichever process serves that name, as a restarted Pod keeps its Service; those started
//! with [`World::dispatcher_behind`] share one Service's, as a rolling update's Pods do.

mod cluster;
mod dispatcher;
mod dispatchers;
mod forge;
mod identity;
mod inputs;
mod pods;
mod settings;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

use tenantci_dispatch::config::Config;

pub use cluster::{apiserver_requests, store_contains};
pub use dispatcher::Dispatcher;
pub use pods::PodWatch;

use crate::forward::Forward;
use crate::nats::{NatsCluster, NatsServer};
use crate::opensandbox::OpenSandbox;
use crate::process::{clean_command, scratch};
use crate::sim::{Gitea, SimProcess};
use crate::spire::Spire;

/// The namespace the dispatcher and its executors run in.
pub const NAMESPACE: &str = "dynamic-runner";
/// The simulated tenant cluster.
pub const CLUSTER: &str = "ci";
/// The executor image of the dispatcher's inputs (the simulator pulls nothing; only the
/// digest form matters).
pub const EXECUTOR_IMAGE: &str =
    "gitea/act_runner@sha256:0000000000000000000000000000000000000000000000000000000000000000";
/// The sidecar image of the executor Pods.
pub const PROXY_IMAGE: &str =
    "tenantci@sha256:1111111111111111111111111111111111111111111111111111111111111111";
/// The webhook secret of [`World::with_webhook`].
pub const WEBHOOK_SECRET: &str = "webhook-s3cret-typed-into-gitea";
/// The SPIRE stand-in's trust domain.
pub const TD: &str = "example.org";
/// The dispatcher's SPIFFE ID in [`TD`], which its facade presents.
pub const FACADE_ID: &str = "spiffe://example.org/ns/dynamic-runner/sa/tenantci-dispatcher";
/// The name of the dispatcher's own ClusterStaticEntry (and of its Workload API socket).
pub const DISPATCHER_ENTRY: &str = "tenantci-dispatcher";

/// Which nats-server the world runs.
enum Nats {
    /// One in a temporary directory of its own.
    Own,
    /// One in the world's directory (`nats/`), kept with it.
    InDir,
    /// A TLS-only one ([`NatsServer::start_tls`]), trusted through `nats.ca_file`.
    Tls,
    /// A three-node JetStream cluster ([`NatsCluster`]).
    Cluster,
}

/// What a world is made of; [`Options::start`] brings it up.
pub struct Options {
    bin: PathBuf,
    dir: Option<tempfile::TempDir>,
    sim_flags: Vec<String>,
    sim_log: bool,
    opensandbox: bool,
    spire: bool,
    forgejo: bool,
    nats: Nats,
}

impl Options {
    /// A world running `bin` (which must have the `sim` feature): the simulator with its
    /// Gitea double and one nats-server, in a fresh scratch directory.
    pub fn new(bin: impl Into<PathBuf>) -> Options {
        Options {
            bin: bin.into(),
            dir: None,
            sim_flags: Vec::new(),
            sim_log: false,
            opensandbox: false,
            spire: false,
            forgejo: false,
            nats: Nats::Own,
        }
    }

    /// The world's directory (removed with the guard, unless kept: [`World::keep_dir`]).
    pub fn dir(mut self, dir: tempfile::TempDir) -> Options {
        self.dir = Some(dir);
        self
    }

    /// More `tenantci sim` flags (`--node-boot 1s`, `--max-nodes 0`, `--in-memory`).
    pub fn sim_flags(mut self, flags: &[&str]) -> Options {
        self.sim_flags.extend(flags.iter().map(|f| f.to_string()));
        self
    }

    /// The simulator doing API work only, as a benchmark wants it: Pods stay Pending
    /// (`--max-nodes 0`) and nothing is saved to disk (`--in-memory`: the persister rewrites
    /// every object after each burst of writes, a cost that grows with the objects).
    pub fn api_only(self) -> Options {
        self.sim_flags(&["--max-nodes", "0", "--in-memory"])
    }

    /// The simulator's stderr to `sim.log` in the world's directory (else inherited).
    pub fn sim_log(mut self) -> Options {
        self.sim_log = true;
        self
    }

    /// The simulator's OpenSandbox double (the VM backend's Lifecycle API).
    pub fn opensandbox(mut self) -> Options {
        self.opensandbox = true;
        self
    }

    /// The simulator's SPIRE stand-in for trust domain [`TD`].
    pub fn spire(mut self) -> Options {
        self.spire = true;
        self
    }

    /// The Gitea double playing Forgejo (`sim --forgejo`).
    pub fn forgejo(mut self) -> Options {
        self.forgejo = true;
        self
    }

    /// nats-server's files under the world's directory (`nats/`), kept with it.
    pub fn nats_in_dir(mut self) -> Options {
        self.nats = Nats::InDir;
        self
    }

    /// A nats-server that speaks TLS only, its certificate from a private CA that
    /// dispatchers trust through `nats.ca_file` (`tls://` URL).
    pub fn tls_nats(mut self) -> Options {
        self.nats = Nats::Tls;
        self
    }

    /// A three-node JetStream cluster; dispatchers get every server's URL. Its topology is
    /// made by [`World::init_clustered_queue`].
    pub fn nats_cluster(mut self) -> Options {
        self.nats = Nats::Cluster;
        self
    }

    /// Starts the simulator and nats-server. The dispatcher's inputs are made next, with
    /// [`World::write_inputs`] or [`World::init`].
    pub async fn start(self) -> World {
        let dir = self.dir.unwrap_or_else(scratch);
        let state = dir.path().join("state");
        let mut flags = vec!["--gitea"];
        if self.opensandbox {
            flags.push("--opensandbox");
        }
        flags.extend(self.sim_flags.iter().map(String::as_str));
        if self.forgejo {
            flags.push("--forgejo");
        }
        if self.spire {
            flags.extend(["--spire", TD]);
        }
        let mut sim_cmd = clean_command(&self.bin);
        if self.sim_log {
            sim_cmd.stderr(std::fs::File::create(dir.path().join("sim.log")).unwrap());
        }
        let sim = SimProcess::start(sim_cmd, &state, &[CLUSTER], &flags);
        let (nats, peers, nats_dir) = match self.nats {
            Nats::Own => (NatsServer::start(), Vec::new(), None),
            Nats::InDir => (
                NatsServer::start_in(&dir.path().join("nats")),
                Vec::new(),
                None,
            ),
            Nats::Tls => (NatsServer::start_tls(), Vec::new(), None),
            Nats::Cluster => {
                let (mut servers, d) = NatsCluster::start().into_parts();
                (servers.remove(0), servers, Some(d))
            }
        };
        let tenant_admin = sim.tenant_admin(CLUSTER);
        let kube = crate::kube::kube_client(&tenant_admin).await;
        std::fs::create_dir_all(dir.path().join("dispatch")).unwrap();
        World {
            gitea: sim.gitea(),
            opensandbox: self
                .opensandbox
                .then(|| OpenSandbox::from_state_dir(&state)),
            spire: self.spire.then(|| Spire::from_state_dir(&state)),
            forgejo: self.forgejo,
            bin: self.bin,
            dispatcher_env: Vec::new(),
            kube,
            tenant_admin,
            http: reqwest::Client::new(),
            base: None,
            services: Mutex::default(),
            sim,
            nats,
            peers,
            _nats_dir: nats_dir,
            dir,
        }
    }
}

/// Everything one test's (or benchmark's) dispatchers share.
pub struct World {
    /// The simulator; first, so it stops before the directory goes.
    sim: SimProcess,
    /// The nats-server the dispatchers use (with a cluster: its first member, n1).
    pub nats: NatsServer,
    /// With a three-node NATS cluster: `nats` is n1, these are n2 and n3.
    pub peers: Vec<NatsServer>,
    /// The cluster's files; after the servers, so every server is killed before they go.
    _nats_dir: Option<tempfile::TempDir>,
    /// The simulator's Gitea double.
    pub gitea: Gitea,
    /// The simulator's OpenSandbox double, when started with one ([`Options::opensandbox`]).
    opensandbox: Option<OpenSandbox>,
    /// The simulator's SPIRE stand-in, when started with one ([`Options::spire`]).
    pub spire: Option<Spire>,
    forgejo: bool,
    /// The `tenantci` binary every child runs.
    pub bin: PathBuf,
    /// Environment of every dispatcher started from now on (the Workload API endpoint).
    dispatcher_env: Vec<(String, String)>,
    /// A kube client for the simulated cluster as its tenant admin.
    pub kube: kube::Client,
    /// The tenant-admin kubeconfig of the simulated cluster.
    pub tenant_admin: PathBuf,
    http: reqwest::Client,
    /// The config every dispatcher starts from (facade URL and identity differ per name).
    base: Option<Config>,
    /// Each instance name's fixed facade address.
    services: Mutex<BTreeMap<String, Arc<Forward>>>,
    /// The world's directory: the simulator's state, the dispatchers' configs and logs.
    /// Removed when the world is dropped, unless [`World::keep_dir`].
    pub dir: tempfile::TempDir,
}

impl World {
    /// A `tenantci` command with the runbook's `SOCIALWEB_*` and tenantci's own variables
    /// removed, so the developer's shell cannot leak into a child.
    pub fn command(&self) -> Command {
        clean_command(&self.bin)
    }

    /// The simulator's process (its memory, for the benchmarks).
    pub fn sim(&self) -> &SimProcess {
        &self.sim
    }

    /// The simulator's OpenSandbox double; panics in a world without it.
    pub fn opensandbox(&self) -> &OpenSandbox {
        self.opensandbox
            .as_ref()
            .expect("a world with the OpenSandbox double")
    }

    /// The SPIRE stand-in; panics in a world without it.
    pub fn spire(&self) -> &Spire {
        self.spire
            .as_ref()
            .expect("a world with the SPIRE stand-in")
    }

    /// The simulator's state directory (the gateway's: `--state-dir`, cluster `ci`).
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// The HTTP client the world drives the doubles with.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Keeps the world's directory (every log) after the world is dropped; its path.
    pub fn keep_dir(self) -> PathBuf {
        let World { dir, .. } = self;
        dir.keep()
    }
}
