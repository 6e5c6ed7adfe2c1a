//! Component schemas of one group-version: generated from k8s-openapi's typed models (its
//! `schemars` feature) for the built-in kinds, read from the CustomResourceDefinition for the
//! gateway's `Cluster`, then marked the way kube-apiserver marks them: the
//! `x-kubernetes-group-version-kind` a client looks a kind up by, and the list-map /
//! patch-strategy extensions of the lists the simulator's strategic merge patch merges by key
//! (so kubectl computes the patches the server applies).

use k8s_openapi::api::{apps, coordination, core, networking, policy, rbac, scheduling};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

use crate::api::patch;
use crate::api::registry::ResourceDef;

/// The definitions the custom kinds' schemas come from: the admin apiserver's `Cluster` and
/// the tenant apiservers' SPIRE `ClusterStaticEntry`.
const CRDS: &[&str] = &[
    include_str!("../../../../../manifests/sim/cluster-crd.yaml"),
    include_str!("../../../../../manifests/sim/clusterstaticentry-crd.yaml"),
];

/// Component name of a CRD kind, as kube-apiserver names it (reversed group, version, kind).
fn crd_schema_name(def: &ResourceDef) -> String {
    let group: Vec<&str> = def.group.split('.').rev().collect();
    format!("{}.{}.{}", group.join("."), def.version, def.kind)
}

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// Adds `def`'s schema (and everything it references) to `generator`; returns its name.
fn add_kind(generator: &mut SchemaGenerator, def: &ResourceDef) -> Option<String> {
    fn add<T: schemars::JsonSchema>(g: &mut SchemaGenerator) -> Option<String> {
        g.subschema_for::<T>();
        Some(T::schema_name().into_owned())
    }
    match def.key {
        "namespaces" => add::<core::v1::Namespace>(generator),
        "pods" => add::<core::v1::Pod>(generator),
        "secrets" => add::<core::v1::Secret>(generator),
        "configmaps" => add::<core::v1::ConfigMap>(generator),
        "services" => add::<core::v1::Service>(generator),
        "serviceaccounts" => add::<core::v1::ServiceAccount>(generator),
        "events" => add::<core::v1::Event>(generator),
        "persistentvolumeclaims" => add::<core::v1::PersistentVolumeClaim>(generator),
        "nodes" => add::<core::v1::Node>(generator),
        "deployments.apps" => add::<apps::v1::Deployment>(generator),
        "priorityclasses.scheduling.k8s.io" => add::<scheduling::v1::PriorityClass>(generator),
        "poddisruptionbudgets.policy" => add::<policy::v1::PodDisruptionBudget>(generator),
        "networkpolicies.networking.k8s.io" => add::<networking::v1::NetworkPolicy>(generator),
        "roles.rbac.authorization.k8s.io" => add::<rbac::v1::Role>(generator),
        "clusterroles.rbac.authorization.k8s.io" => add::<rbac::v1::ClusterRole>(generator),
        "rolebindings.rbac.authorization.k8s.io" => add::<rbac::v1::RoleBinding>(generator),
        "clusterrolebindings.rbac.authorization.k8s.io" => {
            add::<rbac::v1::ClusterRoleBinding>(generator)
        }
        "leases.coordination.k8s.io" => add::<coordination::v1::Lease>(generator),
        "subjectaccessreviews.authorization.k8s.io" => {
            add::<k8s_openapi::api::authorization::v1::SubjectAccessReview>(generator)
        }
        "selfsubjectaccessreviews.authorization.k8s.io" => {
            add::<k8s_openapi::api::authorization::v1::SelfSubjectAccessReview>(generator)
        }
        _ => None,
    }
}

/// The `openAPIV3Schema` of the CRD that defines `def`, with `metadata` pointing at
/// ObjectMeta as kube-apiserver publishes CRD schemas.
fn crd_schema(generator: &mut SchemaGenerator, def: &ResourceDef) -> Option<Value> {
    let crd = CRDS.iter().find_map(|yaml| {
        let crd: CustomResourceDefinition = serde_yaml::from_str(yaml).ok()?;
        (crd.spec.group == def.group && crd.spec.names.kind == def.kind).then_some(crd)
    })?;
    let version = crd.spec.versions.iter().find(|v| v.name == def.version)?;
    let schema = version.schema.as_ref()?.open_api_v3_schema.as_ref()?;
    let mut schema = serde_json::to_value(schema).ok()?;
    generator.subschema_for::<ObjectMeta>();
    schema["properties"]["metadata"] = json!({
        "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
        "allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}],
    });
    Some(schema)
}

