//! kubectl's everyday commands against `tenantci sim` as they are typed: client-side
//! `apply` (the runbook's heredoc), `diff`, `explain`, field validation, `delete --wait`.
//! They rest on the simulator's OpenAPI v3 documents and server-side field validation.

use std::process::Command;

use tenantci_testkit::kube::Kubectl;
use tenantci_testkit::sim::SimProcess;

use crate::util::{self, assert_exit, repo_file, stderr, stdout, tenantci};

const POD_WITH_UNKNOWN_FIELD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: typo
  namespace: default
spec:
  containers:
    - name: build
      image: registry.k8s.io/pause:3.10
      imagePolicy: Always
";

#[test]
fn sim_runbook_steps_2_4_5_as_written_then_reapply_diff_delete() {
    let scratch = util::scratch();
    let state = scratch.path().join("socialweb");
    let sim = SimProcess::start(tenantci(), &state, &["ci"], &[]);
    let script = repo_file("tests/it/fixtures/runbook-steps-2-4-5.sh");
    let o = util::run(
        Command::new("bash")
            .arg(&script)
            .env("ADMIN_KUBECONFIG", sim.admin_kubeconfig())
            .env("TENANT_ADMIN_KUBECONFIG", sim.tenant_admin("ci"))
            .env("STATE_DIR", &state)
            .env("OUT_DIR", scratch.path().join("tenant-ci"))
            .env("TENANTCI", util::bin())
            .env("HOME", scratch.path())
            .env("KUBECACHEDIR", scratch.path().join("kube-cache"))
            .env_remove("KUBECONFIG"),
    );
    assert_exit(&o, 0);
    let out = stdout(&o);
    for line in [
        "namespace/gitlab-runner created",
        "clusterrole.rbac.authorization.k8s.io/gitlab-runner created",
        "clusterrolebinding.rbac.authorization.k8s.io/gitlab-runner created",
    ] {
        assert!(out.contains(line), "{line}: {out}");
    }
    assert_eq!(out.lines().last(), Some("yes"), "{out}");
    // The client-side apply left its last-applied annotation.
    let admin = Kubectl::new(&sim.tenant_admin("ci"), scratch.path());
    let o = admin.run(&["get", "clusterrole", "gitlab-runner", "-o", "json"]);
    assert_exit(&o, 0);
    let role: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let last = role["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
        .as_str()
        .unwrap_or_else(|| panic!("no last-applied annotation: {role}"));
    assert!(last.contains("\"pods/exec\""), "{last}");

    // The same manifest again: nothing to change, nothing to diff.
    let manifest = repo_file("tests/it/fixtures/runbook-rbac.yaml");
    let manifest = manifest.to_str().unwrap();
    let o = admin.run(&["apply", "-f", manifest]);
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o).matches(" unchanged").count(),
        3,
        "{}",
        stdout(&o)
    );
    assert_exit(&admin.run(&["diff", "-f", manifest]), 0);
    // An edit: diff shows it and exits 1; apply sends a three-way patch that removes it.
    let edited = scratch.path().join("edited.yaml");
    let text = std::fs::read_to_string(manifest).unwrap();
    let text = text.replacen(
        "verbs: [\"get\", \"create\"]",
        "verbs: [\"get\", \"create\", \"list\"]",
        1,
    );
    std::fs::write(&edited, &text).unwrap();
    let o = admin.run(&["diff", "-f", edited.to_str().unwrap()]);
    assert_exit(&o, 1);
    assert!(stdout(&o).contains("+  - list"), "{}", stdout(&o));
    let o = admin.run(&["apply", "-f", edited.to_str().unwrap()]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains("clusterrole.rbac.authorization.k8s.io/gitlab-runner configured"),
        "{}",
        stdout(&o)
    );
    let o = admin.run(&["apply", "-f", manifest]);
    assert_exit(&o, 0);
    assert_exit(&admin.run(&["diff", "-f", manifest]), 0);

    // delete -f waits for the objects to go, and they are gone.
    let o = admin.run(&["delete", "-f", manifest, "--wait", "--timeout=60s"]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains("namespace \"gitlab-runner\" deleted"),
        "{}",
        stdout(&o)
    );
    let o = admin.run(&["get", "namespace", "gitlab-runner"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("NotFound"), "{}", stderr(&o));
    assert_eq!(sim.stop(), Some(0));
}

