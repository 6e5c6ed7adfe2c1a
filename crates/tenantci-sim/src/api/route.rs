//! Path routing: a request path becomes discovery, health, or a resource request with its
//! namespace, name and subresource (kube-apiserver's RequestInfo rules, including
//! `/api/v1/namespaces/<ns>` naming the namespace object itself).

use super::registry::{self, ResourceDef};

/// What a request path names.
#[derive(Debug, Clone)]
pub enum Route {
    /// `/version`.
    Version,
    /// `/healthz`, `/readyz`, `/livez` (and their sub-paths).
    Health,
    /// `/metrics`: the request counter (`counts`).
    Metrics,
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/<group>`
    Group(String),
    /// `/api/v1`, `/apis/<group>/<version>`
    ResourceList {
        /// The group (empty: the core group).
        group: String,
        /// The version.
        version: String,
    },
    /// A served resource: a collection, an object or a subresource.
    Resource(ResourceRoute),
    /// A known API prefix with an unknown resource: (group, resource) for authorization.
    UnknownResource {
        /// The API group of the path.
        group: String,
        /// The resource the path names.
        resource: String,
        /// The namespace, "" when none.
        namespace: String,
        /// The object's name, "" when none.
        name: String,
    },
    /// `/openapi/v3` (empty) or `/openapi/v3/<group-version path>`.
    OpenApiV3(String),
    /// Anything else (including `/openapi/v2`): a non-resource URL that answers 404.
    Other,
}

/// A request for a served resource.
#[derive(Debug, Clone)]
pub struct ResourceRoute {
    /// The resource.
    pub def: &'static ResourceDef,
    /// The namespace from the path (for a Namespace object, its own name).
    pub namespace: Option<String>,
    /// The object's name; None for a collection.
    pub name: Option<String>,
    /// The subresource (`status`, `log`, ...), if any.
    pub subresource: Option<String>,
}

/// Routes `path` against `registry`, as kube-apiserver's RequestInfo reads it.
pub fn route(registry: &'static [ResourceDef], path: &str) -> Route {
    let trimmed = path.trim_end_matches('/');
    let parts: Vec<&str> = trimmed.split('/').filter(|s| !s.is_empty()).collect();
    match parts.as_slice() {
        ["version"] => Route::Version,
        ["metrics"] => Route::Metrics,
        ["healthz"] | ["readyz"] | ["livez"] => Route::Health,
        [h, ..] if matches!(*h, "healthz" | "readyz" | "livez") => Route::Health,
        ["openapi", "v3", rest @ ..] => Route::OpenApiV3(rest.join("/")),
        ["api"] => Route::CoreVersions,
        ["apis"] => Route::Groups,
        ["apis", g] => Route::Group(g.to_string()),
        ["api", v] => Route::ResourceList {
            group: String::new(),
            version: v.to_string(),
        },
        ["apis", g, v] => Route::ResourceList {
            group: g.to_string(),
            version: v.to_string(),
        },
        ["api", v, rest @ ..] => resource(registry, "", v, rest),
        ["apis", g, v, rest @ ..] => resource(registry, g, v, rest),
        _ => Route::Other,
    }
}

fn resource(registry: &'static [ResourceDef], group: &str, version: &str, rest: &[&str]) -> Route {
    let mut parts = rest;
    let mut namespace = None;
    if parts.first() == Some(&"namespaces") && parts.len() > 1 {
        namespace = Some(parts[1].to_string());
        if parts.len() > 2 && !matches!(parts[2], "status" | "finalize") {
            parts = &parts[2..];
        }
    }
    let res = parts[0];
    // `/api/v1/namespaces/<name>[/status]`: the namespace is the object, and its own scope.
    let (name, sub) = if res == "namespaces"
        && namespace.is_some()
        && parts.len() <= 3
        && parts.as_ptr() == rest.as_ptr()
    {
        (namespace.clone(), parts.get(2).map(|s| s.to_string()))
    } else {
        (
            parts.get(1).map(|s| s.to_string()),
            parts.get(2).map(|s| s.to_string()),
        )
    };
    if parts.len() > 3 {
        return Route::Other;
    }
    match registry::find(registry, group, version, res) {
        Some(def) => Route::Resource(ResourceRoute {
            def,
            namespace: if def.namespaced || res == "namespaces" {
                namespace
            } else {
                None
            },
            name,
            subresource: sub,
        }),
        None => Route::UnknownResource {
            group: group.to_string(),
            resource: res.to_string(),
            namespace: namespace.unwrap_or_default(),
            name: name.unwrap_or_default(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(path: &str) -> ResourceRoute {
        match route(registry::TENANT, path) {
            Route::Resource(r) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn routes() {
        let r = res("/api/v1/namespaces/ns/pods/p/log");
        assert_eq!(
            (
                r.def.plural,
                r.namespace.as_deref(),
                r.name.as_deref(),
                r.subresource.as_deref()
            ),
            ("pods", Some("ns"), Some("p"), Some("log"))
        );
        let r = res("/api/v1/namespaces/ns");
        assert_eq!(
            (r.def.plural, r.namespace.as_deref(), r.name.as_deref()),
            ("namespaces", Some("ns"), Some("ns"))
        );
        let r = res("/api/v1/namespaces");
        assert_eq!((r.def.plural, r.name), ("namespaces", None));
        let r = res("/apis/apps/v1/namespaces/x/deployments");
        assert_eq!(
            (r.def.plural, r.namespace.as_deref()),
            ("deployments", Some("x"))
        );
        let r = res("/api/v1/pods");
        assert_eq!(r.namespace, None);
        let r = res("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/x");
        assert_eq!((r.namespace, r.name.as_deref()), (None, Some("x")));
        assert!(matches!(
            route(registry::TENANT, "/openapi/v2"),
            Route::Other
        ));
        assert!(
            matches!(route(registry::TENANT, "/openapi/v3/apis/apps/v1"), Route::OpenApiV3(p) if p == "apis/apps/v1")
        );
        assert!(matches!(
            route(registry::TENANT, "/api/v1/namespaces/x/widgets"),
            Route::UnknownResource { .. }
        ));
        assert!(
            matches!(route(registry::TENANT, "/apis/apps/v1"), Route::ResourceList { group, version } if group == "apps" && version == "v1")
        );
    }
}
