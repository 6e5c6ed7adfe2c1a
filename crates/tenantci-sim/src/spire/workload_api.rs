//! A Workload API double on one unix socket: `FetchX509SVID` as a server stream that sends the
//! socket's current SVID at once and again on every rotation, as a SPIRE agent does.
//!
//! Like the agent, a call without the metadata `workload.spiffe.io: true` is refused
//! (InvalidArgument), and a socket whose entry has no SVID (yet, or any more) answers
//! PermissionDenied "no identity issued". The other methods of `SpiffeWorkloadAPI`
//! (bundles, JWT) are Unimplemented: nothing in tenantci calls them.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::{Request, Response, Status};

use super::proto::{X509SvidRequest, X509SvidResponse};

const FETCH_X509_SVID: &str = "/SpiffeWorkloadAPI/FetchX509SVID";
const SECURITY_HEADER: &str = "workload.spiffe.io";

/// What a socket serves: the response to stream, or no identity.
pub type Current = Option<Arc<X509SvidResponse>>;

type SvidStream = Pin<Box<dyn Stream<Item = Result<X509SvidResponse, Status>> + Send>>;

/// One listening socket; dropping it stops the server and removes the socket file.
pub struct Endpoint {
    path: PathBuf,
    current: watch::Sender<Current>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// Listens on `path` (a stale socket file there is replaced) serving `initial`.
    pub fn bind(path: &Path, initial: Current) -> std::io::Result<Self> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = UnixListener::bind(path)?;
        let (current, rx) = watch::channel(initial);
        let svc = tower::service_fn(move |req: http::Request<tonic::body::Body>| {
            let rx = rx.clone();
            async move {
                if req.uri().path() != FETCH_X509_SVID {
                    let status = Status::unimplemented(format!(
                        "{} is not served by the simulator's Workload API",
                        req.uri().path()
                    ));
                    return Ok::<_, std::convert::Infallible>(status.into_http());
                }
                let handler = tower::service_fn(move |call: Request<X509SvidRequest>| {
                    fetch_x509_svid(call, rx.clone())
                });
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                Ok(grpc.server_streaming(handler, req).await)
            }
        });
        let incoming = futures::stream::unfold(listener, |l| async move {
            let conn = l.accept().await.map(|(stream, _)| stream);
            Some((conn, l))
        });
        let shown = path.display().to_string();
        let task = tokio::spawn(async move {
            if let Err(e) = tonic::transport::Server::builder()
                .serve_with_incoming(svc, incoming)
                .await
            {
                tracing::warn!(socket = %shown, error = %e, "workload API double stopped");
            }
        });
        Ok(Endpoint {
            path: path.to_path_buf(),
            current,
            task,
        })
    }

    /// The socket it serves on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves `next` from now on: open streams receive it (a rotation), or end with
    /// PermissionDenied when it is `None`.
    pub fn set(&self, next: Current) {
        self.current.send_replace(next);
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // Aborting drops every connection: a stream never ends by itself, so a graceful
        // shutdown would wait for clients that keep theirs open.
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

fn no_identity() -> Status {
    Status::permission_denied("no identity issued")
}

async fn fetch_x509_svid(
    call: Request<X509SvidRequest>,
    mut rx: watch::Receiver<Current>,
) -> Result<Response<SvidStream>, Status> {
    let header = call.metadata().get(SECURITY_HEADER);
    if header.and_then(|v| v.to_str().ok()) != Some("true") {
        return Err(Status::invalid_argument(
            "security header missing from request",
        ));
    }
    let Some(first) = rx.borrow_and_update().clone() else {
        return Err(no_identity());
    };
    // The first response now, then one per change; the stream ends after a removal.
    let updates = futures::stream::unfold(
        (rx, Some(first), false),
        |(mut rx, first, ended)| async move {
            if ended {
                return None;
            }
            if let Some(first) = first {
                return Some((Ok((*first).clone()), (rx, None, false)));
            }
            rx.changed().await.ok()?;
            let next = rx.borrow_and_update().clone();
            match next {
                Some(svid) => Some((Ok((*svid).clone()), (rx, None, false))),
                None => Some((Err(no_identity()), (rx, None, true))),
            }
        },
    );
    Ok(Response::new(Box::pin(updates)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spire::proto::X509Svid;

    async fn client(path: &Path) -> tonic::client::Grpc<tonic::transport::Channel> {
        let path = path.to_path_buf();
        let channel = tonic::transport::Endpoint::from_static("http://workload.invalid")
            .connect_with_connector(tower::service_fn(move |_: http::Uri| {
                let path = path.clone();
                async move {
                    let s = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
                }
            }))
            .await
            .unwrap();
        tonic::client::Grpc::new(channel)
    }

    async fn fetch(
        path: &Path,
        header: bool,
    ) -> Result<tonic::Streaming<X509SvidResponse>, Status> {
        let mut grpc = client(path).await;
        grpc.ready().await.unwrap();
        let mut req = Request::new(X509SvidRequest {});
        if header {
            req.metadata_mut()
                .insert(SECURITY_HEADER, "true".parse().unwrap());
        }
        let codec = tonic_prost::ProstCodec::<X509SvidRequest, X509SvidResponse>::default();
        let path = http::uri::PathAndQuery::from_static(FETCH_X509_SVID);
        grpc.server_streaming(req, path, codec)
            .await
            .map(|r| r.into_inner())
    }

    fn svid(id: &str) -> Current {
        Some(Arc::new(X509SvidResponse {
            svids: vec![X509Svid {
                spiffe_id: id.into(),
                ..Default::default()
            }],
            ..Default::default()
        }))
    }

    #[tokio::test]
    async fn fetch_streams_the_svid_and_its_rotations_and_needs_the_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.sock");
        let endpoint = Endpoint::bind(&path, svid("spiffe://example.org/a")).unwrap();

        let refused = fetch(&path, false).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);

        let mut stream = fetch(&path, true).await.unwrap();
        let first = stream.message().await.unwrap().unwrap();
        assert_eq!(first.svids[0].spiffe_id, "spiffe://example.org/a");
        endpoint.set(svid("spiffe://example.org/b"));
        let next = stream.message().await.unwrap().unwrap();
        assert_eq!(next.svids[0].spiffe_id, "spiffe://example.org/b");
        endpoint.set(None);
        let ended = stream.message().await.unwrap_err();
        assert_eq!(ended.code(), tonic::Code::PermissionDenied);
        let none = fetch(&path, true).await.unwrap_err();
        assert_eq!(none.code(), tonic::Code::PermissionDenied);

        drop(endpoint);
        assert!(!path.exists(), "the socket file goes with the endpoint");
    }
}