#[test]
fn sim_kubectl_explain_and_field_validation() {
    let scratch = util::scratch();
    let sim = SimProcess::start(tenantci(), &scratch.path().join("state"), &["ci"], &[]);
    let k = Kubectl::new(&sim.tenant_admin("ci"), scratch.path());
    let o = k.run(&["explain", "pods.spec.containers"]);
    assert_exit(&o, 0);
    let doc = stdout(&o);
    assert!(doc.contains("FIELD: containers <[]Container>"), "{doc}");
    assert!(doc.contains("image\t<string>"), "{doc}");
    let admin = Kubectl::new(&sim.admin_kubeconfig(), scratch.path());
    let o = admin.run(&["explain", "clusters.status.url"]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("127.0.0.1"), "{}", stdout(&o));

    // kubectl's default (--validate=strict) asks the server: refused, naming the field.
    for verb in ["apply", "create"] {
        let o = k.run_stdin(&[verb, "-f", "-"], POD_WITH_UNKNOWN_FIELD);
        assert_exit(&o, 1);
        assert!(
            stderr(&o).contains(
                "strict decoding error: unknown field \"spec.containers[0].imagePolicy\""
            ),
            "{verb}: {}",
            stderr(&o)
        );
    }
    assert_exit(&k.run(&["get", "pod", "typo"]), 1);
    // --validate=warn: accepted with a warning, the field dropped as kube-apiserver does.
    let o = k.run_stdin(
        &["apply", "--validate=warn", "-f", "-"],
        POD_WITH_UNKNOWN_FIELD,
    );
    assert_exit(&o, 0);
    assert!(
        stderr(&o).contains("Warning: unknown field \"spec.containers[0].imagePolicy\""),
        "{}",
        stderr(&o)
    );
    let o = k.run(&["get", "pod", "typo", "-o", "jsonpath={.spec.containers[0]}"]);
    assert_exit(&o, 0);
    assert!(!stdout(&o).contains("imagePolicy"), "{}", stdout(&o));
    // `get` prints kube-apiserver's columns for the kind (a Table answer).
    let o = k.run(&["get", "pods"]);
    assert_exit(&o, 0);
    let header: Vec<String> = stdout(&o)
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(
        header,
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("typo "), "{}", stdout(&o));
    let o = k.run(&["get", "namespace", "default"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("STATUS"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("default") && lines[1].contains("Active"),
        "{lines:?}"
    );
    // The everyday edits of an applied object.
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c1\ndata:\n  a: b\n";
    assert_exit(&k.run_stdin(&["apply", "-f", "-"], cm), 0);
    assert_exit(&k.run(&["label", "configmap", "c1", "x=y"]), 0);
    assert_exit(&k.run(&["annotate", "configmap", "c1", "note=hi"]), 0);
    assert_exit(
        &k.run(&["patch", "configmap", "c1", "-p", r#"{"data":{"c":"d"}}"#]),
        0,
    );
    let o = k.run(&["get", "configmap", "c1", "-o", "yaml"]);
    assert_exit(&o, 0);
    assert_exit(&k.run_stdin(&["replace", "-f", "-"], &stdout(&o)), 0);
    let o = k.run(&[
        "get",
        "configmap",
        "c1",
        "-o",
        "jsonpath={.metadata.labels.x} {.data.c}",
    ]);
    assert_eq!(stdout(&o), "y d");
    // --validate=false (Ignore): accepted without a word.
    let o = k.run_stdin(
        &["create", "--validate=false", "-f", "-"],
        &POD_WITH_UNKNOWN_FIELD.replace("typo", "typo-2"),
    );
    assert_exit(&o, 0);
    assert!(!stderr(&o).contains("Warning"), "{}", stderr(&o));
    assert_eq!(sim.stop(), Some(0));
}

#[test]
fn sim_kubectl_create_deployment_rolls_out_on_rented_nodes() {
    let scratch = util::scratch();
    let sim = SimProcess::start(tenantci(), &scratch.path().join("state"), &["ci"], &[]);
    let k = Kubectl::new(&sim.tenant_admin("ci"), scratch.path());
    // A typed generator: kubectl sends the Deployment as protobuf.
    let o = k.run(&[
        "create",
        "deployment",
        "web",
        "--image=registry.k8s.io/pause:3.10",
        "--replicas=2",
        "--port=8080",
    ]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o).trim(), "deployment.apps/web created");
    // rollout status watches until every replica runs on a rented node.
    let o = k.run(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains("deployment \"web\" successfully rolled out"),
        "{}",
        stdout(&o)
    );
    let o = k.run(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[*].spec.nodeName}",
    ]);
    assert_exit(&o, 0);
    let nodes = stdout(&o);
    assert_eq!(nodes.split_whitespace().count(), 2, "{nodes}");
    assert!(
        nodes.split_whitespace().all(|n| n.starts_with("rented-")),
        "{nodes}"
    );
    let o = k.run(&[
        "get",
        "deployment",
        "web",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].ports[0].containerPort}",
    ]);
    assert_eq!(stdout(&o), "8080");
    let o = k.run(&["get", "deployment", "web"]);
    assert!(stdout(&o).contains("2/2"), "{}", stdout(&o));
    // The other generators: configmap, secret (data base64 as sent), namespace.
    assert_exit(
        &k.run(&["create", "configmap", "c", "--from-literal=a=b"]),
        0,
    );
    assert_exit(
        &k.run(&["create", "secret", "generic", "s", "--from-literal=p=q"]),
        0,
    );
    assert_exit(&k.run(&["create", "namespace", "n1"]), 0);
    let o = k.run(&["get", "secret", "s", "-o", "jsonpath={.data.p}"]);
    assert_eq!(stdout(&o), "cQ==");
    assert_eq!(sim.stop(), Some(0));
}
