//! Request parsing as kube-apiserver's `RequestInfoFactory.NewRequestInfo`
//! (k8s.io/apiserver/pkg/endpoints/request/requestinfo.go), and the authorizer's attributes.

use serde_json::Value;

/// What kube-apiserver derives from the method, path and query of a request.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RequestInfo {
    /// Whether the path is a resource request (`/api/...`, `/apis/<group>/<version>/...`).
    pub is_resource_request: bool,
    /// The decoded URL path.
    pub path: String,
    /// The verb: a resource request's (`get`, `list`, `watch`, ...) or the lower-cased method.
    pub verb: String,
    /// `api` or `apis` for resource requests.
    pub api_prefix: String,
    /// The API group (empty: the core group).
    pub api_group: String,
    /// The API version.
    pub api_version: String,
    /// The namespace (empty: cluster scope or none).
    pub namespace: String,
    /// The resource.
    pub resource: String,
    /// The subresource, if any.
    pub subresource: String,
    /// The object's name, if any.
    pub name: String,
    /// The path segments from the resource on (`resource/name/subresource/...`).
    pub parts: Vec<String>,
}

const SPECIAL_VERBS: [&str; 2] = ["proxy", "watch"];
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// Parses a request the way kube-apiserver does. `path` may be percent-encoded; `query` is
/// the raw query string without `?`.
///
/// Paths under `/api/<v>/...` and `/apis/<g>/<v>/...` with at least one segment after the
/// version are resource requests; everything else (including `/api/v1` and `/apis/apps/v1`)
/// is a non-resource request whose verb is the lower-case method.
pub fn request_info(method: &http::Method, path: &str, query: Option<&str>) -> RequestInfo {
    let decoded = percent_decode(path, false);
    let mut info = RequestInfo {
        path: decoded.clone(),
        verb: method.as_str().to_ascii_lowercase(),
        ..RequestInfo::default()
    };
    let trimmed = decoded.trim_matches('/');
    let segments: Vec<&str> = if trimmed.is_empty() {
        Vec::new()
    } else {
        trimmed.split('/').collect()
    };
    if segments.len() < 3 || !(segments[0] == "api" || segments[0] == "apis") {
        return info;
    }
    info.api_prefix = segments[0].to_string();
    let mut parts = &segments[1..];
    if info.api_prefix != "api" {
        if parts.len() < 3 {
            return info;
        }
        info.api_group = parts[0].to_string();
        parts = &parts[1..];
    }
    info.is_resource_request = true;
    info.api_version = parts[0].to_string();
    parts = &parts[1..];

    if SPECIAL_VERBS.contains(&parts[0]) {
        info.verb = parts[0].to_string();
        parts = &parts[1..];
        // kube-apiserver rejects `/api/v1/watch` with nothing after it; an empty resource is
        // the closest answer a total function can give (nothing grants it but `*`).
        if parts.is_empty() {
            return info;
        }
    } else {
        info.verb = method_verb(method).to_string();
    }

    if parts[0] == "namespaces" && parts.len() > 1 {
        info.namespace = parts[1].to_string();
        if parts.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&parts[2]) {
            parts = &parts[2..];
        }
    }
    info.parts = parts.iter().map(|s| s.to_string()).collect();
    if parts.len() >= 3 && info.verb != "proxy" {
        info.subresource = parts[2].to_string();
    }
    if parts.len() >= 2 {
        info.name = parts[1].to_string();
    }
    info.resource = parts[0].to_string();
    collection_verb(&mut info, query);
    info
}

/// A resource request's verb from its method, before the path and query refine it.
fn method_verb(method: &http::Method) -> &'static str {
    match *method {
        http::Method::POST => "create",
        http::Method::GET | http::Method::HEAD => "get",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "",
    }
}

/// Without a name, `get` is `watch` when the query's `watch` is true (as [`go_bool`] reads
/// it), else `list`, and takes the name from a `fieldSelector` requiring exactly
/// `metadata.name`; `delete` is `deletecollection`.
fn collection_verb(info: &mut RequestInfo, query: Option<&str>) {
    if info.name.is_empty() && info.verb == "get" {
        let params = query_pairs(query.unwrap_or(""));
        let watch = params
            .iter()
            .find(|(k, _)| k == "watch")
            .is_some_and(|(_, v)| go_bool(v));
        info.verb = if watch { "watch" } else { "list" }.to_string();
        if let Some((_, selector)) = params.iter().find(|(k, _)| k == "fieldSelector")
            && let Some(name) = exact_field_match(selector, "metadata.name")
            && is_valid_path_segment_name(&name)
        {
            info.name = name;
        }
    }
    if info.name.is_empty() && info.verb == "delete" {
        info.verb = "deletecollection".to_string();
    }
}

/// apimachinery's query-string bool: absent is false, `0`/`false` are false, anything else
/// (including an empty value) is true.
fn go_bool(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k, true), percent_decode(v, true)),
            None => (percent_decode(p, true), String::new()),
        })
        .collect()
}

/// The value `field` must equal under a field selector (`a=b`, `a==b`), as
/// `fields.Selector.RequiresExactMatch`.
fn exact_field_match(selector: &str, field: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        if term.contains("!=") {
            return None;
        }
        let (k, v) = term.split_once("==").or_else(|| term.split_once('='))?;
        (k.trim() == field).then(|| v.to_string())
    })
}

fn is_valid_path_segment_name(name: &str) -> bool {
    name != "." && name != ".." && !name.contains('/') && !name.contains('%')
}

