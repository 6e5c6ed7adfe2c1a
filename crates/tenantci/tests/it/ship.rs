//! What ships beside the binary, checked with the tools operators use: kustomize (kubectl's)
//! against the simulator, bash on the completions, promtool on the alert rules. (The systemd
//! units and scripts/install.sh: `packaging`; the image: scripts/check-image.sh.)

use std::process::Command;

use serde::Deserialize as _;
use serde_yaml::Value;

use crate::util::{
    assert_exit, promtool_test_rules, repo_file, run, scratch, stderr, stdout, tenantci,
};
use tenantci_testkit::kube::Kubectl;
use tenantci_testkit::sim::SimProcess;

pub(crate) fn kustomize(dir: &str) -> Vec<Value> {
    let o = Command::new("kubectl")
        .arg("kustomize")
        .arg(repo_file(dir))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .collect()
}

/// Every overlay under manifests/overlays, as a repository path.
pub(crate) fn overlays() -> Vec<String> {
    std::fs::read_dir(repo_file("manifests/overlays"))
        .unwrap()
        .map(|e| {
            format!(
                "manifests/overlays/{}",
                e.unwrap().file_name().to_string_lossy()
            )
        })
        .collect()
}

pub(crate) fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

#[test]
fn the_dispatch_kustomization_renders_and_applies_to_the_simulator() {
    let objects = kustomize("manifests/dispatch");
    let deployment = of_kind(&objects, "Deployment")[0];
    let image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap();
    assert!(image.contains("@sha256:"), "pinned by digest: {image}");
    for o in &objects {
        assert_eq!(
            o["metadata"]["labels"]["app.kubernetes.io/part-of"],
            "tenantci"
        );
    }

    let dir = scratch();
    let sim = SimProcess::start(tenantci(), &dir.path().join("state"), &["ci"], &[]);
    let kubectl = Kubectl::new(&sim.tenant_admin("ci"), dir.path());
    let docs: Vec<String> = objects
        .iter()
        .map(|o| serde_yaml::to_string(o).unwrap())
        .collect();
    let o = kubectl.run_stdin(&["apply", "--server-side", "-f", "-"], &docs.join("---\n"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = kubectl.run(&[
        "-n",
        "tenantci-system",
        "get",
        "deployment/tenantci-dispatcher",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), image);
    the_base_s_service_account_may_act_only_where_run_does(&kubectl);
}

/// Where each object of the base is: the dispatcher's own in `tenantci-system`, the Role on
/// the executors' namespace (and its binding) in `dynamic-runner`.
#[test]
fn the_dispatch_kustomization_puts_the_dispatcher_in_a_namespace_of_its_own() {
    let objects = kustomize("manifests/dispatch");
    let mut placed: Vec<(String, String, String)> = objects
        .iter()
        .map(|o| {
            let f = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                f(&o["kind"]),
                f(&o["metadata"]["name"]),
                f(&o["metadata"]["namespace"]),
            )
        })
        .collect();
    placed.sort();
    let own = "tenantci-system";
    let jobs = "dynamic-runner";
    let name = "tenantci-dispatcher";
    let leader = "tenantci-dispatcher-leader";
    let reader = "tenantci-status-reader";
    let want = [
        ("Deployment", name, own),
        ("Namespace", jobs, ""),
        ("Namespace", own, ""),
        ("PodDisruptionBudget", name, own),
        ("Role", name, jobs),
        ("Role", leader, own),
        ("Role", reader, own),
        ("RoleBinding", name, jobs),
        ("RoleBinding", leader, own),
        ("RoleBinding", "tenantci-status-readers", own),
        ("Service", "tenantci-dispatcher-facade", own),
        ("ServiceAccount", name, own),
    ];
    let want: Vec<(String, String, String)> = want
        .iter()
        .map(|(k, n, ns)| (k.to_string(), n.to_string(), ns.to_string()))
        .collect();
    assert_eq!(placed, want);
    // The dispatcher's bindings name the ServiceAccount where it is; the status readers'
    // (a Group, people) is granted only in the dispatcher's namespace, never the executors'.
    for b in of_kind(&objects, "RoleBinding") {
        if b["roleRef"]["name"] == reader {
            assert_eq!(b["subjects"][0]["kind"], "Group", "{b:?}");
            assert_eq!(b["metadata"]["namespace"], own, "{b:?}");
            continue;
        }
        assert_eq!(b["subjects"][0]["kind"], "ServiceAccount");
        assert_eq!(b["subjects"][0]["namespace"], own, "{b:?}");
    }
}

/// `kubectl auth can-i` as the base's ServiceAccount: what `run` does, where it does it, and
/// nothing in any other namespace (its own included, but for the Lease).
fn the_base_s_service_account_may_act_only_where_run_does(kubectl: &Kubectl) {
    let sa = "system:serviceaccount:tenantci-system:tenantci-dispatcher";
    for (args, allowed) in [
        (["create", "pods", "-n", "dynamic-runner"], true),
        (["delete", "secrets", "-n", "dynamic-runner"], true),
        (["update", "leases", "-n", "tenantci-system"], true),
        (["update", "leases", "-n", "dynamic-runner"], false),
        (["create", "pods", "-n", "tenantci-system"], false),
        (["get", "secrets", "-n", "tenantci-system"], false),
        (["create", "pods", "-n", "default"], false),
        (["get", "secrets", "-n", "kube-system"], false),
    ] {
        let mut a = vec!["auth", "can-i"];
        a.extend(args);
        a.extend(["--as", sa]);
        let o = kubectl.run(&a);
        assert_eq!(o.status.success(), allowed, "{args:?}");
    }
}

/// The network-policy component: default deny in both namespaces; executors may reach the
/// dispatcher's Pods in its namespace on the facade port only, and the dispatcher takes the
/// facade only from executor Pods of the executors' namespace.
#[test]
fn the_network_policy_lets_executors_reach_only_the_facade_across_namespaces() {
    let objects = kustomize("manifests/overlays/locked-down");
    let policies = of_kind(&objects, "NetworkPolicy");
    let named = |name: &str, ns: &str| -> &Value {
        policies
            .iter()
            .find(|p| p["metadata"]["name"] == name && p["metadata"]["namespace"] == ns)
            .unwrap_or_else(|| panic!("NetworkPolicy {ns}/{name}"))
    };
    for ns in ["dynamic-runner", "tenantci-system"] {
        let deny = named("default-deny", ns);
        assert_eq!(
            deny["spec"]["podSelector"],
            serde_yaml::from_str::<Value>("{}").unwrap()
        );
    }
    let executor = named("gitea-executor", "dynamic-runner");
    let to_facade = &executor["spec"]["egress"][0];
    let peer = &to_facade["to"][0];
    assert_eq!(
        peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "tenantci-system"
    );
    assert_eq!(
        peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "tenantci-dispatcher"
    );
    assert_eq!(to_facade["to"].as_sequence().unwrap().len(), 1);
    assert_eq!(to_facade["ports"].as_sequence().unwrap().len(), 1);
    assert_eq!(to_facade["ports"][0]["port"], 8443);
    let dispatcher = named("tenantci-dispatcher", "tenantci-system");
    let from_executors = &dispatcher["spec"]["ingress"][0];
    let peer = &from_executors["from"][0];
    assert_eq!(
        peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "dynamic-runner"
    );
    assert_eq!(
        peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
        "gitea-executor"
    );
    assert_eq!(from_executors["ports"][0]["port"], 8443);
    assert_eq!(from_executors["ports"].as_sequence().unwrap().len(), 1);
}

#[test]
fn the_openbao_overlay_renders_an_external_secret_and_a_generated_config() {
    let objects = kustomize("manifests/overlays/openbao");
    let secret = of_kind(&objects, "ExternalSecret");
    assert_eq!(secret.len(), 1);
    let spec = &secret[0]["spec"];
    assert_eq!(spec["secretStoreRef"]["kind"], "ClusterSecretStore");
    assert_eq!(spec["secretStoreRef"]["name"], "openbao");
    assert_eq!(spec["target"]["name"], "tenantci-dispatcher");
    assert_eq!(secret[0]["apiVersion"], "external-secrets.io/v1");
    let store = of_kind(&objects, "ClusterSecretStore");
    assert_eq!(store.len(), 1, "the store the ExternalSecret names");
    assert_eq!(store[0]["apiVersion"], "external-secrets.io/v1");
    assert_eq!(store[0]["metadata"]["name"], "openbao");
    let mount = store[0]["spec"]["provider"]["vault"]["path"]
        .as_str()
        .unwrap();
    // The `bao kv put` line `dispatch init` prints writes where the data is read: every key of
    // one path, under the names the config uses.
    assert_eq!(mount, tenantci_dispatch::init::in_cluster::BAO_MOUNT);
    let extract = &spec["dataFrom"][0]["extract"]["key"];
    assert_eq!(extract.as_str(), Some("dynamic-runner/dispatcher"));
    assert!(
        spec["data"].is_null(),
        "no fixed list of keys: optional ones come too"
    );
    let config = of_kind(&objects, "ConfigMap")[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        config.starts_with("tenantci-dispatcher-config-"),
        "{config}"
    );
    let deployment = serde_yaml::to_string(of_kind(&objects, "Deployment")[0]).unwrap();
    assert!(
        deployment.contains(&config),
        "the Deployment mounts the generated ConfigMap"
    );
    // The example config loads with this build's schema.
    tenantci_dispatch::config::Config::load(&repo_file("manifests/overlays/openbao/config.toml"))
        .unwrap();
}

#[test]
fn the_spire_overlay_adds_the_identity_rbac_and_the_dispatcher_s_svid() {
    let objects = kustomize("manifests/overlays/spire");
    let role = of_kind(&objects, "ClusterRole");
    assert_eq!(role.len(), 1);
    // The same ClusterRole `dispatch init` applies (the file is embedded there).
    let embedded =
        tenantci_dispatch::init::manifests::rbac_identity("dynamic-runner", "tenantci-system");
    let rendered: k8s_openapi::api::rbac::v1::ClusterRole =
        serde_yaml::from_value(role[0].clone()).unwrap();
    assert_eq!(rendered.metadata.name, embedded.role.metadata.name);
    assert_eq!(rendered.rules, embedded.role.rules);
    assert_eq!(of_kind(&objects, "ClusterRoleBinding").len(), 1);
    let id = of_kind(&objects, "ClusterSPIFFEID");
    assert_eq!(id.len(), 1);
    assert_eq!(
        id[0]["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "tenantci-dispatcher"
    );
    assert_eq!(
        id[0]["spec"]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "tenantci-system",
        "the dispatcher's namespace, whose name its SPIFFE ID carries"
    );
    let deployment = of_kind(&objects, "Deployment")[0];
    let pod = &deployment["spec"]["template"]["spec"];
    let csi = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "spiffe-workload-api")
        .expect("the Workload API volume");
    assert_eq!(csi["csi"]["driver"], "csi.spiffe.io");
    let container = &pod["containers"][0];
    assert!(
        container["env"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "SPIFFE_ENDPOINT_SOCKET"),
        "{container:?}"
    );
    // The base's mounts are kept by the patch.
    let mounts: Vec<&str> = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    for m in ["config", "tmp", "spiffe-workload-api"] {
        assert!(mounts.contains(&m), "{m} in {mounts:?}");
    }
}

/// The base is namespaced only; the warm-pool component adds the one cluster-scoped read,
/// the same ClusterRole and binding `dispatch init` applies with a warm pool (the file is
/// embedded there), and nothing else.
#[test]
fn the_warm_pool_component_adds_the_pause_read_and_the_base_nothing_cluster_scoped() {
    let base = kustomize("manifests/dispatch");
    for kind in ["ClusterRole", "ClusterRoleBinding"] {
        assert!(of_kind(&base, kind).is_empty(), "the base has no {kind}");
    }
    let objects = kustomize("manifests/overlays/warm-pool");
    assert_eq!(objects.len(), base.len() + 2, "the base and the two");
    let embedded =
        tenantci_dispatch::init::manifests::rbac_pause("dynamic-runner", "tenantci-system");
    let role = of_kind(&objects, "ClusterRole");
    assert_eq!(role.len(), 1);
    let rendered: k8s_openapi::api::rbac::v1::ClusterRole =
        serde_yaml::from_value(role[0].clone()).unwrap();
    assert_eq!(rendered.metadata.name, embedded.role.metadata.name);
    assert_eq!(rendered.rules, embedded.role.rules);
    let binding = of_kind(&objects, "ClusterRoleBinding");
    assert_eq!(binding.len(), 1);
    let rendered: k8s_openapi::api::rbac::v1::ClusterRoleBinding =
        serde_yaml::from_value(binding[0].clone()).unwrap();
    assert_eq!(rendered.role_ref, embedded.binding.role_ref);
    // kustomize's namespace transformer also stamps the User subject (which has none, and
    // the apiserver ignores it there): compare what names the subject.
    let who = |b: &k8s_openapi::api::rbac::v1::ClusterRoleBinding| -> Vec<(String, String, Option<String>)> {
        b.subjects
            .iter()
            .flatten()
            .map(|s| {
                let ns = (s.kind == "ServiceAccount").then(|| s.namespace.clone()).flatten();
                (s.kind.clone(), s.name.clone(), ns)
            })
            .collect()
    };
    assert_eq!(who(&rendered), who(&embedded.binding));
}

/// The monitoring component: the metrics listener turned on (with its opt-in) and named, a
/// Service and ServiceMonitor that select it, and the promtool-tested rules as a
/// PrometheusRule.
#[test]
fn the_monitoring_component_scrapes_the_metrics_listener_and_carries_the_tested_rules() {
    let objects = kustomize("manifests/overlays/monitoring");
    let deployment = of_kind(&objects, "Deployment")[0];
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let env: std::collections::BTreeMap<String, String> = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_string(),
                e["value"].as_str()?.to_string(),
            ))
        })
        .collect();
    // The config with the Deployment's environment loads: the opt-in is there.
    let cfg = tenantci_dispatch::config::Config::load_with_env(
        &repo_file("manifests/overlays/openbao/config.toml"),
        &|k| env.get(k).cloned(),
    )
    .unwrap();
    let listen = cfg.status.metrics_listen.expect("the metrics listener");
    assert!(listen.ip().is_unspecified() && cfg.status.expose_metrics);
    let ports: Vec<(&str, u64)> = container["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap(),
                p["containerPort"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(ports.contains(&("facade", 8443)), "{ports:?}");
    assert!(
        ports.contains(&("metrics", u64::from(listen.port()))),
        "{ports:?}"
    );
    let service = of_kind(&objects, "Service")
        .into_iter()
        .find(|s| s["metadata"]["name"] == "tenantci-dispatcher-metrics")
        .expect("the metrics Service");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "metrics");
    let monitor = of_kind(&objects, "ServiceMonitor")[0];
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .unwrap()
    {
        assert_eq!(
            &service["metadata"]["labels"][k], v,
            "the ServiceMonitor selects the Service"
        );
    }
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    let rules = of_kind(&objects, "PrometheusRule")[0];
    let tested: Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo_file("manifests/monitoring/alerts.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        rules["spec"]["groups"], tested["groups"],
        "components/monitoring/prometheusrule.yaml holds alerts.yaml's groups"
    );
}

