//! The HTTPS transport shared by every simulated apiserver: accept, TLS handshake,
//! authenticate the peer certificate once per connection, then serve HTTP/1.1 or HTTP/2
//! requests into an [`ApiServer`]. Stops accepting and drops every connection (watches
//! included) when the shutdown signal fires.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request as HyperRequest, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::api::{ApiServer, Identity, Reply, Request, portforward};
use super::api_error::ApiError;
use super::authn::Authenticator;
use super::portforward as sim_portforward;

/// kube-apiserver's default request body limit.
const MAX_BODY: usize = 3 * 1024 * 1024;

/// A response body: one chunk, or a stream of watch events.
pub enum ReplyBody {
    /// The whole body in one frame (None once it is sent).
    Full(Option<Bytes>),
    /// Watch events, each chunk sent as it comes, until the sender drops.
    Stream(mpsc::Receiver<Bytes>),
}

impl Body for ReplyBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut *self {
            ReplyBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ReplyBody::Stream(rx) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, ReplyBody::Full(None))
    }
}

fn json_response(code: u16, body: Vec<u8>) -> Response<ReplyBody> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .header("cache-control", "no-cache, private")
        .body(ReplyBody::Full(Some(Bytes::from(body))))
        .expect("static headers are valid")
}

/// RFC 7234 warn-code 299 with the text as a quoted string, as kube-apiserver sends it.
fn warning_header(text: &str) -> String {
    let quoted = text.replace('\\', "\\\\").replace('"', "\\\"");
    format!("299 - \"{quoted}\"")
}

fn to_response(reply: Reply, head: bool) -> Response<ReplyBody> {
    let mut resp = match reply {
        Reply::Json(code, v) => json_response(code, serde_json::to_vec(&v).unwrap_or_default()),
        Reply::Warned(code, v, warnings) => {
            let mut r = json_response(code, serde_json::to_vec(&v).unwrap_or_default());
            for w in warnings {
                if let Ok(h) = http::HeaderValue::from_str(&warning_header(&w)) {
                    r.headers_mut().append("warning", h);
                }
            }
            r
        }
        Reply::Text(code, ct, b) => Response::builder()
            .status(code)
            .header("content-type", ct)
            .body(ReplyBody::Full(Some(b)))
            .expect("static headers are valid"),
        // Only an upgradable HTTP/1.1 request gets this far with an upgrade (`handle`).
        Reply::PortForward(_) => {
            let e = ApiError::bad_request("Upgrade request required");
            json_response(e.code, serde_json::to_vec(&e.body).unwrap_or_default())
        }
        Reply::Stream(rx) => Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .header("cache-control", "no-cache, private")
            .body(ReplyBody::Stream(rx))
            .expect("static headers are valid"),
    };
    if head {
        *resp.body_mut() = ReplyBody::Full(None);
    }
    resp
}

async fn handle(
    api: Arc<ApiServer>,
    identity: Arc<Identity>,
    mut req: HyperRequest<Incoming>,
) -> Result<Response<ReplyBody>, Infallible> {
    let upgrade = hyper::upgrade::on(&mut req);
    let (parts, body) = req.into_parts();
    let accept =
        portforward::websocket_key(&parts.headers).map(|k| derive_accept_key(k.as_bytes()));
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            let e = ApiError::new(
                413,
                "RequestEntityTooLarge",
                "the request body is too large",
                None,
            );
            return Ok(json_response(
                e.code,
                serde_json::to_vec(&e.body).unwrap_or_default(),
            ));
        }
    };
    let head = parts.method == http::Method::HEAD;
    let request = Request::new(
        parts.method,
        parts.uri.path(),
        parts.uri.query(),
        parts.headers,
        body,
    );
    let reply = api.handle(request, &identity).await;
    Ok(match (reply, accept) {
        (Reply::PortForward(forward), Some(accept)) => {
            switch_to_port_forward(upgrade, accept, forward)
        }
        (reply, _) => to_response(reply, head),
    })
}

/// 101 Switching Protocols to `v4.channel.k8s.io`; the relay runs once hyper hands over the
/// connection.
fn switch_to_port_forward(
    upgrade: hyper::upgrade::OnUpgrade,
    accept: String,
    forward: sim_portforward::Forward,
) -> Response<ReplyBody> {
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        sim_portforward::relay(ws, forward).await;
    });
    Response::builder()
        .status(http::StatusCode::SWITCHING_PROTOCOLS)
        .header(http::header::CONNECTION, "Upgrade")
        .header(http::header::UPGRADE, "websocket")
        .header(http::header::SEC_WEBSOCKET_ACCEPT, accept)
        .header(
            http::header::SEC_WEBSOCKET_PROTOCOL,
            sim_portforward::PROTOCOL,
        )
        .body(ReplyBody::Full(None))
        .expect("static headers are valid")
}

/// Serves `api` on `listener` until `shutdown` changes.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    authn: Arc<Authenticator>,
    api: Arc<ApiServer>,
    mut shutdown: watch::Receiver<bool>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => {
                let Ok((tcp, _)) = accepted else { continue };
                api.count_connection();
                let _ = tcp.set_nodelay(true);
                let (acceptor, authn, api) = (acceptor.clone(), authn.clone(), api.clone());
                conns.spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    // Authenticated per request, as kube-apiserver's x509 authenticator verifies
                    // the connection's certificate at each request: a client certificate that
                    // expires while a connection stays open is refused from then on.
                    let chain = tls.get_ref().1.peer_certificates().map(<[_]>::to_vec);
                    let svc = service_fn(move |req| {
                        let identity = Arc::new(authn.authenticate(chain.as_deref()));
                        handle(api.clone(), identity, req)
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection_with_upgrades(TokioIo::new(tls), svc)
                        .await;
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
}
