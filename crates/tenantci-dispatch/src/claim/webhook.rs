//! The webhook receiver: Gitea's `workflow_job` and Forgejo's `workflow_job_waiting`
//! deliveries at `POST /webhooks/gitea`, used as a nudge so the scheduler sends a FetchTask at
//! once instead of waiting for its next poll.
//!
//! Boundary: a delivery is a hint, never an instruction. It carries no task (Gitea creates the
//! task only when a FetchTask picks the job), so the most a delivery can do is make the leader
//! poll now; polling stays the source of truth and a lost delivery costs latency, not a job.
//! That is also why plain HTTP with the HMAC signature is enough: a replayed delivery can at
//! most cause a FetchTask within the nudge budget (`claim::nudge`, applied by the scheduler),
//! and one whose `X-Gitea-Delivery` id was seen recently is refused (409, `claim::deliveries`).
//!
//! Invariants: the body is read up to [`MAX_BODY`] and verified (HMAC-SHA256 of the raw
//! bytes, compared in constant time) before anything in it is looked at; a refused delivery
//! (401 unsigned or mis-signed, 413 oversized, 400 malformed, 409 replayed) is counted and
//! never acted on; only the leader nudges (a standby counts the delivery and does nothing).
//! The pure verdict is [`judge`], then [`replay_checked`]; the handler only reads, counts and
//! nudges. The server is `http1`'s, with the executor proxy's bounds: a header-read timeout
//! (`webhook.header_read_timeout`) and at most [`MAX_CONNECTIONS`] open at once, so clients
//! that send half their headers are closed rather than held (issue 45).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::claim::deliveries::RecentDeliveries;
use crate::health::Health;
use crate::http1::{self, Bounds, Stopped};
use crate::metrics::Metrics;
use tenantci_core::forge::{
    self,
    delivery::{self, Announced},
};

/// Where Gitea posts (the webhook's "Target URL" is `http://<webhook.listen>/webhooks/gitea`).
pub const PATH: &str = "/webhooks/gitea";
/// Largest delivery read. A `workflow_job` body is a few KiB (job, repository, sender); 1 MiB
/// leaves room for long step lists and bounds what an unauthenticated sender can make us hold.
pub const MAX_BODY: usize = 1 << 20;
/// The body's HMAC-SHA256 under the webhook secret, hex.
pub const SIGNATURE_HEADER: &str = "x-gitea-signature";
/// The event's name (`workflow_job`, `workflow_job_waiting`, ...).
pub const EVENT_HEADER: &str = "x-gitea-event";
/// The delivery's id (a UUID; Gitea's Redeliver sends a new one), for the replay check.
pub const DELIVERY_HEADER: &str = "x-gitea-delivery";
/// Forgejo sends the `X-Gitea-*` headers and these copies; either is read.
const FORGEJO_HEADERS: [(&str, &str); 3] = [
    (SIGNATURE_HEADER, "x-forgejo-signature"),
    (EVENT_HEADER, "x-forgejo-event"),
    (DELIVERY_HEADER, "x-forgejo-delivery"),
];

/// The webhook secret's bytes. `Debug` never prints it.
#[derive(Clone)]
pub struct WebhookSecret(Vec<u8>);

impl WebhookSecret {
    /// The secret as typed into the forge's webhook settings.
    pub fn new(secret: impl Into<Vec<u8>>) -> Self {
        WebhookSecret(secret.into())
    }

    fn mac(&self) -> Hmac<Sha256> {
        Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length")
    }

    /// What Gitea puts into `X-Gitea-Signature`: lower-case hex HMAC-SHA256 of the body.
    pub fn sign(&self, body: &[u8]) -> String {
        let mut mac = self.mac();
        mac.update(body);
        hex::encode(mac.finalize().into_bytes())
    }

    /// Constant-time check of a presented signature (hex, either case).
    pub fn verify(&self, body: &[u8], presented: &str) -> bool {
        let Ok(bytes) = hex::decode(presented.trim()) else {
            return false;
        };
        let mut mac = self.mac();
        mac.update(body);
        mac.verify_slice(&bytes).is_ok()
    }
}

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret([redacted])")
    }
}

/// What became of one delivery; also the metric's `outcome` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A job this registration can run is waiting: FetchTask now.
    Nudge,
    /// Signed and well-formed, but nothing to do (another event, action or label set).
    Ignored,
    /// No signature header: refused (401).
    Unsigned,
    /// A signature that does not match the body under our secret: refused (401).
    BadSignature,
    /// Larger than [`MAX_BODY`], declared or read: refused (413).
    TooLarge,
    /// Signed, but not a delivery the forge layer can read: refused (400).
    Malformed,
    /// Signed, but its delivery id was seen recently: not acted on again.
    Replayed,
}