/// Every kustomization renders with kubectl's kustomize; the base, the locked-down overlay
/// (built-in kinds only: the webhook and network-policy components), the cache overlay (a
/// PersistentVolumeClaim) and the warm-pool overlay (a ClusterRole and binding) pass `kubectl apply
/// --dry-run=server` at the simulator, which validates them against its OpenAPI (fields
/// strictly) and stores nothing. The overlays with CRDs (External Secrets, SPIRE, Prometheus
/// Operator) are rendered only here: the simulator serves none of those CRDs (`crd_schemas`
/// checks their objects against the CRDs' published schemas).
#[test]
fn every_kustomization_renders_and_the_built_in_ones_pass_a_server_dry_run() {
    let overlays = overlays();
    assert!(overlays.len() >= 5, "{overlays:?}");
    for dir in &overlays {
        let objects = kustomize(dir);
        let deployment = of_kind(&objects, "Deployment")[0];
        let pod: k8s_openapi::api::core::v1::PodSpec =
            serde_yaml::from_value(deployment["spec"]["template"]["spec"].clone()).unwrap();
        assert_eq!(
            tenantci_core::pod_security::restricted(&pod),
            Vec::<String>::new(),
            "{dir}: the dispatcher passes Pod Security `restricted`"
        );
    }
    let dir = scratch();
    let sim = SimProcess::start(tenantci(), &dir.path().join("state"), &["ci"], &[]);
    let kubectl = Kubectl::new(&sim.tenant_admin("ci"), dir.path());
    // The namespaces exist, as they do after `dispatch init`; the rest is only validated.
    for ns in ["dynamic-runner", "tenantci-system"] {
        assert!(kubectl.run(&["create", "namespace", ns]).status.success());
    }
    for dir in [
        "manifests/dispatch",
        "manifests/overlays/locked-down",
        "manifests/overlays/cache",
        "manifests/overlays/warm-pool",
    ] {
        let objects = kustomize(dir);
        let docs: Vec<String> = objects
            .iter()
            .map(|o| serde_yaml::to_string(o).unwrap())
            .collect();
        let o = kubectl.run_stdin(
            &[
                "apply",
                "--server-side",
                "--dry-run=server",
                "--validate=strict",
                "-f",
                "-",
            ],
            &docs.join("---\n"),
        );
        assert!(
            o.status.success(),
            "{dir}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("(server dry run)"), "{out}");
        if dir.ends_with("locked-down") {
            for kind in [
                "networkpolicy.networking.k8s.io/gitea-executor",
                "service/tenantci-dispatcher-webhook",
                "poddisruptionbudget.policy/tenantci-dispatcher",
            ] {
                assert!(out.contains(kind), "{kind} in {out}");
            }
        }
        if dir.ends_with("warm-pool") {
            let role =
                "clusterrole.rbac.authorization.k8s.io/tenantci-dispatcher-pause:dynamic-runner";
            assert!(out.contains(role), "{role} in {out}");
        }
    }
    let o = kubectl.run(&[
        "-n",
        "tenantci-system",
        "get",
        "deployment/tenantci-dispatcher",
    ]);
    assert!(!o.status.success(), "a dry run stores nothing");
}

#[test]
fn bash_completions_parse() {
    let o = run(tenantci().args(["completions", "bash"]));
    assert_exit(&o, 0);
    let dir = scratch();
    let file = dir.path().join("tenantci.bash");
    std::fs::write(&file, &o.stdout).unwrap();
    let check = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(stdout(&o).contains("runner__check") || stdout(&o).contains("check"));
}

#[test]
fn the_dashboard_plots_every_metric_the_alerts_use() {
    let dir = repo_file("manifests/monitoring");
    let dashboard = std::fs::read_to_string(dir.join("dashboard.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&dashboard).unwrap();
    let alerts = std::fs::read_to_string(dir.join("alerts.yaml")).unwrap();
    let metrics: std::collections::BTreeSet<&str> = alerts
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("tenantci_dispatch_"))
        .collect();
    assert!(metrics.len() >= 5, "{metrics:?}");
    for m in metrics {
        assert!(dashboard.contains(m), "the dashboard does not plot {m}");
    }
}

#[test]
fn alert_rules_pass_promtool() {
    let tests = [
        "alerts.test.yaml",
        "runner-credential-alerts.test.yaml",
        "front-alerts.test.yaml",
    ]
    .map(std::path::Path::new);
    let Some(o) = promtool_test_rules(&repo_file("manifests/monitoring"), &tests) else {
        return;
    };
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
}

/// A copy of the workspace's manifests and lock, each crate's source a stub: what
/// `cargo tree` (and so scripts/check-layering.sh) reads.
fn manifests_copy() -> tempfile::TempDir {
    let dir = scratch();
    let root = repo_file("");
    for file in [
        "Cargo.toml",
        "Cargo.lock",
        "scripts/check-layering.sh",
        "scripts/lib/module_layers.py",
        "scripts/lib/backend_named.py",
        "scripts/lib/rust_source.py",
        "crates/tenantci-dispatch/layers.txt",
        "crates/tenantci-sim/layers.txt",
        "docs/architecture.md",
    ] {
        let to = dir.path().join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(root.join(file), to).unwrap();
    }
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let krate = entry.unwrap().path();
        let to = dir.path().join("crates").join(krate.file_name().unwrap());
        std::fs::create_dir_all(to.join("src")).unwrap();
        std::fs::copy(krate.join("Cargo.toml"), to.join("Cargo.toml")).unwrap();
        std::fs::write(to.join("src/lib.rs"), "").unwrap();
        std::fs::write(to.join("src/main.rs"), "fn main() {}").unwrap();
    }
    dir
}

fn check_layering(dir: &std::path::Path, lock: &str) -> std::process::Output {
    run(&mut layering_command(dir, lock))
}

fn layering_command(dir: &std::path::Path, lock: &str) -> Command {
    let mut command = Command::new("bash");
    command
        .arg("scripts/check-layering.sh")
        .current_dir(dir)
        .env("LAYERING_LOCK", lock)
        .env("CARGO_NET_OFFLINE", "true");
    command
}

/// The layering check passes on the workspace as it is, and fails, naming the crate and
/// the dependency, when tenantci-runner takes async-nats (the queue is tenantci-dispatch's) or
/// tenantci-sim takes tenantci-dispatch, and when a forbidden crypto provider is linked.
#[test]
fn the_layering_check_fails_when_a_crate_breaks_its_rule() {
    let as_is = manifests_copy();
    assert_exit(&check_layering(as_is.path(), "--locked"), 0);
    for (krate, dependency) in [
        ("tenantci-runner", "async-nats"),
        ("tenantci-sim", "tenantci-dispatch"),
    ] {
        let broken = manifests_copy();
        let manifest = broken.path().join("crates").join(krate).join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        let text = text.replacen(
            "[dependencies]\n",
            &format!("[dependencies]\n{dependency}.workspace = true\n"),
            1,
        );
        std::fs::write(&manifest, text).unwrap();
        let out = check_layering(broken.path(), "--offline");
        assert_exit(&out, 1);
        let err = stderr(&out);
        assert!(
            err.contains(&format!("layering: {krate} depends on {dependency}")),
            "{err}"
        );
    }
    // The crypto-provider rule looks at every edge (dev and build too): pointed at a crate the
    // workspace does link, it must find it.
    let out = run(
        layering_command(as_is.path(), "--locked").env("FORBIDDEN_PROVIDERS", "aws-lc-rs ring")
    );
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("layering: the workspace links ring, a second crypto provider")
            && !err.contains("aws-lc-rs,"),
        "{err}"
    );
}

