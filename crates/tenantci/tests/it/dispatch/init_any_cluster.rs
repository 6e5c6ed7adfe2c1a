//! `tenantci dispatch init --kubeconfig` (any cluster, no gateway state dir) with the real
//! binary against the simulator: the RBAC for the ServiceAccount, no minted credential, and
//! the refusals of a kubeconfig that cannot do what init needs. (A task end to end on this
//! path: `dispatch::run`'s `init_with_a_kubeconfig_and_no_state_dir_runs_a_task_as_the_service_account`.)

use tenantci_testkit::kube::Kubectl;
use tenantci_testkit::snapshot::ClusterSnapshot;

use super::init::{Setup, can_i, hand_back, outcomes, setup};
use crate::util::{assert_exit, run, stderr, stdout, tenantci};

/// The dispatcher's ServiceAccount, in its own namespace (`--kubeconfig`'s default).
const SA: &str = "system:serviceaccount:tenantci-system:tenantci-dispatcher";

impl Setup {
    /// `init` on the `--kubeconfig` path: no `--state-dir`, no `--cluster`.
    fn init_kubeconfig(&self, out: &str, kubeconfig: &str) -> std::process::Output {
        self.init(
            out,
            &[
                ("--state-dir", None),
                ("--cluster", None),
                ("--kubeconfig", Some(kubeconfig)),
            ],
            &[],
        )
    }

    /// A kubeconfig for a user of the cluster that no binding names.
    fn nobody_kubeconfig(&self) -> String {
        self.user_kubeconfig("nobody")
    }

    /// A kubeconfig for the user `name` (group `<name>s`), bound to nothing yet.
    fn user_kubeconfig(&self, name: &str) -> String {
        let dir = self.root.join(format!("{name}-credential"));
        let o = run(tenantci()
            .args(["credential", "mint", "--state-dir"])
            .arg(self.root.join("state"))
            .args(["--cluster", "ci", "--server", &self.sim.cluster_url("ci")])
            .args(["--common-name", name, "--organization", &format!("{name}s")])
            .arg("--out-dir")
            .arg(&dir));
        assert_exit(&o, 0);
        dir.join("kubeconfig").display().to_string()
    }
}

