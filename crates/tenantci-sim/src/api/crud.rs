//! Writes: create, update (PUT), patch (merge, strategic, JSON, apply), delete and
//! deletecollection, with kube-apiserver's preconditions and errors. Reads are in `read`,
//! watches in `watch`.

use std::sync::Arc;

use http::Method;
use serde_json::{Value, json};

use super::kinds;
use super::managed;
use super::openapi::{self, fields};
use super::patch;
use super::registry::ResourceDef;
use super::request::MediaType;
use super::route::ResourceRoute;
use super::{ApiServer, Reply, Request, authorize, reviews};
use crate::api_error::{ApiError, ApiResult};
use crate::authz::UserInfo;
use crate::validate;

use crate::ids::{name_suffix, now, uuid};

fn rv_of(v: &Value) -> &str {
    v["metadata"]["resourceVersion"].as_str().unwrap_or("")
}

/// The body of a create or update: a whole object in JSON or YAML, of the URL's kind, in the
/// URL's namespace (filled in when absent).
fn object_body(def: &'static ResourceDef, ns: &str, req: &Request) -> ApiResult<Value> {
    let mut obj = match req.media_type()? {
        MediaType::Json => req.json_body(false)?,
        MediaType::Yaml => req.json_body(true)?,
        // kubectl's typed generators (`create deployment`) send protobuf only.
        MediaType::Protobuf => super::protobuf::decode_object(&req.body)
            .map_err(|_| ApiError::unsupported_media_type(req.content_type()))?,
        _ => return Err(ApiError::unsupported_media_type(req.content_type())),
    };
    check_type(def, &obj)?;
    check_namespace(def, &mut obj, ns)?;
    Ok(obj)
}

/// The object names its type correctly (kube-apiserver's decoding step).
fn check_type(def: &ResourceDef, obj: &Value) -> ApiResult<()> {
    if !obj.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    let kind = obj["kind"].as_str().unwrap_or("");
    if kind.is_empty() {
        return Err(ApiError::bad_request(format!(
            "Object 'Kind' is missing in '{}'",
            truncate(obj)
        )));
    }
    let api_version = obj["apiVersion"].as_str().unwrap_or("");
    if api_version.is_empty() {
        return Err(ApiError::bad_request(format!(
            "Object 'apiVersion' is missing in '{}'",
            truncate(obj)
        )));
    }
    if kind != def.kind || api_version != def.api_version() {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            def.api_version()
        )));
    }
    Ok(())
}

fn truncate(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 200 {
        format!(
            "{}...",
            &s[..s.char_indices().nth(200).map(|(i, _)| i).unwrap_or(s.len())]
        )
    } else {
        s
    }
}

fn meta_mut(obj: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    obj["metadata"]
        .as_object_mut()
        .expect("just made an object")
}

fn check_namespace(def: &ResourceDef, obj: &mut Value, ns: &str) -> ApiResult<()> {
    let meta = meta_mut(obj);
    if !def.namespaced {
        meta.remove("namespace");
        return Ok(());
    }
    match meta.get("namespace").and_then(Value::as_str) {
        Some(n) if !n.is_empty() && n != ns => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        _ => {
            meta.insert("namespace".into(), json!(ns));
            Ok(())
        }
    }
}

/// The answer to a write: the object, with a `Warning` per unknown field dropped.
fn written(code: u16, obj: Value, warnings: Vec<String>) -> Reply {
    if warnings.is_empty() {
        Reply::Json(code, obj)
    } else {
        Reply::Warned(code, obj, warnings)
    }
}

/// 422 when `name` breaks `def`'s name rule (kube-apiserver's first message for it).
fn check_name(def: &ResourceDef, name: &str) -> ApiResult<()> {
    match validate::name_errors(name, def.name_rule).first() {
        Some(msg) => Err(ApiError::invalid(
            def.kind,
            def.group,
            name,
            "metadata.name",
            "FieldValueInvalid",
            &format!("Invalid value: \"{name}\": {msg}"),
        )),
        None => Ok(()),
    }
}