/// A copy of `krate`'s sources beside the manifests: what the import rules read.
fn sources_copy(krate: &str) -> tempfile::TempDir {
    let dir = manifests_copy();
    let from = repo_file(&format!("crates/{krate}/src"));
    let to = dir.path().join(format!("crates/{krate}/src"));
    let status = Command::new("cp")
        .arg("-R")
        .arg(format!("{}/.", from.display()))
        .arg(&to)
        .status()
        .unwrap();
    assert!(status.success());
    dir
}

/// The module rules of tenantci-dispatch (crates/tenantci-dispatch/layers.txt): the sources as
/// they are pass; an import up a floor (the queue taking the facade), one across a floor (the
/// renewal taking init's code, inside a `use` group over several lines), a re-export at the
/// crate root (it would hide the floor) and two files importing each other each fail, naming
/// the file, the line and the import.
#[test]
fn the_layering_check_names_a_module_import_that_breaks_a_floor() {
    let as_is = sources_copy("tenantci-dispatch");
    assert_exit(&check_layering(as_is.path(), "--locked"), 0);
    let upward = "use crate::facade::handout::Handout;\n";
    for (file, import, expected) in [
        (
            "queue/producer.rs",
            upward,
            "queue/producer.rs:1: `queue` (floor 2) imports `facade` (floor 7), a higher floor: `use crate::facade::handout::Handout;`",
        ),
        (
            "renew/plan.rs",
            "use crate::{\n    config::Config,\n    init::plan::Inputs,\n};\n",
            "renew/plan.rs:1: `renew` imports `init` on its own floor (10)",
        ),
        (
            "lib.rs",
            "pub use run::Dispatcher;\n",
            "lib.rs:1: the crate root re-exports from `run`",
        ),
        (
            "task/recovery.rs",
            "use crate::task::registry::Registry;\n",
            "task/recovery.rs:1 -> task/registry.rs: `use crate::task::registry::Registry;`",
        ),
    ] {
        let broken = sources_copy("tenantci-dispatch");
        let path = broken
            .path()
            .join("crates/tenantci-dispatch/src")
            .join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{import}{text}")).unwrap();
        if file == "task/recovery.rs" {
            // The circle's other half: the registry takes recovery back.
            let registry = broken
                .path()
                .join("crates/tenantci-dispatch/src/task/registry.rs");
            let text = std::fs::read_to_string(&registry).unwrap();
            std::fs::write(
                &registry,
                format!("use crate::task::recovery::Recovery;\n{text}"),
            )
            .unwrap();
        }
        let out = check_layering(broken.path(), "--locked");
        assert_exit(&out, 1);
        let err = stderr(&out);
        assert!(err.contains(expected), "{file}: {err}");
    }
}

