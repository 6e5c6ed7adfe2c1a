//! The simulator as a child process (`tenantci sim`, SIGTERMed and reaped on drop) or
//! in-process, and the Gitea double it serves with `--gitea` (address, registration token,
//! enqueueing jobs, webhooks and its fault switches through its admin API).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::process::{Process, first_line};
use crate::wait::DEADLINE;

/// `tenantci sim` running as a child process, after its ready line.
pub struct SimProcess {
    process: Process,
    /// The ready line: `{"type":"ready", stateDir, adminKubeconfig, clusters: [...]}`.
    pub ready: Value,
}

impl SimProcess {
    /// Runs `tenantci sim --state-dir STATE --cluster C... EXTRA...`, where `tenantci` is a
    /// command for the binary (its environment and stderr as the caller set them), and
    /// waits for the ready line.
    pub fn start(mut tenantci: Command, state: &Path, clusters: &[&str], extra: &[&str]) -> Self {
        tenantci
            .arg("sim")
            .arg("--state-dir")
            .arg(state)
            .args(extra);
        for c in clusters {
            tenantci.arg("--cluster").arg(c);
        }
        let mut process = Process::spawn(tenantci.stdin(Stdio::null()).stdout(Stdio::piped()));
        let stdout = process.child().stdout.take().unwrap();
        let line = first_line(stdout, "tenantci sim");
        let ready: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("ready line {line:?}: {e}"));
        assert_eq!(ready["type"], "ready", "{line}");
        SimProcess { process, ready }
    }

    /// The simulator's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Cluster `name`'s entry in the ready line (`name`, `url`, `tenantAdminKubeconfig`, ...);
    /// panics when there is none.
    pub fn cluster(&self, name: &str) -> &Value {
        self.ready["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no cluster {name} in {}", self.ready))
    }

    /// Cluster `name`'s tenant apiserver URL (`https://127.0.0.1:<port>`).
    pub fn cluster_url(&self, name: &str) -> String {
        self.cluster(name)["url"].as_str().unwrap().to_string()
    }

    /// The admin apiserver's kubeconfig (lists the `Cluster` objects).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        PathBuf::from(self.ready["adminKubeconfig"].as_str().unwrap())
    }

    /// The tenant-admin kubeconfig of cluster `name`.
    pub fn tenant_admin(&self, name: &str) -> PathBuf {
        PathBuf::from(
            self.cluster(name)["tenantAdminKubeconfig"]
                .as_str()
                .unwrap(),
        )
    }

    /// The Gitea double (`--gitea`), from `<state>/gitea.json`.
    pub fn gitea(&self) -> Gitea {
        let path = Path::new(self.ready["stateDir"].as_str().unwrap()).join("gitea.json");
        let doc: Value = serde_json::from_slice(
            &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
        .unwrap();
        let field = |k: &str| doc[k].as_str().unwrap().to_string();
        Gitea {
            url: field("url"),
            admin_url: field("adminUrl"),
            registration_token: field("registrationToken"),
            api_token: field("apiToken"),
        }
    }

    /// SIGTERM and wait (SIGKILL after [`DEADLINE`]); the exit code.
    pub fn stop(mut self) -> Option<i32> {
        self.process.terminate(DEADLINE)
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        // A clean stop, so the simulator's own children and files are released; `stop`
        // already did it when called.
        self.process.terminate(DEADLINE);
    }
}

/// The simulator's Gitea double, as `gitea.json` describes it.
#[derive(Debug, Clone)]
pub struct Gitea {
    /// The RunnerService base URL (what runners and the dispatcher use).
    pub url: String,
    /// The admin API (`POST /jobs`, `GET /jobs/<id>`, `GET /tasks/<id>`).
    pub admin_url: String,
    /// The registration token a runner registers with.
    pub registration_token: String,
    /// The API token of Forgejo's waiting-jobs API (`GET /api/v1/.../actions/runners/jobs`).
    pub api_token: String,
}

impl Gitea {
    /// Enqueues a one-step job asking for `runs_on`, with one secret `DEPLOY_KEY`; returns
    /// the job id.
    pub async fn enqueue(
        &self,
        http: &reqwest::Client,
        name: &str,
        runs_on: &[&str],
        secret: &str,
    ) -> i64 {
        let body = json!({
            "name": name,
            "runs_on": runs_on,
            "workflow_payload": format!(
                "name: {name}\njobs:\n  build:\n    runs-on: [{}]\n    steps:\n      - run: make test\n",
                runs_on.join(", ")
            ),
            "secrets": {"DEPLOY_KEY": secret},
        });
        let resp = http
            .post(format!("{}/jobs", self.admin_url))
            .json(&body)
            .send()
            .await
            .expect("the Gitea double's admin API");
        assert!(resp.status().is_success(), "enqueue: {}", resp.status());
        let created: Value = resp.json().await.unwrap();
        created["job_id"].as_i64().expect("job_id")
    }

    /// Registers a webhook at the double: `workflow_job` deliveries to `url`, signed with
    /// `secret` (as Gitea signs them).
    pub async fn add_hook(&self, http: &reqwest::Client, url: &str, secret: &str) {
        let resp = http
            .post(format!("{}/hooks", self.admin_url))
            .json(&json!({"url": url, "secret": secret}))
            .send()
            .await
            .expect("the Gitea double's admin API");
        assert!(resp.status().is_success(), "add hook: {}", resp.status());
    }

    /// `POST <admin>/<path>` with a JSON body; panics unless it succeeds (the Forgejo
    /// switches: `drop-fetch`, `hold`, `version`).
    pub async fn admin_post(&self, http: &reqwest::Client, path: &str, body: Value) {
        let resp = http
            .post(format!("{}/{path}", self.admin_url))
            .json(&body)
            .send()
            .await
            .expect("the Gitea double's admin API");
        assert!(resp.status().is_success(), "{path}: {}", resp.status());
    }

    /// Holds the double's RunnerService calls arriving in the next `duration` until it has
    /// passed (a frozen Gitea), then serves them.
    pub async fn stall(&self, http: &reqwest::Client, duration: std::time::Duration) {
        let resp = http
            .post(format!("{}/stall", self.admin_url))
            .json(&json!({"millis": duration.as_millis() as u64}))
            .send()
            .await
            .expect("the Gitea double's admin API");
        assert!(resp.status().is_success(), "stall: {}", resp.status());
    }

    /// GET `<admin_url>/<path>` as JSON (`jobs/<id>`, `tasks/<id>`).
    pub async fn admin(&self, http: &reqwest::Client, path: &str) -> Value {
        http.get(format!("{}/{path}", self.admin_url))
            .send()
            .await
            .expect("the Gitea double's admin API")
            .json()
            .await
            .unwrap()
    }
}

/// An in-process simulator with one cluster, its state under `scratch/state`.
pub async fn in_process(scratch: &Path, cluster: &str) -> tenantci_sim::SimHandle {
    tenantci_sim::start(tenantci_sim::SimConfig {
        state_dir: scratch.join("state"),
        clusters: vec![cluster.to_string()],
        // In-process and never restarted: nothing to keep across a restart.
        persist: false,
        spire_crd: true,
        nodes: Default::default(),
    })
    .await
    .unwrap()
}
