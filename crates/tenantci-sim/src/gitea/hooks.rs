//! The Gitea double's webhooks: `workflow_job` deliveries to URLs registered through the admin
//! API, with Gitea's headers and signature (`X-Gitea-Signature`: lower-case hex HMAC-SHA256 of
//! the raw body keyed with the hook's secret; `X-Hub-Signature-256: sha256=<hex>`), so the
//! dispatcher's receiver is exercised on the real path. Like Gitea, deliveries are queued and
//! best-effort: sent in the background, one attempt, outcome recorded (no retry).
//!
//! A Forgejo double sends Forgejo's events instead (`forge::delivery`): one per job state,
//! `workflow_job_waiting` (queued) and `workflow_job_running` (claimed), with the job as an
//! `ActionRunJob` under `job`, `X-Forgejo-*` headers and their `X-Gitea-*` copies. The
//! `action` values of Forgejo's payload are the double's guesses (`new_attempt`,
//! `status_changed`): nothing reads them.
//!
//! Not kept: per-repo/org scoping (every hook gets every job), other events.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tenantci_core::forge::Forge;
use tenantci_core::forge::delivery::{FORGEJO_WAITING_EVENT, GITEA_EVENT};

use super::wire::action_run_job;

/// `POST /admin/hooks`'s body.
#[derive(Clone, Debug, Deserialize)]
pub struct HookSpec {
    /// `http://` target (the double speaks plain HTTP only).
    pub url: String,
    /// Empty: deliveries go unsigned (`X-Gitea-Signature` empty), as Gitea does.
    #[serde(default)]
    pub secret: String,
}

/// One delivery's outcome, for tests and the demo.
#[derive(Clone, Debug, Serialize)]
pub struct DeliveryView {
    /// The hook's index (as `add` returned it).
    pub hook: usize,
    /// The job event's `action` (`queued`, `in_progress`, ...).
    pub action: String,
    /// The job's id.
    pub job_id: i64,
    /// The HTTP status, or None when the target did not answer.
    pub status: Option<u16>,
    /// Why the target did not answer, when it did not.
    pub error: Option<String>,
}

/// What a job looks like in a delivery.
pub struct JobEvent<'a> {
    /// Gitea's `action`: `queued`, `in_progress` or `completed`.
    pub action: &'a str,
    /// The job's id (also its run's, in the double).
    pub job_id: i64,
    /// The job's name.
    pub name: &'a str,
    /// The job's `runs-on` labels.
    pub labels: &'a [String],
    /// The runner holding the job (id, name), once claimed.
    pub runner: Option<(i64, &'a str)>,
    /// When the job was created.
    pub created: SystemTime,
}

/// The registered webhooks and the outcome of each delivery.
#[derive(Default)]
pub struct Hooks {
    forge: Forge,
    hooks: Mutex<Vec<HookSpec>>,
    deliveries: Arc<Mutex<Vec<DeliveryView>>>,
}

fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// The delivery body Gitea sends for a `workflow_job` event (the fields a consumer reads).
pub fn body(ev: &JobEvent<'_>) -> Vec<u8> {
    let status = match ev.action {
        "queued" => "queued",
        "in_progress" => "in_progress",
        "completed" => "completed",
        _ => "waiting",
    };
    serde_json::json!({
        "action": ev.action,
        "workflow_job": {
            "id": ev.job_id,
            "run_id": ev.job_id,
            "name": ev.name,
            "labels": ev.labels,
            "status": status,
            "conclusion": null,
            "runner_id": ev.runner.map(|r| r.0).unwrap_or(0),
            "runner_name": ev.runner.map(|r| r.1).unwrap_or(""),
            "steps": [],
            "created_at": rfc3339(ev.created),
        },
        "repository": {"id": 1, "name": "demo", "full_name": "sim/demo"},
        "organization": {"id": 1, "login": "sim"},
        "sender": {"id": 1, "login": "sim"},
    })
    .to_string()
    .into_bytes()
}

/// Forgejo's event for `ev` and its body (`WorkflowJobPayload`: `action`, `job`, `run`,
/// `repository`, `sender`).
pub fn forgejo_event(ev: &JobEvent<'_>) -> (&'static str, Vec<u8>) {
    let (event, action, status) = match ev.action {
        "queued" => (FORGEJO_WAITING_EVENT, "new_attempt", "waiting"),
        "in_progress" => ("workflow_job_running", "status_changed", "running"),
        _ => ("workflow_job_success", "completed", "success"),
    };
    let body = serde_json::json!({
        "action": action,
        "job": action_run_job(ev.job_id, ev.name, ev.labels, status, 0),
        "run": {"id": ev.job_id},
        "repository": {"id": 1, "name": "demo", "full_name": "sim/demo"},
        "sender": {"id": 1, "login": "sim"},
    })
    .to_string()
    .into_bytes();
    (event, body)
}