/// Nothing outside the dispatcher's `backend/` names a backend (docs/architecture.md, "A
/// third backend"): the sources as they are pass; a match on one backend's kind put back
/// outside `backend/` (as routing once matched `vm`), a kind constructed there, or the
/// test-only fake backend named there each fail, naming the file, the line and the fix. A
/// kind constructed inside a test module is test data and passes.
#[test]
fn the_layering_check_refuses_a_backend_named_outside_backend() {
    // The backend check alone (`scripts/lib/backend_named.py`, as check-layering.sh runs it):
    // the whole script on these sources is the module test's first case above.
    let check = |dir: &std::path::Path| {
        run(Command::new("python3")
            .arg("scripts/lib/backend_named.py")
            .args(["crates/tenantci-dispatch/src", "pod", "vm", "fake"])
            .current_dir(dir))
    };
    let as_is = sources_copy("tenantci-dispatch");
    assert_exit(&check(as_is.path()), 0);
    let src = as_is.path().join("crates/tenantci-dispatch/src");
    for (file, code, expected) in [
        (
            "claim/routing.rs",
            "pub fn is_vm(b: crate::backend_kind::BackendKind) -> bool {\n    b == crate::backend::vm::KIND\n}\n",
            "claim/routing.rs:2: `vm::KIND` is a backend's own constant outside backend/",
        ),
        (
            "view/explain.rs",
            "const POD: crate::backend_kind::BackendKind = crate::backend_kind::BackendKind::new(\"pod\");\n",
            "view/explain.rs:1: `BackendKind::new(` is a backend kind constructed outside backend/",
        ),
        (
            "config.rs",
            "use crate::backend::fake;\n",
            "config.rs:1: `backend::fake` is the test-only fake backend outside backend/",
        ),
    ] {
        let path = src.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{code}{text}")).unwrap();
        let out = check(as_is.path());
        assert_exit(&out, 1);
        let err = stderr(&out);
        assert!(err.contains(expected), "{file}: {err}");
        assert!(err.contains("ask backend::catalog"), "the fix: {err}");
        std::fs::write(&path, text).unwrap();
    }
    let path = src.join("claim/routing.rs");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        format!("{text}\n#[cfg(test)]\nmod kinds {{\n    const POD: crate::backend_kind::BackendKind = crate::backend_kind::BackendKind::new(\"pod\");\n}}\n"),
    )
    .unwrap();
    assert_exit(&check(as_is.path()), 0);
    // check-layering.sh runs it: the script names the check.
    let script = std::fs::read_to_string(repo_file("scripts/check-layering.sh")).unwrap();
    assert!(script.contains("scripts/lib/backend_named.py crates/tenantci-dispatch/src"));
}

