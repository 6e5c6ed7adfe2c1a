//! What differs per kind: defaults set on create (pod phase Pending, namespace Active, ...)
//! and the few validations tenantci's objects meet (pods need containers with name and image).
//! Everything else is stored as sent.

use serde_json::{Value, json};

use super::registry::ResourceDef;
use crate::api_error::ApiError;

fn invalid(def: &ResourceDef, name: &str, field: &str, reason: &str, detail: &str) -> ApiError {
    ApiError::invalid(def.kind, def.group, name, field, reason, detail)
}

/// Validates a new or updated object beyond its name.
pub fn validate(def: &ResourceDef, obj: &Value) -> Result<(), ApiError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    match def.key {
        "pods" => validate_pod(def, name, obj),
        "roles.rbac.authorization.k8s.io" | "clusterroles.rbac.authorization.k8s.io" => {
            validate_rules(def, name, obj)
        }
        "rolebindings.rbac.authorization.k8s.io"
        | "clusterrolebindings.rbac.authorization.k8s.io" => {
            if obj["roleRef"]["name"].as_str().unwrap_or("").is_empty() {
                return Err(required(def, name, "roleRef.name"));
            }
            Ok(())
        }
        "priorityclasses.scheduling.k8s.io" => {
            if !obj["value"].is_i64() {
                return Err(required(def, name, "value"));
            }
            Ok(())
        }
        super::registry::CLUSTER_STATIC_ENTRIES => validate_cluster_static_entry(def, name, obj),
        _ => Ok(()),
    }
}

/// 422 `Required value` for `field`.
fn required(def: &ResourceDef, name: &str, field: &str) -> ApiError {
    invalid(def, name, field, "FieldValueRequired", "Required value")
}

/// A Pod needs containers, each with a name and an image.
fn validate_pod(def: &ResourceDef, name: &str, obj: &Value) -> Result<(), ApiError> {
    let containers = obj["spec"]["containers"].as_array();
    let Some(containers) = containers.filter(|c| !c.is_empty()) else {
        return Err(required(def, name, "spec.containers"));
    };
    for (i, c) in containers.iter().enumerate() {
        if c["name"].as_str().unwrap_or("").is_empty() {
            return Err(required(def, name, &format!("spec.containers[{i}].name")));
        }
        if c["image"].as_str().unwrap_or("").is_empty() {
            return Err(required(def, name, &format!("spec.containers[{i}].image")));
        }
    }
    Ok(())
}

/// Every rule of a (Cluster)Role names at least one verb.
fn validate_rules(def: &ResourceDef, name: &str, obj: &Value) -> Result<(), ApiError> {
    for (i, r) in obj["rules"].as_array().into_iter().flatten().enumerate() {
        if r["verbs"].as_array().is_none_or(|v| v.is_empty()) {
            return Err(invalid(
                def,
                name,
                &format!("rules[{i}].verbs"),
                "FieldValueRequired",
                "Required value: verbs must contain at least one value",
            ));
        }
    }
    Ok(())
}

/// The ClusterStaticEntry CRD's required fields, as kube-apiserver's schema validation
/// refuses them.
fn validate_cluster_static_entry(
    def: &ResourceDef,
    name: &str,
    obj: &Value,
) -> Result<(), ApiError> {
    for field in ["spiffeID", "parentID"] {
        if obj["spec"][field].as_str().unwrap_or("").is_empty() {
            return Err(required(def, name, &format!("spec.{field}")));
        }
    }
    if !obj["spec"]["selectors"].is_array() {
        return Err(required(def, name, "spec.selectors"));
    }
    Ok(())
}

fn set_default(obj: &mut Value, ptr: &str, value: Value) {
    let mut cur = obj;
    let parts: Vec<&str> = ptr.split('/').filter(|s| !s.is_empty()).collect();
    for (i, p) in parts.iter().enumerate() {
        if !cur.is_object() {
            return;
        }
        let last = i == parts.len() - 1;
        let m = cur.as_object_mut().expect("checked");
        if last {
            m.entry(p.to_string()).or_insert(value);
            return;
        }
        cur = m.entry(p.to_string()).or_insert_with(|| json!({}));
    }
}

/// Server-set fields of a new object (kube-apiserver's PrepareForCreate and defaulting).
pub fn defaults_on_create(def: &ResourceDef, obj: &mut Value) {
    match def.key {
        "pods" => {
            obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
            set_default(obj, "/spec/restartPolicy", json!("Always"));
            set_default(obj, "/spec/terminationGracePeriodSeconds", json!(30));
            set_default(obj, "/spec/dnsPolicy", json!("ClusterFirst"));
            set_default(obj, "/spec/schedulerName", json!("default-scheduler"));
            set_default(obj, "/spec/serviceAccountName", json!("default"));
            set_default(obj, "/spec/priority", json!(0));
            if let Some(cs) = obj["spec"]["containers"].as_array_mut() {
                for c in cs {
                    set_default(c, "/imagePullPolicy", json!("IfNotPresent"));
                    set_default(c, "/terminationMessagePath", json!("/dev/termination-log"));
                    set_default(c, "/terminationMessagePolicy", json!("File"));
                }
            }
        }
        "namespaces" => {
            obj["status"] = json!({"phase": "Active"});
            set_default(obj, "/spec/finalizers", json!(["kubernetes"]));
            let name = obj["metadata"]["name"].clone();
            if let Some(labels) = obj["metadata"].as_object_mut() {
                let l = labels.entry("labels").or_insert_with(|| json!({}));
                if let Some(l) = l.as_object_mut() {
                    l.insert("kubernetes.io/metadata.name".into(), name);
                }
            }
        }
        "deployments.apps" => {
            obj["status"] = json!({});
            set_default(obj, "/spec/replicas", json!(1));
            set_default(obj, "/spec/revisionHistoryLimit", json!(10));
            set_default(obj, "/spec/progressDeadlineSeconds", json!(600));
            set_default(
                obj,
                "/spec/strategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}),
            );
        }
        "services" => {
            set_default(obj, "/spec/type", json!("ClusterIP"));
            set_default(obj, "/spec/sessionAffinity", json!("None"));
            let ip = format!(
                "10.96.{}.{}",
                rand::random::<u8>(),
                rand::random::<u8>().max(1)
            );
            set_default(obj, "/spec/clusterIP", json!(ip.clone()));
            set_default(obj, "/spec/clusterIPs", json!([ip]));
        }
        "priorityclasses.scheduling.k8s.io" => {
            set_default(obj, "/preemptionPolicy", json!("PreemptLowerPriority"));
        }
        "secrets" => {
            set_default(obj, "/type", json!("Opaque"));
        }
        "poddisruptionbudgets.policy" => {
            obj["status"] = json!({"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0});
        }
        _ => {}
    }
}
