//! The RunnerService server: what executors (the official runner) talk to instead of Gitea.
//! [`router`] speaks Connect unary (binary protobuf and JSON, gzip both ways, Connect error
//! bodies) and authenticates every call except Register and Ping by `x-runner-uuid` /
//! `x-runner-token`; what each call does is the [`RunnerServiceHandler`]'s business, which the
//! dispatcher implements (the Gitea double in `sim::gitea` implements it too, over plain HTTP).
//! [`spawn`] serves the router over HTTPS (tokio-rustls, HTTP/1.1 and h2) from a given
//! listener, so tests can bind 127.0.0.1:0.
//!
//! Does not decide which task an executor gets, hold any state, or talk to Gitea.
//! Invariant: a backend method runs only after `authenticate` accepted the caller, and never
//! sees a body that failed to decode.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Extension, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::post;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::spiffe::tls::PeerId;

use super::connect::{self, Codec, ConnectError, GZIP_MIN, MAX_BODY, Wire};
use super::proto::{
    DeclareRequest, DeclareResponse, FetchTaskRequest, FetchTaskResponse, PingRequest,
    PingResponse, RegisterRequest, RegisterResponse, UpdateLogRequest, UpdateLogResponse,
    UpdateTaskRequest, UpdateTaskResponse,
};

/// Path prefix of the RunnerService procedures (Gitea mounts them under `/api/actions`).
pub const RUNNER_SERVICE_PATH: &str = "/api/actions/runner.v1.RunnerService";
/// Path of `ping.v1.PingService/Ping`, which needs no credentials.
pub const PING_PATH: &str = "/api/actions/ping.v1.PingService/Ping";
/// Header carrying the runner's UUID on every call but Register and Ping.
pub const UUID_HEADER: &str = "x-runner-uuid";
/// Header carrying the runner's secret token on every call but Register and Ping.
pub const TOKEN_HEADER: &str = "x-runner-token";
/// Forgejo: identifies one logical FetchTask across retries (docs/forgejo-protocol.md).
pub const REQUEST_KEY_HEADER: &str = "x-runner-request-key";

/// What the RunnerService does. Every method but `register` runs for an authenticated
/// caller. Errors go to the executor as Connect errors, so their messages must not leak
/// secrets.
pub trait RunnerServiceHandler: Send + Sync + 'static {
    /// Who is calling, as `authenticate` established it.
    type Caller: Send + Sync + 'static;

    /// Checks a runner's uuid and token (compare tokens in constant time). A failure should be
    /// `unauthenticated` ("unregistered runner"): the runner then stops polling.
    fn authenticate(
        &self,
        uuid: &str,
        token: &str,
    ) -> impl Future<Output = Result<Self::Caller, ConnectError>> + Send;

    /// [`RunnerServiceHandler::authenticate`] with the client's SPIFFE ID when the connection is
    /// SPIFFE mTLS (`spiffe::tls::server_config`), for a backend that authorizes by it too.
    /// The default ignores it.
    fn authenticate_peer(
        &self,
        uuid: &str,
        token: &str,
        peer: Option<&PeerId>,
    ) -> impl Future<Output = Result<Self::Caller, ConnectError>> + Send {
        let _ = peer;
        self.authenticate(uuid, token)
    }

    /// Registers a runner. Executors behind the facade are provisioned with their
    /// credentials, so the default is `unimplemented`.
    fn register(
        &self,
        req: RegisterRequest,
    ) -> impl Future<Output = Result<RegisterResponse, ConnectError>> + Send {
        let _ = req;
        async {
            Err(ConnectError::unimplemented(
                "runner registration is not offered here",
            ))
        }
    }

    /// States the caller's version and labels (the runner's first call at start; an error ends
    /// the official runner).
    fn declare(
        &self,
        caller: &Self::Caller,
        req: DeclareRequest,
    ) -> impl Future<Output = Result<DeclareResponse, ConnectError>> + Send;

    /// Answers at once (no long poll), as Gitea does.
    fn fetch_task(
        &self,
        caller: &Self::Caller,
        req: FetchTaskRequest,
    ) -> impl Future<Output = Result<FetchTaskResponse, ConnectError>> + Send;

    /// [`RunnerServiceHandler::fetch_task`] with the call's `x-runner-request-key` (Forgejo). The
    /// default ignores the key, as Gitea does.
    fn fetch_task_keyed(
        &self,
        caller: &Self::Caller,
        req: FetchTaskRequest,
        request_key: Option<&str>,
    ) -> impl Future<Output = Result<FetchTaskResponse, ConnectError>> + Send {
        let _ = request_key;
        self.fetch_task(caller, req)
    }

    /// Records a task's progress, result and outputs.
    fn update_task(
        &self,
        caller: &Self::Caller,
        req: UpdateTaskRequest,
    ) -> impl Future<Output = Result<UpdateTaskResponse, ConnectError>> + Send;

    /// Appends rows to a task's log.
    fn update_log(
        &self,
        caller: &Self::Caller,
        req: UpdateLogRequest,
    ) -> impl Future<Output = Result<UpdateLogResponse, ConnectError>> + Send;
}

