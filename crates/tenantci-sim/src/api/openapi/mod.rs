//! OpenAPI v3 as kube-apiserver publishes it: `/openapi/v3` lists one document per
//! group-version (`api/v1`, `apis/apps/v1`) with a content hash, and each document holds the
//! paths and component schemas of that group-version's kinds. kubectl reads them for
//! `explain`, for client-side apply's patch computation, and to learn that the server
//! validates fields itself (`fieldValidation`). The same schemas drive that validation
//! (`fields`).
//!
//! Built once per registry, on first use (the tenant registry's documents are shared by every
//! tenant apiserver), and kept as the serialized bytes served plus the schemas validation
//! walks.

pub mod fields;
mod paths;
mod schemas;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use bytes::Bytes;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::registry::{self, ResourceDef};

/// One registry's OpenAPI v3 documents.
pub struct Documents {
    /// The `/openapi/v3` body.
    discovery: Bytes,
    /// `api/v1` / `apis/<group>/<version>` -> document body.
    by_group_version: HashMap<String, Bytes>,
    /// Every component schema without descriptions, for field validation.
    pub schemas: Map<String, Value>,
    /// Resource key (`pods`) -> its kind's component schema name.
    kind_schema: HashMap<&'static str, String>,
}

impl Documents {
    /// The `/openapi/v3` body: each group-version's document URL, with its content hash.
    pub fn discovery(&self) -> Bytes {
        self.discovery.clone()
    }

    /// The document at `/openapi/v3/<path>`.
    pub fn group_version(&self, path: &str) -> Option<Bytes> {
        self.by_group_version.get(path).cloned()
    }

    /// The component schema of `def`'s kind.
    pub fn kind(&self, def: &ResourceDef) -> Option<&Value> {
        self.kind_schema
            .get(def.key)
            .and_then(|n| self.schemas.get(n))
    }
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn hash(body: &[u8]) -> String {
    hex::encode_upper(&Sha256::digest(body)[..16])
}

/// Drops the prose from a schema kept for validation only (most of its size).
fn strip_descriptions(schema: &mut Value) {
    match schema {
        Value::Object(m) => {
            if m.get("description").is_some_and(Value::is_string) {
                m.remove("description");
            }
            m.values_mut().for_each(strip_descriptions);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_descriptions),
        _ => {}
    }
}

fn build(registry: &'static [ResourceDef]) -> Documents {
    let mut by_group_version = HashMap::new();
    let mut listing = Map::new();
    let mut all = Map::new();
    let mut kind_schema = HashMap::new();
    for (group, version) in registry::groups(registry) {
        let defs: Vec<&'static ResourceDef> = registry
            .iter()
            .filter(|d| d.group == group && d.version == version)
            .collect();
        let (mut components, names) = schemas::components(&defs);
        components.insert(
            "io.k8s.apimachinery.pkg.apis.meta.v1.Patch".into(),
            paths::patch_schema(),
        );
        let mut path_items = Map::new();
        for (def, name) in defs.iter().zip(&names) {
            paths::for_resource(def, name, &mut path_items);
            kind_schema.insert(def.key, name.clone());
        }
        let doc = json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": super::discovery::version()["gitVersion"]},
            "paths": path_items,
            "components": {"schemas": components},
        });
        let body = Bytes::from(serde_json::to_vec(&doc).unwrap_or_default());
        let path = gv_path(group, version);
        listing.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", hash(&body))}),
        );
        by_group_version.insert(path, body);
        if let Value::Object(mut c) = doc["components"]["schemas"].clone() {
            c.values_mut().for_each(strip_descriptions);
            all.extend(c);
        }
    }
    let discovery = Bytes::from(serde_json::to_vec(&json!({"paths": listing})).unwrap_or_default());
    Documents {
        discovery,
        by_group_version,
        schemas: all,
        kind_schema,
    }
}

/// The documents of `registry`, built on first use and shared by every apiserver serving it.
pub fn documents(registry: &'static [ResourceDef]) -> &'static Documents {
    static BUILT: OnceLock<Mutex<Vec<(usize, &'static Documents)>>> = OnceLock::new();
    let id = registry.as_ptr() as usize;
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some((_, d)) = built.iter().find(|(i, _)| *i == id) {
        return d;
    }
    let docs: &'static Documents = Box::leak(Box::new(build(registry)));
    built.push((id, docs));
    docs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::registry::TENANT;

    #[test]
    fn discovery_lists_every_group_version_with_its_hash() {
        let docs = documents(TENANT);
        let listing: Value = serde_json::from_slice(&docs.discovery()).unwrap();
        for (group, version) in registry::groups(TENANT) {
            let path = gv_path(group, version);
            let url = listing["paths"][&path]["serverRelativeURL"]
                .as_str()
                .unwrap_or_else(|| panic!("{path} missing: {listing}"));
            let body = docs.group_version(&path).unwrap();
            assert_eq!(url, format!("/openapi/v3/{path}?hash={}", hash(&body)));
        }
        let apps: Value =
            serde_json::from_slice(&docs.group_version("apis/apps/v1").unwrap()).unwrap();
        let patch =
            &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "Deployment"
        );
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
        assert!(apps["components"]["schemas"]["io.k8s.api.apps.v1.DeploymentSpec"].is_object());
    }
}
