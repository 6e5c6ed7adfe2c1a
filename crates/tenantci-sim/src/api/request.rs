//! The parts of an HTTP request the API layer reads, decoded once: method, path, query
//! parameters and body media type. Independent of hyper so handlers are testable in-process.

use std::collections::HashMap;

use bytes::Bytes;
use http::{HeaderMap, Method};
use serde_json::Value;

use crate::api_error::{ApiError, ApiResult};

/// One HTTP request as the API layer reads it.
#[derive(Debug)]
pub struct Request {
    /// The HTTP method.
    pub method: Method,
    /// The URL path, without the query.
    pub path: String,
    /// The query string as sent, if any.
    pub raw_query: Option<String>,
    /// The query parameters, percent-decoded (a repeated key keeps its last value).
    pub query: HashMap<String, String>,
    /// The request headers.
    pub headers: HeaderMap,
    /// The body, whole.
    pub body: Bytes,
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The query string's parameters, percent-decoded (`+` is a space); a key without `=` maps to "".
pub fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    let mut map = HashMap::new();
    for pair in q.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        map.insert(percent_decode(k), percent_decode(v));
    }
    map
}

/// Body encodings the API accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaType {
    /// `application/json` (also what an empty Content-Type means).
    Json,
    /// `application/yaml`.
    Yaml,
    /// `application/vnd.kubernetes.protobuf`.
    Protobuf,
    /// `application/merge-patch+json`: a JSON merge patch.
    MergePatch,
    /// `application/strategic-merge-patch+json`.
    StrategicMergePatch,
    /// `application/json-patch+json`: an RFC 6902 JSON patch.
    JsonPatch,
    /// `application/apply-patch+yaml` (or `+json`): a server-side apply.
    ApplyPatch,
}

impl Request {
    /// A request from its parts; the query is parsed here.
    pub fn new(
        method: Method,
        path: &str,
        raw_query: Option<&str>,
        headers: HeaderMap,
        body: Bytes,
    ) -> Self {
        Request {
            query: parse_query(raw_query),
            method,
            path: path.to_string(),
            raw_query: raw_query.map(str::to_string),
            headers,
            body,
        }
    }

    /// Query parameter `k`, None when absent or empty.
    pub fn param(&self, k: &str) -> Option<&str> {
        self.query
            .get(k)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// Whether query parameter `k` is `true` or `1`.
    pub fn flag(&self, k: &str) -> bool {
        matches!(self.param(k), Some("true") | Some("1"))
    }

    /// The `Content-Type` header, "" when absent.
    pub fn content_type(&self) -> &str {
        self.headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The body's encoding from `Content-Type`; 415 Unsupported Media Type for any other.
    pub fn media_type(&self) -> ApiResult<MediaType> {
        let ct = self.content_type();
        let base = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        Ok(match base.as_str() {
            "application/json" | "" => MediaType::Json,
            "application/yaml" => MediaType::Yaml,
            "application/vnd.kubernetes.protobuf" => MediaType::Protobuf,
            "application/merge-patch+json" => MediaType::MergePatch,
            "application/strategic-merge-patch+json" => MediaType::StrategicMergePatch,
            "application/json-patch+json" => MediaType::JsonPatch,
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                MediaType::ApplyPatch
            }
            _ => return Err(ApiError::unsupported_media_type(ct)),
        })
    }

    /// The body as JSON (YAML accepted where kube-apiserver accepts it).
    pub fn json_body(&self, yaml: bool) -> ApiResult<Value> {
        if self.body.is_empty() {
            return Err(ApiError::bad_request("the body of the request was empty"));
        }
        let parsed: Result<Value, String> = match serde_json::from_slice(&self.body) {
            Ok(v) => Ok(v),
            Err(e) if yaml => {
                serde_yaml::from_slice(&self.body).map_err(|ye| format!("{e}; yaml: {ye}"))
            }
            Err(e) => Err(e.to_string()),
        };
        parsed.map_err(|e| {
            ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
        })
    }

    /// The default field manager: the `User-Agent` up to its first `/` (`kubectl`), `unknown`
    /// without one.
    pub fn user_agent_manager(&self) -> String {
        let ua = self
            .headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("unknown");
        ua.split('/').next().unwrap_or("unknown").to_string()
    }

    /// The shape the client's `Accept` asks for: a Table (kubectl), metadata only
    /// (`as=PartialObjectMetadata[List]`: kube's metadata watchers, controller-runtime's
    /// metadata informers), or the object itself.
    pub fn shape(&self) -> Shape {
        let accept = self
            .headers
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if accept.contains("as=Table") {
            Shape::Table
        } else if accept.contains("as=PartialObjectMetadata") {
            Shape::Metadata
        } else {
            Shape::Object
        }
    }
}

/// What a read answers with (see [`Request::shape`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The object (or list) itself.
    Object,
    /// A `meta.k8s.io` Table, as kubectl asks for.
    Table,
    /// `PartialObjectMetadata` (or its list): metadata only.
    Metadata,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_query() {
        let q = parse_query(Some("labelSelector=app%3Dx%2Ctier+in+(a)&watch=true&x"));
        assert_eq!(q["labelSelector"], "app=x,tier in (a)");
        assert_eq!(q["watch"], "true");
        assert_eq!(q["x"], "");
    }
}
