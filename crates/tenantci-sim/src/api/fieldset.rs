//! Field sets as server-side apply tracks them (`managedFields[].fieldsV1`): paths of
//! `f:<field>` and `k:{"<mergeKey>":<value>}` elements, converted to and from FieldsV1 JSON.
//! A path naming a keyed list element is itself a member (the element's `"."`).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::patch::merge_key;

/// One field's path: `f:<field>` and `k:{...}` segments from the object's root.
pub type Path = Vec<String>;
/// The fields a manager owns.
pub type FieldSet = BTreeSet<Path>;

/// Fields never owned: identity and server-set metadata.
fn ignored(path: &[String]) -> bool {
    matches!(
        path.iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice(),
        ["f:apiVersion"]
            | ["f:kind"]
            | ["f:status", ..]
            | ["f:metadata", "f:name"]
            | ["f:metadata", "f:namespace"]
            | ["f:metadata", "f:uid"]
            | ["f:metadata", "f:resourceVersion"]
            | ["f:metadata", "f:generation"]
            | ["f:metadata", "f:creationTimestamp"]
            | ["f:metadata", "f:managedFields", ..]
            | ["f:metadata", "f:deletionTimestamp"]
    )
}

fn element_key(field: &str, item: &Value) -> Option<String> {
    let key = merge_key(field)?;
    let v = item.get(key)?;
    let mut m = Map::new();
    m.insert(key.to_string(), v.clone());
    Some(format!("k:{}", Value::Object(m)))
}

fn walk(v: &Value, prefix: &mut Path, out: &mut FieldSet) {
    let Value::Object(m) = v else {
        out.insert(prefix.clone());
        return;
    };
    if m.is_empty() && !prefix.is_empty() {
        out.insert(prefix.clone());
        return;
    }
    for (k, child) in m {
        prefix.push(format!("f:{k}"));
        if !ignored(prefix) {
            match child {
                Value::Array(items)
                    if !items.is_empty() && items.iter().all(|i| element_key(k, i).is_some()) =>
                {
                    for item in items {
                        prefix.push(element_key(k, item).expect("checked above"));
                        out.insert(prefix.clone());
                        walk(item, prefix, out);
                        prefix.pop();
                    }
                }
                Value::Object(_) => walk(child, prefix, out),
                _ => {
                    out.insert(prefix.clone());
                }
            }
        }
        prefix.pop();
    }
}

/// Every field `obj` sets (the fields an apply configuration claims).
pub fn fields_of(obj: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    walk(obj, &mut Vec::new(), &mut out);
    out
}

/// The value at `path`, if present.
pub fn get<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = obj;
    let mut last_field = "";
    for seg in path {
        if let Some(f) = seg.strip_prefix("f:") {
            cur = cur.get(f)?;
            last_field = f;
        } else if let Some(k) = seg.strip_prefix("k:") {
            let want: Map<String, Value> = serde_json::from_str(k).ok()?;
            let _ = last_field;
            cur = cur
                .as_array()?
                .iter()
                .find(|item| want.iter().all(|(wk, wv)| item.get(wk) == Some(wv)))?;
        } else {
            return None;
        }
    }
    Some(cur)
}

/// Removes the value at `path` (no-op if absent).
pub fn remove(obj: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for seg in parents {
        let next = if let Some(f) = seg.strip_prefix("f:") {
            cur.get_mut(f)
        } else if let Some(k) = seg.strip_prefix("k:") {
            let want: Map<String, Value> = match serde_json::from_str(k) {
                Ok(w) => w,
                Err(_) => return,
            };
            cur.as_array_mut().and_then(|a| {
                a.iter_mut()
                    .find(|item| want.iter().all(|(wk, wv)| item.get(wk) == Some(wv)))
            })
        } else {
            None
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let Some(f) = last.strip_prefix("f:") {
        if let Some(m) = cur.as_object_mut() {
            m.remove(f);
        }
    } else if let Some(k) = last.strip_prefix("k:")
        && let (Ok(want), Some(a)) = (
            serde_json::from_str::<Map<String, Value>>(k),
            cur.as_array_mut(),
        )
    {
        a.retain(|item| !want.iter().all(|(wk, wv)| item.get(wk) == Some(wv)));
    }
}

/// FieldsV1 JSON for a set.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut cur = &mut root;
        for seg in path {
            cur = cur
                .entry(seg.clone())
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("field nodes are objects");
        }
        // A member that also has children is marked with ".".
        let has_children = set
            .iter()
            .any(|other| other.len() > path.len() && other.starts_with(path));
        if has_children {
            cur.insert(".".into(), Value::Object(Map::new()));
        }
    }
    Value::Object(root)
}

fn parse(v: &Value, prefix: &mut Path, out: &mut FieldSet) {
    let Some(m) = v.as_object() else { return };
    if m.is_empty() {
        if !prefix.is_empty() {
            out.insert(prefix.clone());
        }
        return;
    }
    for (k, child) in m {
        if k == "." {
            out.insert(prefix.clone());
            continue;
        }
        prefix.push(k.clone());
        parse(child, prefix, out);
        prefix.pop();
    }
}

/// The field set a `fieldsV1` JSON object describes.
pub fn from_fields_v1(v: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    parse(v, &mut Vec::new(), &mut out);
    out
}

/// `.spec.containers[name="a"].image`, how conflicts name a field.
pub fn display(path: &[String]) -> String {
    let mut s = String::new();
    for seg in path {
        if let Some(f) = seg.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = seg.strip_prefix("k:")
            && let Ok(m) = serde_json::from_str::<Map<String, Value>>(k)
        {
            let inner: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
            s.push_str(&format!("[{}]", inner.join(",")));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_through_fields_v1() {
        let obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "1"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let set = fields_of(&obj);
        let v1 = to_fields_v1(&set);
        assert_eq!(
            v1,
            json!({"f:metadata": {"f:labels": {"f:a": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}})
        );
        assert_eq!(from_fields_v1(&v1), set);
        let p: Path = vec![
            "f:spec".into(),
            "f:containers".into(),
            "k:{\"name\":\"c\"}".into(),
            "f:image".into(),
        ];
        assert_eq!(get(&obj, &p), Some(&json!("i")));
        assert_eq!(display(&p), ".spec.containers[name=\"c\"].image");
    }
}