/// The RunnerService and PingService routes over `backend`, without transport.
pub fn router<B: RunnerServiceHandler>(backend: Arc<B>) -> Router {
    Router::new()
        .route(&format!("{RUNNER_SERVICE_PATH}/{{method}}"), post(rpc::<B>))
        .route(PING_PATH, post(ping))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(backend)
}

/// How to answer a request: in its own codec, gzipped when it accepts gzip and the body is
/// large enough.
#[derive(Clone, Copy, Debug)]
pub struct Reply {
    /// The codec of the request, used for the answer too.
    pub codec: Codec,
    /// Whether the peer's `Accept-Encoding` admits gzip: answers of [`GZIP_MIN`] bytes or more
    /// are then gzipped.
    pub gzip: bool,
}

impl Reply {
    /// A 200 answer carrying `msg`.
    pub fn ok<M: Wire>(self, msg: &M) -> Response {
        let body = self.codec.encode(msg);
        let mut builder = Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, self.codec.content_type());
        let body = if self.gzip && body.len() >= GZIP_MIN {
            builder = builder.header(header::CONTENT_ENCODING, "gzip");
            connect::gzip(&body)
        } else {
            body
        };
        builder
            .body(Body::from(body))
            .unwrap_or_else(|_| plain_500())
    }
}

/// A Connect error answer: the code's HTTP status and the JSON error body.
pub fn error_response(err: &ConnectError) -> Response {
    Response::builder()
        .status(
            StatusCode::from_u16(err.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        )
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(err.to_json()))
        .unwrap_or_else(|_| plain_500())
}

fn plain_500() -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    r
}

