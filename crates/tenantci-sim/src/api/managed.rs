//! Server-side apply and managedFields bookkeeping.
//!
//! `apply` merges an apply configuration into the live object for one field manager: fields
//! another manager owns with a different value conflict (409 unless `force`, which takes them
//! over); fields this manager applied before and no longer applies are removed unless another
//! manager owns them. `record_update` gives the fields a non-apply write changed to its manager.

use serde_json::{Value, json};

use super::fieldset::{self, FieldSet};
use super::patch::strategic_merge;
use crate::api_error::ApiError;

#[derive(Debug, Clone)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: String,
    fields: FieldSet,
}

fn read(obj: &Value) -> Vec<Entry> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| Entry {
                    manager: e["manager"].as_str().unwrap_or("").to_string(),
                    operation: e["operation"].as_str().unwrap_or("Update").to_string(),
                    api_version: e["apiVersion"].as_str().unwrap_or("").to_string(),
                    time: e["time"].as_str().unwrap_or("").to_string(),
                    subresource: e["subresource"].as_str().unwrap_or("").to_string(),
                    fields: fieldset::from_fields_v1(&e["fieldsV1"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn write(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": fieldset::to_fields_v1(&e.fields),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// Leaf-ish members whose value can differ (element markers only conflict through children).
fn comparable(path: &[String]) -> bool {
    path.last().is_some_and(|s| s.starts_with("f:"))
}

fn conflict_error(
    kind: &str,
    group: &str,
    name: &str,
    conflicts: &[(String, String, String)],
) -> ApiError {
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(m, v, f)| {
            json!({"type": "FieldManagerConflict", "message": format!("conflict with \"{m}\" using {v}"), "field": f})
        })
        .collect();
    let message = if conflicts.len() == 1 {
        let (m, v, f) = &conflicts[0];
        format!("Apply failed with 1 conflict: conflict with \"{m}\" using {v}: {f}")
    } else {
        let mut by: Vec<String> = Vec::new();
        let mut last = String::new();
        for (m, v, f) in conflicts {
            let head = format!("conflicts with \"{m}\" using {v}:");
            if head != last {
                by.push(head.clone());
                last = head;
            }
            by.push(format!("- {f}"));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            by.join("\n")
        )
    };
    let mut details = json!({"name": name});
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    details["kind"] = json!(kind);
    details["causes"] = json!(causes);
    ApiError::new(409, "Conflict", message, Some(details))
}

/// Applies `config` for `manager`; `live` is None when the object is being created.
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
    api_version: &str,
    (plural, group, name): (&str, &str, &str),
) -> Result<Value, ApiError> {
    let claimed = fieldset::fields_of(config);
    let empty = json!({});
    let live_v = live.unwrap_or(&empty);
    let mut entries = read(live_v);
    let is_mine = |e: &Entry| applied_by(e, manager);
    let conflicts = conflicts(&entries, manager, &claimed, live_v, config);
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(plural, group, name, &conflicts));
    }
    if force {
        take_claimed(&mut entries, manager, &claimed, live_v, config);
    }
    let mut merged = merge_applied(live_v, config, &entries, manager, &claimed);
    // A no-op apply (same fields, same object) keeps its entry's time, as kube-apiserver does:
    // a new time would make it a write, a new resourceVersion and a watch event for nothing.
    let time = entries
        .iter()
        .find(|e| is_mine(e))
        .filter(|e| {
            e.fields == claimed
                && e.api_version == api_version
                && without_managed_fields(&merged) == without_managed_fields(live_v)
        })
        .map_or_else(crate::ids::now, |e| e.time.clone());
    let mine = Entry {
        manager: manager.to_string(),
        operation: "Apply".into(),
        api_version: api_version.to_string(),
        time,
        subresource: String::new(),
        fields: claimed,
    };
    // In its place, so that a no-op apply leaves the list as it was.
    match entries.iter().position(is_mine) {
        Some(i) => entries[i] = mine,
        None => entries.push(mine),
    }
    write(&mut merged, &entries);
    Ok(merged)
}

/// Whether `e` is `manager`'s apply entry (of the object itself, no subresource).
fn applied_by(e: &Entry, manager: &str) -> bool {
    e.manager == manager && e.operation == "Apply" && e.subresource.is_empty()
}

/// The fields `config` claims that another manager owns with another value than `config`'s:
/// (that manager, its apiVersion, the field as conflicts name it).
fn conflicts(
    entries: &[Entry],
    manager: &str,
    claimed: &FieldSet,
    live: &Value,
    config: &Value,
) -> Vec<(String, String, String)> {
    let mut conflicts = Vec::new();
    for e in entries.iter().filter(|e| !applied_by(e, manager)) {
        for f in e.fields.intersection(claimed) {
            if comparable(f) && fieldset::get(live, f) != fieldset::get(config, f) {
                conflicts.push((
                    e.manager.clone(),
                    e.api_version.clone(),
                    fieldset::display(f),
                ));
            }
        }
    }
    conflicts
}