#[test]
fn init_with_a_kubeconfig_binds_the_service_account_and_mints_nothing() {
    let s = setup();
    let admin = s.sim.tenant_admin("ci").display().to_string();
    let o = s.init_kubeconfig("d", &admin);
    assert_exit(&o, 0);
    let hb = hand_back(&o);
    assert_eq!(hb["cluster"], "ci", "the kubeconfig's cluster name");
    assert_eq!(hb["files"]["kubeconfig"], serde_json::Value::Null);
    let steps = outcomes(&hb);
    assert!(
        steps.contains(&("credential".into(), "skipped".into())),
        "{steps:?}"
    );
    let verify = hb["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "verify")
        .unwrap();
    assert!(
        verify["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("SubjectAccessReviews as {SA}")),
        "{verify}"
    );
    let dir = s.out("d").parent().unwrap().to_path_buf();
    assert!(!dir.join("kube").exists(), "no credential minted");
    let config = std::fs::read_to_string(s.out("d")).unwrap();
    assert!(
        !config.contains("kubeconfig"),
        "in-cluster config: {config}"
    );
    assert_eq!(s.runners().len(), 1, "registered once");
    assert!(
        config.contains("dispatcher_namespace = \"tenantci-system\""),
        "{config}"
    );
    assert_eq!(hb["namespace"], "dynamic-runner");
    assert_eq!(hb["dispatcherNamespace"], "tenantci-system");
    // Two namespaces, the executors' Role bound across to the ServiceAccount in the other.
    let k = s.admin();
    for ns in ["dynamic-runner", "tenantci-system"] {
        assert!(k.run(&["get", "namespace", ns]).status.success(), "{ns}");
    }
    let o = k.run(&[
        "-n",
        "dynamic-runner",
        "get",
        "rolebinding",
        "tenantci-dispatcher",
        "-o",
        "jsonpath={.roleRef.name} {range .subjects[*]}{.kind}/{.name}/{.namespace} {end}",
    ]);
    assert_eq!(
        stdout(&o).trim(),
        "tenantci-dispatcher ServiceAccount/tenantci-dispatcher/tenantci-system User/tenantci-dispatcher/"
    );
    // The ServiceAccount may do what `run` does, where it does it, and nothing beyond: the
    // Lease in its own namespace, the executors' objects in theirs, nothing anywhere else.
    for (args, allowed) in [
        (vec!["create", "pods", "-n", "dynamic-runner"], true),
        (vec!["watch", "secrets", "-n", "dynamic-runner"], true),
        (
            vec!["patch", "deployments.apps", "-n", "dynamic-runner"],
            true,
        ),
        (vec!["update", "leases", "-n", "tenantci-system"], true),
        (vec!["create", "leases", "-n", "tenantci-system"], true),
        (vec!["create", "leases", "-n", "dynamic-runner"], false),
        (vec!["create", "pods", "-n", "tenantci-system"], false),
        (vec!["get", "secrets", "-n", "tenantci-system"], false),
        (vec!["get", "configmaps", "-n", "tenantci-system"], false),
        (vec!["create", "pods", "-n", "default"], false),
        (vec!["get", "leases", "-n", "default"], false),
        (vec!["get", "secrets", "-n", "kube-system"], false),
        (vec!["list", "secrets", "--all-namespaces"], false),
    ] {
        let mut a = args.clone();
        a.extend(["--as", SA]);
        assert_eq!(can_i(&k, &a).0, allowed, "{args:?}");
    }
    // A re-run changes nothing.
    let again = s.init_kubeconfig("d", &admin);
    assert_exit(&again, 0);
    let steps = outcomes(&hand_back(&again));
    assert!(
        steps.contains(&("rbac".into(), "unchanged".into())),
        "{steps:?}"
    );
    assert_eq!(s.runners().len(), 1, "the registration is kept");
}

/// A kubeconfig without the access init needs, a kubeconfig whose apiserver does not answer,
/// and both ways of naming the cluster at once: one sentence, nothing written, applied or
/// registered.
#[test]
fn init_refuses_a_kubeconfig_without_access_writing_applying_and_registering_nothing() {
    let s = setup();
    let kubectl = s.admin();
    let cluster = ClusterSnapshot::take(&kubectl);
    let nobody = s.nobody_kubeconfig();
    let o = s.init_kubeconfig("nobody", &nobody);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(
        err.contains(&format!("the kubeconfig `{nobody}` may not get namespaces")),
        "{err}"
    );
    assert!(err.contains("cluster administrator"), "{err}");
    // An apiserver that does not answer: exit 3, nothing written.
    let dead = s.root.join("dead.kubeconfig");
    let text = std::fs::read_to_string(s.sim.tenant_admin("ci")).unwrap();
    let url = s.sim.cluster_url("ci");
    std::fs::write(&dead, text.replace(&url, "https://127.0.0.1:9")).unwrap();
    let o = s.init_kubeconfig("dead", dead.to_str().unwrap());
    assert_exit(&o, 3);
    assert!(
        stderr(&o).contains("cannot reach the apiserver at https://127.0.0.1:9"),
        "{}",
        stderr(&o)
    );
    // Both paths at once.
    let admin = s.sim.tenant_admin("ci").display().to_string();
    let o = s.init("both", &[("--kubeconfig", Some(&admin))], &[]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("--kubeconfig and --state-dir"),
        "{}",
        stderr(&o)
    );
    // The facade Service named in the executors' namespace while the dispatcher (and the
    // Service) are in their own; a dispatcher namespace that is no DNS label.
    fn in_cluster<'a>(
        admin: &'a str,
        extra: &[(&'a str, Option<&'a str>)],
    ) -> Vec<(&'a str, Option<&'a str>)> {
        let mut edits = vec![
            ("--state-dir", None),
            ("--cluster", None),
            ("--kubeconfig", Some(admin)),
            ("--facade-listen", Some("0.0.0.0:8443")),
        ];
        edits.extend_from_slice(extra);
        edits
    }
    let old_url = "https://tenantci-dispatcher-facade.dynamic-runner.svc:8443";
    let o = s.init(
        "facade",
        &in_cluster(&admin, &[("--facade-url", Some(old_url))]),
        &[],
    );
    assert_exit(&o, 2);
    let err = stderr(&o);
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one sentence: {err}");
    assert!(
        errors[0].contains("names the Service tenantci-dispatcher-facade in namespace `dynamic-runner`, but the dispatcher and its facade Service are in `tenantci-system`"),
        "{err}"
    );
    assert!(
        err.contains("https://tenantci-dispatcher-facade.tenantci-system.svc:8443"),
        "the fix: {err}"
    );
    let o = s.init(
        "bad-ns",
        &in_cluster(
            &admin,
            &[("--dispatcher-namespace", Some("Tenantci_System"))],
        ),
        &[],
    );
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("--dispatcher-namespace `Tenantci_System` is not a DNS label"),
        "{}",
        stderr(&o)
    );
    for name in ["nobody", "dead", "both", "facade", "bad-ns"] {
        assert!(!s.root.join(name).exists(), "{name}: nothing written");
    }
    assert!(s.runners().is_empty(), "nothing registered");
    assert!(!s.namespace_exists(), "nothing applied");
    assert_eq!(
        ClusterSnapshot::take(&kubectl),
        cluster,
        "no object written"
    );
}

