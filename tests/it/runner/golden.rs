//! Golden files for new, added-to and updated config.toml. Regenerate with
//! `UPDATE_GOLDEN=1 cargo test --test it runner_golden` and review the diff.

use std::path::{Path, PathBuf};

use tenantci::runner::gitlab_config::entry::example_entry;
use tenantci::runner::gitlab_config::{Action, MergeOptions, keys, merge};

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
