//! Pure merge of one [`RunnerEntry`] into a config.toml document (toml_edit).
//!
//! Everything outside our entry — comments, key order, `concurrent`, other runners, keys we do
//! not know — is kept byte for byte. Inside our entry (found by `name`) tenantci owns the keys
//! [`RunnerEntry::fields`] can write: it sets those it has, removes owned keys it no longer
//! has, and leaves every other key (`[runners.cache]`, `environment`, ...) alone. A value that
//! is already right is not touched, so a second merge returns the same text. No I/O here.
//! `[runners.kubernetes.autoscaler]` is owned only in native pause-pod mode (see
//! [`super::entry::Autoscaler`]).
//!
//! [`existing_token`] and [`keeps_native_pause_pods`] read what an existing entry holds, for
//! the token and pause-pod decisions made before a merge.

use std::path::Path;

use toml_edit::{ArrayOfTables, DocumentMut, Item, Table, Value};

use super::entry::{EXECUTOR_KUBERNETES, Field, RunnerEntry, TlsCaFile};
use super::keys;
use tenantci_core::{Error, Result};

/// What the merge did to the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// There was no config.toml (or it was blank): a new file.
    Created,
    /// The file had no runner with our name: the entry was appended.
    Added,
    /// Our entry existed and some owned key differed.
    Updated,
    /// Nothing differed: the text is byte-identical and nothing must be written.
    Unchanged,
}

/// Options that change what the merge accepts.
#[derive(Debug, Clone, Copy, Default)]
pub struct MergeOptions {
    /// Take over an entry with our name even when it uses another executor.
    pub force: bool,
}

/// The merge's result: the new text and whether it differs from the old.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The whole new config.toml.
    pub text: String,
    /// What the merge did; [`Action::Unchanged`] when `text` is the old text byte for byte.
    pub action: Action,
}

impl Plan {
    /// Whether the text differs from the old one, so there is something to write.
    pub fn changed(&self) -> bool {
        self.action != Action::Unchanged
    }
}

/// Computes the new config.toml. `existing` is the current text (`None`: no file); `path`
/// only names the file in messages. Validates the entry first.
pub fn plan(
    path: &Path,
    existing: Option<&str>,
    entry: &RunnerEntry,
    options: MergeOptions,
) -> Result<Plan> {
    entry.validate()?;
    let blank = existing.is_none_or(|t| t.trim().is_empty());
    let mut doc = if blank {
        let mut doc = DocumentMut::new();
        doc.insert(
            keys::CONCURRENT,
            toml_edit::value(i64::from(entry.limit.max(1))),
        );
        doc
    } else {
        parse(path, existing.unwrap_or_default())?
    };
    let merged = merge(path, &mut doc, entry, options)?;
    let text = doc.to_string();
    let action = if blank {
        Action::Created
    } else if Some(text.as_str()) == existing {
        Action::Unchanged
    } else if merged {
        Action::Updated
    } else {
        Action::Added
    };
    Ok(Plan { text, action })
}

/// Parses config.toml; a syntax error names the line and column, never quoting the file
/// (which may hold tokens).
pub fn parse(path: &Path, text: &str) -> Result<DocumentMut> {
    text.parse::<DocumentMut>().map_err(|e| {
        let (line, column) = e
            .span()
            .map(|span| line_column(text, span.start))
            .unwrap_or((1, 1));
        Error::bad_input(format!(
            "`{}` is not valid TOML at line {line}, column {column}: {}",
            path.display(),
            e.message().trim_end()
        ))
        .hint("fix the file by hand (gitlab-runner would refuse it too); it was not changed")
    })
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    (
        line,
        String::from_utf8_lossy(&before[line_start..])
            .chars()
            .count()
            + 1,
    )
}