fn header_str(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Reads a Connect unary request's codec and body. An unknown `Content-Type` is answered with
/// 415 and `Accept-Post`, as the Connect spec asks; the error is the answer to send.
pub fn read_request(headers: &HeaderMap, body: &[u8]) -> Result<(Reply, Vec<u8>), Box<Response>> {
    let content_type = header_str(headers, header::CONTENT_TYPE).unwrap_or("");
    let Some(codec) = Codec::from_content_type(content_type) else {
        let err = ConnectError::invalid_argument(format!(
            "unsupported content type {content_type:?} (use application/proto or application/json)"
        ));
        let mut resp = error_response(&err);
        *resp.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
        resp.headers_mut().insert(
            header::HeaderName::from_static("accept-post"),
            HeaderValue::from_static("application/proto, application/json"),
        );
        return Err(Box::new(resp));
    };
    let gzip = header_str(headers, header::ACCEPT_ENCODING).is_some_and(connect::accepts_gzip);
    let reply = Reply { codec, gzip };
    let body = connect::decode_body(header_str(headers, header::CONTENT_ENCODING), body)
        .map_err(|e| Box::new(error_response(&e)))?;
    Ok((reply, body))
}

/// The uuid and token a runner call carries; either missing is `unauthenticated`.
pub fn runner_credentials(headers: &HeaderMap) -> Result<(&str, &str), ConnectError> {
    let uuid = header_str(headers, UUID_HEADER).filter(|s| !s.is_empty());
    let token = header_str(headers, TOKEN_HEADER).filter(|s| !s.is_empty());
    match (uuid, token) {
        (Some(u), Some(t)) => Ok((u, t)),
        _ => Err(ConnectError::unauthenticated(format!(
            "missing {UUID_HEADER} or {TOKEN_HEADER} header"
        ))),
    }
}

async fn unary<Req, Resp, F, Fut>(reply: Reply, body: &[u8], call: F) -> Response
where
    Req: Wire,
    Resp: Wire,
    F: FnOnce(Req) -> Fut,
    Fut: Future<Output = Result<Resp, ConnectError>>,
{
    let req = match reply.codec.decode::<Req>(body) {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    match call(req).await {
        Ok(resp) => reply.ok(&resp),
        Err(e) => error_response(&e),
    }
}

async fn rpc<B: RunnerServiceHandler>(
    State(backend): State<Arc<B>>,
    Path(method): Path<String>,
    peer: Option<Extension<PeerId>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (reply, body) = match read_request(&headers, &body) {
        Ok(x) => x,
        Err(resp) => return *resp,
    };
    if method == "Register" {
        return unary(reply, &body, |req| backend.register(req)).await;
    }
    if !matches!(
        method.as_str(),
        "Declare" | "FetchTask" | "UpdateTask" | "UpdateLog"
    ) {
        return error_response(&ConnectError::new(
            connect::Code::NotFound,
            format!("no procedure runner.v1.RunnerService/{method}"),
        ));
    }
    let caller = match runner_credentials(&headers) {
        Ok((uuid, token)) => {
            let peer = peer.as_ref().map(|Extension(p)| p);
            backend.authenticate_peer(uuid, token, peer).await
        }
        Err(e) => Err(e),
    };
    let caller = match caller {
        Ok(c) => c,
        Err(e) => return error_response(&e),
    };
    let b = &*backend;
    let c = &caller;
    match method.as_str() {
        "Declare" => unary(reply, &body, |req| b.declare(c, req)).await,
        "FetchTask" => {
            let key = header_str(&headers, REQUEST_KEY_HEADER).filter(|k| !k.is_empty());
            unary(reply, &body, |req| b.fetch_task_keyed(c, req, key)).await
        }
        "UpdateTask" => unary(reply, &body, |req| b.update_task(c, req)).await,
        _ => unary(reply, &body, |req| b.update_log(c, req)).await,
    }
}

async fn ping(headers: HeaderMap, body: Bytes) -> Response {
    let (reply, body) = match read_request(&headers, &body) {
        Ok(x) => x,
        Err(resp) => return *resp,
    };
    unary(reply, &body, |req: PingRequest| async move {
        Ok(PingResponse {
            data: format!("Hello, {}!", req.data),
        })
    })
    .await
}

/// A rustls server config from a PEM certificate chain and key, offering h2 and HTTP/1.1.
pub fn tls_config(cert_pem: &str, key_pem: &str) -> crate::Result<Arc<rustls::ServerConfig>> {
    crate::tls::ensure_crypto_provider();
    let certs = rustls_pemfile::certs(&mut cert_pem.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| crate::Error::bad_input("facade certificate is not PEM").caused_by(e))?;
    let key = rustls_pemfile::private_key(&mut key_pem.as_bytes())
        .map_err(|e| crate::Error::bad_input("facade key is not PEM").caused_by(e))?
        .ok_or_else(|| crate::Error::bad_input("facade key PEM holds no private key"))?;
    let mut cfg = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            crate::Error::bad_input("the facade certificate and the facade key do not fit")
                .caused_by(e)
                .hint("re-run `tenantci dispatch init`, which issues a new facade certificate and key as a pair")
        })?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// A running HTTPS server; dropping it without [`FacadeHandle::shutdown`] aborts it.
pub struct FacadeHandle {
    /// The address the server listens on.
    pub local_addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl FacadeHandle {
    /// `https://<local_addr>`, the URL a client calls.
    pub fn base_url(&self) -> String {
        format!("https://{}", self.local_addr)
    }

    /// Stops accepting connections and waits for the accept loop to end.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for FacadeHandle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Serves [`router`]`(backend)` over HTTPS on `listener`.
pub fn spawn<B: RunnerServiceHandler>(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    backend: Arc<B>,
) -> std::io::Result<FacadeHandle> {
    spawn_router(listener, tls, router(backend))
}

/// Serves any router over HTTPS on `listener` (connections already open when it stops finish
/// their in-flight requests).
pub fn spawn_router(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
) -> std::io::Result<FacadeHandle> {
    let local_addr = listener.local_addr()?;
    let (stop, mut stopped) = oneshot::channel::<()>();
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let task = tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = &mut stopped => break,
                accepted = listener.accept() => accepted,
            };
            let Ok((tcp, peer)) = accepted else {
                continue;
            };
            // RunnerService calls are small requests and answers: with Nagle's algorithm on,
            // a handshake flight or an answer's tail waits for the peer's delayed ACK (~40 ms
            // on Linux). The identity benchmark saw it as 40-50 ms first calls.
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let app = app.clone();
            tokio::spawn(async move {
                let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp))
                    .await
                {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "facade TLS handshake failed");
                        return;
                    }
                    Err(_) => return,
                };
                // With a SPIFFE mTLS config (core::spiffe::tls) every request of this
                // connection carries the client's ID; server-only TLS adds nothing.
                let peer_id = crate::spiffe::tls::peer_id(tls.get_ref().1).map(PeerId);
                let app = tower::ServiceExt::map_request(app, move |mut req: http::Request<_>| {
                    if let Some(id) = &peer_id {
                        req.extensions_mut().insert(id.clone());
                    }
                    req
                });
                let service = hyper_util::service::TowerToHyperService::new(app);
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                if let Err(e) = builder.serve_connection(TokioIo::new(tls), service).await {
                    tracing::debug!(%peer, error = %e, "facade connection ended with an error");
                }
            });
        }
    });
    Ok(FacadeHandle {
        local_addr,
        stop: Some(stop),
        task: Some(task),
    })
}
