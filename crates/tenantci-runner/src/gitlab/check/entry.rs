//! The `[[runners]]` entry as `runner check` reads it: only the keys it checks, each optional
//! (an operator's file may lack any of them). Pure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item, Table};

use crate::checklist::Check;
use crate::gitlab::config::keys;

/// The `executor` value of the entries `runner check` checks.
pub const EXECUTOR: &str = "kubernetes";
/// gitlab-runner's namespace when the entry names none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// One `[[runners]]` entry's keys that `runner check` reads; `None` where the entry lacks the key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryView {
    /// `name`; empty when missing.
    pub name: String,
    /// `url`: the GitLab URL.
    pub url: Option<String>,
    /// `token`: the runner token, or a `$VAR` reference to one.
    pub token: Option<String>,
    /// `tls-ca-file`: the CA gitlab-runner trusts for GitLab.
    pub tls_ca_file: Option<PathBuf>,
    /// `executor`; only `kubernetes` entries are checked further.
    pub executor: Option<String>,
    /// `[runners.kubernetes] host`: the tenant apiserver's URL.
    pub host: Option<String>,
    /// `[runners.kubernetes] cert_file`: the client certificate.
    pub cert_file: Option<PathBuf>,
    /// `[runners.kubernetes] key_file`: its private key.
    pub key_file: Option<PathBuf>,
    /// `[runners.kubernetes] ca_file`: the serving CA that verifies `host`.
    pub ca_file: Option<PathBuf>,
    /// `[runners.kubernetes] namespace`, or [`DEFAULT_NAMESPACE`] when missing.
    pub namespace: String,
    /// gitlab-runner resource keys (`cpu_request`, ...) to quantities.
    pub resources: BTreeMap<String, String>,
    /// `max_pause_pods` of `[runners.kubernetes.autoscaler]`: gitlab-runner keeps its own
    /// pause pods.
    pub native_pause_pods: Option<i64>,
    /// `id`: the runner's id at GitLab (written when the runner was created through the API).
    pub id: Option<i64>,
    /// `limit`: jobs this entry runs at once (0: only `concurrent` bounds it).
    pub limit: Option<i64>,
    /// `request_concurrency`: job requests in flight to GitLab.
    pub request_concurrency: Option<i64>,
    /// The file's top-level `concurrent`: jobs all its entries run at once.
    pub concurrent: Option<i64>,
}

/// The entry named `name`, or the only kubernetes entry; a [`Check`] saying what is wrong
/// otherwise.
pub fn find(path: &Path, text: &str, name: Option<&str>) -> Result<EntryView, Check> {
    let fail = |detail: String, fix: &str| Check::fail("entry", detail, fix);
    let doc: DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        fail(
            format!("`{}` is not valid TOML: {}", path.display(), e.message()),
            "fix the file; gitlab-runner cannot load it either",
        )
    })?;
    let runners: Vec<&Table> = doc
        .get(keys::RUNNERS)
        .and_then(Item::as_array_of_tables)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let name_of = |t: &Table| t.get(keys::NAME).and_then(Item::as_str).map(str::to_string);
    let chosen: Vec<&Table> = match name {
        Some(name) => runners
            .iter()
            .copied()
            .filter(|t| name_of(t).as_deref() == Some(name))
            .collect(),
        None => runners
            .iter()
            .copied()
            .filter(|t| t.get(keys::EXECUTOR).and_then(Item::as_str) == Some(EXECUTOR))
            .collect(),
    };
    match (chosen.as_slice(), name) {
        ([one], _) => {
            let mut v = view(one);
            v.concurrent = doc.get(keys::CONCURRENT).and_then(Item::as_integer);
            Ok(v)
        }
        ([], Some(name)) => Err(fail(
            format!(
                "`{}` has no [[runners]] entry named `{name}`",
                path.display()
            ),
            "pass --name as written in the entry's `name`, or create it with `tenantci bootstrap runner`",
        )),
        ([], None) => Err(fail(
            format!("`{}` has no kubernetes [[runners]] entry", path.display()),
            "create one with `tenantci bootstrap runner`",
        )),
        (many, _) => Err(fail(
            format!(
                "`{}` has {} matching entries ({})",
                path.display(),
                many.len(),
                many.iter()
                    .filter_map(|t| name_of(t))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "pass --name RUNNER (names must be unique)",
        )),
    }
}

fn view(runner: &Table) -> EntryView {
    let s = |t: &Table, k: &str| t.get(k).and_then(Item::as_str).map(str::to_string);
    let p = |t: &Table, k: &str| s(t, k).map(PathBuf::from);
    let empty = Table::new();
    let kube = runner
        .get(keys::KUBERNETES)
        .and_then(Item::as_table)
        .unwrap_or(&empty);
    let resources = keys::RESOURCE_KEYS
        .iter()
        .filter_map(|k| s(kube, k).map(|v| (k.to_string(), v)))
        .collect();
    let native_pause_pods = kube
        .get(keys::AUTOSCALER)
        .and_then(Item::as_table)
        .and_then(|a| a.get(keys::MAX_PAUSE_PODS))
        .and_then(Item::as_integer);
    EntryView {
        name: s(runner, keys::NAME).unwrap_or_default(),
        url: s(runner, keys::URL),
        token: s(runner, keys::TOKEN),
        tls_ca_file: p(runner, keys::TLS_CA_FILE),
        executor: s(runner, keys::EXECUTOR),
        host: s(kube, keys::HOST),
        cert_file: p(kube, keys::CERT_FILE),
        key_file: p(kube, keys::KEY_FILE),
        ca_file: p(kube, keys::CA_FILE),
        namespace: s(kube, keys::NAMESPACE).unwrap_or_else(|| DEFAULT_NAMESPACE.into()),
        resources,
        native_pause_pods,
        id: runner.get(keys::ID).and_then(Item::as_integer),
        limit: runner.get(keys::LIMIT).and_then(Item::as_integer),
        request_concurrency: runner
            .get(keys::REQUEST_CONCURRENCY)
            .and_then(Item::as_integer),
        concurrent: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gitlab::config::entry::{example_entry, example_native_entry};
    use crate::gitlab::config::merge;

    fn text(entries: &[crate::gitlab::config::RunnerEntry]) -> String {
        let mut out: Option<String> = None;
        for e in entries {
            let plan = merge::plan(Path::new("c"), out.as_deref(), e, Default::default()).unwrap();
            out = Some(plan.text);
        }
        out.unwrap()
    }

    #[test]
    fn the_entry_written_by_tenantci_reads_back() {
        let t = text(&[example_native_entry()]);
        let v = find(Path::new("c"), &t, Some("tenant-a")).unwrap();
        assert_eq!(v.host.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(v.executor.as_deref(), Some("kubernetes"));
        assert_eq!(v.native_pause_pods, Some(2));
        assert_eq!(
            v.resources.get("cpu_request").map(String::as_str),
            Some("500m")
        );
        assert_eq!(v, find(Path::new("c"), &t, None).unwrap());
    }

    #[test]
    fn a_missing_or_ambiguous_entry_is_a_failed_check() {
        let mut other = example_entry();
        other.name = "tenant-b".into();
        let t = text(&[example_entry(), other]);
        assert!(find(Path::new("c"), &t, Some("nope")).is_err());
        let many = find(Path::new("c"), &t, None).unwrap_err();
        assert!(
            many.detail.contains("2 matching entries"),
            "{}",
            many.detail
        );
        assert!(find(Path::new("c"), &t, Some("tenant-b")).is_ok());
    }
}
