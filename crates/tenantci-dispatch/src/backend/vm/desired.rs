//! The sandbox of one VM task, pure: the Lifecycle API create request, the metadata that makes
//! it findable and owned, and what the metadata says back.
//!
//! The executor inside reaches the facade exactly as a Pod executor does: the runner reads
//! `.runner` (the task's assignment id and capability) and talks plain HTTP to
//! `tenantci executor-proxy` on loopback, which alone holds the facade's CA. A VM has no
//! Secret to mount, so the boot script ([`boot_script`]) writes those files from the
//! sandbox's env into a 0700 directory, removes the variables, starts the proxy and execs
//! the runner for one task. The env is the only place the capability lives in OpenSandbox:
//! the Lifecycle API never returns it, and the metadata carries ids only. The sealed
//! assignment is not in the sandbox at all: the facade hands the task out from the claim
//! ledger.
//!
//! With executor identity on, a sandbox runs no SPIRE agent, so the dispatcher mints the
//! task's X509-SVID at the SPIRE server ([`SvidFiles`]) and the env carries it like the
//! capability: the boot script writes spiffe-helper's three files into `<VM_DIR>/spiffe`
//! (0700; the key 0600), and the proxy presents them (`--spiffe-source files:DIR`) instead of
//! trusting a CA file. The job finds its SVID there too, as a Pod's job finds the Workload API.

use std::collections::BTreeMap;

use crate::backend::vm::settings::Vm;
use crate::task::spec::{ATTEMPT_LABEL, CONFIG_KEY, RUNNER_KEY, TASK_ID_LABEL};
use crate::task::spec::{ExecutorSpec, PROXY_LISTEN};
use crate::task_id::TaskId;
use tenantci_core::Secret;
use tenantci_core::opensandbox::{CreateSandbox, ImageSpec, ResourceLimits, Sandbox};
use tenantci_core::record_version::Kind;
use tenantci_core::spiffe::files;
use tenantci_core::spiffe::server_api::MintedSvid;

/// The dispatcher (its Gitea runner id) that owns the sandbox: recovery lists by it.
pub const DISPATCHER_KEY: &str = "tenantci.io/dispatcher";
/// Set once Gitea accepted the task's final state; the reconciler then deletes the sandbox.
pub const TERMINAL_KEY: &str = "tenantci.io/terminal";
/// The version of the sandbox's format (its metadata keys and env), read by the one rule
/// (`tenantci_core::record_version`): none is 1; a newer one is not this release's to read.
pub const FORMAT_KEY: &str = "tenantci.io/format";
/// The VM executor's kind for the version rule, and the format this release writes.
pub const KIND: Kind = Kind::new("vm_executor", 1);
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "tenantci");

/// Where the boot script puts `.runner`, `config.yaml`, `ca.crt` and the runner's HOME.
pub const VM_DIR: &str = "/tmp/gitea-task";

/// The sandbox env the boot script reads (and unsets before the runner starts).
pub mod env {
    /// `.runner` (JSON; holds the capability).
    pub const RUNNER: &str = "TENANTCI_RUNNER";
    /// The runner's `config.yaml`.
    pub const RUNNER_CONFIG: &str = "TENANTCI_RUNNER_CONFIG";
    /// The facade's CA certificate (PEM), for the proxy.
    pub const FACADE_CA: &str = "TENANTCI_FACADE_CA";
    /// The facade URL, for the proxy.
    pub const FACADE_URL: &str = "TENANTCI_FACADE_URL";
    /// Gitea's URL, for the proxy's passthrough (checkout, artifacts, the API).
    pub const GITEA_URL: &str = "TENANTCI_GITEA_URL";
    /// Gitea's private CA (PEM), when `gitea.ca_file` is set.
    pub const GITEA_CA: &str = "TENANTCI_GITEA_CA";
    /// Identity on: the task's X509-SVID chain (PEM), for `svid.pem`.
    pub const SVID: &str = "TENANTCI_SVID";
    /// Identity on: the SVID's PKCS#8 key (PEM), for `svid_key.pem`.
    pub const SVID_KEY: &str = "TENANTCI_SVID_KEY";
    /// Identity on: the trust domain's bundle (PEM), for `svid_bundle.pem`.
    pub const SVID_BUNDLE: &str = "TENANTCI_SVID_BUNDLE";
}

/// Where the boot script writes the SVID files (identity on).
pub const SVID_DIR: &str = "/tmp/gitea-task/spiffe";

/// A task's minted X509-SVID as spiffe-helper's files hold it (PEM).
pub struct SvidFiles {
    /// The SVID and its intermediates.
    pub chain_pem: String,
    /// The SVID's private key (PKCS#8).
    pub key_pem: Secret,
    /// The trust domain's bundle, which the proxy verifies the facade's SVID against.
    pub bundle_pem: String,
}

