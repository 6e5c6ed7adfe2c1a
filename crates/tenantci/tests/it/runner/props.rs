//! Properties of the merge: any valid pre-existing config.toml is preserved outside our entry,
//! a second merge is a no-op, and arbitrary input never panics (the fuzz target's contract).

use std::path::Path;

use proptest::prelude::*;
use tenantci_runner::gitlab::config::entry::example_entry;
use tenantci_runner::gitlab::config::{Action, MergeOptions, merge};

fn bare_key() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_-]{0,8}"
}

fn any_key() -> impl Strategy<Value = String> {
    prop_oneof![bare_key(), "[ -~]{1,8}", "\\PC{1,4}"]
}

fn scalar() -> impl Strategy<Value = toml_edit::Value> {
    prop_oneof![
        any::<i64>().prop_map(toml_edit::Value::from),
        any::<bool>().prop_map(toml_edit::Value::from),
        "\\PC{0,12}".prop_map(|s| toml_edit::Value::from(s.as_str())),
        "[ -~\n\t\"'\\\\]{0,12}".prop_map(|s| toml_edit::Value::from(s.as_str())),
        prop::collection::vec(any::<i32>(), 0..3)
            .prop_map(|v| toml_edit::Value::Array(v.into_iter().map(i64::from).collect())),
    ]
}

fn table() -> impl Strategy<Value = Vec<(String, toml_edit::Value)>> {
    prop::collection::vec((any_key(), scalar()), 0..5)
}

/// A config.toml built with toml_edit (valid by construction), optionally with a comment
/// header, top-level keys, other runners (names never `tenant-a`) and a trailing table.
fn document() -> impl Strategy<Value = String> {
    (
        prop::option::of("# [ -~]{0,20}\n"),
        table(),
        prop::collection::vec(("[a-z]{1,6}", table()), 0..3),
        prop::option::of(table()),
    )
        .prop_map(|(comment, top, runners, trailing)| {
            let mut doc = toml_edit::DocumentMut::new();
            for (k, v) in top {
                if k != "runners" {
                    doc.insert(&k, toml_edit::Item::Value(v));
                }
            }
            let mut array = toml_edit::ArrayOfTables::new();
            for (name, fields) in runners {
                let mut t = toml_edit::Table::new();
                t.insert("name", toml_edit::value(format!("other-{name}")));
                for (k, v) in fields {
                    if k != "name" {
                        t.insert(&k, toml_edit::Item::Value(v));
                    }
                }
                array.push(t);
            }
            if !array.is_empty() {
                doc.insert("runners", toml_edit::Item::ArrayOfTables(array));
            }
            if let Some(fields) = trailing {
                let mut t = toml_edit::Table::new();
                for (k, v) in fields {
                    t.insert(&k, toml_edit::Item::Value(v));
                }
                doc.insert("zz_trailing", toml_edit::Item::Table(t));
            }
            format!("{}{}", comment.unwrap_or_default(), doc)
        })
}

