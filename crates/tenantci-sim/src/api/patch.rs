//! PATCH bodies other than apply: JSON merge patch (RFC 7386), strategic merge patch for what
//! kubectl and kube-rs send (merge keys for the lists they touch, `$patch`, `$retainKeys`,
//! `$setElementOrder`, `$deleteFromPrimitiveList`), and JSON patch (RFC 6902).
//! Pure functions over JSON; the caller authorizes, checks versions and stores.

use serde_json::{Map, Value};

/// RFC 7386: objects merge recursively, `null` deletes, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let t = target.as_object_mut().expect("just made an object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// The merge key of a list field, as the Kubernetes types declare `patchMergeKey`.
pub fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "hostAliases" => match field {
            "hostAliases" => "ip",
            _ => "name",
        },
        "ports" => "containerPort",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "conditions" => "type",
        "ownerReferences" => "uid",
        "topologySpreadConstraints" => "topologyKey",
        _ => return None,
    })
}

/// Lists whose elements are merged as a set of primitives (`finalizers`).
fn is_primitive_set(field: &str) -> bool {
    field == "finalizers"
}

fn same_key(a: &Value, b: &Value, key: &str) -> bool {
    a.get(key).is_some() && a.get(key) == b.get(key)
}

fn merge_list(field: &str, target: &mut Vec<Value>, patch: &[Value]) {
    if let Some(key) = merge_key(field)
        && patch.iter().all(Value::is_object)
    {
        for item in patch {
            let directive = item.get("$patch").and_then(Value::as_str);
            let pos = target.iter().position(|t| same_key(t, item, key));
            match (directive, pos) {
                (Some("delete"), Some(i)) => {
                    target.remove(i);
                }
                (Some("delete"), None) => {}
                (Some("replace"), _) => {
                    let mut v = item.clone();
                    strip_directives(&mut v);
                    match pos {
                        Some(i) => target[i] = v,
                        None => target.push(v),
                    }
                }
                (_, Some(i)) => strategic_merge(&mut target[i], item),
                (_, None) => {
                    let mut v = Value::Object(Map::new());
                    strategic_merge(&mut v, item);
                    target.push(v);
                }
            }
        }
        return;
    }
    if is_primitive_set(field) {
        for item in patch {
            if !target.contains(item) {
                target.push(item.clone());
            }
        }
        return;
    }
    *target = patch.to_vec();
}

fn strip_directives(v: &mut Value) {
    if let Value::Object(m) = v {
        m.retain(|k, _| !k.starts_with('$'));
        for (_, x) in m.iter_mut() {
            strip_directives(x);
        }
    } else if let Value::Array(a) = v {
        for x in a {
            strip_directives(x);
        }
    }
}

/// Strategic merge patch of `patch` into `target`.
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut v = patch.clone();
        strip_directives(&mut v);
        *target = v;
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("just made an object");
    if let Some(Value::Array(keep)) = p.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        t.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, v) in p {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(del)) = (t.get_mut(field), v) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match v {
            Value::Array(items) => match t.get_mut(k) {
                Some(Value::Array(existing)) => merge_list(k, existing, items),
                _ => {
                    let mut fresh = Vec::new();
                    merge_list(k, &mut fresh, items);
                    t.insert(k.clone(), Value::Array(fresh));
                }
            },
            Value::Object(_) => strategic_merge(t.entry(k.clone()).or_insert(Value::Null), v),
            other => {
                t.insert(k.clone(), other.clone());
            }
        }
    }
}

fn pointer_parts(path: &str) -> Result<Vec<String>, String> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| format!("invalid JSON pointer {path:?}"))?;
    Ok(rest
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn parent_and_key<'a>(doc: &'a mut Value, path: &str) -> Result<(&'a mut Value, String), String> {
    let mut parts = pointer_parts(path)?;
    let last = parts.pop().ok_or("cannot operate on the document root")?;
    let mut cur = doc;
    for p in parts {
        cur = match cur {
            Value::Object(m) => m.get_mut(&p),
            Value::Array(a) => p.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| format!("doc is missing path: {path:?}"))?;
    }
    Ok((cur, last))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let (parent, key) = parent_and_key(doc, path)?;
    match parent {
        Value::Object(m) => {
            m.insert(key, value);
            Ok(())
        }
        Value::Array(a) => {
            let i = if key == "-" {
                a.len()
            } else {
                key.parse::<usize>()
                    .map_err(|_| format!("invalid index {key:?}"))?
            };
            if i > a.len() {
                return Err(format!(
                    "add operation does not apply: index {i} out of bounds"
                ));
            }
            a.insert(i, value);
            Ok(())
        }
        _ => Err(format!("doc is missing path: {path:?}")),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, key) = parent_and_key(doc, path)?;
    match parent {
        Value::Object(m) => m
            .remove(&key)
            .ok_or_else(|| format!("unable to remove nonexistent key: {key}: missing value")),
        Value::Array(a) => {
            let i = key
                .parse::<usize>()
                .map_err(|_| format!("invalid index {key:?}"))?;
            if i >= a.len() {
                return Err(format!(
                    "remove operation does not apply: index {i} out of bounds"
                ));
            }
            Ok(a.remove(i))
        }
        _ => Err(format!("doc is missing path: {path:?}")),
    }
}

/// RFC 6902 JSON patch.
pub fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), String> {
    let ops = ops
        .as_array()
        .ok_or("a JSON patch must be a list of operations")?;
    for op in ops {
        let path = op["path"].as_str().ok_or("operation has no path")?;
        match op["op"].as_str().unwrap_or("") {
            "add" => add(doc, path, op["value"].clone())?,
            "remove" => {
                remove(doc, path)?;
            }
            "replace" => {
                remove(doc, path)?;
                add(doc, path, op["value"].clone())?;
            }
            "move" | "copy" => {
                let from = op["from"].as_str().ok_or("operation has no from")?;
                let v = if op["op"] == "move" {
                    remove(doc, from)?
                } else {
                    doc.pointer(from)
                        .cloned()
                        .ok_or_else(|| format!("doc is missing from path: {from:?}"))?
                };
                add(doc, path, v)?;
            }
            "test" => {
                if doc.pointer(path) != Some(&op["value"]) {
                    return Err(format!("testing value {path} failed"));
                }
            }
            other => return Err(format!("unexpected operation {other:?}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_deletes_with_null() {
        let mut t = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        merge_patch(&mut t, &json!({"a": {"b": null, "d": 3}, "l": [3]}));
        assert_eq!(t, json!({"a": {"c": 2, "d": 3}, "l": [3]}));
    }

    #[test]
    fn strategic_merges_containers_by_name() {
        let mut t = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}});
        strategic_merge(
            &mut t,
            &json!({"spec": {"$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
                "containers": [{"name": "b", "image": "z"}, {"name": "c", "$patch": "delete"}]}}),
        );
        assert_eq!(
            t,
            json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "z"}]}})
        );
    }

    #[test]
    fn json_patch_ops() {
        let mut d = json!({"metadata": {"labels": {"a": "1"}}, "l": [1]});
        json_patch(
            &mut d,
            &json!([{"op": "add", "path": "/metadata/labels/b", "value": "2"},
                    {"op": "remove", "path": "/metadata/labels/a"},
                    {"op": "add", "path": "/l/-", "value": 2}]),
        )
        .unwrap();
        assert_eq!(d, json!({"metadata": {"labels": {"b": "2"}}, "l": [1, 2]}));
    }
}