impl From<MintedSvid> for SvidFiles {
    fn from(m: MintedSvid) -> Self {
        SvidFiles {
            chain_pem: m.chain_pem,
            key_pem: m.key_pem,
            bundle_pem: m.bundle_pem,
        }
    }
}

/// The metadata of `task`'s sandbox for `attempt`.
pub fn metadata(task: TaskId, attempt: u32, dispatcher: i64) -> BTreeMap<String, String> {
    let mut m = owned_by(dispatcher);
    m.insert(TASK_ID_LABEL.into(), task.to_string());
    m.insert(ATTEMPT_LABEL.into(), attempt.to_string());
    m.insert(FORMAT_KEY.into(), KIND.current_text());
    m
}

/// The list filter for every sandbox of `dispatcher`.
pub fn owned_by(dispatcher: i64) -> BTreeMap<String, String> {
    BTreeMap::from([
        (DISPATCHER_KEY.to_string(), dispatcher.to_string()),
        (MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string()),
    ])
}

/// The list filter for `task`'s sandboxes of `dispatcher`.
pub fn of_task(dispatcher: i64, task: TaskId) -> BTreeMap<String, String> {
    let mut m = owned_by(dispatcher);
    m.insert(TASK_ID_LABEL.into(), task.to_string());
    m
}

/// Whether this release reads the sandbox: one of a newer format is reported (once) and
/// left as it is (never marked, replaced or deleted).
pub fn readable(s: &Sandbox) -> bool {
    match KIND.check_text(s.metadata.get(FORMAT_KEY).map(String::as_str)) {
        Ok(_) => true,
        Err(newer) => {
            crate::newer_records::report(&newer, &format!("sandbox {}", s.id));
            false
        }
    }
}

/// The task and attempt a sandbox's metadata names.
pub fn task_of(s: &Sandbox) -> Option<(TaskId, u32)> {
    let task = s.metadata.get(TASK_ID_LABEL)?.parse().ok()?;
    let attempt = s.metadata.get(ATTEMPT_LABEL)?.parse().ok()?;
    Some((task, attempt))
}

/// Whether the sandbox carries the terminal marker ([`TERMINAL_KEY`]).
pub fn is_terminal(s: &Sandbox) -> bool {
    s.metadata.get(TERMINAL_KEY).is_some_and(|v| v == "true")
}

/// The entrypoint's script: files from the env (umask 077), the variables removed so the job
/// does not inherit the capability, the proxy in the background, then the runner for one task.
/// `facade_id` (identity on): the proxy presents the SVID files and accepts only that ID;
/// otherwise it trusts the facade's CA.
/// `run_once` is the runner's one-task command line (`RunnerCommand::run_once`).
pub fn boot_script(run_once: &str, facade_id: Option<&str>) -> String {
    let d = VM_DIR;
    let (files, unset, trust) = match facade_id {
        None => (
            format!("printf '%s' \"${ca}\" > {d}/ca.crt\n", ca = env::FACADE_CA),
            env::FACADE_CA.to_string(),
            format!("--facade-ca {d}/ca.crt"),
        ),
        Some(id) => (
            format!(
                "mkdir -p {SVID_DIR}\nprintf '%s' \"${svid}\" > {SVID_DIR}/{cert}\nprintf '%s' \"${key}\" > {SVID_DIR}/{key_file}\nprintf '%s' \"${bundle}\" > {SVID_DIR}/{bundle_file}\n",
                svid = env::SVID,
                key = env::SVID_KEY,
                bundle = env::SVID_BUNDLE,
                cert = files::CERT_FILE,
                key_file = files::KEY_FILE,
                bundle_file = files::BUNDLE_FILE,
            ),
            format!("{} {} {}", env::SVID, env::SVID_KEY, env::SVID_BUNDLE),
            format!("--spiffe-source files:{SVID_DIR} --facade-id '{id}'"),
        ),
    };
    format!(
        r#"set -eu
umask 077
mkdir -p {d}/home
printf '%s' "${runner}" > {d}/{RUNNER_KEY}
printf '%s' "${config}" > {d}/{CONFIG_KEY}
{files}facade_url="${url}"
gitea_url="${gitea_url}"
gitea_trust=""
if [ -n "${{{gitea_ca}:-}}" ]; then
  printf '%s' "${gitea_ca}" > {d}/gitea-ca.crt
  gitea_trust="--gitea-ca {d}/gitea-ca.crt"
fi
unset {runner} {config} {url} {gitea_url} {gitea_ca} {unset}
export HOME={d}/home
tenantci executor-proxy --listen {PROXY_LISTEN} --facade-url "$facade_url" --gitea-url "$gitea_url" $gitea_trust {trust} &
cd {d}/home
exec {run_once} --config {d}/{CONFIG_KEY}
"#,
        runner = env::RUNNER,
        config = env::RUNNER_CONFIG,
        url = env::FACADE_URL,
        gitea_url = env::GITEA_URL,
        gitea_ca = env::GITEA_CA,
    )
}