/// A forced apply takes the fields it conflicts on: no other manager owns a claimed field
/// whose value it changes.
fn take_claimed(
    entries: &mut [Entry],
    manager: &str,
    claimed: &FieldSet,
    live: &Value,
    config: &Value,
) {
    for e in entries.iter_mut().filter(|e| !applied_by(e, manager)) {
        e.fields.retain(|f| {
            !claimed.contains(f)
                || !comparable(f)
                || fieldset::get(live, f) == fieldset::get(config, f)
        });
    }
}

/// `live` without the fields `manager` applied before that neither `config` claims nor any
/// other manager owns (deepest first), then `config` merged in (its `managedFields` and
/// `resourceVersion` aside).
fn merge_applied(
    live: &Value,
    config: &Value,
    entries: &[Entry],
    manager: &str,
    claimed: &FieldSet,
) -> Value {
    let previous = entries
        .iter()
        .find(|e| applied_by(e, manager))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let others: FieldSet = entries
        .iter()
        .filter(|e| !applied_by(e, manager))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    let mut merged = live.clone();
    let mut dropped: Vec<&Vec<String>> = previous
        .iter()
        .filter(|f| !claimed.contains(*f) && !others.contains(*f))
        .collect();
    dropped.sort_by_key(|f| std::cmp::Reverse(f.len()));
    for f in dropped {
        fieldset::remove(&mut merged, f);
    }
    let mut cfg = config.clone();
    if let Some(m) = cfg.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
        m.remove("resourceVersion");
    }
    strategic_merge(&mut merged, &cfg);
    merged
}

fn without_managed_fields(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    o
}

/// Gives the fields a non-apply write set or changed to `manager` (operation Update).
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    subresource: &str,
) {
    let empty = json!({});
    let old_v = old.unwrap_or(&empty);
    let mut entries = read(old_v);
    let new_fields = fieldset::fields_of(new);
    let changed: FieldSet = new_fields
        .iter()
        .filter(|f| fieldset::get(old_v, f) != fieldset::get(new, f))
        .cloned()
        .collect();
    for e in entries.iter_mut() {
        e.fields
            .retain(|f| new_fields.contains(f) || !comparable(f));
        if !(e.manager == manager && e.operation == "Update") {
            e.fields.retain(|f| !changed.contains(f));
        }
    }
    if !changed.is_empty() {
        match entries.iter_mut().find(|e| {
            e.manager == manager && e.operation == "Update" && e.subresource == subresource
        }) {
            Some(e) => {
                e.fields.extend(changed);
                e.time = crate::ids::now();
            }
            None => entries.push(Entry {
                manager: manager.to_string(),
                operation: "Update".into(),
                api_version: api_version.to_string(),
                time: crate::ids::now(),
                subresource: subresource.to_string(),
                fields: changed,
            }),
        }
    }
    write(new, &entries);
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: (&str, &str, &str) = ("configmaps", "", "c");

    #[test]
    fn a_no_op_apply_keeps_its_time_and_a_change_takes_a_new_one() {
        let cfg = json!({"metadata": {"name": "c"}, "data": {"k": "1"}});
        let mut live = apply(None, &cfg, "m", false, "v1", ID).unwrap();
        // As if the first apply were a second or more ago.
        live["metadata"]["managedFields"][0]["time"] = json!("2020-01-01T00:00:00Z");
        let again = apply(Some(&live), &cfg, "m", false, "v1", ID).unwrap();
        assert_eq!(again, live, "nothing changed, nothing to write");
        let cfg2 = json!({"metadata": {"name": "c"}, "data": {"k": "2"}});
        let changed = apply(Some(&live), &cfg2, "m", false, "v1", ID).unwrap();
        assert_ne!(
            changed["metadata"]["managedFields"][0]["time"],
            json!("2020-01-01T00:00:00Z")
        );
    }

    #[test]
    fn apply_conflicts_with_another_manager_unless_forced() {
        let cfg = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "a"}});
        let live = apply(None, &cfg, "one", false, "v1", ID).unwrap();
        let cfg2 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "b"}});
        let err = apply(Some(&live), &cfg2, "two", false, "v1", ID).unwrap_err();
        assert_eq!(err.code, 409);
        assert!(
            err.body["message"]
                .as_str()
                .unwrap()
                .contains("conflict with \"one\""),
            "{}",
            err.body
        );
        let forced = apply(Some(&live), &cfg2, "two", true, "v1", ID).unwrap();
        assert_eq!(forced["data"]["k"], "b");
        assert_eq!(
            forced["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        // Same value is shared ownership, not a conflict.
        assert!(apply(Some(&live), &cfg, "two", false, "v1", ID).is_ok());
    }

    #[test]
    fn apply_removes_fields_it_no_longer_sets() {
        let cfg = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}});
        let live = apply(None, &cfg, "m", false, "v1", ID).unwrap();
        let cfg2 = json!({"metadata": {"name": "c"}, "data": {"a": "1"}});
        let next = apply(Some(&live), &cfg2, "m", false, "v1", ID).unwrap();
        assert_eq!(next["data"], json!({"a": "1"}));
    }
}