/// Merges `entry` into `doc`; returns whether an entry with its name already existed.
pub fn merge(
    path: &Path,
    doc: &mut DocumentMut,
    entry: &RunnerEntry,
    options: MergeOptions,
) -> Result<bool> {
    let root = doc.as_table_mut();
    if !root.contains_key(keys::RUNNERS) {
        root.insert(keys::RUNNERS, Item::ArrayOfTables(ArrayOfTables::new()));
    }
    let Some(runners) = root
        .get_mut(keys::RUNNERS)
        .and_then(Item::as_array_of_tables_mut)
    else {
        return Err(Error::bad_input(format!(
            "`runners` in `{}` is not an array of tables",
            path.display()
        ))
        .hint("gitlab-runner expects [[runners]] sections; fix the file by hand"));
    };
    let matching: Vec<usize> = runners
        .iter()
        .enumerate()
        .filter(|(_, t)| t.get(keys::NAME).and_then(Item::as_str) == Some(entry.name.as_str()))
        .map(|(i, _)| i)
        .collect();
    let fields = entry.fields();
    match matching.as_slice() {
        [] => {
            let mut table = Table::new();
            table.decor_mut().set_prefix("\n");
            apply(&mut table, &fields, &entry.owned(), 1);
            runners.push(table);
            Ok(false)
        }
        [index] => {
            let table = runners.get_mut(*index).expect("index from iter");
            let executor = table.get(keys::EXECUTOR).map(|i| i.as_str());
            if let Some(other) = executor
                && other != Some(EXECUTOR_KUBERNETES) && !options.force {
                    return Err(Error::bad_input(format!(
                        "the runner `{}` in `{}` uses executor `{}`, not kubernetes",
                        entry.name,
                        path.display(),
                        other.unwrap_or("(not a string)")
                    ))
                    .hint("choose another --name, or pass --force to turn it into a kubernetes runner"));
                }
            drop_managed_ca_file(table, &entry.tls_ca_file);
            apply(table, &fields, &entry.owned(), 1);
            Ok(true)
        }
        _ => Err(Error::bad_input(format!(
            "`{}` has {} runners named `{}`",
            path.display(),
            matching.len(),
            entry.name
        ))
        .hint("runner names must be unique for tenantci to find its entry; rename or remove the extras")),
    }
}

/// Removes `tls-ca-file` when it is tenantci's managed copy and no longer wanted; an
/// operator's own path stays ([`TlsCaFile`]).
fn drop_managed_ca_file(table: &mut Table, tls_ca_file: &TlsCaFile) {
    if let TlsCaFile::RemoveIfManaged(managed) = tls_ca_file {
        let current = table.get(keys::TLS_CA_FILE).and_then(Item::as_str);
        if current.map(Path::new) == Some(managed.as_path()) {
            table.remove(keys::TLS_CA_FILE);
        }
    }
}

/// Indentation in gitlab-runner's own style: two spaces per table level.
fn indent(depth: usize) -> String {
    "  ".repeat(depth)
}

/// The indentation keys of `table` already use, or gitlab-runner's for `depth`.
fn key_indent(table: &Table, depth: usize) -> String {
    table
        .iter()
        .filter(|(_, item)| item.is_value())
        .find_map(|(key, _)| {
            let prefix = table.key(key)?.leaf_decor().prefix()?.as_str()?.to_string();
            prefix
                .chars()
                .all(|c| c == ' ' || c == '\t')
                .then_some(prefix)
        })
        .unwrap_or_else(|| indent(depth))
}

