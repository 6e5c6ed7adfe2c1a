//! Client <-> facade over HTTPS (a generated CA and serving cert), both codecs, gzip both
//! ways, and the wire-level failures.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenantci_core::forge::gitea::facade::{self, FacadeHandle, RunnerServiceHandler};
use tenantci_core::forge::gitea::proto::{
    DeclareRequest, DeclareResponse, FetchTaskRequest, FetchTaskResponse, LogRow, Task, TaskResult,
    TaskState, UpdateLogRequest, UpdateLogResponse, UpdateTaskRequest, UpdateTaskResponse,
};
use tenantci_core::forge::gitea::{ClientConfig, Code, Codec, ConnectError, RunnerClient, connect};
use tenantci_core::pki::{self, CertificateAuthority};

use super::{client, with_creds};

const UUID: &str = "6f1e-executor";
const TOKEN: &str = "capability-token";

/// Hands out one large task (so answers cross the gzip threshold) and records updates.
#[derive(Default)]
struct Handler {
    fetched: Mutex<Vec<(String, i64)>>,
    updates: Mutex<Vec<UpdateTaskRequest>>,
    logs: Mutex<Vec<UpdateLogRequest>>,
}

impl RunnerServiceHandler for Handler {
    type Caller = String;

    async fn authenticate(&self, uuid: &str, token: &str) -> Result<String, ConnectError> {
        if uuid == UUID && token == TOKEN {
            Ok(uuid.to_string())
        } else {
            Err(ConnectError::unauthenticated("unregistered runner"))
        }
    }

    async fn declare(
        &self,
        _: &String,
        _: DeclareRequest,
    ) -> Result<DeclareResponse, ConnectError> {
        Err(ConnectError::unimplemented("old server"))
    }

    async fn fetch_task(
        &self,
        caller: &String,
        req: FetchTaskRequest,
    ) -> Result<FetchTaskResponse, ConnectError> {
        self.fetched
            .lock()
            .unwrap()
            .push((caller.clone(), req.tasks_version));
        Ok(FetchTaskResponse {
            task: Some(Task {
                id: 41,
                workflow_payload: Some("echo hello\n".repeat(400).into_bytes()),
                secrets: [("S".to_string(), "v".to_string())].into(),
                ..Default::default()
            }),
            tasks_version: 3,
            ..Default::default()
        })
    }

    async fn update_task(
        &self,
        _: &String,
        req: UpdateTaskRequest,
    ) -> Result<UpdateTaskResponse, ConnectError> {
        let id = req.state.as_ref().map_or(0, |s| s.id);
        self.updates.lock().unwrap().push(req);
        Ok(UpdateTaskResponse {
            state: Some(TaskState {
                id,
                result: TaskResult::Cancelled as i32,
                ..Default::default()
            }),
            sent_outputs: vec![],
        })
    }

    async fn update_log(
        &self,
        _: &String,
        req: UpdateLogRequest,
    ) -> Result<UpdateLogResponse, ConnectError> {
        let ack = req.index + req.rows.len() as i64;
        self.logs.lock().unwrap().push(req);
        Ok(UpdateLogResponse { ack_index: ack })
    }
}

struct Fixture {
    ca_pem: String,
    handle: FacadeHandle,
    backend: Arc<Handler>,
}

async fn start() -> Fixture {
    tenantci_core::tls::ensure_crypto_provider();
    let day = Duration::from_secs(86_400);
    let ca = CertificateAuthority::generate("facade test CA", day).unwrap();
    let leaf = pki::issue::server_cert(&ca, "facade", &["127.0.0.1".to_string()], day).unwrap();
    let tls = facade::tls_config(&leaf.cert_pem, &leaf.key_pem).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend = Arc::new(Handler::default());
    let handle = facade::spawn(listener, tls, backend.clone()).unwrap();
    Fixture {
        ca_pem: ca.cert_pem().to_string(),
        handle,
        backend,
    }
}

