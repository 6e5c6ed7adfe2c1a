//! `GET pods/{name}/portforward` as kube-apiserver answers it: `get` is authorized by the
//! filter like any GET; a WebSocket upgrade must also be allowed `create` on the subresource
//! (the `AuthorizePodWebsocketUpgradeCreatePermission` check of recent releases), then the Pod
//! must exist and be bound to a node, and the ports parse. The relay itself is the transport's
//! (`crate::portforward::relay`, after the 101 answer).

use http::header;

use super::authorize::resource_attrs;
use super::registry::ResourceDef;
use super::{ApiServer, Reply, Request};
use crate::api_error::{ApiError, ApiResult};
use crate::authz::UserInfo;
use crate::portforward::{self, Forward};

/// Whether the request asks for a WebSocket upgrade (`Connection: Upgrade`, `Upgrade: websocket`).
pub fn wants_websocket(req: &Request) -> bool {
    let has = |name: header::HeaderName, token: &str| {
        req.headers.get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    has(header::CONNECTION, "upgrade") && has(header::UPGRADE, "websocket")
}

/// Whether the client offers the one subprotocol the kubelet's port-forward speaks.
fn offers_v4(req: &Request) -> bool {
    req.headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == portforward::PROTOCOL)
}

impl ApiServer {
    pub(super) fn port_forward(
        &self,
        def: &'static ResourceDef,
        ns: &str,
        name: &str,
        req: &Request,
        user: &UserInfo,
    ) -> ApiResult<Reply> {
        if wants_websocket(req) {
            let create = resource_attrs("create", "", def.plural, "portforward", ns, name);
            self.require(user, &create)?;
        }
        let pod = self
            .store
            .get(def.key, ns, name)
            .ok_or_else(|| ApiError::not_found(def.group_resource(), name))?;
        if !wants_websocket(req) {
            // SPDY (`Upgrade: SPDY/3.1`) or no upgrade at all: the simulator speaks WebSocket only.
            return Err(ApiError::bad_request(
                "Upgrade request required: the simulator serves pods/portforward over WebSocket (v4.channel.k8s.io) only, not SPDY",
            ));
        }
        if !offers_v4(req) {
            return Err(ApiError::bad_request(format!(
                "requested protocol(s) are not supported: the port-forward WebSocket speaks {}",
                portforward::PROTOCOL
            )));
        }
        let ports = portforward::ports(req.query.get("ports").map(String::as_str))
            .map_err(ApiError::bad_request)?;
        if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
            return Err(ApiError::bad_request(format!(
                "pod {name} does not have a host assigned"
            )));
        }
        let annotation = pod["metadata"]["annotations"][portforward::ANNOTATION]
            .as_str()
            .unwrap_or("");
        // A malformed annotation maps nothing: every port is one nobody listens on.
        let map = portforward::targets(annotation).unwrap_or_default();
        Ok(Reply::PortForward(Forward {
            pod: name.to_string(),
            uid: pod["metadata"]["uid"].as_str().unwrap_or("").to_string(),
            targets: ports.iter().map(|p| (*p, map.get(p).copied())).collect(),
        }))
    }
}

/// The upgrade's answer headers need the client's key; the transport reads it from here.
pub fn websocket_key(headers: &http::HeaderMap) -> Option<&str> {
    headers
        .get(header::SEC_WEBSOCKET_KEY)
        .and_then(|v| v.to_str().ok())
}