/// A namespace administrator (not cluster admin), as a platform team hands one out: every
/// verb on every resource in the namespaces `dynamic-runner` and `tenantci-system` (a
/// RoleBinding in each), and cluster-wide
/// only what every `dispatch init --kubeconfig` needs (the Namespace object, whose Pod
/// Security labels init applies, and SubjectAccessReviews for the `verify` step). No
/// ClusterRole, no PriorityClass.
const NAMESPACE_ADMIN: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: dynamic-runner
---
apiVersion: v1
kind: Namespace
metadata:
  name: tenantci-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: test-namespace-admin
rules:
  - apiGroups: ["*"]
    resources: ["*"]
    verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: test-namespace-admin
  namespace: dynamic-runner
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: test-namespace-admin
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: User
    name: ns-admin
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: test-namespace-admin
  namespace: tenantci-system
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: test-namespace-admin
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: User
    name: ns-admin
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: test-namespace-provisioner
rules:
  - apiGroups: [""]
    resources: ["namespaces"]
    verbs: ["get", "create", "patch"]
  - apiGroups: ["authorization.k8s.io"]
    resources: ["subjectaccessreviews"]
    verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: test-namespace-provisioner
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: test-namespace-provisioner
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: User
    name: ns-admin
"#;

/// The names of the cluster's ClusterRoles, read with kube as the tenant admin.
fn cluster_roles(s: &Setup) -> Vec<String> {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = tenantci_core::kube_client::from_kubeconfig(&s.sim.tenant_admin("ci"))
            .await
            .unwrap();
        kube::Api::<ClusterRole>::all(client)
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|r| r.metadata.name)
            .collect()
    })
}

