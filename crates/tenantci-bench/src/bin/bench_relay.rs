//! The facade's UpdateLog relay in one process, for instruction counts (issue 57): a runner
//! client -> a RunnerService facade over HTTPS (core's `facade::spawn`) whose UpdateLog
//! forwards to a forge with a `RunnerClient`, as the dispatcher's facade does after its
//! checks -> a forge answering every UpdateLog (also `facade::spawn`, HTTPS). `CALLS` calls
//! from `RUNNERS` runners at once; prints the calls, the process CPU (user + system) and the
//! CPU per call. What differs between two builds is the relay's shape (copies, codecs, the
//! client); under `valgrind --tool=callgrind` two runs at two CALLS give the instructions per
//! relayed call as the slope, whatever else the host runs (scripts/bench-relay.sh).
//!
//! Usage: bench_relay [CALLS] [RUNNERS]

use std::sync::Arc;
use std::time::Duration;

use tenantci_core::forge::gitea::facade::{self, RunnerServiceHandler};
use tenantci_core::forge::gitea::proto::{
    DeclareRequest, DeclareResponse, FetchTaskRequest, FetchTaskResponse, LogRow, UpdateLogRequest,
    UpdateLogResponse, UpdateTaskRequest, UpdateTaskResponse,
};
use tenantci_core::forge::gitea::{ClientConfig, ConnectError, Credentials, RunnerClient};
use tenantci_core::pki::{self, CertificateAuthority};

/// One end: the forge (`to: None`, every UpdateLog acked through its last row) or the relay
/// (UpdateLog forwarded to the forge: the dispatcher's facade without its ledger).
struct Node {
    to: Option<RunnerClient>,
}

fn ack(req: &UpdateLogRequest) -> UpdateLogResponse {
    UpdateLogResponse {
        ack_index: req.index + req.rows.len() as i64,
    }
}

fn unavailable(e: impl std::fmt::Display) -> ConnectError {
    ConnectError::unavailable(e.to_string())
}

fn unimplemented<T>() -> Result<T, ConnectError> {
    Err(ConnectError::unimplemented("not in this benchmark"))
}

impl RunnerServiceHandler for Node {
    type Caller = ();
    async fn authenticate(&self, _: &str, _: &str) -> Result<(), ConnectError> {
        Ok(())
    }
    async fn declare(&self, _: &(), _: DeclareRequest) -> Result<DeclareResponse, ConnectError> {
        unimplemented()
    }
    async fn fetch_task(
        &self,
        _: &(),
        _: FetchTaskRequest,
    ) -> Result<FetchTaskResponse, ConnectError> {
        unimplemented()
    }
    async fn update_task(
        &self,
        _: &(),
        _: UpdateTaskRequest,
    ) -> Result<UpdateTaskResponse, ConnectError> {
        unimplemented()
    }
    async fn update_log(
        &self,
        _: &(),
        req: UpdateLogRequest,
    ) -> Result<UpdateLogResponse, ConnectError> {
        let Some(forge) = &self.to else {
            return Ok(ack(&req));
        };
        forge.update_log(&req).await.map_err(unavailable)
    }
    // issue-57:begin (scripts/bench-relay.sh drops this for the baseline, whose core relays
    // through `update_log` only)
    /// The relay sends the body as received, as the dispatcher's facade does.
    async fn update_log_received(
        &self,
        _: &(),
        req: UpdateLogRequest,
        received: Option<facade::Received>,
    ) -> Result<UpdateLogResponse, ConnectError> {
        let Some(forge) = &self.to else {
            return Ok(ack(&req));
        };
        let relayed = forge.update_log_relayed(&req, received.as_ref());
        relayed.await.map_err(unavailable)
    }
    // issue-57:end
}

fn client(base: &str, ca: &str) -> RunnerClient {
    let mut cfg = ClientConfig::new(base);
    cfg.ca_pem = Some(ca.to_string());
    RunnerClient::new(cfg)
        .expect("client")
        .with_credentials(Credentials {
            uuid: "task-1-attempt-1".into(),
            token: "t".into(),
        })
}

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, r)| r.split_whitespace().collect());
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (tick(11) + tick(12)) / 100.0
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let calls: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let runners: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(16);
    let day = Duration::from_secs(86400);
    let ca = CertificateAuthority::generate("bench", day * 2).unwrap();
    let leaf = pki::issue::server_cert(&ca, "127.0.0.1", &["127.0.0.1".to_string()], day).unwrap();
    let tls = facade::tls_config(&leaf.cert_pem, &leaf.key_pem).unwrap();
    let listen = || tokio::net::TcpListener::bind("127.0.0.1:0");
    let forge = Node { to: None };
    let forge = facade::spawn(listen().await.unwrap(), tls.clone(), Arc::new(forge)).unwrap();
    let relay = Node {
        to: Some(client(&forge.base_url(), ca.cert_pem())),
    };
    let relay = facade::spawn(listen().await.unwrap(), tls, Arc::new(relay)).unwrap();
    let runner = client(&relay.base_url(), ca.cert_pem());
    let per = calls.div_ceil(runners);
    let log = |index: i64| UpdateLogRequest {
        task_id: 1,
        index,
        rows: vec![LogRow {
            time: None,
            content: format!("line {index}: a step's output, about as long as a real one"),
        }],
        no_more: false,
    };
    // One warm-up call each: connections and handshakes are not the relay's per-call cost.
    for _ in 0..runners {
        runner.update_log(&log(0)).await.unwrap();
    }
    let (cpu0, t0) = (cpu_seconds(), std::time::Instant::now());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..runners {
        let runner = runner.clone();
        tasks.spawn(async move {
            for i in 0..per {
                runner.update_log(&log(i as i64)).await.unwrap();
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let (cpu, wall) = (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
    let n = per * runners;
    println!(
        "calls {n}, runners {runners}: {:.1} s wall, {:.2} s CPU, {:.1} us CPU per relayed call (runner and forge included)",
        wall,
        cpu,
        cpu / n as f64 * 1e6
    );
}
