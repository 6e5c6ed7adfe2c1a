//! The executor-proxy's road to Gitea itself. The runner derives everything a job reaches on
//! Gitea from its `.runner` address (`github.server_url`, `github.api_url`,
//! `ACTIONS_RUNTIME_URL = <address>/api/actions_pipeline/`, `ACTIONS_RESULTS_URL = <address>`;
//! docs/gitea-protocol.md), and that address is the proxy. So every request that is neither
//! one of the four RunnerService calls nor the shared cache's (`/_tenantci/cache/`) goes on to
//! the Gitea instance: checkout's `git` traffic, artifacts (v3 and v4), the API with the job's
//! token.
//!
//! What it keeps from a host runner: the job's own headers (its `Authorization` passes), Gitea's
//! answers as they are (a redirect is handed to the job, not followed here, and no URL is
//! rewritten: artifact v3's upload URLs and v4's signed URLs point at the address Gitea
//! guesses for itself, its `ROOT_URL` or the `Host` this proxy sends, `gitea.url`'s, and the
//! job then reaches Gitea directly, as on a runner host), bodies
//! streamed both ways with no size cap and nothing buffered whole (uploads of gigabytes), and
//! Gitea's TLS verified with the image's trust store or the configured Gitea CA.
//!
//! What it drops: hop-by-hop headers, and every `x-runner-*` header. Those carry the task's
//! capability toward the facade; Gitea never needs them and must never see them.
//!
//! Gitea unreachable is a 502 with a sentence naming Gitea's URL, after the connect timeout;
//! Gitea silent mid-answer for [`READ_TIMEOUT`] ends the answer. Nothing is retried: a
//! request with a body may have been acted on (an artifact chunk stored), and the job's own
//! client (git, the toolkit) already retries what is safe to retry.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tenantci_core::{Error, Result};

/// Connecting to Gitea takes longer than this only when it is down or unroutable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Silence from Gitea for this long in the middle of an answer ends it (a stuck Gitea must not
/// hold the job's step forever); a long upload or download that keeps moving is never cut.
pub const READ_TIMEOUT: Duration = Duration::from_secs(300);

/// Where the proxy sends what is not the RunnerService.
#[derive(Debug, Clone)]
pub struct GiteaUpstream {
    /// Gitea's base URL (`gitea.url` of the dispatcher's config), without a trailing slash.
    pub url: String,
    /// An extra CA (PEM) to trust for Gitea, beside the image's trust store.
    pub ca_pem: Option<String>,
}

/// The client and base URL the passthrough uses, and what it says when the upstream does
/// not answer.
#[derive(Clone)]
pub struct Passthrough {
    http: reqwest::Client,
    base: String,
    /// Who is behind `base`, for the 502's sentence (`Gitea`, `the dispatcher's cache`).
    name: &'static str,
    /// What to check when it does not answer.
    hint: &'static str,
    /// The request paths carry a secret (the cache grant): never logged.
    paths_are_secret: bool,
}

/// The settings of a client that relays a job's requests as they are: redirects handed to the
/// job, not followed (as a host runner's job sees them); no total timeout, only silence
/// bounded ([`READ_TIMEOUT`]: uploads and downloads of gigabytes); bodies not decoded (the
/// upstream decides the encoding, the job's client decodes it); HTTP/1.1 even where the
/// upstream offers h2 (reqwest's `http2` feature is on through `object_store`): a job's large
/// bodies are single streams, and h2's 16 KiB frames and flow-control windows halved this
/// client's rate on one (615 against 1178 MiB/s, docs/benchmarks/cache.md); each of the job's
/// concurrent requests gets a connection of its own, as a host runner's Node client does.
pub(crate) fn streaming(b: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
    b.http1_only()
        .redirect(reqwest::redirect::Policy::none())
        .read_timeout(READ_TIMEOUT)
        .no_gzip()
        .no_brotli()
        .no_deflate()
        .no_zstd()
}

/// Checks `url` is an http(s) URL with a host: `--gitea-url` as the dispatcher writes it.
pub fn check_url(url: &str) -> Result<()> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(host) if !host.is_empty() && !host.starts_with('/') => Ok(()),
        _ => Err(
            Error::bad_input(format!("--gitea-url `{url}` is not an http(s) URL"))
                .hint("pass the dispatcher's gitea.url, e.g. https://gitea.example"),
        ),
    }
}

impl Passthrough {
    /// The client toward `up`: the image's trust store (and the bundled roots), plus `ca_pem`.
    pub fn new(up: &GiteaUpstream) -> Result<Self> {
        check_url(&up.url)?;
        tenantci_core::tls::ensure_crypto_provider();
        let mut builder =
            streaming(reqwest::Client::builder().use_rustls_tls()).connect_timeout(CONNECT_TIMEOUT);
        if let Some(pem) = &up.ca_pem {
            let ca = reqwest::Certificate::from_pem(pem.as_bytes()).map_err(|e| {
                Error::bad_input("the Gitea CA is not a PEM certificate")
                    .caused_by(e)
                    .hint("pass the CA that signed Gitea's certificate (gitea.ca_file)")
            })?;
            builder = builder.add_root_certificate(ca);
        }
        let http = builder
            .build()
            .map_err(|e| Error::bad_input("cannot build the Gitea client").caused_by(e))?;
        Ok(Passthrough {
            http,
            base: up.url.trim_end_matches('/').to_string(),
            name: "Gitea",
            hint: "check that the executor can reach it (DNS, NetworkPolicy, its TLS CA in gitea.ca_file)",
            paths_are_secret: false,
        })
    }