/// Issue 45's follow-up: the warm pools' PriorityClass read is cluster-scoped RBAC, needed
/// only with a warm pool. A namespace administrator's kubeconfig passes init without one (no
/// ClusterRole applied); once a class of the config has `[executor.class.warm]` the same
/// kubeconfig is refused in phase one (exit 2, one sentence naming the missing grant and why,
/// nothing written, applied or registered), and a cluster admin's re-run grants the read:
/// the ServiceAccount may then `get` that one class and nothing else of PriorityClasses.
#[test]
fn a_namespace_admin_passes_init_without_warm_pools_and_is_refused_with_them() {
    let s = setup();
    let k = s.admin();
    let o = k.run_stdin(&["apply", "-f", "-"], NAMESPACE_ADMIN);
    assert_exit(&o, 0);
    let ns_admin = s.user_kubeconfig("ns-admin");
    let before = cluster_roles(&s);
    let o = s.init_kubeconfig("d", &ns_admin);
    assert_exit(&o, 0);
    let steps = outcomes(&hand_back(&o));
    assert!(
        steps.iter().all(|(s, _)| s != "rbac-warm-pools"),
        "{steps:?}"
    );
    assert_eq!(cluster_roles(&s), before, "no ClusterRole applied");

    // A warm pool added to the config; the same kubeconfig may not grant its read.
    let mut config = tenantci_dispatch::config::Config::load(&s.out("d")).unwrap();
    let mut small =
        tenantci_dispatch::sizing::class::ExecutorClass::pod("small", "500m", "512Mi", 1);
    small.warm = Some(tenantci_dispatch::sizing::class::WarmPool {
        min: 1,
        max: 1,
        idle: std::time::Duration::from_secs(60).into(),
        window: std::time::Duration::from_secs(60).into(),
    });
    config.executor.classes = vec![small];
    std::fs::write(s.out("d"), config.to_toml()).unwrap();
    let dir = s.out("d").parent().unwrap().to_path_buf();
    let files = crate::util::snapshot(&dir);
    let cluster = ClusterSnapshot::take(&k);
    let o = s.init_kubeconfig("d", &ns_admin);
    assert_exit(&o, 2);
    let err = stderr(&o);
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one sentence: {err}");
    assert!(
        errors[0].contains(&format!(
            "the kubeconfig `{ns_admin}` may not get clusterroles.rbac.authorization.k8s.io in the cluster scope"
        )) && errors[0].contains("read the warm pools' PriorityClass `tenantci-pause`"),
        "{err}"
    );
    assert!(
        err.contains("tenantci-dispatcher-pause:dynamic-runner"),
        "the grant: {err}"
    );
    assert_eq!(crate::util::snapshot(&dir), files, "nothing written");
    assert_eq!(ClusterSnapshot::take(&k), cluster, "nothing applied");
    assert_eq!(s.runners().len(), 1, "registered once, by the first run");

    // A cluster admin's re-run applies the read, and only that read; its dry run only says so.
    let admin = s.sim.tenant_admin("ci").display().to_string();
    let path = [
        ("--state-dir", None),
        ("--cluster", None),
        ("--kubeconfig", Some(admin.as_str())),
    ];
    let o = s.init("d", &path, &["--dry-run"]);
    assert_exit(&o, 0);
    let steps = outcomes(&hand_back(&o));
    assert!(
        steps.contains(&("rbac-warm-pools".into(), "would apply".into())),
        "{steps:?}"
    );
    assert_eq!(
        ClusterSnapshot::take(&k),
        cluster,
        "a dry run applies nothing"
    );
    let o = s.init_kubeconfig("d", &admin);
    assert_exit(&o, 0);
    let steps = outcomes(&hand_back(&o));
    assert!(
        steps.contains(&("rbac-warm-pools".into(), "applied".into())),
        "{steps:?}"
    );
    let pause = "tenantci-dispatcher-pause:dynamic-runner".to_string();
    assert!(cluster_roles(&s).contains(&pause));
    let as_sa = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["--as", SA]);
        can_i(&k, &a).0
    };
    assert!(as_sa(&["get", "priorityclasses/tenantci-pause"]));
    assert!(!as_sa(&["get", "priorityclasses/other"]));
    assert!(!as_sa(&["list", "priorityclasses"]));
}

/// The flags of the in-cluster path: `--kubeconfig`, the facade on the Pod IP behind its
/// Service, a webhook and the VM backend (so every optional key of the Secret is there).
fn in_cluster_flags<'a>(
    admin: &'a str,
    webhook_secret: &'a str,
    opensandbox: &'a [String; 2],
) -> Vec<(&'a str, Option<&'a str>)> {
    vec![
        ("--state-dir", None),
        ("--cluster", None),
        ("--kubeconfig", Some(admin)),
        ("--facade-listen", Some("0.0.0.0:8443")),
        (
            "--facade-url",
            Some("https://tenantci-dispatcher-facade.tenantci-system.svc:8443"),
        ),
        ("--webhook-listen", Some("127.0.0.1:8090")),
        ("--webhook-secret-file", Some(webhook_secret)),
        ("--opensandbox-url", Some(&opensandbox[0])),
        ("--opensandbox-api-key-file", Some(&opensandbox[1])),
        ("--labels", Some("self-hosted,pod,vm")),
    ]
}

