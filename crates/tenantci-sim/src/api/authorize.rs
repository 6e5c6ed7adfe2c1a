//! Glue between the API layer and `sim::authz`: request attributes from a routed request, the
//! RBAC objects as the evaluator wants them (cached until an RBAC object changes), and the
//! 403 answers. The evaluation itself is `authz`'s.

use std::sync::{Arc, Mutex};

use http::{HeaderMap, Method};
use serde_json::Value;

use super::route::Route;
use super::{ApiServer, Request};
use crate::api_error::{ApiError, ApiResult};
use crate::authz::{
    self, Attributes, NonResourceAttributes, RbacObjects, ResourceAttributes, UserInfo,
};

const RBAC_KEYS: [&str; 4] = [
    "roles.rbac.authorization.k8s.io",
    "clusterroles.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io",
    "clusterrolebindings.rbac.authorization.k8s.io",
];

/// The RBAC snapshot [`ApiServer::rbac`] built last, with the store version it was built at.
#[derive(Default)]
pub struct RbacCache(Mutex<Option<(u64, Arc<RbacObjects>)>>);

/// The verb kube-apiserver derives from a request.
pub fn verb(req: &Request, has_name: bool) -> &'static str {
    match req.method {
        Method::GET | Method::HEAD if has_name => "get",
        Method::GET | Method::HEAD if req.flag("watch") => "watch",
        Method::GET | Method::HEAD => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if has_name => "delete",
        Method::DELETE => "deletecollection",
        _ => "unknown",
    }
}

/// Resource attributes as the authorizer wants them (`api_version` is always `*`).
pub fn resource_attrs(
    verb: &str,
    group: &str,
    resource: &str,
    sub: &str,
    ns: &str,
    name: &str,
) -> Attributes {
    Attributes::Resource(ResourceAttributes {
        verb: verb.to_string(),
        api_group: group.to_string(),
        api_version: "*".to_string(),
        resource: resource.to_string(),
        subresource: sub.to_string(),
        namespace: ns.to_string(),
        name: name.to_string(),
    })
}

/// What the authorizer sees of a routed request: resource attributes for a resource (known or not),
/// non-resource attributes (the lower-cased method and the path) for anything else.
pub fn attributes(req: &Request, route: &Route) -> Attributes {
    match route {
        Route::Resource(r) => resource_attrs(
            verb(req, r.name.is_some()),
            r.def.group,
            r.def.plural,
            r.subresource.as_deref().unwrap_or(""),
            r.namespace.as_deref().unwrap_or(""),
            r.name.as_deref().unwrap_or(""),
        ),
        Route::UnknownResource {
            group,
            resource,
            namespace,
            name,
        } => resource_attrs(
            verb(req, !name.is_empty()),
            group,
            resource,
            "",
            namespace,
            name,
        ),
        _ => Attributes::NonResource(NonResourceAttributes {
            verb: req.method.as_str().to_ascii_lowercase(),
            path: req.path.clone(),
        }),
    }
}

impl ApiServer {
    /// The stored RBAC objects, rebuilt only after one of them changed.
    pub fn rbac(&self) -> Arc<RbacObjects> {
        let version = RBAC_KEYS
            .iter()
            .map(|k| self.store.changed_at(k))
            .max()
            .unwrap_or(0);
        let mut cache = self.rbac.0.lock().unwrap();
        if let Some((v, objs)) = cache.as_ref()
            && *v == version
        {
            return objs.clone();
        }
        fn load<T: serde::de::DeserializeOwned>(s: &crate::store::Store, key: &str) -> Vec<T> {
            s.list(key, None)
                .0
                .iter()
                .filter_map(|v| serde_json::from_value((**v).clone()).ok())
                .collect()
        }
        let objs = Arc::new(RbacObjects {
            roles: load(&self.store, RBAC_KEYS[0]),
            cluster_roles: load(&self.store, RBAC_KEYS[1]),
            role_bindings: load(&self.store, RBAC_KEYS[2]),
            cluster_role_bindings: load(&self.store, RBAC_KEYS[3]),
        });
        *cache = Some((version, objs.clone()));
        objs
    }

    /// RBAC's decision on `user` doing `attrs`, over the stored RBAC objects.
    pub fn allowed(&self, user: &UserInfo, attrs: &Attributes) -> authz::Decision {
        authz::authorize(user, attrs, &self.rbac())
    }

    /// `Ok` when `user` may do `attrs`, else kube-apiserver's 403 for it.
    pub fn require(&self, user: &UserInfo, attrs: &Attributes) -> ApiResult<()> {
        if self.allowed(user, attrs).allowed {
            Ok(())
        } else {
            Err(ApiError::from_status(authz::forbidden_status(user, attrs)))
        }
    }

    /// The user the request acts as: `user` itself without `Impersonate-*` headers, else the
    /// impersonated one once `user` may impersonate it (else the filter's refusal: 403, or 500
    /// for groups without a user).
    pub fn impersonate(&self, user: &UserInfo, headers: &HeaderMap) -> ApiResult<UserInfo> {
        let wants = headers
            .keys()
            .any(|k| k.as_str().starts_with("impersonate-"));
        if !wants {
            return Ok(user.clone());
        }
        authz::impersonate(user, headers, &self.rbac()).map_err(|e| ApiError {
            code: e.code,
            body: e.status,
        })
    }

    /// Escalation prevention for writes of RBAC objects.
    pub fn check_escalation(
        &self,
        user: &UserInfo,
        plural: &str,
        ns: Option<&str>,
        name: &str,
        obj: &Value,
    ) -> ApiResult<()> {
        authz::check_escalation(user, ns, obj, &self.rbac()).map_err(|msg| {
            ApiError::from_status(authz::escalation_forbidden_status(plural, name, &msg))
        })
    }
}

/// Whether `key` is a store key of one of the four RBAC kinds.
pub fn is_rbac(key: &str) -> bool {
    RBAC_KEYS.contains(&key)
}