/// Makes `table` (at `depth`: 1 for `[[runners]]`) hold `fields` for the keys in `owned`;
/// other keys stay as they are.
fn apply(
    table: &mut Table,
    fields: &[(&'static str, Field)],
    owned: &[&'static str],
    depth: usize,
) {
    for key in owned {
        let wanted = fields.iter().any(|(k, _)| k == key);
        if !wanted {
            table.remove(key);
        }
    }
    let key_prefix = key_indent(table, depth);
    for (key, field) in fields {
        let existed = table.contains_key(key);
        match field {
            Field::Str(s) => set_value(table, key, Value::from(s.as_str())),
            Field::Datetime(d) => set_value(table, key, Value::from(*d)),
            Field::Int(i) => set_value(table, key, Value::from(*i)),
            Field::Bool(b) => set_value(table, key, Value::from(*b)),
            Field::StrArray(items) => set_value(
                table,
                key,
                Value::Array(items.iter().map(String::as_str).collect()),
            ),
            Field::StrTable(map) => set_str_table(table, key, map, depth + 1),
            Field::Table { fields, owned } => {
                let is_table = matches!(table.get(key), Some(Item::Table(_)));
                if !is_table {
                    let mut sub = match table.remove(key) {
                        Some(Item::Value(Value::InlineTable(inline))) => inline.into_table(),
                        _ => Table::new(),
                    };
                    sub.set_implicit(false);
                    sub.decor_mut().set_prefix(indent(depth));
                    table.insert(key, Item::Table(sub));
                }
                let Some(Item::Table(sub)) = table.get_mut(key) else {
                    unreachable!("inserted above")
                };
                apply(sub, fields, owned, depth + 1);
                if sub.is_empty() {
                    table.remove(key);
                }
            }
            Field::TableArray { tables, owned } => {
                set_table_array(table, key, tables, owned, depth);
            }
        }
        // A table key's decor sits inside its `[header]`; indent only `key = value` lines.
        if !existed
            && table.get(key).is_some_and(Item::is_value)
            && let Some(mut k) = table.key_mut(key)
        {
            k.leaf_decor_mut().set_prefix(key_prefix.as_str());
        }
    }
}

/// Makes `table[key]` a `[[...]]` array of exactly `tables.len()` tables, merging each into
/// the one already at its index (comments and keys we do not own survive there).
fn set_table_array(
    table: &mut Table,
    key: &str,
    tables: &[Vec<(&'static str, Field)>],
    owned: &[&'static str],
    depth: usize,
) {
    if !matches!(table.get(key), Some(Item::ArrayOfTables(_))) {
        // An inline `key = [{...}]` or a wrong type: replaced, as any owned value would be.
        table.remove(key);
        if tables.is_empty() {
            return;
        }
        table.insert(key, Item::ArrayOfTables(ArrayOfTables::new()));
    }
    let Some(Item::ArrayOfTables(array)) = table.get_mut(key) else {
        unreachable!("inserted above")
    };
    while array.len() > tables.len() {
        array.remove(array.len() - 1);
    }
    for (i, fields) in tables.iter().enumerate() {
        if i == array.len() {
            let mut new = Table::new();
            new.decor_mut().set_prefix(indent(depth));
            array.push(new);
        }
        let element = array.get_mut(i).expect("pushed above");
        apply(element, fields, owned, depth + 1);
    }
    if array.is_empty() {
        table.remove(key);
    }
}

fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(a, b)| same_value(a, b))
        }
        (Value::String(x), Value::String(y)) => x.value() == y.value(),
        (Value::Integer(x), Value::Integer(y)) => x.value() == y.value(),
        (Value::Boolean(x), Value::Boolean(y)) => x.value() == y.value(),
        (Value::Datetime(x), Value::Datetime(y)) => x.value() == y.value(),
        _ => false,
    }
}

/// Sets a scalar, keeping the old value's decor (a trailing comment) when it changes.
fn set_value(table: &mut Table, key: &str, mut new: Value) {
    if let Some(Item::Value(old)) = table.get_mut(key) {
        if same_value(old, &new) {
            return;
        }
        *new.decor_mut() = old.decor().clone();
        *old = new;
        return;
    }
    table.insert(key, Item::Value(new));
}

fn set_str_table(
    table: &mut Table,
    key: &str,
    map: &std::collections::BTreeMap<String, String>,
    depth: usize,
) {
    if map.is_empty() {
        table.remove(key);
        return;
    }
    if let Some(existing) = table.get(key).and_then(Item::as_table_like) {
        let current: Option<std::collections::BTreeMap<String, String>> = existing
            .iter()
            .map(|(k, v)| v.as_str().map(|s| (k.to_string(), s.to_string())))
            .collect();
        if current.as_ref() == Some(map) {
            return;
        }
    }
    let inline = matches!(table.get(key), Some(Item::Value(Value::InlineTable(_))));
    let mut sub = Table::new();
    for (k, v) in map {
        sub.insert(k, toml_edit::value(v.as_str()));
        if let Some(mut key) = sub.key_mut(k) {
            key.leaf_decor_mut().set_prefix(indent(depth));
        }
    }
    if inline {
        table.insert(key, toml_edit::value(sub.into_inline_table()));
    } else {
        let position = table
            .get(key)
            .and_then(Item::as_table)
            .and_then(Table::position);
        sub.set_position(position);
        sub.decor_mut().set_prefix(indent(depth - 1));
        table.insert(key, Item::Table(sub));
    }
}

/// Fuzz entry point (fuzz/fuzz_targets/merge.rs and a proptest call it): merging into any
/// input must return `Ok` or a bad-input error, never panic, and be idempotent; with and
/// without native pause pods.
#[doc(hidden)]
pub fn fuzz_merge(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for entry in [
        super::entry::example_entry(),
        super::entry::example_native_entry(),
    ] {
        fuzz_merge_entry(text, &entry);
    }
}

fn fuzz_merge_entry(text: &str, entry: &RunnerEntry) {
    let path = Path::new("config.toml");
    match plan(path, Some(text), entry, MergeOptions { force: true }) {
        Ok(first) => {
            let second = plan(path, Some(&first.text), entry, MergeOptions { force: true })
                .expect("our own output must merge again");
            assert_eq!(
                second.action,
                Action::Unchanged,
                "second merge must be a no-op"
            );
            assert_eq!(second.text, first.text);
        }
        Err(e) => assert_eq!(e.exit_code(), 2, "{e:?}"),
    }
}

/// The `token` of the runner named `name` in `text`, if it parses and has one; lets a re-run
/// reuse a runner created earlier instead of creating another in GitLab.
pub fn existing_token(text: &str, name: &str) -> Option<String> {
    let doc = text.parse::<DocumentMut>().ok()?;
    doc.get(keys::RUNNERS)?
        .as_array_of_tables()?
        .iter()
        .find(|t| t.get(keys::NAME).and_then(Item::as_str) == Some(name))?
        .get(keys::TOKEN)?
        .as_str()
        .filter(|t| !t.is_empty() && *t != super::entry::PENDING_TOKEN)
        .map(str::to_string)
}

/// Whether the runner named `name` in `text` keeps pause pods of its own: its
/// `[runners.kubernetes.autoscaler]` has a policy with `idle_count` or `scale_factor` above 0
/// (how gitlab-runner computes the pause pods it wants). Text that does not parse: `false`
/// (the merge reports it).
pub fn keeps_native_pause_pods(text: &str, name: &str) -> bool {
    let Ok(doc) = text.parse::<DocumentMut>() else {
        return false;
    };
    let policies = doc
        .get(keys::RUNNERS)
        .and_then(Item::as_array_of_tables)
        .and_then(|runners| {
            runners
                .iter()
                .find(|t| t.get(keys::NAME).and_then(Item::as_str) == Some(name))
        })
        .and_then(|t| t.get(keys::KUBERNETES))
        .and_then(|k| k.get(keys::AUTOSCALER))
        .and_then(|a| a.get(keys::POLICY));
    let positive = |p: &dyn toml_edit::TableLike| {
        let number = |key| {
            p.get(key)
                .and_then(|v| v.as_integer().map(|i| i as f64).or_else(|| v.as_float()))
        };
        number(keys::IDLE_COUNT).is_some_and(|n| n > 0.0)
            || number(keys::SCALE_FACTOR).is_some_and(|n| n > 0.0)
    };
    match policies {
        Some(Item::ArrayOfTables(array)) => array.iter().any(|t| positive(t)),
        Some(Item::Value(Value::Array(array))) => array
            .iter()
            .filter_map(Value::as_inline_table)
            .any(|t| positive(t)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gitlab::config::entry::{
        Autoscaler, NativePausePods, example_entry, example_native_entry,
    };

    fn merged(existing: Option<&str>, entry: &RunnerEntry) -> Plan {
        plan(
            Path::new("config.toml"),
            existing,
            entry,
            MergeOptions::default(),
        )
        .unwrap()
    }

    fn with(autoscaler: Autoscaler) -> RunnerEntry {
        let mut e = example_entry();
        e.kubernetes.autoscaler = autoscaler;
        e
    }

    #[test]
    fn tls_ca_file_is_written_and_only_the_managed_copy_removed() {
        let managed = std::path::PathBuf::from("/etc/gitlab-runner/tenant-a/gitlab-ca.crt");
        let mut entry = example_entry();
        entry.tls_ca_file = TlsCaFile::Set(managed.clone());
        let with_ca = merged(None, &entry).text;
        assert!(with_ca.contains("tls-ca-file = \"/etc/gitlab-runner/tenant-a/gitlab-ca.crt\""));
        assert_eq!(merged(Some(&with_ca), &entry).action, Action::Unchanged);

        entry.tls_ca_file = TlsCaFile::RemoveIfManaged(managed.clone());
        let without = merged(Some(&with_ca), &entry).text;
        assert!(!without.contains("tls-ca-file"), "{without}");
        assert_eq!(without, merged(None, &example_entry()).text);

        // The operator's own path is not tenantci's to remove.
        let own = with_ca.replace("tenant-a/gitlab-ca.crt", "corp-ca.pem");
        let kept = merged(Some(&own), &entry);
        assert_eq!(kept.action, Action::Unchanged);
        assert!(
            kept.text
                .contains("tls-ca-file = \"/etc/gitlab-runner/corp-ca.pem\"")
        );
    }

    #[test]
    fn native_autoscaler_follows_the_count_and_switching_off_restores_the_plain_entry() {
        let plain = merged(None, &example_entry()).text;
        let native = merged(Some(&plain), &example_native_entry());
        assert_eq!(native.action, Action::Updated);
        assert!(native.text.contains("max_pause_pods = 2"));

        let mut three = NativePausePods::new(3);
        three.idle_time = "45m".into();
        three.periods = vec!["* 8-17 * * mon-fri".into(), "* * * * sat".into()];
        let resized = merged(Some(&native.text), &with(Autoscaler::Native(three.clone())));
        assert_eq!(resized.action, Action::Updated);
        for line in [
            "max_pause_pods = 3",
            "idle_count = 3",
            "idle_time = \"45m\"",
            "periods = [\"* 8-17 * * mon-fri\", \"* * * * sat\"]",
        ] {
            assert!(resized.text.contains(line), "{line}:\n{}", resized.text);
        }
        assert_eq!(
            merged(Some(&resized.text), &with(Autoscaler::Native(three))).action,
            Action::Unchanged
        );

        let off = merged(Some(&resized.text), &with(Autoscaler::Remove));
        assert_eq!(off.text, plain, "nothing of tenantci's autoscaler is left");
        assert_eq!(
            merged(Some(&off.text), &with(Autoscaler::Remove)).action,
            Action::Unchanged
        );
    }

    #[test]
    fn native_autoscaler_left_alone_without_the_flag() {
        let native = merged(None, &example_native_entry()).text;
        let again = merged(Some(&native), &example_entry());
        assert_eq!(again.action, Action::Unchanged);
        assert_eq!(again.text, native);
    }

    #[test]
    fn native_autoscaler_replaces_an_inline_policy_list() {
        let plain = merged(None, &example_entry()).text;
        let inline = format!(
            "{plain}    [runners.kubernetes.autoscaler]\n      policy = [{{ idle_count = 9 }}]\n"
        );
        assert!(keeps_native_pause_pods(&inline, "tenant-a"));
        let p = merged(Some(&inline), &example_native_entry());
        assert!(!p.text.contains("idle_count = 9"), "{}", p.text);
        let doc: DocumentMut = p.text.parse().unwrap();
        assert!(keys::check_document(&doc).is_empty());
        let policy = &doc["runners"][0]["kubernetes"]["autoscaler"]["policy"];
        assert_eq!(policy.as_array_of_tables().unwrap().len(), 1);
        assert_eq!(
            merged(Some(&p.text), &example_native_entry()).action,
            Action::Unchanged
        );
    }

    #[test]
    fn native_autoscaler_detection_counts_only_policies_that_want_pods() {
        let entry = |autoscaler: &str| {
            format!(
                "[[runners]]\nname = \"r\"\n[runners.kubernetes]\n[runners.kubernetes.autoscaler]\n{autoscaler}"
            )
        };
        let idle = entry("[[runners.kubernetes.autoscaler.policy]]\nidle_count = 0\n");
        assert!(!keeps_native_pause_pods(&idle, "r"));
        assert!(!keeps_native_pause_pods(
            &entry("max_pause_pods = 4\n"),
            "r"
        ));
        let scaled = entry("[[runners.kubernetes.autoscaler.policy]]\nscale_factor = 0.5\n");
        assert!(keeps_native_pause_pods(&scaled, "r"));
        assert!(!keeps_native_pause_pods(&scaled, "other-runner"));
        assert!(!keeps_native_pause_pods("not = [toml", "r"));
    }
}