fn executor(f: &Fixture, codec: Codec, gzip_requests: bool) -> RunnerClient {
    let mut cfg = ClientConfig::new(f.handle.base_url());
    cfg.codec = codec;
    cfg.gzip_requests = gzip_requests;
    cfg.ca_pem = Some(f.ca_pem.clone());
    with_creds(RunnerClient::new(cfg).unwrap(), UUID, TOKEN)
}

fn raw_http(f: &Fixture) -> reqwest::Client {
    reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(f.ca_pem.as_bytes()).unwrap())
        .build()
        .unwrap()
}

fn url(f: &Fixture, method: &str) -> String {
    format!(
        "{}/api/actions/runner.v1.RunnerService/{method}",
        f.handle.base_url()
    )
}

#[tokio::test]
async fn gitea_facade_serves_both_codecs_over_https() {
    let f = start().await;
    for (codec, gzip_requests) in [
        (Codec::Proto, false),
        (Codec::Json, true),
        (Codec::Proto, true),
    ] {
        let c = executor(&f, codec, gzip_requests);
        assert_eq!(c.ping("x").await.unwrap(), "Hello, x!");
        assert_eq!(
            c.declare(&DeclareRequest::default()).await.unwrap(),
            None,
            "unimplemented is tolerated"
        );
        let resp = c.fetch_task(7).await.unwrap();
        let task = resp.task.expect("task");
        assert_eq!(task.id, 41);
        assert_eq!(task.workflow_payload.unwrap().len(), 11 * 400);
        assert_eq!(task.secrets["S"], "v");
        assert_eq!(resp.tasks_version, 3);

        let answer = c
            .update_task(&UpdateTaskRequest {
                state: Some(TaskState {
                    id: 41,
                    ..Default::default()
                }),
                outputs: [("o".to_string(), "1".to_string())].into(),
            })
            .await
            .unwrap();
        assert_eq!(answer.state.unwrap().result, TaskResult::Cancelled as i32);
        let ack = c
            .update_log(&UpdateLogRequest {
                task_id: 41,
                index: 2,
                rows: vec![LogRow {
                    time: Some(prost_types::Timestamp {
                        seconds: 100,
                        nanos: 7,
                    }),
                    content: "line".into(),
                }],
                no_more: true,
            })
            .await
            .unwrap();
        assert_eq!(ack.ack_index, 3);
    }
    assert_eq!(
        f.backend.fetched.lock().unwrap().clone(),
        vec![(UUID.to_string(), 7); 3]
    );
    let logs = f.backend.logs.lock().unwrap().clone();
    assert_eq!(logs.len(), 3);
    assert!(
        logs.iter()
            .all(|l| l.rows[0].time.as_ref().unwrap().nanos == 7 && l.no_more)
    );
    assert_eq!(f.backend.updates.lock().unwrap()[1].outputs["o"], "1");
    f.handle.shutdown().await;
}

#[tokio::test]
async fn gitea_facade_gzips_large_answers_only_when_accepted() {
    let f = start().await;
    let http = raw_http(&f);
    let body = prost::Message::encode_to_vec(&FetchTaskRequest {
        tasks_version: 0,
        ..Default::default()
    });
    let send = |accept: Option<&'static str>| {
        let mut rb = http
            .post(url(&f, "FetchTask"))
            .header("content-type", "application/proto")
            .header("x-runner-uuid", UUID)
            .header("x-runner-token", TOKEN)
            .body(body.clone());
        if let Some(a) = accept {
            rb = rb.header("accept-encoding", a);
        }
        rb.send()
    };
    let gz = send(Some("gzip")).await.unwrap();
    assert_eq!(gz.status().as_u16(), 200);
    assert_eq!(gz.headers()["content-encoding"], "gzip");
    let packed = gz.bytes().await.unwrap();
    let plain = connect::gunzip(&packed).unwrap();
    let decoded: FetchTaskResponse = Codec::Proto.decode(&plain).unwrap();
    assert_eq!(decoded.task.unwrap().id, 41);

    let json = http
        .post(url(&f, "FetchTask"))
        .header("content-type", "application/json")
        .header("x-runner-uuid", UUID)
        .header("x-runner-token", TOKEN)
        .body(r#"{"tasks_version": "5"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(json.headers()["content-type"], "application/json");
    let doc: serde_json::Value = json.json().await.unwrap();
    assert_eq!(doc["tasksVersion"], "3");
    assert_eq!(doc["task"]["id"], "41");
    assert_eq!(doc["task"]["secrets"]["S"], "v");
    assert_eq!(f.backend.fetched.lock().unwrap().last().unwrap().1, 5);

    let identity = send(None).await.unwrap();
    assert!(identity.headers().get("content-encoding").is_none());
    let decoded: FetchTaskResponse = Codec::Proto
        .decode(&identity.bytes().await.unwrap())
        .unwrap();
    assert_eq!(decoded.tasks_version, 3);
    f.handle.shutdown().await;
}