impl Verdict {
    /// The HTTP status the receiver answers with: 204 for what it accepts.
    pub fn status(self) -> StatusCode {
        match self {
            Verdict::Nudge | Verdict::Ignored => StatusCode::NO_CONTENT,
            Verdict::Unsigned | Verdict::BadSignature => StatusCode::UNAUTHORIZED,
            Verdict::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Verdict::Malformed => StatusCode::BAD_REQUEST,
            Verdict::Replayed => StatusCode::CONFLICT,
        }
    }

    /// The `outcome` label of `tenantci_dispatch_webhook_deliveries_total`.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Nudge => "nudge",
            Verdict::Ignored => "ignored",
            Verdict::Unsigned => "unsigned",
            Verdict::BadSignature => "bad_signature",
            Verdict::TooLarge => "too_large",
            Verdict::Malformed => "malformed",
            Verdict::Replayed => "replayed",
        }
    }

    /// Refused deliveries, which answer with a reason (Gitea shows it in the delivery log).
    fn reason(self) -> &'static str {
        match self {
            Verdict::Nudge | Verdict::Ignored => "",
            Verdict::Unsigned => "no X-Gitea-Signature: set the webhook's secret in Gitea\n",
            Verdict::BadSignature => {
                "X-Gitea-Signature does not match: the webhook's secret differs from the dispatcher's webhook.secret_file\n"
            }
            Verdict::TooLarge => "the delivery is larger than 1 MiB\n",
            Verdict::Malformed => {
                "the body is not a workflow_job (Gitea) or workflow_job_waiting (Forgejo) delivery (JSON)\n"
            }
            Verdict::Replayed => {
                "this X-Gitea-Delivery id was received already; a delivery is acted on once (Gitea's Redeliver sends a new id)\n"
            }
        }
    }
}

/// The verdict on one delivery (pure). The signature is checked before the event or body is
/// looked at; a job is ours when every runs-on label is among `labels` (the forges' own
/// rule). Which events announce a waiting job, and where their labels are, is the forge
/// layer's (`forge::delivery`): Gitea's `workflow_job` `queued`, Forgejo's
/// `workflow_job_waiting`.
pub fn judge(
    secret: &WebhookSecret,
    event: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    labels: &[String],
) -> Verdict {
    if body.len() > MAX_BODY {
        return Verdict::TooLarge;
    }
    let Some(signature) = signature.filter(|s| !s.trim().is_empty()) else {
        return Verdict::Unsigned;
    };
    if !secret.verify(body, signature) {
        return Verdict::BadSignature;
    }
    match delivery::announced(event, body) {
        Err(_) => Verdict::Malformed,
        Ok(Announced::Waiting(runs_on)) if forge::runnable_with(&runs_on, labels) => Verdict::Nudge,
        Ok(_) => Verdict::Ignored,
    }
}

/// The runs-on labels of a delivery judged a nudge (signed, a waiting job of ours).
fn announced_labels(event: Option<&str>, body: &[u8]) -> Option<Vec<String>> {
    match delivery::announced(event, body) {
        Ok(Announced::Waiting(labels)) => Some(labels),
        _ => None,
    }
}

/// `verdict` after the replay check: a signed delivery (nudge or ignored) whose id `recent`
/// holds is [`Verdict::Replayed`]; its id is remembered otherwise. Refusals are not
/// remembered, so unsigned senders cannot push real ids out.
pub fn replay_checked(
    verdict: Verdict,
    recent: &mut RecentDeliveries,
    delivery: Option<&str>,
) -> Verdict {
    match verdict {
        Verdict::Nudge | Verdict::Ignored if !recent.first_time(delivery) => Verdict::Replayed,
        v => v,
    }
}

/// What the receiver needs.
pub struct Receiver {
    /// What deliveries are signed with (`webhook.secret_file`).
    pub secret: WebhookSecret,
    /// The registration's labels.
    pub labels: Vec<String>,
    /// Each delivery's outcome.
    pub metrics: Arc<Metrics>,
    /// Whether this instance leads (only the leader nudges).
    pub health: Arc<Health>,
    /// Wakes the scheduler (a stored permit if it is busy polling, so no nudge is lost and
    /// many become one).
    pub nudge: Arc<Notify>,
    /// Signed deliveries seen recently, by id.
    pub recent: Mutex<RecentDeliveries>,
    /// The resource classes: an announced job is told to its class's warm pool.
    pub classes: Vec<crate::sizing::class::ExecutorClass>,
    /// The classes' demand, which an announced job adds to.
    pub warm: Arc<crate::sizing::demand::WarmDemand>,
}

