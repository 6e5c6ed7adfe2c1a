//! The CRD-based objects under manifests/ (ServiceMonitor, PrometheusRule, ExternalSecret,
//! ClusterSecretStore, ClusterSPIFFEID) checked against the OpenAPI schemas their projects
//! publish in their CustomResourceDefinitions, pinned under testdata/crd-schemas (each file
//! names the source file and commit it was taken from: the served version's
//! `openAPIV3Schema`, as compact JSON).
//!
//! Why not the server dry run the built-in kinds get (`ship.rs`): the simulator serves a fixed
//! registry of kinds (the built-in ones and the two CRDs tenantci itself reads), not
//! CustomResourceDefinitions applied at run time, so `kubectl apply --dry-run=server` of these
//! kinds ends in "no matches for kind". So the check kube-apiserver makes of a custom object
//! is made here: the object against the version's schema with a JSON Schema validator
//! (jsonschema crate; the schemas are OpenAPI v3, a draft-4 dialect), unknown fields refused as
//! `--validate=strict` refuses them (every object schema with properties and without
//! `x-kubernetes-preserve-unknown-fields` gets `additionalProperties: false`, the structural
//! schema's pruning turned into an error).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::ship::{kustomize, overlays};
use crate::util::repo_file;

/// The pinned schemas by `apiVersion` and `kind`.
fn schemas() -> BTreeMap<(String, String), Value> {
    let dir = repo_file("crates/tenantci/tests/it/testdata/crd-schemas");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert!(
            doc["source"].as_str().unwrap().contains("/blob/"),
            "{}: pinned to a commit",
            path.display()
        );
        let key = (
            doc["apiVersion"].as_str().unwrap().to_string(),
            doc["kind"].as_str().unwrap().to_string(),
        );
        out.insert(key, strict(doc["openAPIV3Schema"].clone()));
    }
    out
}

/// The schema with unknown fields refused where kube-apiserver's strict field validation
/// refuses them.
fn strict(mut schema: Value) -> Value {
    if let Some(o) = schema.as_object_mut() {
        let preserve = o
            .get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            == Some(true);
        // kube-apiserver reads `pattern` as a Go (RE2) regex; the one RE2 construct in the
        // pinned schemas that ECMA-262 (JSON Schema's dialect) lacks is the case-insensitive
        // flag `(?i)`. Dropped: the pattern then matches its own case only, stricter than the
        // apiserver, never looser.
        if let Some(Value::String(p)) = o.get_mut("pattern") {
            *p = p.replace("(?i)", "");
        }
        if o.contains_key("properties") && !preserve && !o.contains_key("additionalProperties") {
            o.insert("additionalProperties".into(), json!(false));
        }
        for (k, v) in o.iter_mut() {
            match k.as_str() {
                "properties" | "patternProperties" => {
                    for p in v.as_object_mut().into_iter().flat_map(|m| m.values_mut()) {
                        *p = strict(p.take());
                    }
                }
                "items" | "additionalProperties" | "not" => *v = strict(v.take()),
                "allOf" | "anyOf" | "oneOf" => {
                    for s in v.as_array_mut().into_iter().flatten() {
                        *s = strict(s.take());
                    }
                }
                _ => {}
            }
        }
    }
    schema
}

/// The schema violations of `object` (empty: valid).
fn violations(schema: &Value, object: &Value) -> Vec<String> {
    let validator = jsonschema::draft4::new(schema).expect("a pinned schema compiles");
    validator
        .iter_errors(object)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

fn is_builtin(api_version: &str) -> bool {
    // The core group and the `*.k8s.io` groups the built-in kinds live in.
    !api_version.contains('/')
        || api_version.starts_with("apps/")
        || api_version.starts_with("policy/")
        || api_version.split('/').next().unwrap().ends_with(".k8s.io")
}

#[test]
fn every_crd_based_object_under_manifests_passes_its_published_schema() {
    let schemas = schemas();
    let mut checked = BTreeMap::<String, usize>::new();
    for dir in &overlays() {
        for object in kustomize(dir) {
            let object: Value = serde_json::to_value(&object).unwrap();
            let api_version = object["apiVersion"].as_str().unwrap().to_string();
            if is_builtin(&api_version) {
                continue;
            }
            let kind = object["kind"].as_str().unwrap().to_string();
            let schema = schemas.get(&(api_version.clone(), kind.clone())).unwrap_or_else(|| {
                panic!("{dir}: no pinned schema for {api_version} {kind}; add its CRD's under testdata/crd-schemas")
            });
            let errors = violations(schema, &object);
            assert!(
                errors.is_empty(),
                "{dir}: {kind} {}: {errors:#?}",
                object["metadata"]["name"]
            );
            *checked.entry(kind).or_default() += 1;
        }
    }
    for kind in [
        "ServiceMonitor",
        "PrometheusRule",
        "ExternalSecret",
        "ClusterSecretStore",
        "ClusterSPIFFEID",
    ] {
        assert!(checked.contains_key(kind), "{kind} checked: {checked:?}");
    }
}

/// The check can fail: an unknown field, a wrong type and a missing required field are each
/// refused, as the apiserver would refuse them.
#[test]
fn the_schema_check_refuses_what_the_apiserver_would() {
    let schemas = schemas();
    let objects: Vec<Value> = kustomize("manifests/overlays/all")
        .into_iter()
        .map(|o| serde_json::to_value(o).unwrap())
        .collect();
    let find = |kind: &str| objects.iter().find(|o| o["kind"] == kind).unwrap().clone();
    let schema = |o: &Value| {
        let key = (
            o["apiVersion"].as_str().unwrap().to_string(),
            o["kind"].as_str().unwrap().to_string(),
        );
        schemas[&key].clone()
    };
    let mut typo = find("ExternalSecret");
    typo["spec"]["dataFrm"] = json!([]);
    assert!(
        !violations(&schema(&typo), &typo).is_empty(),
        "an unknown field"
    );
    let mut wrong = find("ServiceMonitor");
    wrong["spec"]["endpoints"] = json!("metrics");
    assert!(
        !violations(&schema(&wrong), &wrong).is_empty(),
        "a wrong type"
    );
    let mut missing = find("ClusterSecretStore");
    missing["spec"]["provider"]["vault"]
        .as_object_mut()
        .unwrap()
        .remove("server");
    assert!(
        !violations(&schema(&missing), &missing).is_empty(),
        "a missing required field"
    );
    let mut class = find("ClusterSPIFFEID");
    class["spec"]["className"] = json!(7);
    assert!(
        !violations(&schema(&class), &class).is_empty(),
        "className is a string"
    );
}