async fn connect_error(resp: reqwest::Response) -> (u16, ConnectError) {
    let status = resp.status().as_u16();
    let body = resp.bytes().await.unwrap();
    (status, ConnectError::from_response(status, &body))
}

#[tokio::test]
async fn gitea_facade_rejects_malformed_bodies_and_content_types() {
    let f = start().await;
    let http = raw_http(&f);
    let post = |ct: &'static str, body: &'static [u8]| {
        http.post(url(&f, "UpdateLog"))
            .header("content-type", ct)
            .header("x-runner-uuid", UUID)
            .header("x-runner-token", TOKEN)
            .body(body)
            .send()
    };
    // Field 3 (rows) claims 16 bytes that are not there.
    let (status, err) = connect_error(
        post("application/proto", b"\x08\x01\x1a\x10ab")
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, err.code), (400, Code::InvalidArgument), "{err}");
    let (status, err) =
        connect_error(post("application/json", b"{\"taskId\": [").await.unwrap()).await;
    assert_eq!((status, err.code), (400, Code::InvalidArgument), "{err}");

    let resp = post("text/plain", b"hello").await.unwrap();
    assert_eq!(resp.status().as_u16(), 415);
    assert!(
        resp.headers()["accept-post"]
            .to_str()
            .unwrap()
            .contains("application/proto")
    );
    let resp = post("application/grpc", b"\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 415);

    let bad_gzip = http
        .post(url(&f, "UpdateLog"))
        .header("content-type", "application/proto")
        .header("content-encoding", "gzip")
        .header("x-runner-uuid", UUID)
        .header("x-runner-token", TOKEN)
        .body(&b"not gzip"[..])
        .send()
        .await
        .unwrap();
    assert_eq!(connect_error(bad_gzip).await.1.code, Code::InvalidArgument);

    let unknown = http
        .post(url(&f, "Explode"))
        .header("content-type", "application/proto")
        .send()
        .await
        .unwrap();
    assert_eq!(connect_error(unknown).await.1.code, Code::NotFound);
    let get = http.get(url(&f, "FetchTask")).send().await.unwrap();
    assert_eq!(get.status().as_u16(), 405, "only POST is routed");
    let register = http
        .post(url(&f, "Register"))
        .header("content-type", "application/proto")
        .send()
        .await
        .unwrap();
    assert_eq!(connect_error(register).await.1.code, Code::Unimplemented);

    // Still serving after all of that.
    assert!(f.backend.logs.lock().unwrap().is_empty());
    assert_eq!(
        executor(&f, Codec::Proto, false).ping("ok").await.unwrap(),
        "Hello, ok!"
    );
    f.handle.shutdown().await;
}