async fn deliver(
    State(r): State<Arc<Receiver>>,
    headers: HeaderMap,
    body: Body,
) -> impl IntoResponse {
    let header = |name: &str| {
        let forgejo = FORGEJO_HEADERS
            .iter()
            .find(|(g, _)| *g == name)
            .map(|(_, f)| *f);
        [Some(name), forgejo]
            .into_iter()
            .flatten()
            .find_map(|n| headers.get(n).and_then(|v| v.to_str().ok()))
    };
    let declared_too_large = header("content-length")
        .and_then(|n| n.parse::<usize>().ok())
        .is_some_and(|n| n > MAX_BODY);
    let bytes = if declared_too_large {
        None
    } else {
        to_bytes(body, MAX_BODY).await.ok()
    };
    let verdict = match &bytes {
        Some(bytes) => judge(
            &r.secret,
            header(EVENT_HEADER),
            header(SIGNATURE_HEADER),
            bytes,
            &r.labels,
        ),
        None => Verdict::TooLarge,
    };
    let verdict = replay_checked(
        verdict,
        &mut r.recent.lock().unwrap_or_else(|p| p.into_inner()),
        header(DELIVERY_HEADER),
    );
    let leader = r.health.leader.load(Ordering::SeqCst);
    if verdict == Verdict::Nudge && leader {
        r.nudge.notify_one();
        let labels = bytes
            .as_deref()
            .and_then(|b| announced_labels(header(EVENT_HEADER), b));
        if let Some(Ok(Some(c))) = labels.map(|l| crate::sizing::class::pick(&r.classes, &l)) {
            r.warm.announced(&c.name);
        }
    }
    // A standby's nudge is counted apart: it shows deliveries reach every replica.
    let outcome = if verdict == Verdict::Nudge && !leader {
        "standby"
    } else {
        verdict.label()
    };
    r.metrics.webhook(outcome);
    match verdict {
        Verdict::Nudge | Verdict::Ignored => {
            tracing::debug!(outcome = verdict.label(), leader, "webhook delivery")
        }
        _ => tracing::warn!(
            outcome = verdict.label(),
            delivery = header(DELIVERY_HEADER).unwrap_or("-"),
            "webhook delivery refused (answered {}); nothing is claimed for it",
            verdict.status()
        ),
    }
    (verdict.status(), verdict.reason())
}

/// `POST` [`PATH`] to the receiver, with no body limit but its own ([`MAX_BODY`]).
pub fn router(receiver: Arc<Receiver>) -> Router {
    Router::new()
        .route(PATH, post(deliver))
        // Our own bound (to_bytes) applies; axum's default 2 MiB limit would answer first.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(receiver)
}

/// Connections open at once. Gitea delivers from a small worker pool, so a few are real
/// deliveries; the bound (with `webhook.header_read_timeout`) is what a flood of slow or
/// half-sent requests can hold.
pub const MAX_CONNECTIONS: usize = 512;
/// After the drain starts: deliveries in flight are answered within this, or dropped (a
/// lost delivery costs latency, never a job: polling finds the job).
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The receiver's server bounds: `header_read_timeout` from `webhook.header_read_timeout`.
pub fn bounds(header_read_timeout: std::time::Duration) -> Bounds {
    Bounds {
        header_read_timeout,
        grace: SHUTDOWN_GRACE,
        max_connections: MAX_CONNECTIONS,
    }
}