/// The component schemas of the kinds in `defs` (one group-version), and each kind's
/// schema name.
pub fn components(defs: &[&'static ResourceDef]) -> (Map<String, Value>, Vec<String>) {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let mut crds = Vec::new();
    let mut names = Vec::new();
    for def in defs {
        if let Some(name) = add_kind(&mut generator, def) {
            names.push(((*def), name));
        } else if let Some(schema) = crd_schema(&mut generator, def) {
            let name = crd_schema_name(def);
            crds.push((name.clone(), schema));
            names.push(((*def), name));
        }
    }
    let mut schemas = generator.take_definitions(true);
    schemas.extend(crds);
    for (def, name) in &names {
        if let Some(Value::Object(s)) = schemas.get_mut(name) {
            s.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": def.group, "version": def.version, "kind": def.kind}]),
            );
        }
    }
    mark_lists(&mut schemas);
    (schemas, names.into_iter().map(|(_, n)| n).collect())
}

fn ref_name(schema: &Value) -> Option<&str> {
    schema["$ref"]
        .as_str()
        .or_else(|| schema["allOf"][0]["$ref"].as_str())
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
}

/// Marks the lists the server merges by key (`patch::merge_key`) where the item type has
/// that key, and `finalizers` as a merged set.
fn mark_lists(schemas: &mut Map<String, Value>) {
    let item_has = |schemas: &Map<String, Value>, items: &Value, key: &str| {
        ref_name(items)
            .and_then(|n| schemas.get(n))
            .is_some_and(|s| s["properties"].get(key).is_some())
    };
    let mut marks = Vec::new();
    for (name, schema) in schemas.iter() {
        let Some(props) = schema["properties"].as_object() else {
            continue;
        };
        for (field, prop) in props {
            if prop["type"] != "array" {
                continue;
            }
            let ext = match patch::merge_key(field) {
                Some(key) if item_has(schemas, &prop["items"], key) => json!({
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": [key],
                    "x-kubernetes-patch-merge-key": key,
                    "x-kubernetes-patch-strategy": "merge",
                }),
                None if field == "finalizers" => json!({
                    "x-kubernetes-list-type": "set",
                    "x-kubernetes-patch-strategy": "merge",
                }),
                _ => continue,
            };
            marks.push((name.clone(), field.clone(), ext));
        }
    }
    for (name, field, ext) in marks {
        if let Some(Value::Object(prop)) = schemas
            .get_mut(&name)
            .and_then(|s| s["properties"].get_mut(&field))
        {
            prop.extend(ext.as_object().cloned().unwrap_or_default());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::registry::{self, ADMIN, TENANT};

    #[test]
    fn pod_schema_carries_gvk_and_container_merge_key() {
        let pods = registry::by_key(TENANT, "pods").unwrap();
        let (schemas, names) = components(&[pods]);
        assert_eq!(names, ["io.k8s.api.core.v1.Pod"]);
        assert_eq!(
            schemas["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"],
            json!([{"group": "", "version": "v1", "kind": "Pod"}])
        );
        let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
        // A service's ports have no containerPort: no merge key is claimed for them.
        assert!(
            schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["volumes"]["x-kubernetes-patch-merge-key"]
                == "name"
        );
        assert!(
            schemas[OBJECT_META]["properties"]["finalizers"]["x-kubernetes-list-type"] == "set"
        );
    }

    #[test]
    fn cluster_schema_comes_from_its_crd() {
        let (schemas, names) = components(&[&ADMIN[0]]);
        assert_eq!(names, ["computer.socialweb.tenancy.v1alpha1.Cluster"]);
        let cluster = &schemas["computer.socialweb.tenancy.v1alpha1.Cluster"];
        assert_eq!(
            cluster["properties"]["status"]["properties"]["url"]["type"],
            "string"
        );
        assert_eq!(
            cluster["x-kubernetes-group-version-kind"][0]["kind"],
            "Cluster"
        );
        assert!(schemas.contains_key(OBJECT_META));
    }

    #[test]
    fn cluster_static_entry_schema_comes_from_the_spire_crd() {
        let def = registry::by_key(TENANT, registry::CLUSTER_STATIC_ENTRIES).unwrap();
        let (schemas, names) = components(&[def]);
        assert_eq!(names, ["io.spiffe.spire.v1alpha1.ClusterStaticEntry"]);
        let entry = &schemas["io.spiffe.spire.v1alpha1.ClusterStaticEntry"];
        assert_eq!(
            entry["properties"]["spec"]["required"],
            json!(["spiffeID", "parentID", "selectors"])
        );
        assert_eq!(
            entry["x-kubernetes-group-version-kind"],
            json!([{"group": "spire.spiffe.io", "version": "v1alpha1", "kind": "ClusterStaticEntry"}])
        );
    }
}
