//! Reads: get (and the pod log subresource), list with label and field selectors and
//! limit/continue paging. Pages read the live table, not a snapshot at the first page's
//! version (a documented fidelity limit).

use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Value, json};

use super::registry::ResourceDef;
use super::request::Shape;
use super::{ApiServer, Reply, Request, table};
use crate::api_error::{ApiError, ApiResult};
use crate::selector::{FieldSelector, LabelSelector};

fn key_of(v: &Value) -> String {
    format!(
        "{}/{}",
        v["metadata"]["namespace"].as_str().unwrap_or(""),
        v["metadata"]["name"].as_str().unwrap_or("")
    )
}

impl ApiServer {
    pub(super) fn get(
        &self,
        def: &'static ResourceDef,
        ns: &str,
        name: &str,
        sub: Option<&str>,
        shape: Shape,
    ) -> ApiResult<Reply> {
        let obj = self
            .store
            .get(def.key, ns, name)
            .ok_or_else(|| ApiError::not_found(def.group_resource(), name))?;
        match sub {
            Some("log") => Ok(Reply::Text(200, "text/plain", Bytes::new())),
            Some("exec" | "attach") => Err(ApiError::bad_request("Upgrade request required")),
            None if shape == Shape::Table => {
                let meta = json!({"resourceVersion": obj["metadata"]["resourceVersion"]});
                Ok(Reply::Json(200, table::table(def, &[obj], meta)))
            }
            None if shape == Shape::Metadata => Ok(Reply::Json(200, table::partial(&obj))),
            _ => Ok(Reply::Json(200, (*obj).clone())),
        }
    }

    /// Objects matching the request's selectors, and the version of the read.
    pub(super) fn select(
        &self,
        def: &'static ResourceDef,
        ns: Option<&str>,
        req: &Request,
    ) -> ApiResult<(Vec<Arc<Value>>, u64)> {
        let labels = LabelSelector::parse(req.param("labelSelector").unwrap_or(""))
            .map_err(ApiError::bad_request)?;
        let fields = FieldSelector::parse(req.param("fieldSelector").unwrap_or(""), def.key)
            .map_err(ApiError::bad_request)?;
        let (items, rv) = self
            .store
            .list(def.key, if def.namespaced { ns } else { None });
        let items = items
            .into_iter()
            .filter(|o| labels.matches(o) && fields.matches(o))
            .collect();
        Ok((items, rv))
    }

    pub(super) fn list(
        &self,
        def: &'static ResourceDef,
        ns: Option<&str>,
        req: &Request,
    ) -> ApiResult<Reply> {
        let (mut items, rv) = self.select(def, ns, req)?;
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if let Some(token) = req.param("continue") {
            let start = base64::engine::general_purpose::STANDARD
                .decode(token)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .and_then(|v| v["start"].as_str().map(str::to_string))
                .ok_or_else(|| {
                    ApiError::bad_request("continue key is not valid: illegal base64 data")
                })?;
            items.retain(|o| key_of(o) > start);
        }
        if let Some(limit) = req
            .param("limit")
            .and_then(|l| l.parse::<usize>().ok())
            .filter(|l| *l > 0)
            && items.len() > limit
        {
            let remaining = items.len() - limit;
            items.truncate(limit);
            let last = key_of(items.last().expect("limit > 0"));
            let token = base64::engine::general_purpose::STANDARD
                .encode(json!({"v": "meta.k8s.io/v1", "rv": rv, "start": last}).to_string());
            meta["continue"] = json!(token);
            meta["remainingItemCount"] = json!(remaining);
        }
        match req.shape() {
            Shape::Table => return Ok(Reply::Json(200, table::table(def, &items, meta))),
            Shape::Metadata => {
                let items: Vec<Value> = items.iter().map(|o| table::partial(o)).collect();
                return Ok(Reply::Json(
                    200,
                    json!({
                        "kind": "PartialObjectMetadataList",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": meta,
                        "items": items,
                    }),
                ));
            }
            Shape::Object => {}
        }
        let items: Vec<Value> = items.iter().map(|o| (**o).clone()).collect();
        Ok(Reply::Json(
            200,
            json!({
                "kind": format!("{}List", def.kind),
                "apiVersion": def.api_version(),
                "metadata": meta,
                "items": items,
            }),
        ))
    }
}
