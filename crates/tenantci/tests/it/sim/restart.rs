//! The simulator across a restart and before its first write: objects come back on the same
//! state directory (kubectl sees them, versions go on, a watch from before the restart gets
//! 410), `--in-memory` keeps today's behaviour, a damaged object file is one error naming it,
//! and a bad flag is refused with nothing created.

use std::path::Path;

use tenantci_testkit::kube::Kubectl;
use tenantci_testkit::sim::SimProcess;

use crate::util::{self, assert_exit, run, snapshot, stderr, stdout, tenantci};

const OBJECTS: &str = "clusters/ci/objects.json";

fn get(k: &Kubectl, args: &[&str]) -> String {
    let o = k.run(args);
    assert_exit(&o, 0);
    stdout(&o)
}

/// A ConfigMap and a Pod through kubectl; returns the ConfigMap's resourceVersion.
fn create_objects(k: &Kubectl) -> u64 {
    assert_exit(
        &k.run(&["create", "configmap", "kept", "--from-literal=k=v"]),
        0,
    );
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: kept-pod}\nspec:\n  containers: [{name: c, image: busybox}]\n";
    assert_exit(&k.run_stdin(&["create", "-f", "-"], pod), 0);
    get(
        k,
        &[
            "get",
            "configmap",
            "kept",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ],
    )
    .parse()
    .unwrap()
}

#[test]
fn sim_restart_keeps_objects_and_versions_go_on() {
    let scratch = util::scratch();
    let state = scratch.path().join("state");
    let first = SimProcess::start(tenantci(), &state, &["ci"], &[]);
    let k = Kubectl::new(&first.tenant_admin("ci"), scratch.path());
    let rv = create_objects(&k);
    assert_eq!(first.stop(), Some(0));
    assert_eq!(
        util::mode(&state.join(OBJECTS)),
        0o600,
        "Secrets live in it"
    );

    let second = SimProcess::start(tenantci(), &state, &["ci"], &[]);
    let k = Kubectl::new(&second.tenant_admin("ci"), scratch.path());
    assert_eq!(
        get(
            &k,
            &["get", "configmap", "kept", "-o", "jsonpath={.data.k}"]
        ),
        "v"
    );
    assert_eq!(
        get(&k, &["get", "pod", "kept-pod", "-o", "name"]).trim(),
        "pod/kept-pod"
    );
    assert_exit(&k.run(&["create", "configmap", "after"]), 0);
    let after: u64 = get(
        &k,
        &[
            "get",
            "configmap",
            "after",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ],
    )
    .parse()
    .unwrap();
    assert!(after > rv, "versions go on after a restart: {after} > {rv}");
    // A watch from before the restart is too old: the client is told to list again.
    let o = k.run(&[
        "get",
        "--raw",
        &format!(
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={}",
            rv - 1
        ),
    ]);
    let answer = format!("{}{}", stdout(&o), stderr(&o));
    assert!(
        answer.contains("410") || answer.contains("Expired"),
        "{answer}"
    );
}

#[test]
fn in_memory_forgets_objects_and_writes_no_object_file() {
    let scratch = util::scratch();
    let state = scratch.path().join("state");
    let first = SimProcess::start(tenantci(), &state, &["ci"], &["--in-memory"]);
    let k = Kubectl::new(&first.tenant_admin("ci"), scratch.path());
    create_objects(&k);
    assert_eq!(first.stop(), Some(0));
    assert!(!state.join(OBJECTS).exists());
    let second = SimProcess::start(tenantci(), &state, &["ci"], &["--in-memory"]);
    let k = Kubectl::new(&second.tenant_admin("ci"), scratch.path());
    let o = k.run(&["get", "configmap", "kept"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("NotFound") || stderr(&o).contains("not found"));
}

#[test]
fn a_damaged_object_file_is_one_error_naming_it() {
    let scratch = util::scratch();
    let state = scratch.path().join("state");
    let first = SimProcess::start(tenantci(), &state, &["ci"], &[]);
    assert_eq!(first.stop(), Some(0));
    std::fs::write(state.join(OBJECTS), b"{\"format\":1,\"resourceVer").unwrap();
    let before = snapshot(&state);
    let o = run(tenantci()
        .arg("sim")
        .arg("--state-dir")
        .arg(&state)
        .args(["--cluster", "ci"]));
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(err.contains("objects.json` cannot be read back"), "{err}");
    assert!(err.contains("help: move it aside"), "{err}");
    assert_eq!(snapshot(&state), before, "nothing written");
}

#[track_caller]
fn assert_refused_before_writing(state: &Path, args: &[&str], says: &str) {
    let before = snapshot(state);
    let o = run(tenantci()
        .arg("sim")
        .arg("--state-dir")
        .arg(state)
        .args(args));
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(err.contains(says), "{err}");
    assert!(err.contains("help: "), "{err}");
    assert_eq!(snapshot(state), before, "nothing written for {args:?}");
}

#[test]
fn sim_validates_every_flag_before_writing() {
    let scratch = util::scratch();
    let fresh = scratch.path().join("fresh");
    for (args, says) in [
        (
            &["--cluster", "../x"][..],
            "cluster name `../x` is not a DNS label",
        ),
        (
            &["--cluster", "ci", "--cluster", "GitLab"][..],
            "`GitLab` is not a DNS label",
        ),
        (
            &["--cluster", "ci", "--node-boot", "soon"][..],
            "--node-boot `soon`",
        ),
        (
            &["--cluster", "ci", "--node-vcpu", "0"][..],
            "must be positive",
        ),
    ] {
        assert_refused_before_writing(&fresh, args, says);
        assert!(!fresh.exists(), "the state dir is not even created");
    }
    let existing = scratch.path().join("existing");
    std::fs::create_dir(&existing).unwrap();
    assert_refused_before_writing(&existing, &["--cluster", "../x"], "not a DNS label");
    let long = "x".repeat(100_000);
    let o = run(tenantci()
        .arg("sim")
        .arg("--state-dir")
        .arg(&existing)
        .args(["--cluster", &long]));
    assert_exit(&o, 2);
    assert!(
        stderr(&o).len() < 1000,
        "a short prefix of the name: {}",
        stderr(&o)
    );
}
