//! One apiserver's request handling, independent of the transport: authentication result in,
//! `Reply` out. The tenant apiservers and the gateway admin apiserver are both instances, with
//! different registries and authorization modes.
//!
//! Order per request, as kube-apiserver: authentication (done by the transport, passed in as
//! `Identity`), impersonation, authorization, then the handler.

pub mod authorize;
pub mod counts;
mod crud;
pub mod discovery;
pub mod fieldset;
mod kinds;
pub mod managed;
pub mod openapi;
pub mod patch;
pub mod portforward;
mod protobuf;
mod read;
pub mod registry;
pub mod request;
mod reviews;
pub mod route;
mod table;
mod watch;

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;

use super::api_error::{ApiError, ApiResult};
use super::authz::UserInfo;
use super::store::Store;
pub use request::Request;
use route::Route;

/// Who the transport says the caller is.
#[derive(Debug, Clone)]
pub enum Identity {
    /// A client certificate that chains to the ClientCA.
    User(UserInfo),
    /// No client certificate.
    Anonymous,
    /// A certificate that does not verify, that Go could not parse, or whose CN is empty:
    /// every request answers 401.
    Rejected,
}

/// How requests are authorized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// RBAC over the stored objects (tenant clusters).
    Rbac,
    /// Any verified client may do anything; anonymous callers are refused (gateway admin).
    VerifiedOnly,
}

/// What a handler answers.
pub enum Reply {
    /// A JSON body with its HTTP status.
    Json(u16, Value),
    /// A JSON answer with `Warning` headers (unknown fields dropped under fieldValidation=Warn).
    Warned(u16, Value, Vec<String>),
    /// A body of the given content type with its HTTP status (`/healthz`, `/metrics`, OpenAPI).
    Text(u16, &'static str, Bytes),
    /// A watch: newline-delimited JSON events until the sender drops.
    Stream(mpsc::Receiver<Bytes>),
    /// An accepted `pods/portforward` WebSocket upgrade: the transport answers 101 and relays.
    PortForward(crate::portforward::Forward),
}

impl From<ApiError> for Reply {
    fn from(e: ApiError) -> Self {
        Reply::Json(e.code, e.body)
    }
}

/// One apiserver: its registry, object store and authorization mode; the transport hands it each
/// request with the caller's identity.
pub struct ApiServer {
    /// The resources it serves.
    pub registry: &'static [registry::ResourceDef],
    /// Its objects.
    pub store: Store,
    /// How it authorizes requests.
    pub mode: Mode,
    /// `host:port` advertised by `/api`.
    pub server_address: String,
    rbac: authorize::RbacCache,
    /// TCP connections accepted, before any TLS: what a test counts to prove that a refused
    /// client of the front never reached this apiserver.
    connections: std::sync::atomic::AtomicU64,
    /// Requests served, by verb and resource (`GET /metrics`).
    pub requests: counts::RequestCounts,
    /// Bumped by [`ApiServer::restart`]: every open watch ends.
    restarts: tokio::sync::watch::Sender<u64>,
}

impl ApiServer {
    /// An apiserver with an empty store, advertising `server_address` in `/api`.
    pub fn new(
        registry: &'static [registry::ResourceDef],
        mode: Mode,
        server_address: String,
    ) -> Self {
        ApiServer {
            registry,
            store: Store::new(),
            mode,
            server_address,
            rbac: authorize::RbacCache::default(),
            connections: Default::default(),
            requests: counts::RequestCounts::default(),
            restarts: tokio::sync::watch::Sender::new(0),
        }
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn count_connection(&self) {
        self.connections
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The apiserver restarts as far as its clients can tell: every open watch ends, and a
    /// watch from a version served before answers 410 Gone (`Store::forget_history`).
    pub fn restart(&self) {
        self.store.forget_history();
        self.restarts.send_modify(|n| *n += 1);
    }

    fn anonymous() -> UserInfo {
        UserInfo {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
        }
    }

    /// Answers one request from `identity` (authentication's result): impersonation and
    /// authorization in RBAC mode, then the handler; an error as its Status body.
    pub async fn handle(self: &Arc<Self>, req: Request, identity: &Identity) -> Reply {
        match self.handle_inner(req, identity) {
            Ok(reply) => reply,
            Err(e) => e.into(),
        }
    }

    fn handle_inner(self: &Arc<Self>, req: Request, identity: &Identity) -> ApiResult<Reply> {
        let user = match (identity, self.mode) {
            (Identity::Rejected, _) => return Err(ApiError::unauthorized()),
            (Identity::Anonymous, Mode::VerifiedOnly) => return Err(ApiError::unauthorized()),
            (Identity::User(u), _) => u.clone(),
            (Identity::Anonymous, Mode::Rbac) => Self::anonymous(),
        };
        let user = match self.mode {
            Mode::Rbac => self.impersonate(&user, &req.headers)?,
            Mode::VerifiedOnly => user,
        };
        let route = route::route(self.registry, &req.path);
        if let Route::Resource(r) = &route {
            self.requests.record(&req, r);
        }
        if self.mode == Mode::Rbac {
            let attrs = authorize::attributes(&req, &route);
            self.require(&user, &attrs)?;
        }
        self.dispatch(req, route, &user)
    }

    fn dispatch(self: &Arc<Self>, req: Request, route: Route, user: &UserInfo) -> ApiResult<Reply> {
        let get_only = |v: Option<Value>| -> ApiResult<Reply> {
            if req.method != http::Method::GET {
                return Err(ApiError::method_not_allowed());
            }
            v.map(|v| Reply::Json(200, v))
                .ok_or_else(ApiError::no_route)
        };
        match route {
            Route::Version => get_only(Some(discovery::version())),
            Route::Health => Ok(Reply::Text(
                200,
                "text/plain; charset=utf-8",
                Bytes::from_static(b"ok"),
            )),
            Route::Metrics => match req.method {
                http::Method::GET => Ok(Reply::Text(
                    200,
                    "text/plain; version=0.0.4",
                    Bytes::from(self.requests.exposition()),
                )),
                _ => Err(ApiError::method_not_allowed()),
            },
            Route::CoreVersions => get_only(Some(discovery::core_versions(&self.server_address))),
            Route::Groups => get_only(Some(discovery::groups(self.registry))),
            Route::Group(g) => get_only(discovery::group(self.registry, &g)),
            Route::ResourceList { group, version } => {
                get_only(discovery::resource_list(self.registry, &group, &version))
            }
            Route::OpenApiV3(path) => {
                let docs = openapi::documents(self.registry);
                let body = if path.is_empty() {
                    Some(docs.discovery())
                } else {
                    docs.group_version(&path)
                };
                match body {
                    Some(b) if req.method == http::Method::GET => {
                        Ok(Reply::Text(200, "application/json", b))
                    }
                    Some(_) => Err(ApiError::method_not_allowed()),
                    None => Err(ApiError::no_route()),
                }
            }
            Route::UnknownResource { .. } | Route::Other => Err(ApiError::no_route()),
            Route::Resource(r) => self.resource(req, r, user),
        }
    }
}
