//! Server-side apply that first reads the live object and skips the PATCH when the live object
//! already holds every field we set (and a ConfigMap's or Secret's `data` no key we no longer
//! set): a re-run costs one GET per object and changes nothing. [`summary`] makes one step line
//! of the outcomes.
//! [`apply_all`] applies a list of [`Object`]s in order (the runner's RBAC, the dispatcher's),
//! with the one rule a dry run needs for a namespace that does not exist yet.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::steps::Outcome;
use tenantci_core::Result;

/// The field manager of every apply: the fields tenantci sets are owned under this name.
pub const FIELD_MANAGER: &str = "tenantci";

/// What happened to one object.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Applied {
    /// The object's kind, e.g. `ClusterRole`.
    pub kind: String,
    /// The object's `metadata.name`.
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

/// True when applying `desired` would change nothing in `live`: [`is_subset`], and a `data`
/// map (a ConfigMap's, a Secret's) holds exactly `desired`'s keys. tenantci writes such a map
/// whole, so a key it no longer sets (a password file removed, a webhook turned off) must go,
/// which the subset test alone would skip.
fn unchanged(desired: &Value, live: &Value) -> bool {
    is_subset(desired, live) && stray_data_keys(desired, live).is_empty()
}

/// The keys of `live`'s `data` map that `desired`'s does not hold (none when `desired` has no
/// such map). The forced apply drops those tenantci set before; one another field manager
/// set (a `kubectl patch`, a hand edit) it leaves, so they are removed by name after it.
fn stray_data_keys(desired: &Value, live: &Value) -> Vec<String> {
    let Some(wanted) = desired.get("data").and_then(Value::as_object) else {
        return Vec::new();
    };
    live.get("data")
        .and_then(Value::as_object)
        .map(|m| {
            m.keys()
                .filter(|k| !wanted.contains_key(*k))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// GETs `obj` and server-side applies it unless the live object already matches.
pub async fn apply<K>(api: &Api<K>, obj: &K, dry_run: bool) -> Result<Applied, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let kind = K::kind(&()).to_string();
    let live = api
        .get_opt(&name)
        .await?
        .map(|l| serde_json::to_value(l).unwrap_or(Value::Null));
    let desired = serde_json::to_value(obj).unwrap_or(Value::Null);
    let outcome = match &live {
        Some(l) if unchanged(&desired, l) => {
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
    let stray = live
        .as_ref()
        .map(|l| stray_data_keys(&desired, l))
        .unwrap_or_default();
    if !stray.is_empty() {
        let nulls: serde_json::Map<String, Value> =
            stray.into_iter().map(|k| (k, Value::Null)).collect();
        let params = PatchParams {
            dry_run,
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let drop = serde_json::json!({ "data": nulls });
        api.patch(&name, &params, &Patch::Merge(&drop)).await?;
    }
    Ok(Applied {
        kind,
        name,
        outcome,
    })
}

/// An object of a kind tenantci applies, so one loop applies any mix of them in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    /// A Namespace (cluster-scoped), e.g. the runner's or the dispatcher's.
    Namespace(Namespace),
    /// A ServiceAccount, in its own namespace.
    ServiceAccount(ServiceAccount),
    /// A Role, in its own namespace.
    Role(Role),
    /// A RoleBinding, in its own namespace.
    RoleBinding(RoleBinding),
    /// A ClusterRole.
    ClusterRole(ClusterRole),
    /// A ClusterRoleBinding.
    ClusterRoleBinding(ClusterRoleBinding),
    /// The dispatcher's config as the in-cluster Deployment mounts it (`dispatch init`).
    ConfigMap(ConfigMap),
    /// The dispatcher's secret files as the in-cluster Deployment mounts them. Only its kind,
    /// name and outcome are ever printed.
    Secret(Secret),
}

impl Object {
    fn meta(&self) -> &ObjectMeta {
        match self {
            Object::Namespace(o) => &o.metadata,
            Object::ServiceAccount(o) => &o.metadata,
            Object::Role(o) => &o.metadata,
            Object::RoleBinding(o) => &o.metadata,
            Object::ClusterRole(o) => &o.metadata,
            Object::ClusterRoleBinding(o) => &o.metadata,
            Object::ConfigMap(o) => &o.metadata,
            Object::Secret(o) => &o.metadata,
        }
    }

    /// The object's kind as Kubernetes names it, e.g. `ClusterRoleBinding`.
    pub fn kind(&self) -> &'static str {
        match self {
            Object::Namespace(_) => "Namespace",
            Object::ServiceAccount(_) => "ServiceAccount",
            Object::Role(_) => "Role",
            Object::RoleBinding(_) => "RoleBinding",
            Object::ClusterRole(_) => "ClusterRole",
            Object::ClusterRoleBinding(_) => "ClusterRoleBinding",
            Object::ConfigMap(_) => "ConfigMap",
            Object::Secret(_) => "Secret",
        }
    }

    /// The object's `metadata.name`; empty when unset.
    pub fn name(&self) -> String {
        self.meta().name.clone().unwrap_or_default()
    }

    /// The namespace of a namespaced object; None for cluster-scoped kinds.
    fn namespace(&self) -> Option<&str> {
        match self {
            Object::ServiceAccount(_)
            | Object::Role(_)
            | Object::RoleBinding(_)
            | Object::ConfigMap(_)
            | Object::Secret(_) => Some(self.meta().namespace.as_deref().unwrap_or_default()),
            _ => None,
        }
    }

    async fn apply(&self, client: &kube::Client, dry_run: bool) -> Result<Applied, kube::Error> {
        let c = client.clone();
        let ns = self.namespace().unwrap_or_default();
        match self {
            Object::Namespace(o) => apply(&Api::all(c), o, dry_run).await,
            Object::ServiceAccount(o) => apply(&Api::namespaced(c, ns), o, dry_run).await,
            Object::Role(o) => apply(&Api::namespaced(c, ns), o, dry_run).await,
            Object::RoleBinding(o) => apply(&Api::namespaced(c, ns), o, dry_run).await,
            Object::ClusterRole(o) => apply(&Api::all(c), o, dry_run).await,
            Object::ClusterRoleBinding(o) => apply(&Api::all(c), o, dry_run).await,
            Object::ConfigMap(o) => apply(&Api::namespaced(c, ns), o, dry_run).await,
            Object::Secret(o) => apply(&Api::namespaced(c, ns), o, dry_run).await,
        }
    }

    /// What a real run would do, without asking: for an object a dry run cannot apply.
    fn would_create(&self) -> Applied {
        Applied {
            kind: self.kind().into(),
            name: self.name(),
            outcome: Outcome::Created,
        }
    }
}

/// The namespace a dry run found missing (its outcome is a creation it did not make).
fn missing_namespace(object: &Object, applied: &Applied, dry_run: bool) -> Option<String> {
    let created = dry_run && applied.outcome == Outcome::Created;
    (created && matches!(object, Object::Namespace(_))).then(|| object.name())
}

/// Whether `object` lives in a namespace the dry run found missing: the apiserver would refuse
/// its dry run, so it is reported as what a real run would do.
fn in_missing_namespace(object: &Object, missing: &[String]) -> bool {
    object
        .namespace()
        .is_some_and(|ns| missing.iter().any(|m| m == ns))
}

/// Applies `objects` in order (namespaces first) with an admin client. An error names the
/// object, with `hint` (how to get a client allowed to apply it).
pub async fn apply_all(
    client: &kube::Client,
    objects: &[Object],
    dry_run: bool,
    hint: &str,
) -> Result<Vec<Applied>> {
    let mut out = Vec::with_capacity(objects.len());
    let mut missing = Vec::new();
    for object in objects {
        let applied = if in_missing_namespace(object, &missing) {
            object.would_create()
        } else {
            object.apply(client, dry_run).await.map_err(|e| {
                let what = format!("apply {} `{}`", object.kind(), object.name());
                tenantci_core::kube_client::api_error(e, &what, hint)
            })?
        };
        missing.extend(missing_namespace(object, &applied, dry_run));
        out.push(applied);
    }
    Ok(out)
}

/// One step line for a set of objects: `unchanged` when every object is, `applied` otherwise;
/// the detail lists each object with its own outcome (`bootstrap runner`, `dispatch init`).
pub fn summary(applied: &[Applied]) -> (Outcome, String) {
    let unchanged = applied.iter().all(|a| a.outcome == Outcome::Unchanged);
    let detail = applied
        .iter()
        .map(|a| format!("{} {} {}", a.kind, a.name, a.outcome))
        .collect::<Vec<_>>()
        .join(", ");
    let outcome = if unchanged {
        Outcome::Unchanged
    } else {
        Outcome::Applied
    };
    (outcome, detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn named<T: Default>(
        name: &str,
        ns: Option<&str>,
        meta: impl Fn(&mut T) -> &mut ObjectMeta,
    ) -> T {
        let mut o = T::default();
        let m = meta(&mut o);
        m.name = Some(name.into());
        m.namespace = ns.map(str::to_string);
        o
    }

    #[test]
    fn a_data_key_tenantci_no_longer_sets_is_a_change() {
        let desired = json!({"kind": "Secret", "data": {"a": "MQ=="}});
        let same = json!({"kind": "Secret", "metadata": {"uid": "u"}, "data": {"a": "MQ=="}});
        let more = json!({"kind": "Secret", "data": {"a": "MQ==", "ci-admin.password": "eA=="}});
        assert!(unchanged(&desired, &same));
        assert!(
            is_subset(&desired, &more),
            "the subset test alone misses it"
        );
        assert!(!unchanged(&desired, &more));
        // Kinds without a data map are judged by the subset test alone.
        let role = json!({"rules": [{"verbs": ["get"]}]});
        assert!(unchanged(
            &role,
            &json!({"rules": [{"verbs": ["get"]}], "x": 1})
        ));
    }

    #[test]
    fn a_dry_run_creating_a_namespace_reports_its_objects_as_created() {
        let ns = Object::Namespace(named("ci", None, |o: &mut Namespace| &mut o.metadata));
        let sa = Object::ServiceAccount(named("d", Some("ci"), |o: &mut ServiceAccount| {
            &mut o.metadata
        }));
        let elsewhere = Object::Role(named("d", Some("other"), |o: &mut Role| &mut o.metadata));
        let cluster = Object::ClusterRole(named("d", None, |o: &mut ClusterRole| &mut o.metadata));
        let created = ns.would_create();
        assert_eq!(missing_namespace(&ns, &created, true), Some("ci".into()));
        assert_eq!(missing_namespace(&ns, &created, false), None);
        let unchanged = Applied {
            outcome: Outcome::Unchanged,
            ..created
        };
        assert_eq!(missing_namespace(&ns, &unchanged, true), None);
        let missing = ["ci".to_string()];
        assert!(in_missing_namespace(&sa, &missing));
        assert!(!in_missing_namespace(&elsewhere, &missing));
        assert!(!in_missing_namespace(&cluster, &missing));
        assert_eq!(
            (
                sa.would_create().kind.as_str(),
                sa.would_create().name.as_str()
            ),
            ("ServiceAccount", "d")
        );
    }

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