/// 400 when the object's `metadata.name` is not the name on the URL.
fn check_name_on_url(obj: &Value, name: &str) -> ApiResult<()> {
    let obj_name = obj["metadata"]["name"].as_str().unwrap_or("");
    if obj_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({obj_name}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

/// `current` with the patch `body` applied as `media` says; refused when the patch changed
/// the resourceVersion (a stale precondition) or the name.
fn patched(
    def: &ResourceDef,
    name: &str,
    media: MediaType,
    current: &Value,
    body: &Value,
) -> ApiResult<Value> {
    let mut new = current.clone();
    match media {
        MediaType::MergePatch => patch::merge_patch(&mut new, body),
        MediaType::StrategicMergePatch => patch::strategic_merge(&mut new, body),
        _ => {
            patch::json_patch(&mut new, body).map_err(|e| ApiError::new(422, "Invalid", e, None))?
        }
    }
    if rv_of(&new) != rv_of(current) {
        return Err(ApiError::modified(def.group_resource(), name));
    }
    if new["metadata"]["name"] != current["metadata"]["name"] {
        return Err(ApiError::bad_request(format!(
            "the name of the object does not match the name on the URL ({name})"
        )));
    }
    Ok(new)
}

fn dry_run(req: &Request) -> bool {
    req.param("dryRun") == Some("All")
}

impl ApiServer {
    /// Unknown fields of `obj` under the request's `fieldValidation` (kube-apiserver decodes
    /// into typed objects before anything else): refused under Strict, otherwise dropped
    /// from `obj`, with the warnings to send under Warn. Fields in `already` (unknown in the
    /// stored object a patch starts from) are dropped without a word.
    fn check_fields(
        &self,
        def: &ResourceDef,
        req: &Request,
        obj: &mut Value,
        already: &[String],
    ) -> ApiResult<Vec<String>> {
        let directive = fields::Directive::parse(req.param("fieldValidation"))?;
        let docs = openapi::documents(self.registry);
        let Some(schema) = docs.kind(def) else {
            return Ok(Vec::new());
        };
        let mut unknown = fields::prune_unknown(&docs.schemas, schema, obj);
        unknown.retain(|p| !already.contains(p));
        match directive {
            _ if unknown.is_empty() => Ok(Vec::new()),
            fields::Directive::Strict => Err(fields::strict_error(def.kind, def.version, &unknown)),
            fields::Directive::Warn => Ok(fields::warnings(&unknown)),
            fields::Directive::Ignore => Ok(Vec::new()),
        }
    }

    /// The unknown fields of a stored object, which a patch does not answer for.
    fn stored_unknown(&self, def: &ResourceDef, current: &Value) -> Vec<String> {
        let docs = openapi::documents(self.registry);
        match docs.kind(def) {
            Some(schema) => fields::prune_unknown(&docs.schemas, schema, &mut current.clone()),
            None => Vec::new(),
        }
    }

    fn namespace_exists(&self, def: &ResourceDef, ns: &str) -> ApiResult<()> {
        if def.namespaced && self.store.get("namespaces", "", ns).is_none() {
            return Err(ApiError::not_found(
                crate::api_error::GroupResource {
                    group: "",
                    resource: "namespaces",
                },
                ns,
            ));
        }
        Ok(())
    }

    fn manager(req: &Request) -> String {
        req.param("fieldManager")
            .map(str::to_string)
            .unwrap_or_else(|| req.user_agent_manager())
    }

    pub(super) fn resource(
        self: &Arc<Self>,
        req: Request,
        r: ResourceRoute,
        user: &UserInfo,
    ) -> ApiResult<Reply> {
        let def = r.def;
        if def.is_review() {
            if req.method != Method::POST || r.name.is_some() {
                return Err(ApiError::method_not_allowed());
            }
            return reviews::handle(self, &req, def, user);
        }
        let sub = r.subresource.as_deref();
        if let Some(s) = sub
            && !def.subresources.contains(&s)
        {
            return Err(ApiError::no_route());
        }
        let ns = if def.namespaced {
            r.namespace.clone().unwrap_or_default()
        } else {
            String::new()
        };
        if def.namespaced
            && r.namespace.is_none()
            && (r.name.is_some() || req.method != Method::GET)
        {
            return Err(if r.name.is_some() {
                ApiError::no_route()
            } else {
                ApiError::method_not_allowed()
            });
        }
        match (&req.method, r.name.as_deref()) {
            (&Method::GET, Some(name)) if sub == Some("portforward") => {
                self.port_forward(def, &ns, name, &req, user)
            }
            (&Method::GET | &Method::HEAD, Some(name)) => {
                self.get(def, &ns, name, sub, req.shape())
            }
            (&Method::GET | &Method::HEAD, None) if req.flag("watch") => {
                self.watch(def, r.namespace.as_deref(), &req)
            }
            (&Method::GET | &Method::HEAD, None) => self.list(def, r.namespace.as_deref(), &req),
            (&Method::POST, None) => self.create(def, &ns, &req, user),
            (&Method::POST, Some(name)) if sub == Some("portforward") => {
                self.port_forward(def, &ns, name, &req, user)
            }
            (&Method::POST, Some(_)) if matches!(sub, Some("exec" | "attach")) => {
                Err(upgrade_required())
            }
            (&Method::PUT, Some(name)) => self.update(def, &ns, name, sub, &req, user),
            (&Method::PATCH, Some(name)) => self.patch(def, &ns, name, sub, &req, user),
            (&Method::DELETE, Some(name)) if sub.is_none() => self.delete(def, &ns, name, &req),
            (&Method::DELETE, None) => self.delete_collection(def, r.namespace.as_deref(), &req),
            _ => Err(ApiError::method_not_allowed()),
        }
    }

    fn create(
        &self,
        def: &'static ResourceDef,
        ns: &str,
        req: &Request,
        user: &UserInfo,
    ) -> ApiResult<Reply> {
        let mut obj = object_body(def, ns, req)?;
        let warnings = self.check_fields(def, req, &mut obj, &[])?;
        let meta = meta_mut(&mut obj);
        if meta
            .get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
        {
            return Err(ApiError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let mut name = meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if name.is_empty() {
            match meta
                .get("generateName")
                .and_then(Value::as_str)
                .filter(|g| !g.is_empty())
            {
                Some(g) => name = format!("{g}{}", name_suffix()),
                None => {
                    return Err(ApiError::invalid(
                        def.kind,
                        def.group,
                        "",
                        "metadata.name",
                        "FieldValueRequired",
                        "Required value: name or generateName is required",
                    ));
                }
            }
            meta.insert("name".into(), json!(name));
        }
        check_name(def, &name)?;
        kinds::validate(def, &obj)?;
        self.namespace_exists(def, ns)?;
        if authorize::is_rbac(def.key) {
            self.check_escalation(user, def.plural, def.namespaced.then_some(ns), &name, &obj)?;
        }
        let obj = self.prepare_new(def, obj, &Self::manager(req));
        if dry_run(req) {
            return Ok(written(201, obj, warnings));
        }
        let stored = self
            .store
            .create(def.key, ns, &name, obj)
            .map_err(|_| ApiError::already_exists(def.group_resource(), &name))?;
        self.after_create(def, &name);
        Ok(written(201, (*stored).clone(), warnings))
    }

    /// Server-set metadata and defaults of an object about to be created.
    fn prepare_new(&self, def: &ResourceDef, mut obj: Value, manager: &str) -> Value {
        let had_managed = obj["metadata"]
            .get("managedFields")
            .is_some_and(|m| !m.is_null());
        let meta = meta_mut(&mut obj);
        meta.insert("uid".into(), json!(uuid()));
        meta.insert("creationTimestamp".into(), json!(now()));
        meta.remove("deletionTimestamp");
        if def.generation {
            meta.insert("generation".into(), json!(1));
        }
        kinds::defaults_on_create(def, &mut obj);
        if !had_managed {
            managed::record_update(None, &mut obj, manager, &def.api_version(), "");
        }
        obj
    }

    /// What controllers do right after a create: a new namespace gets its `default`
    /// ServiceAccount. (Pods are placed by `sim::nodes`, which watches the store.)
    fn after_create(&self, def: &ResourceDef, name: &str) {
        if def.key != "namespaces" {
            return;
        }
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}});
        if let Some(sa_def) = super::registry::by_key(self.registry, "serviceaccounts") {
            let obj = self.prepare_new(sa_def, sa, "kube-controller-manager");
            let _ = self.store.create("serviceaccounts", name, "default", obj);
        }
    }

    /// The stored object's identity carried into a replacement, generation bumped on spec change.
    fn carry_over(def: &ResourceDef, current: &Value, new: &mut Value, sub: Option<&str>) {
        let cur_meta = &current["metadata"];
        let spec_changed = current.get("spec") != new.get("spec");
        let meta = meta_mut(new);
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "generation",
        ] {
            match cur_meta.get(k) {
                Some(v) => meta.insert(k.into(), v.clone()),
                None => meta.remove(k),
            };
        }
        if let Some(mf) = cur_meta.get("managedFields") {
            meta.insert("managedFields".into(), mf.clone());
        } else {
            meta.remove("managedFields");
        }
        if def.generation && spec_changed && sub.is_none() {
            let g = cur_meta["generation"].as_i64().unwrap_or(1) + 1;
            meta.insert("generation".into(), json!(g));
        }
        if def.has_status() && sub.is_none() {
            match current.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    new.as_object_mut().map(|m| m.remove("status"));
                }
            }
        }
    }

    fn update(
        &self,
        def: &'static ResourceDef,
        ns: &str,
        name: &str,
        sub: Option<&str>,
        req: &Request,
        user: &UserInfo,
    ) -> ApiResult<Reply> {
        let mut body = object_body(def, ns, req)?;
        let warnings = self.check_fields(def, req, &mut body, &[])?;
        check_name_on_url(&body, name)?;
        if authorize::is_rbac(def.key) {
            self.check_escalation(user, def.plural, def.namespaced.then_some(ns), name, &body)?;
        }
        let manager = Self::manager(req);
        let precondition = rv_of(&body).to_string();
        let compute = |current: Option<&Value>| {
            let current = current.ok_or_else(|| ApiError::not_found(def.group_resource(), name))?;
            if !precondition.is_empty() && precondition != rv_of(current) {
                return Err(ApiError::modified(def.group_resource(), name));
            }
            let mut new = if sub == Some("status") {
                let mut n = current.clone();
                n["status"] = body["status"].clone();
                n
            } else {
                body.clone()
            };
            Self::carry_over(def, current, &mut new, sub);
            meta_mut(&mut new).insert("resourceVersion".into(), json!(rv_of(current)));
            kinds::validate(def, &new)?;
            managed::record_update(
                Some(current),
                &mut new,
                &manager,
                &def.api_version(),
                sub.unwrap_or(""),
            );
            Ok(new)
        };
        if dry_run(req) {
            let current = self.store.get(def.key, ns, name);
            return Ok(written(200, compute(current.as_deref())?, warnings));
        }
        let (obj, _) = self.store.update(def.key, ns, name, compute)?;
        Ok(written(200, (*obj).clone(), warnings))
    }

    fn patch(
        &self,
        def: &'static ResourceDef,
        ns: &str,
        name: &str,
        sub: Option<&str>,
        req: &Request,
        user: &UserInfo,
    ) -> ApiResult<Reply> {
        let media = req.media_type()?;
        match media {
            MediaType::ApplyPatch => return self.apply(def, ns, name, sub, req, user),
            MediaType::MergePatch | MediaType::JsonPatch => {}
            MediaType::StrategicMergePatch if def.group != super::registry::TENANCY_GROUP => {}
            _ => return Err(ApiError::unsupported_media_type(req.content_type())),
        }
        let body = req.json_body(false)?;
        let manager = Self::manager(req);
        let warnings = std::cell::RefCell::new(Vec::new());
        let compute = |current: &Value| -> ApiResult<Value> {
            let mut new = patched(def, name, media, current, &body)?;
            if sub == Some("status") {
                let status = new["status"].clone();
                new = current.clone();
                new["status"] = status;
            }
            Self::carry_over(def, current, &mut new, sub);
            let already = self.stored_unknown(def, current);
            *warnings.borrow_mut() = self.check_fields(def, req, &mut new, &already)?;
            kinds::validate(def, &new)?;
            managed::record_update(
                Some(current),
                &mut new,
                &manager,
                &def.api_version(),
                sub.unwrap_or(""),
            );
            Ok(new)
        };
        let checked_rv = self.check_patch_escalation(def, ns, name, user, compute)?;
        // dryRun=All: the same checks and merge, nothing stored.
        if dry_run(req) {
            let current = self.current(def, ns, name)?;
            let new = compute(&current)?;
            return Ok(written(200, new, warnings.take()));
        }
        let (obj, _) = self.store.update(def.key, ns, name, |current| {
            let current = current.ok_or_else(|| ApiError::not_found(def.group_resource(), name))?;
            if checked_rv.as_deref().is_some_and(|rv| rv != rv_of(current)) {
                return Err(ApiError::modified(def.group_resource(), name));
            }
            compute(current)
        })?;
        Ok(written(200, (*obj).clone(), warnings.take()))
    }

    /// The stored object, or 404.
    fn current(&self, def: &ResourceDef, ns: &str, name: &str) -> ApiResult<Arc<Value>> {
        self.store
            .get(def.key, ns, name)
            .ok_or_else(|| ApiError::not_found(def.group_resource(), name))
    }

    /// Escalation needs the RBAC snapshot, which reads the store: a patched RBAC object is
    /// checked before the write. Returns the version checked (None: not an RBAC object), so
    /// the write goes ahead only if nothing changed in between.
    fn check_patch_escalation(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        user: &UserInfo,
        compute: impl Fn(&Value) -> ApiResult<Value>,
    ) -> ApiResult<Option<String>> {
        if !authorize::is_rbac(def.key) {
            return Ok(None);
        }
        let current = self.current(def, ns, name)?;
        let candidate = compute(&current)?;
        self.check_escalation(
            user,
            def.plural,
            def.namespaced.then_some(ns),
            name,
            &candidate,
        )?;
        Ok(Some(rv_of(&current).to_string()))
    }

    /// An apply that creates: no subresource, the caller may create, the name is valid and
    /// the namespace exists.
    fn check_apply_create(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        sub: Option<&str>,
        user: &UserInfo,
    ) -> ApiResult<()> {
        if sub.is_some() {
            return Err(ApiError::not_found(def.group_resource(), name));
        }
        self.require(
            user,
            &authorize::resource_attrs("create", def.group, def.plural, "", ns, ""),
        )?;
        check_name(def, name)?;
        self.namespace_exists(def, ns)
    }

    /// The applied object `new` made whole: over `current`, what the server keeps (its
    /// version, the carried-over fields); else a new object's server-set fields. Either way
    /// with the managed fields the apply computed.
    fn applied(
        &self,
        def: &ResourceDef,
        current: Option<&Value>,
        mut new: Value,
        manager: &str,
        sub: Option<&str>,
    ) -> Value {
        match current {
            Some(cur) => {
                let mf = new["metadata"]["managedFields"].clone();
                let rv = rv_of(cur).to_string();
                Self::carry_over(def, cur, &mut new, sub);
                let meta = meta_mut(&mut new);
                meta.insert("resourceVersion".into(), json!(rv));
                meta.insert("managedFields".into(), mf);
            }
            None => {
                let mf = new["metadata"]["managedFields"].clone();
                new = self.prepare_new(def, new, manager);
                meta_mut(&mut new).insert("managedFields".into(), mf);
            }
        }
        new
    }

    fn apply(
        &self,
        def: &'static ResourceDef,
        ns: &str,
        name: &str,
        sub: Option<&str>,
        req: &Request,
        user: &UserInfo,
    ) -> ApiResult<Reply> {
        let manager = req
            .param("fieldManager")
            .ok_or_else(|| ApiError::bad_request("PATCH, application/apply-patch+yaml requests must have the fieldManager query parameter set"))?
            .to_string();
        let mut config = req.json_body(true)?;
        check_type(def, &config)?;
        let warnings = self.check_fields(def, req, &mut config, &[])?;
        check_namespace(def, &mut config, ns)?;
        check_name_on_url(&config, name)?;
        if self.store.get(def.key, ns, name).is_none() {
            self.check_apply_create(def, ns, name, sub, user)?;
        }
        if authorize::is_rbac(def.key) {
            self.check_escalation(
                user,
                def.plural,
                def.namespaced.then_some(ns),
                name,
                &config,
            )?;
        }
        let force = req.flag("force");
        let precondition = rv_of(&config).to_string();
        let api_version = def.api_version();
        let compute = |current: Option<&Value>| -> ApiResult<Value> {
            if !precondition.is_empty() && current.is_none_or(|c| rv_of(c) != precondition) {
                return Err(ApiError::modified(def.group_resource(), name));
            }
            let new = managed::apply(
                current,
                &config,
                &manager,
                force,
                &api_version,
                (def.plural, def.group, name),
            )?;
            let new = self.applied(def, current, new, &manager, sub);
            kinds::validate(def, &new)?;
            Ok(new)
        };
        // dryRun=All: the same admission and merge, nothing stored (kube-apiserver semantics).
        if dry_run(req) {
            let current = self.store.get(def.key, ns, name);
            let new = compute(current.as_deref())?;
            let code = if current.is_none() { 201 } else { 200 };
            return Ok(written(code, new, warnings));
        }
        let (obj, created) = self.store.update(def.key, ns, name, compute)?;
        if created {
            self.after_create(def, name);
        }
        Ok(written(
            if created { 201 } else { 200 },
            (*obj).clone(),
            warnings,
        ))
    }

    fn delete(
        &self,
        def: &'static ResourceDef,
        ns: &str,
        name: &str,
        req: &Request,
    ) -> ApiResult<Reply> {
        let opts: Value = if req.body.is_empty() {
            json!({})
        } else {
            req.json_body(false)?
        };
        let pre_rv = opts["preconditions"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let pre_uid = opts["preconditions"]["uid"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let gone = self.store.delete(def.key, ns, name, |current| {
            let current = current.ok_or_else(|| ApiError::not_found(def.group_resource(), name))?;
            if !pre_rv.is_empty() && pre_rv != rv_of(current) {
                return Err(ApiError::conflict(def.group_resource(), name, &format!(
                    "Precondition failed: ResourceVersion in precondition: {pre_rv}, ResourceVersion in object meta: {}", rv_of(current))));
            }
            let uid = current["metadata"]["uid"].as_str().unwrap_or("");
            if !pre_uid.is_empty() && pre_uid != uid {
                return Err(ApiError::conflict(def.group_resource(), name, &format!(
                    "Precondition failed: UID in precondition: {pre_uid}, UID in object meta: {uid}")));
            }
            Ok(())
        })?;
        if def.key == "namespaces" {
            self.store.delete_namespace_contents(name);
        }
        Ok(Reply::Json(200, (*gone).clone()))
    }

    fn delete_collection(
        &self,
        def: &'static ResourceDef,
        ns: Option<&str>,
        req: &Request,
    ) -> ApiResult<Reply> {
        let (items, _) = self.select(def, ns, req)?;
        let mut deleted = Vec::new();
        for item in items {
            let n = item["metadata"]["name"].as_str().unwrap_or("").to_string();
            let ins = item["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if let Ok(g) = self
                .store
                .delete(def.key, &ins, &n, |c| c.map(|_| ()).ok_or(()))
            {
                deleted.push((*g).clone());
            }
        }
        Ok(Reply::Json(
            200,
            json!({
                "kind": format!("{}List", def.kind),
                "apiVersion": def.api_version(),
                "metadata": {"resourceVersion": self.store.resource_version().to_string()},
                "items": deleted,
            }),
        ))
    }
}

fn upgrade_required() -> ApiError {
    ApiError::bad_request("Upgrade request required")
}

impl ApiServer {
    /// Stores a bootstrap object (no authorization, manager `tenantci-sim`); returns false
    /// if its type is not served or the name exists.
    pub fn seed(&self, obj: Value) -> bool {
        let kind = obj["kind"].as_str().unwrap_or("");
        let api_version = obj["apiVersion"].as_str().unwrap_or("");
        let Some(def) = self
            .registry
            .iter()
            .find(|d| d.kind == kind && d.api_version() == api_version)
        else {
            return false;
        };
        let ns = if def.namespaced {
            obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string()
        } else {
            String::new()
        };
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let mut obj = obj;
        let _ = check_namespace(def, &mut obj, &ns);
        let obj = self.prepare_new(def, obj, "tenantci-sim");
        let created = self.store.create(def.key, &ns, &name, obj).is_ok();
        if created {
            self.after_create(def, &name);
        }
        created
    }
}
