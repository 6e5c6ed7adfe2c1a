//! Golden files for new, added-to and updated config.toml. Regenerate with
//! `UPDATE_GOLDEN=1 cargo test --test it runner_golden` and review the diff.

use std::path::{Path, PathBuf};

use tenantci_runner::gitlab::config::entry::{Autoscaler, example_entry, example_native_entry};
use tenantci_runner::gitlab::config::{Action, MergeOptions, RunnerEntry, keys, merge};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/runner/golden")
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

fn input(name: &str) -> String {
    std::fs::read_to_string(golden_dir().join(name)).unwrap()
}

fn plan(existing: Option<&str>) -> merge::Plan {
    merge::plan(
        Path::new("config.toml"),
        existing,
        &example_entry(),
        MergeOptions::default(),
    )
    .unwrap()
}

#[track_caller]
fn assert_keys_known(text: &str) {
    let doc: toml_edit::DocumentMut = text.parse().unwrap();
    let runners = doc["runners"].as_array_of_tables().unwrap();
    let ours = runners
        .iter()
        .find(|t| t["name"].as_str() == Some("tenant-a"))
        .unwrap();
    assert_eq!(keys::check_runner(ours, "runners[tenant-a]"), vec![]);
}

#[test]
fn runner_golden_new_config() {
    let p = plan(None);
    assert_eq!(p.action, Action::Created);
    assert_golden("new.toml", &p.text);
    assert_keys_known(&p.text);
    let doc: toml_edit::DocumentMut = p.text.parse().unwrap();
    assert_eq!(keys::check_document(&doc), vec![]);
}

#[test]
fn runner_golden_added_to_existing_config_keeps_everything_else() {
    let existing = input("existing.toml");
    let p = plan(Some(&existing));
    assert_eq!(p.action, Action::Added);
    assert!(
        p.text.starts_with(&existing),
        "the old text must stay a byte-identical prefix"
    );
    assert_golden("merged.toml", &p.text);
    assert_keys_known(&p.text);
    assert_eq!(plan(Some(&p.text)).action, Action::Unchanged);
}

#[test]
fn runner_golden_updates_our_entry_only() {
    let existing = input("outdated.toml");
    let p = plan(Some(&existing));
    assert_eq!(p.action, Action::Updated);
    assert_golden("updated.toml", &p.text);
    for kept in [
        "concurrent = 8",
        "limit = 4 # raised by tenantci",
        "environment = [\"FF_USE_FASTZIP=true\"]",
        "Type = \"s3\"",
        "service_account = \"kept-by-us\"",
        "name = \"after\"",
    ] {
        assert!(p.text.contains(kept), "{kept} lost:\n{}", p.text);
    }
    for gone in [
        "glrt-old-token",
        "7000",
        "debian:12",
        "old = \"label\"",
        "cpu_limit",
    ] {
        assert!(!p.text.contains(gone), "{gone} kept:\n{}", p.text);
    }
    assert_eq!(plan(Some(&p.text)).action, Action::Unchanged);
}

fn native_plan(existing: Option<&str>, entry: &RunnerEntry) -> merge::Plan {
    merge::plan(
        Path::new("config.toml"),
        existing,
        entry,
        MergeOptions::default(),
    )
    .unwrap()
}

#[test]
fn runner_golden_native_autoscaler_new_config() {
    let entry = example_native_entry();
    let p = native_plan(None, &entry);
    assert_eq!(p.action, Action::Created);
    assert_golden("native.toml", &p.text);
    let doc: toml_edit::DocumentMut = p.text.parse().unwrap();
    assert_eq!(keys::check_document(&doc), vec![]);
    assert_eq!(native_plan(Some(&p.text), &entry).action, Action::Unchanged);
}

/// The operator's own autoscaler table, taken over by --gitlab-native-pause-pods: our keys
/// set (comments kept), their other keys kept, one policy; then switched off explicitly.
#[test]
fn runner_golden_native_autoscaler_takes_over_and_gives_back_a_hand_written_table() {
    let existing = input("native-hand.toml");
    let entry = example_native_entry();
    let p = native_plan(Some(&existing), &entry);
    assert_eq!(p.action, Action::Updated);
    assert_golden("native-hand-merged.toml", &p.text);
    assert_keys_known(&p.text);
    for kept in [
        "# the operator's own pause pods, before tenantci took them over",
        "max_pause_pods = 2 # burst ceiling",
        "pause_pod_priority_class_name = \"pause-pods\"",
        "timezone = \"UTC\"",
    ] {
        assert!(p.text.contains(kept), "{kept} lost:\n{}", p.text);
    }
    let doc: toml_edit::DocumentMut = p.text.parse().unwrap();
    let policies = doc["runners"][0]["kubernetes"]["autoscaler"]["policy"]
        .as_array_of_tables()
        .unwrap();
    assert_eq!(policies.len(), 1, "tenantci owns the policy list");
    assert_eq!(native_plan(Some(&p.text), &entry).action, Action::Unchanged);
    assert!(merge::keeps_native_pause_pods(&p.text, "tenant-a"));

    // Flag off: not touched at all.
    let off = native_plan(Some(&p.text), &example_entry());
    assert_eq!(off.text, p.text);

    // Switched off explicitly: our keys go, the operator's key keeps the table.
    let mut remove = example_entry();
    remove.kubernetes.autoscaler = Autoscaler::Remove;
    let removed = native_plan(Some(&p.text), &remove);
    assert_eq!(removed.action, Action::Updated);
    assert!(!merge::keeps_native_pause_pods(&removed.text, "tenant-a"));
    let doc: toml_edit::DocumentMut = removed.text.parse().unwrap();
    let autoscaler = doc["runners"][0]["kubernetes"]["autoscaler"]
        .as_table()
        .unwrap();
    let left: Vec<&str> = autoscaler.iter().map(|(k, _)| k).collect();
    assert_eq!(left, ["pause_pod_priority_class_name"]);
    assert_eq!(
        native_plan(Some(&removed.text), &remove).action,
        Action::Unchanged
    );
}