#[tokio::test]
async fn gitea_facade_requires_runner_headers() {
    let f = start().await;
    let http = raw_http(&f);
    for headers in [
        vec![],
        vec![("x-runner-uuid", UUID)],
        vec![("x-runner-token", TOKEN)],
        vec![("x-runner-uuid", UUID), ("x-runner-token", "wrong")],
        vec![("x-runner-uuid", "other"), ("x-runner-token", TOKEN)],
    ] {
        let mut rb = http
            .post(url(&f, "FetchTask"))
            .header("content-type", "application/json")
            .body("{}");
        for (k, v) in &headers {
            rb = rb.header(*k, *v);
        }
        let (status, err) = connect_error(rb.send().await.unwrap()).await;
        assert_eq!(
            (status, err.code),
            (401, Code::Unauthenticated),
            "headers {headers:?}"
        );
    }
    let wrong = with_creds(client(&f.handle.base_url(), Codec::Proto), UUID, "nope");
    // Without the CA the TLS handshake fails before any header is sent.
    let err = wrong.fetch_task(0).await.unwrap_err();
    assert!(err.code().is_none() && !err.claim_may_be_lost(), "{err}");
    let mut cfg = ClientConfig::new(f.handle.base_url());
    cfg.ca_pem = Some(f.ca_pem.clone());
    let wrong = with_creds(RunnerClient::new(cfg).unwrap(), UUID, "nope");
    assert!(wrong.fetch_task(0).await.unwrap_err().is_unauthenticated());
    assert!(f.backend.fetched.lock().unwrap().is_empty());
    f.handle.shutdown().await;
}

/// A server answering every call from a script of Connect errors (then `unavailable`),
/// counting calls per path, to see which client calls are retried.
async fn scripted(
    script: Vec<ConnectError>,
) -> (String, Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let script = Arc::new(Mutex::new(std::collections::VecDeque::from(script)));
    let (s2, sc2) = (seen.clone(), script.clone());
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let (seen, script) = (s2.clone(), sc2.clone());
        async move {
            seen.lock()
                .unwrap()
                .push(uri.path().rsplit('/').next().unwrap().to_string());
            let err = script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| ConnectError::unavailable("try later"));
            facade::error_response(&err)
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (base, seen, task)
}

#[tokio::test]
async fn gitea_client_retries_only_calls_safe_to_repeat() {
    let (base, seen, server) = scripted(vec![]).await;
    let c = with_creds(client(&base, Codec::Proto), UUID, TOKEN);
    let err = c.fetch_task(0).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::Unavailable));
    assert!(
        err.claim_may_be_lost(),
        "an unavailable FetchTask may have claimed a task"
    );
    assert!(c.register(&Default::default()).await.is_err());
    assert!(c.update_log(&UpdateLogRequest::default()).await.is_err());
    assert!(c.update_task(&UpdateTaskRequest::default()).await.is_err());
    assert!(c.declare(&DeclareRequest::default()).await.is_err());
    let calls = seen.lock().unwrap().clone();
    let count = |m: &str| calls.iter().filter(|c| *c == m).count();
    assert_eq!(count("FetchTask"), 1, "FetchTask is never retried");
    assert_eq!(count("Register"), 1, "Register is never retried");
    assert_eq!(count("UpdateLog"), 4);
    assert_eq!(count("UpdateTask"), 4);
    assert_eq!(count("Declare"), 4);
    server.abort();

    // A definite refusal is not retried either.
    let (base, seen, server) = scripted(vec![ConnectError::permission_denied("not yours")]).await;
    let c = with_creds(client(&base, Codec::Proto), UUID, TOKEN);
    let err = c
        .update_task(&UpdateTaskRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::PermissionDenied));
    assert_eq!(seen.lock().unwrap().len(), 1);
    server.abort();

    // A repeated archiving UpdateLog that meets already_exists means the first one landed.
    let (base, _, server) = scripted(vec![
        ConnectError::unavailable("lost"),
        ConnectError::already_exists("log file has been archived"),
    ])
    .await;
    let c = with_creds(client(&base, Codec::Proto), UUID, TOKEN);
    let ack = c
        .update_log(&UpdateLogRequest {
            task_id: 1,
            index: 4,
            rows: vec![LogRow::default(); 2],
            no_more: true,
        })
        .await
        .unwrap();
    assert_eq!(ack.ack_index, 6);
    server.abort();
}
