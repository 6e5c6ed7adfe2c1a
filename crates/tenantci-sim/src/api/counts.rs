//! Requests served, by verb and resource, as kube-apiserver's `apiserver_request_total`
//! counter, served at `GET /metrics` in the Prometheus text format: what a benchmark reads to
//! say what a client costs the apiserver (LIST and WATCH apart, as the real counter keeps
//! them).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use super::Request;
use super::route::ResourceRoute;

/// `(verb, resource, subresource)` -> requests.
#[derive(Debug, Default)]
pub struct RequestCounts(Mutex<BTreeMap<(&'static str, &'static str, String), u64>>);

/// The counter's verb for a resource request: kube-apiserver's names (a collection GET is a
/// LIST, `watch=true` a WATCH, a server-side apply an APPLY).
pub fn verb(req: &Request, r: &ResourceRoute) -> &'static str {
    use http::Method;
    let apply = req
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/apply-patch"));
    match (&req.method, r.name.is_some()) {
        (&Method::GET | &Method::HEAD, true) => "GET",
        (&Method::GET | &Method::HEAD, false) if req.flag("watch") => "WATCH",
        (&Method::GET | &Method::HEAD, false) => "LIST",
        (&Method::POST, _) => "POST",
        (&Method::PUT, _) => "PUT",
        (&Method::PATCH, _) if apply => "APPLY",
        (&Method::PATCH, _) => "PATCH",
        (&Method::DELETE, true) => "DELETE",
        (&Method::DELETE, false) => "DELETECOLLECTION",
        _ => "OTHER",
    }
}

impl RequestCounts {
    /// Counts one request to a resource under its verb, resource and subresource.
    pub fn record(&self, req: &Request, r: &ResourceRoute) {
        let key = (
            verb(req, r),
            r.def.plural,
            r.subresource.clone().unwrap_or_default(),
        );
        *self.0.lock().unwrap().entry(key).or_default() += 1;
    }

    /// The Prometheus text exposition of the counter.
    pub fn exposition(&self) -> String {
        let mut out = String::from(
            "# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, resource and subresource.\n# TYPE apiserver_request_total counter\n",
        );
        for ((verb, resource, sub), n) in self.0.lock().unwrap().iter() {
            let _ = writeln!(
                out,
                "apiserver_request_total{{resource=\"{resource}\",subresource=\"{sub}\",verb=\"{verb}\"}} {n}"
            );
        }
        out
    }
}
