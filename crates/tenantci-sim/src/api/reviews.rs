//! SelfSubjectAccessReview and SubjectAccessReview: create-only, nothing stored, answered 201
//! by `authz::evaluate_access_review` with the same evaluator that guards requests. Bodies may
//! be JSON or the protobuf envelope kubectl 1.32 sends for `auth can-i` (decoded by
//! `authz::proto`); answers are JSON, which kubectl accepts.

use super::registry::ResourceDef;
use super::request::MediaType;
use super::{ApiServer, Reply, Request};
use crate::api_error::{ApiError, ApiResult};
use crate::authz::{self, ReviewKind, UserInfo};

pub fn handle(
    api: &ApiServer,
    req: &Request,
    def: &'static ResourceDef,
    user: &UserInfo,
) -> ApiResult<Reply> {
    let kind = if def.plural == "selfsubjectaccessreviews" {
        ReviewKind::SelfSubjectAccessReview
    } else {
        ReviewKind::SubjectAccessReview
    };
    let body = match req.media_type()? {
        MediaType::Json => req.json_body(false)?,
        MediaType::Yaml => req.json_body(true)?,
        MediaType::Protobuf => authz::proto::decode_access_review(&req.body)
            .map_err(|e| ApiError::bad_request(format!("cannot decode the protobuf body: {e}")))?,
        _ => return Err(ApiError::unsupported_media_type(req.content_type())),
    };
    match authz::evaluate_access_review(kind, &body, user, &api.rbac()) {
        Ok(review) => Ok(Reply::Json(201, review)),
        Err(e) => Err(ApiError::from_status(authz::review_invalid_status(
            kind, &e,
        ))),
    }
}
