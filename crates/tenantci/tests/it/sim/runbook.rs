//! The runbook's steps 2, 4 and 5 verbatim against `tenantci sim`, with real kubectl.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use tenantci_testkit::kube::{Kubectl, kubeconfig_for};
use tenantci_testkit::sim::SimProcess;
use tenantci_testkit::wait::DEADLINE;

use crate::util::{self, assert_exit, repo_file, stderr, stdout, tenantci};

const POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: job-1
  namespace: gitlab-runner
spec:
  containers:
    - name: build
      image: registry.k8s.io/pause:3.10
";

/// Step 4: `tenantci internal tenantcredential` with the runbook's variables.
fn mint(state: &std::path::Path, server: &str, out: &std::path::Path, orgs: &str) {
    let o = util::run(
        util::tenantci()
            .args(["internal", "tenantcredential"])
            .env("SOCIALWEB_TENANTCREDENTIAL_STATE_DIR", state)
            .env("SOCIALWEB_TENANTCREDENTIAL_CLUSTER", "ci")
            .env("SOCIALWEB_TENANTCREDENTIAL_SERVER", server)
            .env("SOCIALWEB_TENANTCREDENTIAL_COMMON_NAME", "gitlab-runner")
            .env("SOCIALWEB_TENANTCREDENTIAL_ORGANIZATIONS", orgs)
            .env("SOCIALWEB_TENANTCREDENTIAL_OUT_DIR", out)
            .env("SOCIALWEB_TENANTCREDENTIAL_VALID_FOR", "720h"),
    );
    assert_exit(&o, 0);
}

/// Steps 2 and 5 with the tenant-admin kubeconfig; returns the admin kubectl.
fn apply_rbac(sim: &SimProcess, scratch: &std::path::Path) -> Kubectl {
    let tenant_admin = Kubectl::new(&sim.tenant_admin("ci"), scratch);
    let manifest = repo_file("tests/it/fixtures/runbook-rbac.yaml");
    let o = tenant_admin.run(&["apply", "--server-side", "-f", manifest.to_str().unwrap()]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains(
            "clusterrolebinding.rbac.authorization.k8s.io/gitlab-runner serverside-applied"
        ),
        "{}",
        stdout(&o)
    );
    tenant_admin
}

#[test]
fn sim_runbook_steps_2_4_5() {
    let scratch = util::scratch();
    let state = scratch.path().join("socialweb");
    let sim = SimProcess::start(tenantci(), &state, &["ci"], &[]);

    // Step 2: the clusters, and the URL that goes in the runner's host.
    let admin = Kubectl::new(&sim.admin_kubeconfig(), scratch.path());
    let o = admin.run(&["get", "clusters"]);
    assert_exit(&o, 0);
    let table = stdout(&o);
    assert!(table.lines().next().unwrap().starts_with("NAME"), "{table}");
    assert!(table.lines().any(|l| l.starts_with("ci ")), "{table}");
    let o = admin.run(&["get", "cluster", "ci", "-o", "jsonpath={.status.url}"]);
    assert_exit(&o, 0);
    let url = stdout(&o);
    assert_eq!(url, sim.cluster_url("ci"));
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let gateway: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("gateway.json")).unwrap()).unwrap();
    assert_eq!(
        gateway["adminKubeconfig"].as_str().unwrap(),
        sim.admin_kubeconfig().to_str().unwrap()
    );

    // Step 4: mint the runner's credential.
    let out = scratch.path().join("tenant-ci");
    mint(&state, &url, &out, "gitlab-runner");
    let info = tenantci_core::pki::inspect::CertInfo::from_pem(
        &std::fs::read_to_string(out.join("tls.crt")).unwrap(),
    )
    .unwrap();
    assert_eq!(info.subject, "O=gitlab-runner, CN=gitlab-runner");

    // Step 5: permit the group, then check both halves.
    let tenant_admin = apply_rbac(&sim, scratch.path());
    let can_i = |args: &[&str]| {
        let mut a = vec!["auth", "can-i"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["--as=gitlab-runner", "--as-group=gitlab-runner"]);
        tenant_admin.run(&a)
    };
    let o = can_i(&["create", "pods", "--namespace", "gitlab-runner"]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o).trim(), "yes");
    // The runbook binds its ClusterRole cluster-wide, so reading secrets in kube-system IS
    // granted (as kube-apiserver would); what the role lacks is refused.
    let o = can_i(&["get", "secrets", "--namespace", "kube-system"]);
    assert_exit(&o, 0);
    let o = can_i(&["patch", "secrets", "--namespace", "kube-system"]);
    assert_exit(&o, 1);
    assert_eq!(stdout(&o).trim(), "no");
    let o = can_i(&["list", "nodes"]);
    assert_exit(&o, 1);

    // The runner's own kubeconfig: list and create pods in its namespace ...
    let runner = Kubectl::new(&out.join("kubeconfig"), scratch.path());
    let o = runner.run(&["get", "pods", "-n", "gitlab-runner"]);
    assert_exit(&o, 0);
    let o = runner.run_stdin(&["create", "-f", "-"], POD);
    assert_exit(&o, 0);
    // The pod runs once a node is rented for it: wait for that event (watch), then look.
    let o = runner.run(&[
        "wait",
        "-n",
        "gitlab-runner",
        "--for=jsonpath={.status.phase}=Running",
        "pod/job-1",
        "--timeout=60s",
    ]);
    assert_exit(&o, 0);
    let o = runner.run(&[
        "get",
        "pod",
        "job-1",
        "-n",
        "gitlab-runner",
        "-o",
        "jsonpath={.status.phase}",
    ]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "Running");
    // ... and nothing else.
    let o = runner.run(&["get", "nodes"]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("nodes is forbidden: User \"gitlab-runner\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"),
        "{}",
        stderr(&o)
    );
    let o = runner.run(&["delete", "secret", "x", "-n", "kube-system"]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("NotFound") || stderr(&o).contains("not found"),
        "delete is granted: {}",
        stderr(&o)
    );
    let o = runner.run(&[
        "create",
        "clusterrolebinding",
        "escalate",
        "--clusterrole=cluster-admin",
        "--group=gitlab-runner",
    ]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("is forbidden"), "{}", stderr(&o));
    assert_eq!(sim.stop(), Some(0));
}

