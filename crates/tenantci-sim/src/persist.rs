//! A tenant apiserver's objects on disk, as etcd keeps them for kube-apiserver: stopping and
//! starting `tenantci sim` on the same state directory brings every object back, with
//! resourceVersions that go on from where they were (a watch from before the restart gets
//! 410 Gone and lists again, as after an etcd compaction).
//!
//! One file per cluster, `<state>/clusters/<name>/objects.json`, 0600 (Secrets are in it),
//! replaced atomically (`fsutil::write_atomic`) after every burst of writes and at shutdown;
//! read back with a size bound. A file this build cannot read is one error naming it, never a
//! silently empty cluster. `--in-memory` (SimConfig::persist = false) skips all of it.
//!
//! Durability: a write is on disk once the persister's next pass ends (it starts as soon as
//! the write is made, and coalesces the writes made meanwhile); kill -9 can lose that pass.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{broadcast, watch};

use crate::api::ApiServer;
use crate::api::registry::ResourceDef;
use crate::store::Store;
use tenantci_core::fsutil::{self, MODE_SECRET};
use tenantci_core::gateway::StateDir;
use tenantci_core::{Error, Result};

/// The file's name in the cluster's directory.
pub const FILE: &str = "objects.json";
/// Largest file read back: far above any test or demo; a bound, so a wrong file cannot
/// exhaust memory.
pub const MAX_BYTES: u64 = 512 << 20;
/// The format this build writes and reads.
const FORMAT: u32 = 1;

/// Cluster `cluster`'s object file: `<state>/clusters/<cluster>/objects.json`.
pub fn path(state: &StateDir, cluster: &str) -> PathBuf {
    state.cluster(cluster).dir.join(FILE)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Out<'a> {
    format: u32,
    resource_version: String,
    objects: Vec<Entry<&'a Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct In {
    format: u32,
    resource_version: String,
    objects: Vec<Entry<Value>>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry<V> {
    resource: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    namespace: String,
    name: String,
    object: V,
}

/// The store's objects as the file's bytes.
pub fn encode(store: &Store) -> Vec<u8> {
    let (rv, objects) = store.snapshot();
    let out = Out {
        format: FORMAT,
        resource_version: rv.to_string(),
        objects: objects
            .iter()
            .map(|(resource, (ns, name), obj)| Entry {
                resource: resource.to_string(),
                namespace: ns.clone(),
                name: name.clone(),
                object: &**obj,
            })
            .collect(),
    };
    serde_json::to_vec(&out).expect("JSON values serialize")
}

/// A store from the file's bytes; `Err` says what is wrong with them.
pub fn decode(
    bytes: &[u8],
    registry: &'static [ResourceDef],
) -> std::result::Result<Store, String> {
    let file: In = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if file.format != FORMAT {
        return Err(format!(
            "it has format {}; this build reads format {FORMAT}",
            file.format
        ));
    }
    let rv: u64 = file
        .resource_version
        .parse()
        .map_err(|_| "its resourceVersion is not a number".to_string())?;
    let mut objects = Vec::with_capacity(file.objects.len());
    for e in file.objects {
        let Some(def) = registry.iter().find(|d| d.key == e.resource) else {
            return Err(format!(
                "it holds a resource this simulator does not serve, `{}`",
                tenantci_core::input::shown(&e.resource)
            ));
        };
        objects.push((def.key, (e.namespace, e.name), e.object));
    }
    Ok(Store::restore(rv, objects))
}

/// The saved store of a cluster, or `None` when there is no file yet (a first start).
pub fn load(path: &Path, registry: &'static [ResourceDef]) -> Result<Option<Store>> {
    if !path.exists() {
        return Ok(None);
    }
    let bytes = tenantci_core::input::read_bytes("the simulator's object file", path, MAX_BYTES)?;
    decode(&bytes, registry).map(Some).map_err(|why| {
        Error::bad_input(format!(
            "the simulator's object file `{}` cannot be read back: {why}",
            path.display()
        ))
        .hint(format!(
            "move it aside to start the cluster empty (`mv {0} {0}.bad`), or pass --in-memory",
            path.display()
        ))
    })
}

/// Writes `store`'s objects to `path` (replaced atomically, mode 0600: Secrets are in it).
pub fn save(path: &Path, store: &Store) -> Result<()> {
    fsutil::write_atomic(path, &encode(store), MODE_SECRET)
        .map_err(|e| Error::unwritable("the simulator's object file", path, e))
}

/// Saves `api`'s objects to `path` after every burst of writes until `stop`, then once more.
pub async fn run(api: Arc<ApiServer>, path: PathBuf, mut stop: watch::Receiver<bool>) {
    let mut changes = api.store.subscribe();
    let save_now = |api: &ApiServer| {
        if let Err(e) = save(&path, &api.store) {
            tracing::error!(error = %e.render(), "cannot save the simulator's objects");
        }
    };
    save_now(&api);
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            ev = changes.recv() => {
                if matches!(ev, Err(broadcast::error::RecvError::Closed)) {
                    break;
                }
                // Writes made until now go into this one save.
                while changes.try_recv().is_ok() {}
                save_now(&api);
            }
        }
    }
    save_now(&api);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::registry;
    use serde_json::json;

    #[test]
    fn objects_and_versions_round_trip() {
        let s = Store::new();
        s.create(
            "configmaps",
            "ns",
            "c",
            json!({"metadata": {"name": "c"}, "data": {"k": "v"}}),
        )
        .unwrap();
        s.create("namespaces", "", "ns", json!({"metadata": {"name": "ns"}}))
            .unwrap();
        let back = decode(&encode(&s), registry::TENANT).unwrap();
        assert_eq!(back.resource_version(), s.resource_version());
        assert_eq!(back.get("configmaps", "ns", "c").unwrap()["data"]["k"], "v");
        assert!(back.get("namespaces", "", "ns").is_some());
    }

    #[test]
    fn a_damaged_file_says_what_is_wrong() {
        for (bytes, says) in [
            (&b"{\"format\":1,"[..], "EOF"),
            (br#"{"format":2,"resourceVersion":"1","objects":[]}"#, "format 2"),
            (
                br#"{"format":1,"resourceVersion":"1","objects":[{"resource":"widgets","name":"w","object":{}}]}"#,
                "`widgets`",
            ),
        ] {
            let Err(why) = decode(bytes, registry::TENANT) else {
                panic!("decoded {}", String::from_utf8_lossy(bytes))
            };
            assert!(why.contains(says), "{why}");
        }
    }
}