/// The simulator reads certificate subjects, quantities and DNS names by its own code: its
/// sources as they are pass (and a mention in a comment or a string is no import), and a copy
/// that imports core's certificate reader, quantities or DNS names fails, naming the file, the
/// line, the import and docs/architecture.md, however the import is written (one path, a
/// group over several lines, a nested group, an alias of core's pki module, a path in code).
#[test]
fn the_layering_check_keeps_the_simulator_from_the_product_s_readers() {
    let as_is = sources_copy("tenantci-sim");
    let lib = as_is.path().join("crates/tenantci-sim/src/lib.rs");
    let text = std::fs::read_to_string(&lib).unwrap();
    let mention = "// not tenantci_core::dns\nconst _NOTE: &str = \"tenantci_core::quantity\";\n";
    std::fs::write(&lib, format!("{text}{mention}")).unwrap();
    assert_exit(&check_layering(as_is.path(), "--locked"), 0);
    for (file, import, expected) in [
        (
            "authn.rs",
            "use tenantci_core::pki::inspect::CertInfo;\n",
            "crates/tenantci-sim/src/authn.rs:1: `use tenantci_core::pki::inspect::CertInfo;` reaches tenantci_core::pki::inspect",
        ),
        (
            "nodes.rs",
            "use tenantci_core::{\n    Error,\n    quantity::{self, Milli},\n};\n",
            "crates/tenantci-sim/src/nodes.rs:1: `use tenantci_core::{ Error, quantity::{self, Milli}, };` reaches tenantci_core::quantity",
        ),
        (
            "validate.rs",
            "use tenantci_core::pki::{CertificateAuthority, inspect};\n",
            "crates/tenantci-sim/src/validate.rs:1: `use tenantci_core::pki::{CertificateAuthority, inspect};` reaches tenantci_core::pki::inspect",
        ),
        (
            "authz/impersonation.rs",
            "use tenantci_core::pki as p;\nfn _f() { let _ = p::inspect::CertInfo::from_der; }\n",
            "crates/tenantci-sim/src/authz/impersonation.rs:2: `p::inspect::CertInfo::from_der` reaches tenantci_core::pki::inspect",
        ),
        (
            "scheduler.rs",
            "fn _f() -> bool { tenantci_core::dns::is_label(\"a\") }\n",
            "crates/tenantci-sim/src/scheduler.rs:1: `tenantci_core::dns::is_label` reaches tenantci_core::dns",
        ),
    ] {
        let broken = sources_copy("tenantci-sim");
        let path = broken.path().join("crates/tenantci-sim/src").join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{import}{text}")).unwrap();
        let out = check_layering(broken.path(), "--locked");
        assert_exit(&out, 1);
        let err = stderr(&out);
        assert!(
            err.contains(expected) && err.contains("docs/architecture.md"),
            "{file}: {err}"
        );
    }
}

