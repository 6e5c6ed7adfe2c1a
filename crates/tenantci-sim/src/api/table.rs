//! `Table` answers (meta.k8s.io/v1), which kubectl asks for on `get`: the columns
//! kube-apiserver's printers give each served kind (pods: NAME READY STATUS RESTARTS AGE, ...),
//! NAME and AGE for the rest. Cells are computed from the stored object, as the printers do.

use std::sync::Arc;

use serde_json::{Value, json};

use super::registry::ResourceDef;

fn age(created: &str) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(created) else {
        return "<unknown>".into();
    };
    let secs = (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn column(name: &str, format: &str) -> Value {
    let kind = if name == "Restarts" {
        "integer"
    } else {
        "string"
    };
    json!({"name": name, "type": kind, "format": format, "description": name, "priority": 0})
}

/// An object as `PartialObjectMetadata` (meta.k8s.io/v1): its metadata only.
pub fn partial(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn or_none(v: &Value) -> String {
    let t = s(v);
    if t.is_empty() { "<none>".into() } else { t }
}

fn count(v: &Value) -> usize {
    v.as_object().map_or(0, |m| m.len())
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

fn condition(o: &Value, kind: &str) -> Option<String> {
    o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .map(|c| s(&c["status"]))
}

fn pod_cells(o: &Value) -> Vec<Value> {
    let total = o["spec"]["containers"].as_array().map_or(0, Vec::len);
    let statuses = o["status"]["containerStatuses"].as_array();
    let ready = match statuses {
        Some(cs) => cs.iter().filter(|c| c["ready"] == true).count(),
        None if condition(o, "Ready").as_deref() == Some("True") => total,
        None => 0,
    };
    let restarts: i64 = statuses.map_or(0, |cs| cs.iter().map(|c| int(&c["restartCount"])).sum());
    let status = if !o["metadata"]["deletionTimestamp"].is_null() {
        "Terminating".to_string()
    } else if let Some(r) = o["status"]["reason"].as_str() {
        r.to_string()
    } else {
        s(&o["status"]["phase"])
    };
    vec![
        json!(format!("{ready}/{total}")),
        json!(status),
        json!(restarts),
    ]
}

fn ports(o: &Value) -> String {
    let ports: Vec<String> = o["spec"]["ports"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    format!(
                        "{}/{}",
                        s(&p["port"]),
                        p["protocol"].as_str().unwrap_or("TCP")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if ports.is_empty() {
        "<none>".into()
    } else {
        ports.join(",")
    }
}

/// The columns after NAME (AGE last unless listed, as for nodes: AGE before VERSION).
fn columns(def: &ResourceDef) -> &'static [&'static str] {
    match def.key {
        "pods" => &["Ready", "Status", "Restarts"],
        "namespaces" => &["Status"],
        "nodes" => &["Status", "Roles", "Age", "Version"],
        "services" => &["Type", "Cluster-IP", "External-IP", "Port(s)"],
        "secrets" => &["Type", "Data"],
        "configmaps" => &["Data"],
        "serviceaccounts" => &["Secrets"],
        "persistentvolumeclaims" => &["Status", "Volume", "Capacity", "Storageclass"],
        "deployments.apps" => &["Ready", "Up-to-date", "Available"],
        "priorityclasses.scheduling.k8s.io" => &["Value", "Global-default"],
        "poddisruptionbudgets.policy" => {
            &["Min available", "Max unavailable", "Allowed disruptions"]
        }
        "rolebindings.rbac.authorization.k8s.io"
        | "clusterrolebindings.rbac.authorization.k8s.io" => &["Role"],
        "leases.coordination.k8s.io" => &["Holder"],
        "clusters.tenancy.socialweb.computer" => &["URL", "Phase"],
        _ => &[],
    }
}

fn cells(def: &ResourceDef, o: &Value) -> Vec<Value> {
    let st = &o["status"];
    let spec = &o["spec"];
    let strings = |v: Vec<String>| v.into_iter().map(Value::String).collect::<Vec<_>>();
    match def.key {
        "pods" => pod_cells(o),
        "namespaces" => strings(vec![s(&st["phase"])]),
        "nodes" => strings(vec![
            match condition(o, "Ready").as_deref() {
                Some("True") => "Ready".into(),
                _ => "NotReady".into(),
            },
            "<none>".into(),
            s(&st["nodeInfo"]["kubeletVersion"]),
        ]),
        "services" => strings(vec![
            s(&spec["type"]),
            or_none(&spec["clusterIP"]),
            "<none>".into(),
            ports(o),
        ]),
        "secrets" => vec![json!(s(&o["type"])), json!(count(&o["data"]))],
        "configmaps" => vec![json!(count(&o["data"]) + count(&o["binaryData"]))],
        "serviceaccounts" => vec![json!(o["secrets"].as_array().map_or(0, Vec::len))],
        "persistentvolumeclaims" => strings(vec![
            s(&st["phase"]),
            s(&spec["volumeName"]),
            s(&st["capacity"]["storage"]),
            or_none(&spec["storageClassName"]),
        ]),
        "deployments.apps" => strings(vec![
            format!("{}/{}", int(&st["readyReplicas"]), int(&spec["replicas"])),
            int(&st["updatedReplicas"]).to_string(),
            int(&st["availableReplicas"]).to_string(),
        ]),
        "priorityclasses.scheduling.k8s.io" => vec![
            json!(int(&o["value"])),
            json!(o["globalDefault"].as_bool().unwrap_or(false)),
        ],
        "poddisruptionbudgets.policy" => strings(vec![
            if spec["minAvailable"].is_null() {
                "N/A".into()
            } else {
                s(&spec["minAvailable"])
            },
            if spec["maxUnavailable"].is_null() {
                "N/A".into()
            } else {
                s(&spec["maxUnavailable"])
            },
            int(&st["disruptionsAllowed"]).to_string(),
        ]),
        "rolebindings.rbac.authorization.k8s.io"
        | "clusterrolebindings.rbac.authorization.k8s.io" => strings(vec![format!(
            "{}/{}",
            s(&o["roleRef"]["kind"]),
            s(&o["roleRef"]["name"])
        )]),
        "leases.coordination.k8s.io" => strings(vec![or_none(&spec["holderIdentity"])]),
        "clusters.tenancy.socialweb.computer" => strings(vec![s(&st["url"]), s(&st["phase"])]),
        _ => Vec::new(),
    }
}

/// The `Table` of `items` with `def`'s columns.
pub fn table(def: &ResourceDef, items: &[Arc<Value>], meta: Value) -> Value {
    let mut names = vec!["Name"];
    names.extend(columns(def));
    if !names.contains(&"Age") {
        names.push("Age");
    }
    let defs: Vec<Value> = names
        .iter()
        .map(|c| column(c, if *c == "Name" { "name" } else { "" }))
        .collect();
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let mut cells = cells(def, o).into_iter();
            let created = o["metadata"]["creationTimestamp"].as_str().unwrap_or("");
            let row: Vec<Value> = names
                .iter()
                .map(|c| match *c {
                    "Name" => o["metadata"]["name"].clone(),
                    "Age" => json!(age(created)),
                    _ => cells.next().unwrap_or(Value::Null),
                })
                .collect();
            json!({"cells": row, "object": partial(o)})
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": defs,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::registry::{self, TENANT};

    #[test]
    fn every_row_has_a_cell_per_column() {
        for def in TENANT {
            let obj = Arc::new(json!({"metadata": {"name": "x"}, "spec": {}, "status": {}}));
            let t = table(def, &[obj], json!({}));
            assert_eq!(
                t["rows"][0]["cells"].as_array().unwrap().len(),
                t["columnDefinitions"].as_array().unwrap().len(),
                "{}",
                def.key
            );
        }
    }

    #[test]
    fn pod_row_reads_like_kubectl() {
        let pods = registry::by_key(TENANT, "pods").unwrap();
        let pod = Arc::new(json!({
            "metadata": {"name": "job-1", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }));
        let t = table(pods, &[pod], json!({}));
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "Ready", "Status", "Restarts", "Age"]);
        let cells = t["rows"][0]["cells"].as_array().unwrap();
        assert_eq!(
            cells[..4],
            [json!("job-1"), json!("2/2"), json!("Running"), json!(0)]
        );
    }
}
