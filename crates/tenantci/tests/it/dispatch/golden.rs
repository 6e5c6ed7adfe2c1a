//! Golden files of the executor Pod and Secret for a config with resources derived from a
//! node image, the gitea-runner command and placement keys. Regenerate with
//! `UPDATE_GOLDEN=1 cargo nextest run -p tenantci --test it -E 'test(/dispatch::golden/)'`
//! and review the diff: every line of these files is something the runner or the kubelet
//! reads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Toleration;
use serde_json::{Value, json};
use tenantci_core::node_image::NodeImage;
use tenantci_dispatch::backend::pod::manifest;
use tenantci_dispatch::sizing::resources::Resources;
use tenantci_dispatch::sizing::{ExecutorSettings, RunnerCommand};
use tenantci_dispatch::task::spec::ExecutorSpec;
use tenantci_dispatch::task_id::TaskId;

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/dispatch/golden")
}

#[track_caller]
fn assert_golden(name: &str, actual: &str) {
    let path = golden_dir().join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read {}: {e} (UPDATE_GOLDEN=1 creates it)", path.display()));
    assert_eq!(
        actual, expected,
        "golden file {name} differs (UPDATE_GOLDEN=1 to accept)"
    );
}

fn spec() -> ExecutorSpec {
    let node = NodeImage {
        vcpu: 4,
        mem_mib: 8192,
        rootfs_mib: Some(20480),
    };
    let mut x = ExecutorSettings::with_images(
        format!("gitea/runner@sha256:{}", "a".repeat(64)),
        format!("registry.example/tenantci@sha256:{}", "b".repeat(64)),
    );
    x.runner_command = RunnerCommand::GiteaRunner;
    x.resources = Resources::for_node(&node);
    x.resources.check_fits(&node).unwrap();
    x.node_selector = BTreeMap::from([("socialweb.computer/pool".into(), "ci".into())]);
    x.tolerations = vec![Toleration {
        key: Some("socialweb.computer/rented".into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Default::default()
    }];
    x.runtime_class_name = Some("gvisor".into());
    ExecutorSpec {
        namespace: "dynamic-runner".into(),
        task_id: TaskId::new(4242),
        attempt: 1,
        assignment_id: "task-4242-attempt-1".into(),
        capability: "CAPABILITY-PLACEHOLDER".into(),
        facade_url: "https://10.0.0.1:8443".into(),
        facade_ca_pem: "-----BEGIN CERTIFICATE-----\nFACADE-CA\n-----END CERTIFICATE-----\n".into(),
        gitea: tenantci_dispatch::task::spec::GiteaForExecutors {
            url: "https://gitea.example".into(),
            ca_pem: None,
        },
        labels: vec!["self-hosted".into(), "pod".into()],
        runner_name: "tenantci-dispatch-ci".into(),
        executor: x,
        identity: None,
        class: None,
        // A grant as `cache::grant::mint` spells it (task, attempt, expiry, base64url of the
        // repository and refs, a runtime token's digest, HMAC hex): the runner config shows
        // the shared cache's URL.
        cache_grant: Some(format!(
            "4242.1.1796400000.c2ltL2RlbW8KcmVmcy9oZWFkcy9tYWluCnJlZnMvaGVhZHMvbWFpbg.{}.{}",
            "1".repeat(32),
            "0".repeat(64)
        )),
    }
}

#[test]
fn dispatch_golden_executor_pod() {
    let pod = manifest::desired_pod(&spec());
    assert_golden("executor-pod.yaml", &serde_yaml::to_string(&pod).unwrap());
}

#[test]
fn dispatch_golden_executor_secret() {
    let secret = manifest::desired_secret(&spec(), b"SEALED-ASSIGNMENT");
    // Decoded, so the golden file shows what the runner and the proxy read.
    let mut v = serde_json::to_value(&secret).unwrap();
    let data: BTreeMap<String, Value> = secret
        .data
        .unwrap()
        .into_iter()
        .map(|(k, b)| (k, json!(String::from_utf8(b.0).unwrap())))
        .collect();
    v["data"] = json!(data);
    assert_golden(
        "executor-secret.decoded.yaml",
        &serde_yaml::to_string(&v).unwrap(),
    );
}

/// The per-task SPIRE entry with the default `[identity]` keys: its `className` is the
/// hardened chart's class, which otherwise ignores it.
#[test]
fn dispatch_golden_cluster_static_entry() {
    use tenantci_dispatch::identity::{entries, settings};
    let identity = settings::Identity {
        trust_domain: "example.org".into(),
        id_template: settings::defaults::id_template(),
        parent_template: settings::defaults::parent_template(),
        cluster: Some("ci".into()),
        facade_id: settings::defaults::facade_id("example.org", "dynamic-runner"),
        source: settings::defaults::source(),
        server_address: None,
        server_id: None,
        class_name: settings::defaults::class_name(),
    };
    let pod = entries::ScheduledPod {
        task: TaskId::new(4242),
        pod_name: "gitea-task-4242".into(),
        pod_uid: "0f0e0d0c-0b0a-4909-8807-060504030201".into(),
        node_name: "node-a".into(),
        spiffe_id: "spiffe://example.org/gitea/acme/widget/build".into(),
    };
    let entry = entries::desired(
        &identity.parse().unwrap(),
        "dynamic-runner",
        &pod,
        "a1b2c3d4-0000-4000-8000-000000000001",
    )
    .unwrap();
    assert_golden(
        "cluster-static-entry.yaml",
        &serde_yaml::to_string(&entry).unwrap(),
    );
}
