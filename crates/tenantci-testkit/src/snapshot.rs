//! "Nothing changed" for the tests of refused input: the files under a directory (contents and
//! modes) and the objects of a (simulated) apiserver, taken before and after a command.
//!
//! Boundary: reads only. The cluster side is kubectl with the caller's kubeconfig; the
//! simulator's store stamps every write with one global resourceVersion, so an equal
//! [`ClusterSnapshot::revision`] means no object was created, changed or deleted.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::kube::Kubectl;

/// Every entry under `dir` (not `dir` itself) with its contents: a file's bytes, a symlink's
/// target (never followed: it may name `/dev/zero`), a marker for a FIFO or device (reading it
/// would block or never end). Sorted; empty when `dir` does not exist.
pub fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    entries(dir)
        .into_iter()
        .map(|e| (e.path, e.contents))
        .collect()
}

/// [`files`] with each entry's permission bits: a chmod is a change too.
pub fn files_and_modes(dir: &Path) -> Vec<(PathBuf, u32, Vec<u8>)> {
    entries(dir)
        .into_iter()
        .map(|e| (e.path, e.mode, e.contents))
        .collect()
}

struct Entry {
    path: PathBuf,
    mode: u32,
    contents: Vec<u8>,
}

fn entries(dir: &Path) -> Vec<Entry> {
    let mut out = Vec::new();
    if !dir.exists() {
        return out;
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let kind = meta.file_type();
            let contents = if kind.is_dir() {
                stack.push(path.clone());
                Vec::new()
            } else if kind.is_file() {
                std::fs::read(&path).unwrap()
            } else if kind.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                target.into_os_string().into_encoded_bytes()
            } else {
                b"(not a regular file)".to_vec()
            };
            let mode = meta.permissions().mode() & 0o7777;
            out.push(Entry {
                path,
                mode,
                contents,
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// The kinds a tenantci command writes in a tenant cluster, listed by name so a failed
/// comparison says which object appeared or went.
const KINDS: &str = "namespaces,clusterroles,clusterrolebindings,roles,rolebindings,serviceaccounts,secrets,configmaps,deployments,priorityclasses,pods";

/// A cluster's state as a test compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSnapshot {
    /// The store's resourceVersion: any write anywhere changes it.
    pub revision: String,
    /// `kind/name` (namespaced ones prefixed `namespace/`) of the `KINDS`.
    pub objects: Vec<String>,
}

impl ClusterSnapshot {
    /// Takes it with kubectl as the identity of `kubeconfig` (a tenant admin).
    pub fn take(kubectl: &Kubectl) -> Self {
        let raw = kubectl.run(&["get", "--raw", "/api/v1/namespaces"]);
        assert!(
            raw.status.success(),
            "{}",
            String::from_utf8_lossy(&raw.stderr)
        );
        let list: serde_json::Value = serde_json::from_slice(&raw.stdout).unwrap();
        let revision = list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let template =
            "{range .items[*]}{.kind}/{.metadata.namespace}/{.metadata.name}{\"\\n\"}{end}";
        let o = kubectl.run(&["get", KINDS, "-A", "-o", &format!("jsonpath={template}")]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let mut objects: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        objects.sort();
        ClusterSnapshot { revision, objects }
    }
}
