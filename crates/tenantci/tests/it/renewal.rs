//! The renewal as its unit runs it (`bootstrap runner --textfile`), against the simulator:
//! the textfile after a good run and after a run with the apiserver down, and that textfile
//! fed to the shipped alert rules with promtool, so the whole chain (apiserver down ->
//! renewal fails -> metric says failed -> alert fires) is tested, not only the rules.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::util::{
    assert_exit, mode, promtool_test_rules, repo_file, run, scratch, stderr, stdout, tenantci,
};
use tenantci_testkit::sim::SimProcess;

fn renew(root: &Path, textfile: &Path) -> Output {
    let mut cmd = tenantci();
    cmd.args(["bootstrap", "runner", "--forge", "gitlab", "--state-dir"])
        .arg(root.join("state"))
        .args(["--cluster", "ci", "--credential-dir"])
        .arg(root.join("creds"))
        .arg("--config")
        .arg(root.join("gitlab-runner/config.toml"))
        .args(["--gitlab-url", "https://gitlab.example.com"])
        .arg("--runner-token-file")
        .arg(root.join("token"))
        .arg("--textfile")
        .arg(textfile);
    run(&mut cmd)
}

/// `name{labels} value` samples of a textfile, comments left out.
fn samples(textfile: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(textfile)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_string(), value.to_string())
        })
        .collect()
}

fn value(samples: &[(String, String)], metric: &str) -> Option<String> {
    samples
        .iter()
        .find(|(s, _)| s == &format!("{metric}{{cluster=\"ci\"}}"))
        .map(|(_, v)| v.clone())
}

/// A promtool unit test that holds the textfile's samples for 10 minutes and expects
/// `expected` (YAML) for the alert at 5 minutes.
fn promtool_test(dir: &Path, samples: &[(String, String)], alert: &str, expected: &str) -> PathBuf {
    let series: String = samples
        .iter()
        .map(|(s, v)| format!("      - series: '{s}'\n        values: '{v}x10'\n"))
        .collect();
    let rules = repo_file("manifests/monitoring/runner-credential-alerts.yaml");
    let test = format!(
        "rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n{series}    alert_rule_test:\n      - eval_time: 5m\n        alertname: {alert}\n        exp_alerts: {expected}\n",
        rules.display()
    );
    let path = dir.join(format!("{alert}.test.yaml"));
    std::fs::write(&path, test).unwrap();
    path
}

fn promtool(test: &Path) -> Option<Output> {
    promtool_test_rules(test.parent().unwrap(), &[test])
}

#[test]
fn renewal_with_the_apiserver_down_writes_a_failed_textfile_that_fires_the_alert() {
    let dir = scratch();
    let root = dir.path();
    let sim = SimProcess::start(tenantci(), &root.join("state"), &["ci"], &[]);
    std::fs::write(root.join("token"), "glrt-test-token-123\n").unwrap();
    let collector = root.join("textfile_collector");
    std::fs::create_dir(&collector).unwrap();
    let textfile = collector.join("tenantci_credential_renew_ci.prom");

    assert_exit(&renew(root, &textfile), 0);
    let good = samples(&textfile);
    assert_eq!(mode(&textfile), 0o644);
    assert_eq!(
        value(&good, "tenantci_credential_renew_success").as_deref(),
        Some("1")
    );
    let expiry = value(&good, "tenantci_credential_expiry_timestamp_seconds").unwrap();
    let text = std::fs::read_to_string(&textfile).unwrap();
    assert!(!text.contains("glrt-test-token-123"));

    sim.stop();
    let o = renew(root, &textfile);
    assert_exit(&o, 3);
    let failed = samples(&textfile);
    assert_eq!(
        value(&failed, "tenantci_credential_renew_success").as_deref(),
        Some("0")
    );
    assert_eq!(
        value(&failed, "tenantci_credential_renew_exit_code").as_deref(),
        Some("3")
    );
    assert_eq!(
        value(&failed, "tenantci_credential_expiry_timestamp_seconds"),
        Some(expiry),
        "the certificate on disk is still the one of the good run"
    );
    assert!(!stderr(&o).contains("glrt-test-token-123"));

    let fires = "\n          - exp_labels: {severity: warning, cluster: ci}\n            exp_annotations:\n              summary: The runner credential renewal of cluster ci failed\n              description: \"Exit code 3. Run `journalctl -u tenantci-credential-renew@ci` and `tenantci runner check`.\"";
    let alert = "TenantciCredentialRenewFailed";
    let Some(o) = promtool(&promtool_test(root, &failed, alert, fires)) else {
        return;
    };
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    // The positive control: the good run's textfile does not fire it, so the check above
    // could have failed.
    let o = promtool(&promtool_test(root, &good, alert, "[]")).unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let o = promtool(&promtool_test(root, &good, alert, fires)).unwrap();
    assert!(
        !o.status.success(),
        "a healthy textfile must not fire {alert}"
    );
}

/// A --textfile node_exporter would not read is bad input: exit 2, and nothing is written
/// (neither the textfile nor the config).
#[test]
fn renewal_refuses_a_textfile_outside_an_existing_directory_before_anything_else() {
    let dir = scratch();
    let root = dir.path();
    std::fs::write(root.join("token"), "glrt-test-token-123\n").unwrap();
    for bad in [root.join("missing/renew.prom"), root.join("renew.txt")] {
        let o = renew(root, &bad);
        assert_exit(&o, 2);
        assert!(stderr(&o).contains("--textfile"), "{}", stderr(&o));
        assert!(!bad.exists());
        assert!(!root.join("gitlab-runner").exists());
        assert!(!root.join("creds").exists());
    }
}