/// Serves until `stop` resolves, with every wait bounded (`http1`: the executor proxy's
/// server too): a client that does not finish its headers within the bounds' timeout is
/// disconnected, and at most [`MAX_CONNECTIONS`] are open at once.
pub async fn serve(
    listener: TcpListener,
    receiver: Arc<Receiver>,
    bounds: Bounds,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Stopped {
    let stopped = http1::serve(listener, router(receiver), bounds, stop).await;
    if let Stopped::GraceExpired { open } = stopped {
        tracing::warn!(
            open,
            grace = ?bounds.grace,
            "webhook receiver: deliveries still open after the shutdown grace are dropped (Gitea records them as failed; polling finds their jobs)"
        );
    }
    stopped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> Vec<String> {
        vec!["self-hosted".into(), "pod".into()]
    }

    fn queued(runs_on: &[&str]) -> Vec<u8> {
        serde_json::json!({"action": "queued", "workflow_job": {"id": 1, "labels": runs_on}})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn a_signed_queued_job_for_our_labels_nudges() {
        let s = WebhookSecret::new("hook-secret");
        let body = queued(&["pod"]);
        let sig = s.sign(&body);
        let j = |event, sig: Option<&str>, body: &[u8]| judge(&s, event, sig, body, &labels());
        assert_eq!(j(Some("workflow_job"), Some(&sig), &body), Verdict::Nudge);
        assert_eq!(
            j(Some("workflow_job"), Some(&sig.to_uppercase()), &body),
            Verdict::Nudge,
            "hex in either case"
        );
        // Refusals, before anything in the body counts.
        assert_eq!(j(Some("workflow_job"), None, &body), Verdict::Unsigned);
        assert_eq!(j(Some("workflow_job"), Some(""), &body), Verdict::Unsigned);
        let other = WebhookSecret::new("other").sign(&body);
        assert_eq!(
            j(Some("workflow_job"), Some(&other), &body),
            Verdict::BadSignature
        );
        assert_eq!(
            j(Some("workflow_job"), Some("zz"), &body),
            Verdict::BadSignature
        );
        let mut tampered = body.clone();
        tampered.push(b' ');
        assert_eq!(
            j(Some("workflow_job"), Some(&sig), &tampered),
            Verdict::BadSignature
        );
        let big = vec![b'x'; MAX_BODY + 1];
        assert_eq!(
            j(Some("workflow_job"), Some(&s.sign(&big)), &big),
            Verdict::TooLarge
        );
        let junk = b"{not json";
        assert_eq!(
            j(Some("workflow_job"), Some(&s.sign(junk)), junk),
            Verdict::Malformed
        );
    }

    #[test]
    fn other_events_actions_and_labels_are_ignored() {
        let s = WebhookSecret::new("k");
        let j = |event, body: Vec<u8>| judge(&s, event, Some(&s.sign(&body)), &body, &labels());
        assert_eq!(j(Some("push"), b"{}".to_vec()), Verdict::Ignored);
        assert_eq!(j(None, queued(&["pod"])), Verdict::Ignored);
        assert_eq!(
            j(Some("workflow_job"), queued(&["pod", "gpu"])),
            Verdict::Ignored,
            "a label we do not serve"
        );
        let done = serde_json::json!({"action": "completed", "workflow_job": {"labels": ["pod"]}});
        assert_eq!(
            j(Some("workflow_job"), done.to_string().into_bytes()),
            Verdict::Ignored
        );
    }

    #[test]
    fn forgejo_s_waiting_event_nudges_for_our_labels() {
        let s = WebhookSecret::new("k");
        let j = |event, body: serde_json::Value| {
            let body = body.to_string().into_bytes();
            judge(&s, event, Some(&s.sign(&body)), &body, &labels())
        };
        let waiting = |runs_on: &[&str]| serde_json::json!({"action": "new_attempt", "job": {"id": 4, "runs_on": runs_on, "status": "waiting"}, "run": {"id": 1}, "repository": {"id": 2}});
        assert_eq!(
            j(Some("workflow_job_waiting"), waiting(&["pod"])),
            Verdict::Nudge
        );
        assert_eq!(
            j(Some("workflow_job_waiting"), waiting(&["gpu"])),
            Verdict::Ignored
        );
        assert_eq!(
            j(Some("workflow_job_running"), waiting(&["pod"])),
            Verdict::Ignored
        );
        assert_eq!(
            j(Some("workflow_job_waiting"), serde_json::json!({"job": 1})),
            Verdict::Malformed
        );
    }

    #[test]
    fn a_signed_delivery_seen_before_is_a_replay_and_a_refusal_is_not_remembered() {
        let mut recent = RecentDeliveries::default();
        let mut check = |v, id| replay_checked(v, &mut recent, Some(id));
        assert_eq!(check(Verdict::BadSignature, "d1"), Verdict::BadSignature);
        assert_eq!(
            check(Verdict::Nudge, "d1"),
            Verdict::Nudge,
            "refusals are not remembered"
        );
        assert_eq!(check(Verdict::Nudge, "d1"), Verdict::Replayed);
        assert_eq!(check(Verdict::Ignored, "d1"), Verdict::Replayed);
        assert_eq!(check(Verdict::Ignored, "d2"), Verdict::Ignored);
        assert_eq!(check(Verdict::Nudge, "d2"), Verdict::Replayed);
        assert_eq!(check(Verdict::Unsigned, "d2"), Verdict::Unsigned);
        assert_eq!(Verdict::Replayed.status(), StatusCode::CONFLICT);
        assert!(Verdict::Replayed.reason().contains("X-Gitea-Delivery"));
    }

    #[test]
    fn the_signature_is_gitea_s_hex_hmac_sha256() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        assert_eq!(
            WebhookSecret::new("Jefe").sign(b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert!(!format!("{:?}", WebhookSecret::new("Jefe")).contains("Jefe"));
    }
}