/// Gitea's signature of `body` with `secret` (empty secret: empty signature).
pub fn signature(secret: &str, body: &[u8]) -> String {
    if secret.is_empty() {
        return String::new();
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

impl Hooks {
    /// The hooks of a double playing `forge`.
    pub fn of(forge: Forge) -> Hooks {
        Hooks {
            forge,
            ..Hooks::default()
        }
    }

    /// Registers a hook; returns its index.
    pub fn add(&self, spec: HookSpec) -> usize {
        let mut h = self.hooks.lock().unwrap_or_else(|p| p.into_inner());
        h.push(spec);
        h.len() - 1
    }

    /// Every delivery's outcome so far, in the order they finished.
    pub fn deliveries(&self) -> Vec<DeliveryView> {
        self.deliveries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sends `ev` to every hook in the background (needs a Tokio runtime; without one, e.g.
    /// in a unit test of the double, nothing is sent).
    pub fn deliver(&self, ev: &JobEvent<'_>) {
        let hooks = self.hooks.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if hooks.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (event, body) = match self.forge {
            Forge::Gitea => (GITEA_EVENT, body(ev)),
            Forge::Forgejo => forgejo_event(ev),
        };
        let body = Bytes::from(body);
        let forge = self.forge;
        for (i, hook) in hooks.into_iter().enumerate() {
            let log = self.deliveries.clone();
            let (body, action, job_id) = (body.clone(), ev.action.to_string(), ev.job_id);
            rt.spawn(async move {
                let result = send(&hook, forge, event, body).await;
                let (status, error) = match result {
                    Ok(s) => (Some(s), None),
                    Err(e) => (None, Some(e)),
                };
                log.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(DeliveryView {
                        hook: i,
                        action,
                        job_id,
                        status,
                        error,
                    });
            });
        }
    }
}

async fn send(hook: &HookSpec, forge: Forge, event: &str, body: Bytes) -> Result<u16, String> {
    let sig = signature(&hook.secret, &body);
    let delivery = crate::ids::uuid();
    let mut req = http::Request::post(&hook.url)
        .header("content-type", "application/json")
        .header("x-gitea-event", event)
        .header("x-gitea-event-type", event)
        .header("x-gitea-delivery", &delivery)
        .header("x-gitea-signature", &sig)
        .header("x-gogs-event", event)
        .header("x-gogs-signature", &sig)
        .header("x-hub-signature-256", format!("sha256={sig}"));
    if forge == Forge::Forgejo {
        req = req
            .header("x-forgejo-event", event)
            .header("x-forgejo-event-type", event)
            .header("x-forgejo-delivery", &delivery)
            .header("x-forgejo-signature", &sig);
    }
    let req = req.body(Full::new(body)).map_err(|e| e.to_string())?;
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    // Gitea's delivery timeout is 5 s by default (webhook.DELIVER_TIMEOUT).
    match tokio::time::timeout(Duration::from_secs(5), client.request(req)).await {
        Ok(Ok(resp)) => Ok(resp.status().as_u16()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_hex_hmac_sha256_and_empty_without_a_secret() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(signature("", b"x"), "");
    }

    #[test]
    fn the_body_names_the_action_and_the_labels() {
        let labels = vec!["pod".to_string()];
        let queued = JobEvent {
            action: "queued",
            job_id: 7,
            name: "build",
            labels: &labels,
            runner: None,
            created: SystemTime::UNIX_EPOCH,
        };
        let b = body(&queued);
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["action"], "queued");
        assert_eq!(v["workflow_job"]["labels"][0], "pod");
        assert_eq!(v["workflow_job"]["status"], "queued");
        let (event, b) = forgejo_event(&queued);
        assert_eq!(event, "workflow_job_waiting");
        assert_eq!(
            tenantci_core::forge::delivery::announced(Some(event), &b).unwrap(),
            tenantci_core::forge::delivery::Announced::Waiting(labels.clone()),
            "what the dispatcher's receiver reads"
        );
    }
}