/// The document's text with the runner named `tenant-a` removed.
fn without_ours(text: &str) -> String {
    let mut doc: toml_edit::DocumentMut = text.parse().unwrap();
    if let Some(array) = doc
        .get_mut("runners")
        .and_then(|i| i.as_array_of_tables_mut())
    {
        array.retain(|t| t.get("name").and_then(|n| n.as_str()) != Some("tenant-a"));
        if array.is_empty() {
            doc.remove("runners");
        }
    }
    doc.to_string()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn runner_prop_merge_preserves_everything_outside_our_entry(text in document()) {
        prop_assume!(!text.trim().is_empty());
        let path = Path::new("config.toml");
        let entry = example_entry();
        let first = merge::plan(path, Some(&text), &entry, MergeOptions::default()).unwrap();
        prop_assert_eq!(without_ours(&first.text), without_ours(&text));
        let second = merge::plan(path, Some(&first.text), &entry, MergeOptions::default()).unwrap();
        prop_assert_eq!(second.action, Action::Unchanged);
        prop_assert_eq!(second.text, first.text);
    }

    #[test]
    fn runner_prop_keys_we_do_not_own_survive_in_our_entry(
        runner_extra in table(),
        kubernetes_extra in table(),
    ) {
        use tenantci_runner::gitlab::config::keys;
        let owned = |k: &str| {
            [keys::NAME, keys::URL, keys::TOKEN, keys::EXECUTOR, keys::LIMIT,
             keys::REQUEST_CONCURRENCY, keys::KUBERNETES].contains(&k)
        };
        let owned_k8s = |k: &str| {
            keys::is_resource_key(k)
                || [keys::HOST, keys::CERT_FILE, keys::KEY_FILE, keys::CA_FILE, keys::NAMESPACE,
                    keys::POLL_TIMEOUT, keys::IMAGE, keys::HELPER_IMAGE, keys::PRIVILEGED,
                    keys::NODE_SELECTOR, keys::NODE_TOLERATIONS, keys::POD_LABELS,
                    keys::POD_SECURITY_CONTEXT].contains(&k)
        };
        let mut doc = toml_edit::DocumentMut::new();
        let mut ours = toml_edit::Table::new();
        ours.insert("name", toml_edit::value("tenant-a"));
        ours.insert("executor", toml_edit::value("kubernetes"));
        let runner_extra: Vec<_> = runner_extra.into_iter().filter(|(k, _)| !owned(k)).collect();
        let kubernetes_extra: Vec<_> =
            kubernetes_extra.into_iter().filter(|(k, _)| !owned_k8s(k)).collect();
        for (k, v) in &runner_extra {
            ours.insert(k, toml_edit::Item::Value(v.clone()));
        }
        let mut k8s = toml_edit::Table::new();
        for (k, v) in &kubernetes_extra {
            k8s.insert(k, toml_edit::Item::Value(v.clone()));
        }
        ours.insert("kubernetes", toml_edit::Item::Table(k8s));
        let mut array = toml_edit::ArrayOfTables::new();
        array.push(ours);
        doc.insert("runners", toml_edit::Item::ArrayOfTables(array));
        let text = doc.to_string();

        let entry = example_entry();
        let plan = merge::plan(Path::new("c.toml"), Some(&text), &entry, MergeOptions::default()).unwrap();
        let merged: toml_edit::DocumentMut = plan.text.parse().unwrap();
        let runner = merged["runners"][0].as_table().unwrap();
        let last = |pairs: &[(String, toml_edit::Value)], k: &str| {
            pairs.iter().rev().find(|(key, _)| key == k).map(|(_, v)| v.to_string().trim().to_string())
        };
        for (k, _) in &runner_extra {
            prop_assert_eq!(runner.get(k).and_then(|i| i.as_value()).map(|v| v.to_string().trim().to_string()), last(&runner_extra, k));
        }
        let k8s = runner["kubernetes"].as_table().unwrap();
        for (k, _) in &kubernetes_extra {
            prop_assert_eq!(k8s.get(k).and_then(|i| i.as_value()).map(|v| v.to_string().trim().to_string()), last(&kubernetes_extra, k));
        }
        let again = merge::plan(Path::new("c.toml"), Some(&plan.text), &entry, MergeOptions::default()).unwrap();
        prop_assert_eq!(again.action, Action::Unchanged);
    }

    #[test]
    fn runner_prop_merge_never_panics_on_arbitrary_text(text in "\\PC{0,200}") {
        merge::fuzz_merge(text.as_bytes());
    }

    #[test]
    fn runner_prop_merge_never_panics_on_toml_like_text(
        text in "(\\[\\[runners\\]\\]\n|\\[runners\\.kubernetes\\]\n|name = \"tenant-a\"\n|executor = \"docker\"\n|kubernetes = 1\n|runners = 2\n|[a-z.]{1,6} = [0-9\"a-z{}\\[\\]]{1,6}\n){0,8}"
    ) {
        merge::fuzz_merge(text.as_bytes());
    }

    #[test]
    fn runner_prop_names_and_values_cannot_inject_keys(
        name in "[ -~\n\"'\\\\\\[\\]=]{1,20}",
        value in "[ -~\n\"'\\\\\\[\\]=]{1,20}",
    ) {
        prop_assume!(!name.trim().is_empty());
        let mut entry = example_entry();
        entry.name = name.clone();
        entry.kubernetes.pod_labels.insert(value.clone(), value.clone());
        entry.kubernetes.image = Some(value.clone());
        let plan = merge::plan(Path::new("c.toml"), None, &entry, MergeOptions::default()).unwrap();
        let doc: toml_edit::DocumentMut = plan.text.parse().unwrap();
        let runner = &doc["runners"][0];
        prop_assert_eq!(runner["name"].as_str(), Some(name.as_str()));
        prop_assert_eq!(runner["kubernetes"]["image"].as_str(), Some(value.as_str()));
        let labels = runner["kubernetes"]["pod_labels"].as_table().unwrap();
        prop_assert_eq!(labels.len(), 1);
        prop_assert_eq!(labels[value.as_str()].as_str(), Some(value.as_str()));
        prop_assert_eq!(doc.as_table().len(), 2); // concurrent, runners
        prop_assert_eq!(runner.as_table().unwrap().len(), 7);
    }
}
