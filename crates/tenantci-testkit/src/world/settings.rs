//! What a [`World`]'s dispatchers started from now on are configured with, beyond the base
//! inputs: a webhook receiver, Forgejo's waiting-jobs API, poll and claim timings, executor
//! identity, the VM backend, extra environment.

use std::path::Path;
use std::time::Duration;

use tenantci_dispatch::claim::settings::{WaitingJobs, Webhook};
use tenantci_dispatch::identity::{self, Identity};

use super::{DISPATCHER_ENTRY, FACADE_ID, TD, WEBHOOK_SECRET, World};

impl World {
    /// A webhook receiver (port 0, secret [`WEBHOOK_SECRET`] in a 0600 file with a trailing
    /// newline, as an operator writes it) polling every `fetch_interval` as the safety net.
    pub fn with_webhook(&mut self, fetch_interval: Duration) {
        let file = self.dir.path().join("dispatch").join("webhook.secret");
        if !file.exists() {
            let text = format!("{WEBHOOK_SECRET}\n");
            tenantci_core::fsutil::write_new_atomic(&file, text.as_bytes(), 0o600).unwrap();
        }
        self.base_mut().webhook = Some(Webhook {
            fetch_interval: fetch_interval.into(),
            ..Webhook::new("127.0.0.1:0".parse().unwrap(), file)
        });
    }

    /// Reads the Forgejo double's waiting-jobs API (`scope`, every `interval`) with `token`
    /// in a 0600 file.
    pub fn with_waiting_jobs(&mut self, scope: &str, token: &str, interval: Duration) {
        let file = self.dir.path().join("dispatch").join("forgejo-api.token");
        let _ = std::fs::remove_file(&file);
        tenantci_core::fsutil::write_new_atomic(&file, format!("{token}\n").as_bytes(), 0o600)
            .unwrap();
        self.base_mut().waiting_jobs = Some(WaitingJobs {
            scope: scope.into(),
            token_file: file,
            interval: interval.into(),
        });
    }

    /// Polls Gitea only every `interval` (also after an idle spell): a claim sooner than that
    /// was woken by a nudge.
    pub fn with_fetch_interval(&mut self, interval: Duration) {
        let gitea = &mut self.base_mut().gitea;
        gitea.fetch_interval = interval.into();
        gitea.fetch_interval_idle = interval.into();
    }

    /// Replaces an executor that has not fetched its task after `start_deadline`, up to
    /// `max_attempts`.
    pub fn with_start_deadline(&mut self, start_deadline: Duration, max_attempts: u32) {
        self.base_mut().claim = tenantci_dispatch::task::Claim {
            start_deadline: start_deadline.into(),
            max_attempts,
        };
    }

    /// The VM backend against the simulator's OpenSandbox double with the key in
    /// `api_key_file`, `capacity` sandboxes at once.
    pub fn with_vm(&mut self, capacity: u32, api_key_file: &Path) {
        let url = self.opensandbox().url.clone();
        let base = self.base_mut();
        base.capacity
            .set(tenantci_dispatch::backend::vm::KIND, capacity);
        base.gitea.labels.push("vm".into());
        base.vm = Some(tenantci_dispatch::backend::vm::Vm {
            opensandbox_url: url,
            api_key_file: api_key_file.to_path_buf(),
            image: None,
            cpu: "2".into(),
            memory: "4Gi".into(),
            timeout: Duration::from_secs(3 * 3600 + 600).into(),
        });
    }

    /// Executor identity on: the dispatcher's entry ([`FACADE_ID`]) exists and is served, the
    /// dispatchers get its Workload API socket, and `[identity]` has the defaults with that
    /// facade ID.
    pub async fn with_identity(&mut self) {
        self.create_entry(DISPATCHER_ENTRY, FACADE_ID).await;
        self.identity_config();
    }

    /// [`World::with_identity`] for VM executors too: `[identity]` names the stand-in's SPIRE
    /// Server API, where the dispatcher mints the sandboxes' SVIDs, and the dispatcher's entry
    /// is an admin one when `admin` (SPIRE mints only for admin workloads).
    pub async fn with_vm_identity(&mut self, admin: bool) {
        self.create_entry_with(DISPATCHER_ENTRY, FACADE_ID, admin)
            .await;
        self.identity_config();
        let (address, id) = (
            self.spire().server_address.clone(),
            self.spire().server_id.clone(),
        );
        let identity = self
            .base_mut()
            .identity
            .as_mut()
            .expect("identity_config set it");
        identity.server_address = Some(address);
        identity.server_id = Some(id);
    }

    fn identity_config(&mut self) {
        let endpoint = self.spire().endpoint(super::CLUSTER, DISPATCHER_ENTRY);
        self.dispatcher_env = vec![("SPIFFE_ENDPOINT_SOCKET".into(), endpoint)];
        self.base_mut().identity = Some(Identity {
            trust_domain: TD.into(),
            id_template: identity::settings::defaults::id_template(),
            parent_template: identity::settings::defaults::parent_template(),
            cluster: Some(super::CLUSTER.into()),
            facade_id: FACADE_ID.into(),
            source: "workload-api".into(),
            server_address: None,
            server_id: None,
            class_name: identity::settings::defaults::class_name(),
        });
    }

    /// The environment every dispatcher started from now on gets.
    pub fn dispatcher_env(&self) -> &[(String, String)] {
        &self.dispatcher_env
    }

    /// Adds `key=value` to [`World::dispatcher_env`].
    pub fn push_dispatcher_env(&mut self, key: &str, value: &str) {
        self.dispatcher_env.push((key.into(), value.into()));
    }
}
