//! kubectl against the simulator's ClusterStaticEntry (`spire.spiffe.io/v1alpha1`,
//! cluster-scoped): discovery, create, get, the CRD's required fields, delete.

use tenantci_testkit::kube::Kubectl;
use tenantci_testkit::sim::SimProcess;
use tenantci_testkit::spire::entry_yaml;

use super::TASK_ID;
use crate::util::{assert_exit, scratch, stderr, stdout, tenantci};

#[test]
fn kubectl_creates_gets_and_deletes_a_cluster_static_entry() {
    let dir = scratch();
    let sim = SimProcess::start(tenantci(), &dir.path().join("state"), &["ci"], &[]);
    let kubectl = Kubectl::new(&sim.tenant_admin("ci"), dir.path());

    let o = kubectl.run(&[
        "api-resources",
        "--api-group",
        "spire.spiffe.io",
        "-o",
        "wide",
    ]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    let row = out
        .lines()
        .find(|l| l.starts_with("clusterstaticentries"))
        .unwrap_or_else(|| panic!("{out}"));
    for cell in [
        "spire.spiffe.io/v1alpha1",
        "false",
        "ClusterStaticEntry",
        "watch",
    ] {
        assert!(row.contains(cell), "{cell}: {row}");
    }

    let yaml = entry_yaml(
        "exec-1",
        TASK_ID,
        "spiffe://example.org/spire/agent/k8s_psat/ci/node-uid-1",
        "pod-uid-1",
    );
    let o = kubectl.run_stdin(&["create", "-f", "-"], &yaml);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains("clusterstaticentry.spire.spiffe.io/exec-1 created"),
        "{}",
        stdout(&o)
    );

    let o = kubectl.run(&["get", "clusterstaticentry", "exec-1", "-o", "json"]);
    assert_exit(&o, 0);
    let entry: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(entry["spec"]["spiffeID"], TASK_ID);
    assert_eq!(
        entry["spec"]["selectors"],
        serde_json::json!(["k8s:pod-uid:pod-uid-1", "unix:uid:2000"])
    );
    assert!(entry["metadata"]["namespace"].is_null(), "cluster-scoped");
    let o = kubectl.run(&["get", "clusterstaticentries"]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).lines().any(|l| l.starts_with("exec-1 ")),
        "{}",
        stdout(&o)
    );

    // The CRD's required fields, and its schema's field validation.
    let o = kubectl.run_stdin(
        &["create", "-f", "-"],
        &yaml
            .replace("exec-1", "exec-2")
            .replace("  spiffeID:", "  spiffeId:"),
    );
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("spiffeId"), "{}", stderr(&o));
    let o = kubectl.run_stdin(
        &["create", "--validate=false", "-f", "-"],
        &yaml
            .replace("exec-1", "exec-3")
            .replace("  parentID:", "  # parentID:"),
    );
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("spec.parentID: Required value"),
        "{}",
        stderr(&o)
    );

    let o = kubectl.run(&["delete", "clusterstaticentry", "exec-1"]);
    assert_exit(&o, 0);
    let o = kubectl.run(&["get", "clusterstaticentry", "exec-1"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("NotFound"), "{}", stderr(&o));
}
