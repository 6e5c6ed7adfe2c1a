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

use std::collections::BTreeMap;

use super::settings::Vm;
use crate::dispatch::executor::{
    self, ATTEMPT_LABEL, CONFIG_KEY, ExecutorSpec, PROXY_LISTEN, RUNNER_KEY, TASK_ID_LABEL,
};
use tenantci_core::Secret;
use tenantci_core::opensandbox::{CreateSandbox, ImageSpec, ResourceLimits, Sandbox};

/// The dispatcher (its Gitea runner id) that owns the sandbox: recovery lists by it.
pub const DISPATCHER_KEY: &str = "tenantci.io/dispatcher";
/// Set once Gitea accepted the task's final state; the reconciler then deletes the sandbox.
pub const TERMINAL_KEY: &str = "tenantci.io/terminal";
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
}

/// The metadata of `task`'s sandbox for `attempt`.
pub fn metadata(task: i64, attempt: u32, dispatcher: i64) -> BTreeMap<String, String> {
    let mut m = owned_by(dispatcher);
    m.insert(TASK_ID_LABEL.into(), task.to_string());
    m.insert(ATTEMPT_LABEL.into(), attempt.to_string());
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
pub fn of_task(dispatcher: i64, task: i64) -> BTreeMap<String, String> {
    let mut m = owned_by(dispatcher);
    m.insert(TASK_ID_LABEL.into(), task.to_string());
    m
}

/// The task and attempt a sandbox's metadata names.
pub fn task_of(s: &Sandbox) -> Option<(i64, u32)> {
    let task = s.metadata.get(TASK_ID_LABEL)?.parse().ok()?;
    let attempt = s.metadata.get(ATTEMPT_LABEL)?.parse().ok()?;
    Some((task, attempt))
}

pub fn is_terminal(s: &Sandbox) -> bool {
    s.metadata.get(TERMINAL_KEY).is_some_and(|v| v == "true")
}

/// The entrypoint's script: files from the env (umask 077), the variables removed so the job
/// does not inherit the capability, the proxy in the background, then the runner for one task.
pub fn boot_script(runner_binary: &str) -> String {
    let d = VM_DIR;
    format!(
        r#"set -eu
umask 077
mkdir -p {d}/home
printf '%s' "${runner}" > {d}/{RUNNER_KEY}
printf '%s' "${config}" > {d}/{CONFIG_KEY}
printf '%s' "${ca}" > {d}/ca.crt
facade_url="${url}"
unset {runner} {config} {ca} {url}
export HOME={d}/home
tenantci executor-proxy --listen {PROXY_LISTEN} --facade-url "$facade_url" --facade-ca {d}/ca.crt &
cd {d}/home
exec {runner_binary} daemon --once --config {d}/{CONFIG_KEY}
"#,
        runner = env::RUNNER,
        config = env::RUNNER_CONFIG,
        ca = env::FACADE_CA,
        url = env::FACADE_URL,
    )
}

/// The create request for `spec` (image by digest, limits, a timeout past Gitea's 3 h).
pub fn desired(spec: &ExecutorSpec, vm: &Vm, dispatcher: i64) -> CreateSandbox {
    let runner = String::from_utf8(executor::runner_file(spec)).expect(".runner is JSON");
    let config = executor::runner_config_at(
        spec,
        &format!("{VM_DIR}/{RUNNER_KEY}"),
        &format!("{VM_DIR}/home"),
    );
    let env = BTreeMap::from([
        (env::RUNNER.to_string(), Secret::new(runner)),
        (env::RUNNER_CONFIG.to_string(), Secret::new(config)),
        (
            env::FACADE_CA.to_string(),
            Secret::new(spec.facade_ca_pem.clone()),
        ),
        (
            env::FACADE_URL.to_string(),
            Secret::new(spec.facade_url.clone()),
        ),
    ]);
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
            boot_script(spec.executor.runner_command.binary()),
        ],
        resource_limits: ResourceLimits {
            cpu: vm.cpu.clone(),
            memory: vm.memory.clone(),
        },
        timeout: vm.timeout_seconds(),
        env,
        metadata: metadata(spec.task_id, spec.attempt, dispatcher),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::config;

    fn spec() -> ExecutorSpec {
        ExecutorSpec {
            namespace: "dynamic-runner".into(),
            task_id: 42,
            attempt: 2,
            assignment_id: "task-42-attempt-2".into(),
            capability: "c0ffee".repeat(10),
            facade_url: "https://10.0.0.5:8443".into(),
            facade_ca_pem: "-----BEGIN CERTIFICATE-----\n".into(),
            labels: vec!["self-hosted".into(), "vm".into()],
            runner_name: "tenantci".into(),
            executor: config::Executor::with_images(
                format!("gitea/act_runner@sha256:{}", "a".repeat(64)),
                format!("tenantci@sha256:{}", "b".repeat(64)),
            ),
            identity: None,
        }
    }

    fn vm() -> Vm {
        Vm {
            opensandbox_url: "https://sandbox.example".into(),
            api_key_file: "/etc/tenantci/opensandbox.key".into(),
            image: Some(format!("ci/vm-executor@sha256:{}", "c".repeat(64))),
            cpu: "2".into(),
            memory: "4Gi".into(),
            timeout: super::super::settings::defaults::timeout(),
        }
    }

    #[test]
    fn the_capability_is_in_the_env_only_and_metadata_is_label_safe() {
        let req = desired(&spec(), &vm(), 7);
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
        let req = desired(&spec(), &vm(), 7);
        assert!(req.image.uri.starts_with("ci/vm-executor@sha256:"));
        assert_eq!(
            (req.resource_limits.cpu.as_str(), req.timeout),
            ("2", 11400)
        );
        let mut plain = vm();
        plain.image = None;
        let req = desired(&spec(), &plain, 7);
        assert!(req.image.uri.starts_with("gitea/act_runner@sha256:"));
    }

    #[test]
    fn the_boot_script_unsets_the_capability_before_the_runner_starts() {
        let script = boot_script("act_runner");
        let unset = script.find("unset TENANTCI_RUNNER").unwrap();
        let runner = script.find("exec act_runner daemon --once").unwrap();
        assert!(unset < runner, "{script}");
        assert!(script.starts_with("set -eu\numask 077\n"));
        let config = executor::runner_config_at(&spec(), "/tmp/gitea-task/.runner", "/h");
        assert!(config.contains("file: /tmp/gitea-task/.runner"), "{config}");
    }

    #[test]
    fn metadata_reads_back() {
        let s: Sandbox = serde_json::from_value(serde_json::json!({
            "id": "s1", "status": {"state": "Running"},
            "metadata": metadata(42, 2, 7),
        }))
        .unwrap();
        assert_eq!(task_of(&s), Some((42, 2)));
        assert!(!is_terminal(&s));
    }
}