/// scripts/test.sh lints while it builds (scripts/lib/clippy.sh) through clippy-driver's
/// CLIPPY_ARGS, an interface of cargo-clippy's: a crate with a clippy lint must fail that
/// build, and the same crate without it must pass, or the suite would lint nothing.
#[test]
fn clippy_while_building_fails_the_build_on_a_lint() {
    let dir = scratch();
    let krate = dir.path().join("linted");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    std::fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"linted\"\nversion = \"0.1.0\"\nedition = \"2024\"\n[workspace]\n",
    )
    .unwrap();
    let script = repo_file("scripts/lib/clippy.sh");
    let build = |source: &str| {
        std::fs::write(krate.join("src/lib.rs"), source).unwrap();
        run(Command::new("bash")
            .arg("-c")
            .arg(format!(
                ". '{}' && clippy_while_building && cargo build --offline --quiet",
                script.display()
            ))
            .current_dir(&krate)
            .env("CARGO_TARGET_DIR", dir.path().join("target"))
            .env_remove("RUSTC_WORKSPACE_WRAPPER")
            .env_remove("CLIPPY_ARGS"))
    };
    let out = build("pub fn len(v: &Vec<u8>) -> usize {\n    v.len()\n}\n");
    assert!(!out.status.success(), "a clippy lint passed the build");
    assert!(stderr(&out).contains("clippy::ptr_arg"), "{}", stderr(&out));
    let out = build("pub fn len(v: &[u8]) -> usize {\n    v.len()\n}\n");
    assert_exit(&out, 0);
}
