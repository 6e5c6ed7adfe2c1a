//! `tenantci dispatch init --kubeconfig` (any cluster, no gateway state dir) with the real
//! binary against the simulator: the RBAC for the ServiceAccount, no minted credential, and
//! the refusals of a kubeconfig that cannot do what init needs. (A task end to end on this
//! path: `dispatch::run`'s `init_with_a_kubeconfig_and_no_state_dir_runs_a_task_as_the_service_account`.)

use tenantci_testkit::snapshot::ClusterSnapshot;

use super::init::{Setup, can_i, hand_back, outcomes, setup};
use crate::util::{assert_exit, run, stderr, tenantci};

const SA: &str = "system:serviceaccount:dynamic-runner:tenantci-dispatcher";

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
        let dir = self.root.join("nobody-credential");
        let o = run(tenantci()
            .args(["credential", "mint", "--state-dir"])
            .arg(self.root.join("state"))
            .args(["--cluster", "ci", "--server", &self.sim.cluster_url("ci")])
            .args(["--common-name", "nobody", "--organization", "nobodies"])
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
    // The ServiceAccount may do what `run` does, and nothing beyond.
    let k = s.admin();
    for (args, allowed) in [
        (vec!["create", "pods", "-n", "dynamic-runner"], true),
        (vec!["update", "leases", "-n", "dynamic-runner"], true),
        (vec!["get", "secrets", "-n", "kube-system"], false),
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
    for name in ["nobody", "dead", "both"] {
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