/// The create request for `spec` (image by digest, limits, a timeout past Gitea's 3 h);
/// `svid` is the task's, minted when identity is on (`spec.identity`).
pub fn desired(
    spec: &ExecutorSpec,
    vm: &Vm,
    dispatcher: i64,
    svid: Option<&SvidFiles>,
) -> CreateSandbox {
    let runner = String::from_utf8(crate::task::spec::runner_file(spec)).expect(".runner is JSON");
    let config = crate::task::spec::runner_config_at(
        spec,
        &format!("{VM_DIR}/{RUNNER_KEY}"),
        &format!("{VM_DIR}/home"),
    );
    let mut env = BTreeMap::from([
        (env::RUNNER.to_string(), Secret::new(runner)),
        (env::RUNNER_CONFIG.to_string(), Secret::new(config)),
        (
            env::FACADE_URL.to_string(),
            Secret::new(spec.facade_url.clone()),
        ),
        (
            env::GITEA_URL.to_string(),
            Secret::new(spec.gitea.url.clone()),
        ),
    ]);
    if let Some(pem) = &spec.gitea.ca_pem {
        env.insert(env::GITEA_CA.to_string(), Secret::new(pem.clone()));
    }
    match svid {
        Some(svid) => env.extend([
            (env::SVID.to_string(), Secret::new(svid.chain_pem.clone())),
            (env::SVID_KEY.to_string(), svid.key_pem.clone()),
            (
                env::SVID_BUNDLE.to_string(),
                Secret::new(svid.bundle_pem.clone()),
            ),
        ]),
        None => {
            env.insert(
                env::FACADE_CA.to_string(),
                Secret::new(spec.facade_ca_pem.clone()),
            );
        }
    }
    let facade_id = spec
        .identity
        .as_ref()
        .filter(|_| svid.is_some())
        .map(|i| i.facade_id.as_str());
    CreateSandbox {
        image: ImageSpec {
            uri: vm
                .image
                .clone()
                .unwrap_or_else(|| spec.executor.image.clone()),
        },
        entrypoint: vec![
            "/bin/sh".into(),
            "-c".into(),
            boot_script(
                &spec.executor.runner_command.run_once().join(" "),
                facade_id,
            ),
        ],
        // A class sizes the sandbox; without one, the `[vm]` section does.
        resource_limits: match &spec.class {
            Some(c) => ResourceLimits {
                cpu: c.cpu.clone(),
                memory: c.memory.clone(),
            },
            None => ResourceLimits {
                cpu: vm.cpu.clone(),
                memory: vm.memory.clone(),
            },
        },
        timeout: vm.timeout_seconds(),
        env,
        metadata: metadata(spec.task_id, spec.attempt, dispatcher),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ExecutorSpec {
        crate::task::spec::example(2, "task-42-attempt-2", "vm")
    }

    fn vm() -> Vm {
        Vm {
            opensandbox_url: "https://sandbox.example".into(),
            api_key_file: "/etc/tenantci/opensandbox.key".into(),
            image: Some(format!("ci/vm-executor@sha256:{}", "c".repeat(64))),
            cpu: "2".into(),
            memory: "4Gi".into(),
            timeout: crate::backend::vm::settings::defaults::timeout(),
        }
    }

    #[test]
    fn the_boot_script_points_the_proxy_at_gitea_and_its_ca() {
        let mut s = spec();
        let req = desired(&s, &vm(), 7, None);
        assert_eq!(req.env[env::GITEA_URL].expose(), "https://gitea.example");
        assert!(!req.env.contains_key(env::GITEA_CA));
        s.gitea.ca_pem = Some("PEM".into());
        let req = desired(&s, &vm(), 7, None);
        assert_eq!(req.env[env::GITEA_CA].expose(), "PEM");
        let script = boot_script("act_runner", None);
        assert!(
            script.contains("--gitea-url \"$gitea_url\" $gitea_trust"),
            "{script}"
        );
        assert!(script.contains(&format!("unset {} {}", env::RUNNER, env::RUNNER_CONFIG)));
        assert!(script.contains(env::GITEA_CA), "{script}");
        // The script is valid POSIX sh.
        let check = std::process::Command::new("sh")
            .args(["-n", "-c", &script])
            .status()
            .unwrap();
        assert!(check.success(), "{script}");
    }

    #[test]
    fn the_capability_is_in_the_env_only_and_metadata_is_label_safe() {
        let req = desired(&spec(), &vm(), 7, None);
        let capability = "c0ffee".repeat(10);
        assert!(req.env[env::RUNNER].expose().contains(&capability));
        let public = format!(
            "{:?} {:?} {:?}",
            req.metadata,
            req.entrypoint,
            serde_json::to_value(&req.metadata)
        );
        assert!(!public.contains(&capability), "{public}");
        assert!(
            !format!("{req:?}").contains(&capability),
            "Debug redacts env"
        );
        tenantci_core::opensandbox::label::check_all(&req.metadata).unwrap();
        assert_eq!(req.metadata[TASK_ID_LABEL], "42");
        assert_eq!(req.metadata[ATTEMPT_LABEL], "2");
        assert_eq!(req.metadata[DISPATCHER_KEY], "7");
    }

    #[test]
    fn image_limits_and_timeout_follow_the_vm_section() {
        let req = desired(&spec(), &vm(), 7, None);
        assert!(req.image.uri.starts_with("ci/vm-executor@sha256:"));
        assert_eq!(
            (req.resource_limits.cpu.as_str(), req.timeout),
            ("2", 11400)
        );
        let mut plain = vm();
        plain.image = None;
        let req = desired(&spec(), &plain, 7, None);
        assert!(req.image.uri.starts_with("gitea/act_runner@sha256:"));
    }

    #[test]
    fn the_boot_script_unsets_the_capability_before_the_runner_starts() {
        let script = boot_script("act_runner daemon --once", None);
        let unset = script.find("unset TENANTCI_RUNNER").unwrap();
        let runner = script.find("exec act_runner daemon --once").unwrap();
        assert!(unset < runner, "{script}");
        assert!(script.starts_with("set -eu\numask 077\n"));
        let config = crate::task::spec::runner_config_at(&spec(), "/tmp/gitea-task/.runner", "/h");
        assert!(config.contains("file: /tmp/gitea-task/.runner"), "{config}");
    }

    #[test]
    fn with_identity_the_svid_replaces_the_ca_and_the_proxy_presents_it() {
        let mut s = spec();
        s.identity = Some(crate::task::spec::ExecutorIdentity {
            spiffe_id: "spiffe://example.org/gitea/acme/w/build".into(),
            facade_id: "spiffe://example.org/ns/dynamic-runner/sa/tenantci-dispatcher".into(),
        });
        let svid = SvidFiles {
            chain_pem: "CHAIN".into(),
            key_pem: Secret::new("k3y-material".to_string()),
            bundle_pem: "BUNDLE".into(),
        };
        let req = desired(&s, &vm(), 7, Some(&svid));
        assert_eq!(req.env[env::SVID_KEY].expose(), "k3y-material");
        assert_eq!(req.env[env::SVID].expose(), "CHAIN");
        assert!(
            !req.env.contains_key(env::FACADE_CA),
            "no CA with identity on"
        );
        assert!(
            !format!("{req:?}").contains("k3y-material"),
            "Debug redacts the key"
        );
        let script = &req.entrypoint[2];
        assert!(
            script.contains("--spiffe-source files:/tmp/gitea-task/spiffe --facade-id 'spiffe://example.org/ns/dynamic-runner/sa/tenantci-dispatcher'"),
            "{script}"
        );
        assert!(
            script.contains("> /tmp/gitea-task/spiffe/svid_key.pem"),
            "{script}"
        );
        let unset = script
            .find("TENANTCI_SVID_KEY TENANTCI_SVID_BUNDLE")
            .unwrap();
        let runner = script.find("exec act_runner").unwrap();
        assert!(unset < runner, "{script}");
        assert!(!script.contains("--facade-ca"), "{script}");
    }

    #[test]
    fn metadata_reads_back() {
        let s: Sandbox = serde_json::from_value(serde_json::json!({
            "id": "s1", "status": {"state": "Running"},
            "metadata": metadata(TaskId::new(42), 2, 7),
        }))
        .unwrap();
        assert_eq!(task_of(&s), Some((TaskId::new(42), 2)));
        assert!(!is_terminal(&s));
        assert!(readable(&s));
    }

    #[test]
    fn a_sandbox_of_a_newer_format_is_not_read_and_one_without_a_format_is() {
        let with = |format: Option<&str>| -> Sandbox {
            let mut m = metadata(TaskId::new(42), 2, 7);
            match format {
                Some(f) => m.insert(FORMAT_KEY.into(), f.into()),
                None => m.remove(FORMAT_KEY),
            };
            serde_json::from_value(serde_json::json!({
                "id": "s1", "status": {"state": "Running"}, "metadata": m,
            }))
            .unwrap()
        };
        assert!(readable(&with(None)), "before the field: version 1");
        assert!(readable(&with(Some("1"))));
        assert!(!readable(&with(Some("2"))));
        assert!(
            !readable(&with(Some("v2"))),
            "a format it cannot parse is not its to read"
        );
    }
}