/// `kubectl apply -k manifests/overlays/<overlay>` at the simulator, then the Deployment as
/// the apiserver holds it, its volume materialized under `dir`.
fn apply_overlay(k: &Kubectl, overlay: &str, dir: &std::path::Path) -> super::mounted::Mounted {
    let path = crate::util::repo_file(&format!("manifests/overlays/{overlay}"));
    let o = k.run(&["apply", "-k", path.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "{overlay}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = k.run(&[
        "-n",
        "tenantci-system",
        "get",
        "deployment",
        "tenantci-dispatcher",
        "-o",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let deployment: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let m = super::mounted::mount(k, "tenantci-system", &deployment, dir);
    m.assert_every_file_resolves();
    m
}

/// Runbook §2's three commands against the simulator: `dispatch init --kubeconfig
/// --apply-secret` with no state dir, `kubectl apply -k` of an overlay (`locked-down`: the
/// base, the webhook and network policy; then `vm`, the base and the VM component), and the
/// Deployment as the apiserver holds it. Every key the Deployment's volume projects is in the
/// ConfigMap or Secret init applied, and every file the mounted config and the Deployment's
/// environment name is in that volume. `--secret-out` writes the same two objects, 0600, and
/// nothing printed holds a secret.
#[test]
fn init_applies_the_config_and_secret_in_the_shape_the_deployment_mounts() {
    let s = setup();
    let admin = s.sim.tenant_admin("ci").display().to_string();
    let webhook_secret = s.root.join("webhook-secret");
    tenantci_core::fsutil::write_new_atomic(&webhook_secret, b"hook-secret-value\n", 0o600)
        .unwrap();
    let sandbox = tenantci_testkit::opensandbox::OpenSandbox::from_state_dir(&s.root.join("state"));
    let opensandbox = [
        sandbox.url.clone(),
        sandbox.api_key_file.display().to_string(),
    ];
    let manifest = s.root.join("in-cluster.yaml");
    let mut flags = in_cluster_flags(&admin, webhook_secret.to_str().unwrap(), &opensandbox);
    flags.push(("--secret-out", Some(manifest.to_str().unwrap())));
    let pod_config = s.root.join("openbao-overlay").join("config.toml");
    std::fs::create_dir_all(pod_config.parent().unwrap()).unwrap();
    flags.push(("--pod-config-out", Some(pod_config.to_str().unwrap())));
    let o = s.init("d", &flags, &["--apply-secret"]);
    assert_exit(&o, 0);
    let hb = hand_back(&o);
    let steps = outcomes(&hb);
    for step in ["in-cluster", "secret-out", "pod-config-out"] {
        assert!(steps.iter().any(|(s, _)| s == step), "{step} in {steps:?}");
    }
    let bao = hb["baoKvPut"].as_str().unwrap();
    assert!(
        bao.starts_with("bao kv put -mount=ci dynamic-runner/dispatcher "),
        "{bao}"
    );
    let dir = s.out("d").parent().unwrap().to_path_buf();
    assert!(
        bao.contains(&format!(
            "sealing.key=@{}",
            dir.join("sealing.key").display()
        )),
        "{bao}"
    );
    let sealing = std::fs::read(dir.join("sealing.key")).unwrap();
    for text in [stdout(&o), stderr(&o)] {
        assert!(!text.contains("hook-secret-value"), "no secret printed");
        assert!(!text.contains(&s.token), "no token printed");
        assert!(!text.contains(&sandbox.api_key()), "no API key printed");
        assert!(
            !text.contains(String::from_utf8_lossy(&sealing).trim()),
            "no key printed"
        );
    }
    assert_eq!(crate::util::mode(&manifest), 0o600);
    // Commands two and three, for two overlays.
    let k = s.admin();
    let m = apply_overlay(&k, "locked-down", &s.root.join("pod-locked-down"));
    assert_eq!(m.mount_path, "/etc/tenantci/dispatch");
    let c = m.config();
    assert_eq!(c.cluster.kubeconfig, None, "the ServiceAccount");
    assert_eq!(c.facade.listen.to_string(), "0.0.0.0:8443");
    assert_eq!(
        c.webhook.as_ref().unwrap().listen.to_string(),
        "0.0.0.0:8090"
    );
    assert_eq!(
        std::fs::read(m.dir.join("webhook.secret")).unwrap(),
        b"hook-secret-value\n"
    );
    assert_eq!(std::fs::read(m.dir.join("sealing.key")).unwrap(), sealing);
    // --pod-config-out is that ConfigMap's one key, for the OpenBao overlay's generator.
    let applied = k.run(&[
        "-n",
        "tenantci-system",
        "get",
        "configmap",
        "tenantci-dispatcher-config",
        "-o",
        "jsonpath={.data.config\\.toml}",
    ]);
    assert!(applied.status.success(), "{}", stderr(&applied));
    assert_eq!(
        std::fs::read_to_string(&pod_config).unwrap(),
        stdout(&applied)
    );
    let m = apply_overlay(&k, "vm", &s.root.join("pod-vm"));
    assert_eq!(
        m.env["TENANTCI_DISPATCH_VM_API_KEY_FILE"],
        m.dir.join("opensandbox-api.key").display().to_string(),
        "the vm component names the Secret's key"
    );
    assert_eq!(
        std::fs::read(m.config().vm.unwrap().api_key_file).unwrap(),
        std::fs::read(&sandbox.api_key_file).unwrap()
    );
    // The manifest is the same two objects.
    let o = k.run(&[
        "apply",
        "--server-side",
        "--dry-run=server",
        "-f",
        manifest.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = stdout(&o);
    assert!(
        out.contains("configmap/tenantci-dispatcher-config"),
        "{out}"
    );
    assert!(out.contains("secret/tenantci-dispatcher"), "{out}");
    let rerun = || {
        s.init(
            "d",
            &in_cluster_flags(&admin, webhook_secret.to_str().unwrap(), &opensandbox),
            &["--apply-secret"],
        )
    };
    reruns_change_nothing_but_a_key_init_does_not_set(&k, rerun);
}

/// A re-run changes nothing in the cluster. A key in the live Secret that init does not set
/// (one an older config needed, or put there by hand with `kubectl patch`, which server-side
/// apply leaves to its own field manager) would stay mounted: the next run removes it, and the
/// run after that changes nothing again.
fn reruns_change_nothing_but_a_key_init_does_not_set(
    k: &Kubectl,
    rerun: impl Fn() -> std::process::Output,
) {
    let unchanged = |o: &std::process::Output| {
        assert_exit(o, 0);
        outcomes(&hand_back(o)).contains(&("in-cluster".into(), "unchanged".into()))
    };
    assert!(unchanged(&rerun()), "a re-run changes nothing");
    let secret = [
        "-n",
        "tenantci-system",
        "get",
        "secret",
        "tenantci-dispatcher",
    ];
    let patched = k.run(&[
        "-n",
        "tenantci-system",
        "patch",
        "secret",
        "tenantci-dispatcher",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"retired.key":"c3RhbGU="}}"#,
    ]);
    assert!(patched.status.success(), "{}", stderr(&patched));
    // Its key names only: the values are secrets, even in a test's output.
    let keys = |k: &Kubectl| -> Vec<String> {
        let o = k.run(&[&secret[..], &["-o", "json"]].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        v["data"].as_object().unwrap().keys().cloned().collect()
    };
    assert!(keys(k).contains(&"retired.key".to_string()));
    assert!(
        !unchanged(&rerun()),
        "a Secret with a stray key is not unchanged"
    );
    let left = keys(k);
    assert!(!left.contains(&"retired.key".to_string()), "{left:?}");
    assert!(
        unchanged(&rerun()),
        "and the run after that changes nothing"
    );
}

/// `--gitea-ca` (issue 29) against the Gitea double behind TLS from a private CA: without it
/// the version read fails naming the flag (exit 3); a file that is no certificate is exit 2;
/// neither writes, applies or registers anything. With it init registers, the config names
/// the CA (`gitea.ca_file`), and the Secret carries it as `gitea-ca.crt`, which the mounted
/// config names. A broken config at --out is exit 2 naming it, not the TLS failure (exit 3)
/// its lost CA would cause.
#[test]
fn init_trusts_the_gitea_ca_it_is_given_and_puts_it_where_the_deployment_mounts() {
    let s = setup();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let double: std::net::SocketAddr = s.gitea_url.trim_start_matches("http://").parse().unwrap();
    let front = rt.block_on(tenantci_testkit::tls_front::TlsFront::start(double));
    let url = front.url();
    let ca = s.root.join("gitea-ca.pem");
    std::fs::write(&ca, &front.ca_pem).unwrap();
    let not_pem = s.root.join("not-a-ca.pem");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    let admin = s.sim.tenant_admin("ci").display().to_string();
    let kubectl = s.admin();
    let cluster = ClusterSnapshot::take(&kubectl);
    let init = |out: &str, ca: Option<&str>| {
        s.init(
            out,
            &[
                ("--state-dir", None),
                ("--cluster", None),
                ("--kubeconfig", Some(&admin)),
                ("--gitea-url", Some(&url)),
                ("--gitea-ca", ca),
            ],
            &["--apply-secret"],
        )
    };
    let o = init("untrusted", None);
    assert_exit(&o, 3);
    assert!(stderr(&o).contains("--gitea-ca"), "{}", stderr(&o));
    let o = init("bad-ca", Some(not_pem.to_str().unwrap()));
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains(&format!(
            "the Gitea CA file `{}` holds no PEM certificate",
            not_pem.display()
        )),
        "{}",
        stderr(&o)
    );
    for name in ["untrusted", "bad-ca"] {
        assert!(!s.root.join(name).exists(), "{name}: nothing written");
    }
    assert!(s.runners().is_empty(), "nothing registered");
    assert_eq!(ClusterSnapshot::take(&kubectl), cluster, "nothing applied");
    let o = init("d", Some(ca.to_str().unwrap()));
    assert_exit(&o, 0);
    assert_eq!(s.runners().len(), 1, "registered over TLS");
    let written = tenantci_dispatch::config::Config::load(&s.out("d")).unwrap();
    assert_eq!(written.gitea.ca_file.as_deref(), Some(ca.as_path()));
    let rendered = crate::ship::kustomize("manifests/dispatch");
    let deployment =
        serde_json::to_value(crate::ship::of_kind(&rendered, "Deployment")[0]).unwrap();
    let m = super::mounted::mount(
        &kubectl,
        "tenantci-system",
        &deployment,
        &s.root.join("pod"),
    );
    m.assert_every_file_resolves();
    let mounted_ca = m
        .config()
        .gitea
        .ca_file
        .expect("the Pod's config names the CA");
    assert_eq!(mounted_ca, m.dir.join("gitea-ca.crt"));
    assert_eq!(std::fs::read_to_string(mounted_ca).unwrap(), front.ca_pem);
    // A re-run without the flag keeps the CA and still reaches Gitea with it.
    let o = init("d", None);
    assert_exit(&o, 0);
    // A config at --out that does not load is named (exit 2, unchanged), not hidden behind
    // the TLS failure its lost CA would cause.
    std::fs::create_dir_all(s.root.join("broken")).unwrap();
    std::fs::write(
        s.out("broken"),
        "[gitea
",
    )
    .unwrap();
    let o = init("broken", None);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("config.toml"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(s.out("broken")).unwrap(),
        "[gitea\n"
    );
    drop(front);
}
