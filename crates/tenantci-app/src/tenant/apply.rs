//! Server-side apply that first reads the live object and skips the PATCH when the live object
//! already holds every field we set: a re-run costs one GET per object and changes nothing.

use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::steps::Outcome;

pub const FIELD_MANAGER: &str = "tenantci";

/// What happened to one object.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Applied {
    pub kind: String,
    pub name: String,
    /// Created, Updated or Unchanged (with `dry_run`: what would happen); Deleted or Absent
    /// for removals.
    pub outcome: Outcome,
}

/// True when every field of `desired` is present and equal in `live` (arrays element-wise,
/// same length). Fields the apiserver adds (defaults, status, metadata) are ignored.
pub fn is_subset(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d
            .iter()
            .all(|(k, v)| v.is_null() || l.get(k).is_some_and(|lv| is_subset(v, lv))),
        (Value::Array(d), Value::Array(l)) => {
            d.len() == l.len() && d.iter().zip(l).all(|(a, b)| is_subset(a, b))
        }
        (d, l) => d == l,
    }
}

/// GETs `obj` and server-side applies it unless the live object already matches.
pub async fn apply<K>(api: &Api<K>, obj: &K, dry_run: bool) -> Result<Applied, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let kind = K::kind(&()).to_string();
    let live = api.get_opt(&name).await?;
    let desired = serde_json::to_value(obj).unwrap_or(Value::Null);
    let outcome = match &live {
        Some(l) if is_subset(&desired, &serde_json::to_value(l).unwrap_or(Value::Null)) => {
            return Ok(Applied {
                kind,
                name,
                outcome: Outcome::Unchanged,
            });
        }
        Some(_) => Outcome::Updated,
        None => Outcome::Created,
    };
    let mut params = PatchParams::apply(FIELD_MANAGER).force();
    params.dry_run = dry_run;
    api.patch(&name, &params, &Patch::Apply(obj)).await?;
    Ok(Applied {
        kind,
        name,
        outcome,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subset_ignores_added_fields_but_not_changed_ones() {
        let desired =
            json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "rules": [{"verbs": ["get"]}]});
        let live = json!({"metadata": {"name": "a", "uid": "u", "labels": {"x": "1", "y": "2"}}, "rules": [{"verbs": ["get"], "apiGroups": [""]}]});
        assert!(is_subset(&desired, &live));
        let changed = json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "rules": [{"verbs": ["get", "list"]}]});
        assert!(!is_subset(&changed, &live));
        let more_rules = json!({"rules": [{"verbs": ["get"]}, {"verbs": ["list"]}]});
        assert!(!is_subset(&more_rules, &live));
    }
}
