//! Server-side field validation (`fieldValidation=Strict|Warn|Ignore`): the fields of a
//! written object that its kind's schema does not declare. kube-apiserver decodes into typed
//! objects, so such fields never reach storage: Strict refuses the request naming them, Warn
//! drops them and says so in a `Warning` header, Ignore drops them silently.

use serde_json::{Map, Value};

use crate::api_error::{ApiError, ApiResult};

/// How unknown fields in a write are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directive {
    /// Refuse the write, naming the unknown fields.
    Strict,
    /// Drop the unknown fields and say so in a `Warning` header.
    Warn,
    /// Drop the unknown fields silently.
    Ignore,
}

impl Directive {
    /// The `fieldValidation` query parameter; absent means Warn, as kube-apiserver.
    pub fn parse(value: Option<&str>) -> ApiResult<Directive> {
        match value {
            None | Some("Warn") => Ok(Directive::Warn),
            Some("Strict") => Ok(Directive::Strict),
            Some("Ignore") => Ok(Directive::Ignore),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation: Invalid value: \"{other}\": must be one of Ignore, Warn, or Strict"
            ))),
        }
    }
}

fn resolve<'a>(schemas: &'a Map<String, Value>, mut schema: &'a Value) -> &'a Value {
    for _ in 0..16 {
        let r = schema["$ref"]
            .as_str()
            .or_else(|| schema["allOf"][0]["$ref"].as_str());
        match r
            .and_then(|r| r.strip_prefix("#/components/schemas/"))
            .and_then(|n| schemas.get(n))
        {
            Some(s) => schema = s,
            None => break,
        }
    }
    schema
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn walk(
    schemas: &Map<String, Value>,
    schema: &Value,
    value: &mut Value,
    path: &str,
    unknown: &mut Vec<String>,
) {
    let s = resolve(schemas, schema);
    if s["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) {
        return;
    }
    match value {
        Value::Object(fields) => {
            let props = s["properties"].as_object();
            let additional = &s["additionalProperties"];
            if additional == &Value::Bool(true) || (props.is_none() && !additional.is_object()) {
                return; // a free-form object
            }
            let mut drop = Vec::new();
            for (k, child) in fields.iter_mut() {
                let p = join(path, k);
                match props.and_then(|p| p.get(k)) {
                    Some(cs) => walk(schemas, cs, child, &p, unknown),
                    None if additional.is_object() => walk(schemas, additional, child, &p, unknown),
                    None => {
                        unknown.push(p);
                        drop.push(k.clone());
                    }
                }
            }
            for k in drop {
                fields.remove(&k);
            }
        }
        Value::Array(items) if s["items"].is_object() => {
            for (i, item) in items.iter_mut().enumerate() {
                walk(schemas, &s["items"], item, &format!("{path}[{i}]"), unknown);
            }
        }
        _ => {}
    }
}

/// Removes from `obj` the fields `schema` does not declare; returns their paths, as
/// kube-apiserver writes them (`spec.containers[0].imagePolicy`).
pub fn prune_unknown(schemas: &Map<String, Value>, schema: &Value, obj: &mut Value) -> Vec<String> {
    let mut unknown = Vec::new();
    walk(schemas, schema, obj, "", &mut unknown);
    unknown
}

/// The `Warning` header values for unknown fields.
pub fn warnings(unknown: &[String]) -> Vec<String> {
    unknown
        .iter()
        .map(|p| format!("unknown field \"{p}\""))
        .collect()
}

/// kube-apiserver's refusal under Strict.
pub fn strict_error(kind: &str, version: &str, unknown: &[String]) -> ApiError {
    ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
        warnings(unknown).join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::openapi::documents;
    use crate::api::registry::{self, ADMIN, TENANT};
    use serde_json::json;

    #[test]
    fn finds_and_drops_unknown_fields_with_their_paths() {
        let docs = documents(TENANT);
        let pods = registry::by_key(TENANT, "pods").unwrap();
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"any": "x"}, "colour": "red"},
            "spec": {"containers": [{"name": "c", "image": "i", "imagePolicy": "x",
                "resources": {"limits": {"cpu": "1"}}}]},
        });
        let unknown = prune_unknown(&docs.schemas, docs.kind(pods).unwrap(), &mut pod);
        assert_eq!(
            unknown,
            ["metadata.colour", "spec.containers[0].imagePolicy"]
        );
        assert!(pod["spec"]["containers"][0].get("imagePolicy").is_none());
        assert_eq!(pod["metadata"]["labels"]["any"], "x");
        assert_eq!(
            strict_error("Pod", "v1", &unknown).body["message"],
            "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: unknown field \"metadata.colour\", unknown field \"spec.containers[0].imagePolicy\""
        );
    }

    #[test]
    fn cluster_spec_is_open_and_status_is_checked() {
        let docs = documents(ADMIN);
        let mut c = json!({"apiVersion": "tenancy.socialweb.computer/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "ci"}, "spec": {"anything": 1}, "status": {"url": "u", "colour": 1}});
        let unknown = prune_unknown(&docs.schemas, docs.kind(&ADMIN[0]).unwrap(), &mut c);
        assert_eq!(unknown, ["status.colour"]);
    }

    #[test]
    fn directive_defaults_to_warn() {
        assert_eq!(Directive::parse(None).unwrap(), Directive::Warn);
        assert_eq!(Directive::parse(Some("Strict")).unwrap(), Directive::Strict);
        assert_eq!(Directive::parse(Some("strict")).unwrap_err().code, 400);
    }
}
