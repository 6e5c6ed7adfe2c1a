//! `Table` answers (meta.k8s.io/v1) for the resources whose kubectl columns matter: the
//! gateway's clusters (NAME, URL, PHASE, AGE). Other resources answer plain lists, which
//! kubectl prints as NAME and AGE.

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
    json!({"name": name, "type": "string", "format": format, "description": name, "priority": 0})
}

fn partial(def: &ResourceDef, obj: &Value) -> Value {
    let _ = def;
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
}

pub fn table(def: &ResourceDef, items: &[Arc<Value>], meta: Value) -> Option<Value> {
    if def.key != "clusters.tenancy.socialweb.computer" {
        return None;
    }
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            json!({
                "cells": [
                    o["metadata"]["name"],
                    o["status"]["url"],
                    o["status"]["phase"],
                    age(o["metadata"]["creationTimestamp"].as_str().unwrap_or("")),
                ],
                "object": partial(def, o),
            })
        })
        .collect();
    Some(json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": [column("Name", "name"), column("URL", ""), column("Phase", ""), column("Age", "")],
        "rows": rows,
    }))
}