    /// A passthrough over a client built elsewhere (the facade's, for the cache, whose paths
    /// carry the task's cache grant: its log lines leave the path out).
    pub fn over(http: reqwest::Client, base: &str, name: &'static str, hint: &'static str) -> Self {
        Passthrough {
            http,
            base: base.trim_end_matches('/').to_string(),
            name,
            hint,
            paths_are_secret: true,
        }
    }

    /// Gitea's base URL.
    pub fn url(&self) -> &str {
        &self.base
    }
}

/// Whether `name` may go from the job to Gitea (request) or from Gitea to the job (answer).
fn passes(name: &HeaderName) -> bool {
    const HOP_BY_HOP: [&str; 8] = [
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
    ];
    let name = name.as_str();
    // Transfer-Encoding is the connection's framing: each side frames its own body. Host is
    // Gitea's, set from the URL. Expect: the proxy's server side already answered the job's
    // `100-continue`; its body is on the way.
    !(HOP_BY_HOP.contains(&name)
        || name == "transfer-encoding"
        || name == "host"
        || name == "expect"
        || name.starts_with("x-runner-"))
}

/// `headers` without the hop-by-hop ones and the runner's own (`x-runner-*`): what may cross
/// the proxy, either way.
pub(crate) fn end_to_end(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if passes(name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// Forwards one request to Gitea and streams its answer back.
pub async fn forward(State(gitea): State<Passthrough>, req: Request) -> Response {
    stream_to(&gitea, req, HeaderMap::new()).await
}

/// Forwards one request to `gitea`'s base with `extra` headers beside the job's end-to-end
/// ones, and streams the answer back.
pub async fn stream_to(gitea: &Passthrough, req: Request, extra: HeaderMap) -> Response {
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let url = format!("{}{path}", gitea.base);
    let sent = gitea
        .http
        .request(parts.method.clone(), &url)
        .headers(end_to_end(&parts.headers))
        .headers(extra)
        .body(reqwest::Body::wrap_stream(body.into_data_stream()))
        .send()
        .await;
    match sent {
        Ok(resp) => {
            let status = resp.status();
            let headers = end_to_end(resp.headers());
            let mut answer = Response::new(Body::from_stream(resp.bytes_stream()));
            *answer.status_mut() = status;
            *answer.headers_mut() = headers;
            answer
        }
        Err(e) => {
            // Without the URL reqwest puts in its message: the sentence names the base and
            // path itself, and a cache path carries the grant.
            let error = tenantci_core::error::one_line(&e.without_url());
            let path = if gitea.paths_are_secret {
                "(not logged: it carries the cache grant)"
            } else {
                parts.uri.path()
            };
            tracing::warn!(method = %parts.method, path, %error, upstream = gitea.name, "executor-proxy: the upstream is unreachable");
            let sentence = format!(
                "executor-proxy: {} at {} did not answer {} {} ({error}); {}\n",
                gitea.name,
                gitea.base,
                parts.method,
                parts.uri.path(),
                gitea.hint
            );
            (
                StatusCode::BAD_GATEWAY,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                sentence,
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a server that offers h2 (the facade's transport, as Go's net/http does for
    /// Gitea), a relaying client speaks HTTP/1.1; a plain client would take h2.
    #[tokio::test]
    async fn a_relaying_client_speaks_http1_where_the_upstream_offers_h2() {
        use std::time::Duration;
        use tenantci_core::forge::gitea::facade::{spawn_router, tls_config};
        let ca =
            tenantci_core::pki::CertificateAuthority::generate("test CA", Duration::from_secs(600))
                .unwrap();
        let leaf = tenantci_core::pki::issue::server_cert(
            &ca,
            "upstream",
            &["127.0.0.1".into()],
            Duration::from_secs(600),
        )
        .unwrap();
        let app = axum::Router::new().route(
            "/",
            axum::routing::get(|req: axum::extract::Request| async move {
                format!("{:?}", req.version())
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = spawn_router(
            listener,
            tls_config(&leaf.cert_pem, &leaf.key_pem).unwrap(),
            app,
        )
        .unwrap();
        let url = format!("https://{}/", server.local_addr);
        let trusting = || {
            tenantci_core::tls::ensure_crypto_provider();
            reqwest::Client::builder()
                .use_rustls_tls()
                .add_root_certificate(
                    reqwest::Certificate::from_pem(ca.cert_pem().as_bytes()).unwrap(),
                )
        };
        let version = |client: reqwest::Client| {
            let url = url.clone();
            async move { client.get(url).send().await.unwrap().text().await.unwrap() }
        };
        assert_eq!(version(trusting().build().unwrap()).await, "HTTP/2.0");
        assert_eq!(
            version(streaming(trusting()).build().unwrap()).await,
            "HTTP/1.1"
        );
    }

    #[test]
    fn runner_headers_and_hop_by_hop_headers_never_pass() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("authorization", "Bearer job-token"),
            ("x-runner-token", "capability"),
            ("x-runner-uuid", "task-1"),
            ("X-Runner-Anything", "x"),
            ("connection", "keep-alive"),
            ("transfer-encoding", "chunked"),
            ("host", "127.0.0.1:8431"),
            ("expect", "100-continue"),
            ("content-range", "bytes 0-9/10"),
            ("content-type", "application/octet-stream"),
        ] {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        let kept: Vec<_> = end_to_end(&h)
            .keys()
            .map(|k| k.as_str().to_string())
            .collect();
        assert_eq!(kept, ["authorization", "content-range", "content-type"]);
    }

    #[test]
    fn the_gitea_url_must_be_http_or_https_with_a_host() {
        check_url("https://gitea.example").unwrap();
        check_url("http://10.0.0.3:3000/").unwrap();
        for bad in ["gitea.example", "https://", "ftp://x", "https:///path"] {
            let e = check_url(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
            assert!(e.message().contains("--gitea-url"), "{bad}");
        }
    }
}
