//! The `paths` of a group-version document: one collection and one item path per resource,
//! with the operations the simulator serves. kubectl reads them to decide what the server
//! supports: a PATCH operation tagged with the kind's `x-kubernetes-group-version-kind` and
//! listing `fieldValidation` / `dryRun` means server-side validation and dry-run, and its
//! request content types say whether strategic merge patch is accepted.

use serde_json::{Map, Value, json};

use crate::api::registry::ResourceDef;

fn query(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn path_param(name: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}})
}

fn write_params() -> Vec<Value> {
    vec![
        query(
            "dryRun",
            "When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed",
        ),
        query(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
        ),
        query(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: - Ignore - Warn (the default) - Strict",
        ),
    ]
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn content(types: &[&str], schema: &Value) -> Value {
    let mut m = Map::new();
    for t in types {
        m.insert((*t).into(), json!({"schema": schema}));
    }
    Value::Object(m)
}

fn operation(def: &ResourceDef, action: &str, id: &str, params: Vec<Value>, ok: &Value) -> Value {
    json!({
        "description": format!("{action} {}", def.kind),
        "operationId": format!("{id}{}", def.kind),
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": content(&["application/json", "application/yaml"], ok)}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": def.group, "version": def.version, "kind": def.kind},
    })
}

/// The request media types of PATCH: strategic merge patch for built-in kinds only, as
/// kube-apiserver (CRDs take JSON and merge patches and apply).
fn patch_types(def: &ResourceDef) -> Vec<&'static str> {
    let mut t = vec![
        "application/json-patch+json",
        "application/merge-patch+json",
    ];
    if def.group != crate::api::registry::TENANCY_GROUP {
        t.push("application/strategic-merge-patch+json");
    }
    t.push("application/apply-patch+yaml");
    t
}

/// `/api/v1/namespaces/{namespace}/pods` and `.../{name}` (cluster-scoped: no namespace).
pub fn for_resource(def: &ResourceDef, schema: &str, out: &mut Map<String, Value>) {
    let base = if def.group.is_empty() {
        format!("/api/{}", def.version)
    } else {
        format!("/apis/{}/{}", def.group, def.version)
    };
    let scope = if def.namespaced {
        "/namespaces/{namespace}"
    } else {
        ""
    };
    let collection = format!("{base}{scope}/{}", def.plural);
    let object = schema_ref(schema);
    let body = json!({"content": content(&["application/json", "application/yaml"], &object), "required": true});
    let scoped = |mut params: Vec<Value>| {
        if def.namespaced {
            params.push(path_param("namespace"));
        }
        params
    };
    let mut post = operation(def, "post", "create", scoped(write_params()), &object);
    post["requestBody"] = body.clone();
    let mut coll = json!({"post": post});
    if def.verbs.contains(&"list") {
        coll["get"] = operation(
            def,
            "list",
            "list",
            scoped(vec![]),
            &json!({"type": "object"}),
        );
    }
    out.insert(collection.clone(), coll);
    if def.verbs == ["create"] {
        return;
    }
    let item_params = |p: Vec<Value>| {
        let mut p = scoped(p);
        p.push(path_param("name"));
        p
    };
    let mut put = operation(def, "put", "replace", item_params(write_params()), &object);
    put["requestBody"] = body;
    let mut patch = operation(def, "patch", "patch", item_params(write_params()), &object);
    patch["requestBody"] = json!({
        "content": content(&patch_types(def), &schema_ref("io.k8s.apimachinery.pkg.apis.meta.v1.Patch")),
        "required": true,
    });
    let item = json!({
        "get": operation(def, "get", "read", item_params(vec![]), &object),
        "put": put,
        "patch": patch,
        "delete": operation(def, "delete", "delete", item_params(vec![query("dryRun", "dry run")]), &json!({"type": "object"})),
    });
    out.insert(format!("{collection}/{{name}}"), item);
}

/// The schema PATCH bodies are declared with (kube-apiserver's own).
pub fn patch_schema() -> Value {
    json!({
        "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.",
        "type": "object",
    })
}