#[test]
fn sim_foreign_ca_is_unauthorized_and_wrong_group_is_forbidden() {
    let scratch = util::scratch();
    let state = scratch.path().join("state");
    let sim = SimProcess::start(tenantci(), &state, &["ci"], &[]);
    let url = sim.cluster_url("ci");
    apply_rbac(&sim, scratch.path());
    let serving_ca = std::fs::read_to_string(state.join("clusters/ci/pki/serving-ca.crt")).unwrap();

    let other = tenantci_core::pki::CertificateAuthority::generate(
        "ci-client-ca",
        std::time::Duration::from_secs(3600),
    )
    .unwrap();
    let kc = kubeconfig_for(
        scratch.path(),
        "foreign",
        &url,
        &serving_ca,
        &other,
        "gitlab-runner",
        &["gitlab-runner"],
    );
    let o = Kubectl::new(&kc, scratch.path()).run(&["get", "pods", "-n", "gitlab-runner"]);
    assert_exit(&o, 1);
    // kubectl words a 401 as "You must be logged in to the server".
    assert!(
        stderr(&o).contains("You must be logged in to the server"),
        "{}",
        stderr(&o)
    );

    let out = scratch.path().join("wrong-group");
    mint(&state, &url, &out, "ci-runners");
    let o = Kubectl::new(&out.join("kubeconfig"), scratch.path()).run(&[
        "get",
        "pods",
        "-n",
        "gitlab-runner",
    ]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o)
            .contains("pods is forbidden: User \"gitlab-runner\" cannot list resource \"pods\""),
        "{}",
        stderr(&o)
    );
}

#[test]
fn sim_kubectl_watch_sees_a_new_pod() {
    let scratch = util::scratch();
    let sim = SimProcess::start(tenantci(), &scratch.path().join("state"), &["ci"], &[]);
    let k = Kubectl::new(&sim.tenant_admin("ci"), scratch.path());
    let mut watch = k
        .command()
        .args(["get", "pods", "-n", "default", "--watch", "-o", "name"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Create pods until the watch (whose start we cannot observe) reports one.
    let mut seen = false;
    for i in 0..30 {
        let pod = POD
            .replace("job-1", &format!("w-{i}"))
            .replace("gitlab-runner", "default");
        assert_exit(&k.run_stdin(&["create", "-f", "-"], &pod), 0);
        if let Ok(line) = rx.recv_timeout(DEADLINE / 30) {
            assert!(line.starts_with("pod/w-"), "{line}");
            seen = true;
            break;
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(seen, "kubectl get --watch printed no pod");
}

#[test]
fn sim_restart_keeps_cas_and_ports() {
    let scratch = util::scratch();
    let state = scratch.path().join("state");
    let first = SimProcess::start(tenantci(), &state, &["ci", "team-a"], &[]);
    let url = first.cluster_url("ci");
    let ca = std::fs::read(state.join("clusters/ci/pki/client-ca.crt")).unwrap();
    let kc = std::fs::read(first.tenant_admin("ci")).unwrap();
    assert_eq!(
        util::mode(&state.join("clusters/ci/pki/client-ca.key")),
        0o600
    );
    assert_eq!(first.stop(), Some(0));
    let second = SimProcess::start(tenantci(), &state, &["ci", "team-a"], &[]);
    assert_eq!(second.cluster_url("ci"), url);
    assert_eq!(
        std::fs::read(state.join("clusters/ci/pki/client-ca.crt")).unwrap(),
        ca
    );
    assert_eq!(std::fs::read(second.tenant_admin("ci")).unwrap(), kc);
    let o = Kubectl::new(&second.tenant_admin("team-a"), scratch.path()).run(&[
        "get",
        "namespaces",
        "-o",
        "name",
    ]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains("namespace/kube-system"),
        "{}",
        stdout(&o)
    );
}