/// Percent-decodes `s` (and `+` as space for query components). Invalid escapes stay as they are.
fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Attributes of a resource request, as `authorizer.AttributesRecord` with
/// `ResourceRequest: true`. `api_version` is `*` when an access review leaves it empty.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ResourceAttributes {
    /// The verb (`get`, `create`, ...).
    pub verb: String,
    /// The API group (empty: the core group).
    pub api_group: String,
    /// The API version (`*`: any).
    pub api_version: String,
    /// The resource.
    pub resource: String,
    /// The subresource (empty: the object itself).
    pub subresource: String,
    /// The namespace (empty: cluster scope).
    pub namespace: String,
    /// The object's name (empty: every object).
    pub name: String,
}

impl ResourceAttributes {
    /// `verb` on `resource` in `api_group` (`""` = core), cluster scope, no name.
    pub fn new(verb: &str, api_group: &str, resource: &str) -> Self {
        ResourceAttributes {
            verb: verb.to_string(),
            api_group: api_group.to_string(),
            api_version: "*".to_string(),
            resource: resource.to_string(),
            ..ResourceAttributes::default()
        }
    }

    /// The same attributes in `namespace`.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = namespace.to_string();
        self
    }

    /// The same attributes for the object `name`.
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    /// The same attributes for `subresource`.
    pub fn subresource(mut self, subresource: &str) -> Self {
        self.subresource = subresource.to_string();
        self
    }
}

/// Attributes of a non-resource request (`/healthz`, `/api`, `/apis/apps/v1`, ...).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NonResourceAttributes {
    /// The verb: the lower-cased HTTP method.
    pub verb: String,
    /// The URL path.
    pub path: String,
}

/// What the authorizer decides on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attributes {
    /// A request for a resource.
    Resource(ResourceAttributes),
    /// A request for any other URL.
    NonResource(NonResourceAttributes),
}

impl From<ResourceAttributes> for Attributes {
    fn from(a: ResourceAttributes) -> Self {
        Attributes::Resource(a)
    }
}

impl From<NonResourceAttributes> for Attributes {
    fn from(a: NonResourceAttributes) -> Self {
        Attributes::NonResource(a)
    }
}

impl From<&RequestInfo> for Attributes {
    fn from(info: &RequestInfo) -> Self {
        if info.is_resource_request {
            Attributes::Resource(ResourceAttributes {
                verb: info.verb.clone(),
                api_group: info.api_group.clone(),
                api_version: info.api_version.clone(),
                resource: info.resource.clone(),
                subresource: info.subresource.clone(),
                namespace: info.namespace.clone(),
                name: info.name.clone(),
            })
        } else {
            Attributes::NonResource(NonResourceAttributes {
                verb: info.verb.clone(),
                path: info.path.clone(),
            })
        }
    }
}

impl From<RequestInfo> for Attributes {
    fn from(info: RequestInfo) -> Self {
        Attributes::from(&info)
    }
}

impl Attributes {
    /// A non-resource request.
    pub fn non_resource(verb: &str, path: &str) -> Self {
        Attributes::NonResource(NonResourceAttributes {
            verb: verb.to_string(),
            path: path.to_string(),
        })
    }

    /// The attributes of an access review's `spec` (`resourceAttributes` or
    /// `nonResourceAttributes`, exactly one), as `authorizationutil.AuthorizationAttributesFrom`.
    /// An empty `version` means every version (`*`).
    pub fn from_review_spec(spec: &Value) -> Result<Self, String> {
        let res = spec.get("resourceAttributes").filter(|v| !v.is_null());
        let non = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
        let text = |obj: &Value, key: &str| -> Result<String, String> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(other) => Err(format!("{key}: expected a string, got {other}")),
            }
        };
        match (res, non) {
            (Some(_), Some(_)) => Err(
                "spec.nonResourceAttributes: Invalid value: cannot be specified in combination with resourceAttributes"
                    .to_string(),
            ),
            (None, None) => Err(
                "spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified"
                    .to_string(),
            ),
            (Some(r), None) => {
                if !r.is_object() {
                    return Err("spec.resourceAttributes: expected an object".to_string());
                }
                let version = text(r, "version")?;
                Ok(Attributes::Resource(ResourceAttributes {
                    verb: text(r, "verb")?,
                    api_group: text(r, "group")?,
                    api_version: if version.is_empty() { "*".to_string() } else { version },
                    resource: text(r, "resource")?,
                    subresource: text(r, "subresource")?,
                    namespace: text(r, "namespace")?,
                    name: text(r, "name")?,
                }))
            }
            (None, Some(n)) => {
                if !n.is_object() {
                    return Err("spec.nonResourceAttributes: expected an object".to_string());
                }
                Ok(Attributes::NonResource(NonResourceAttributes {
                    verb: text(n, "verb")?,
                    path: text(n, "path")?,
                }))
            }
        }
    }

    /// The request's verb.
    pub fn verb(&self) -> &str {
        match self {
            Attributes::Resource(r) => &r.verb,
            Attributes::NonResource(n) => &n.verb,
        }
    }

    /// The request namespace (empty for cluster-scoped and non-resource requests).
    pub fn namespace(&self) -> &str {
        match self {
            Attributes::Resource(r) => &r.namespace,
            Attributes::NonResource(_) => "",
        }
    }

    /// Whether it is a resource request.
    pub fn is_resource_request(&self) -> bool {
        matches!(self, Attributes::Resource(_))
    }
}
