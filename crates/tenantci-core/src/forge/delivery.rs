//! What a forge's webhook delivery says about a waiting job, for both forges (pure): the one
//! place that knows their event names and payload shapes (docs/forgejo-protocol.md).
//!
//! - Gitea 1.24+: event `workflow_job`, `action` = `queued` for a job that waits for a runner,
//!   its runs-on labels at `workflow_job.labels`.
//! - Forgejo: one event per job state; `workflow_job_waiting` for a job that waits (a new
//!   attempt or a job unblocked), its runs-on labels at `job.runs_on` (the payload's `job` is
//!   an `ActionRunJob`, as the waiting-jobs API lists it).
//!
//! Either forge also sends its deliveries' `X-Gitea-*` headers (Forgejo adds `X-Forgejo-*`
//! copies), so the receiver reads the event and signature from those.

use serde::Deserialize;

/// Gitea's event for job state changes.
pub const GITEA_EVENT: &str = "workflow_job";
/// Forgejo's event for a job that waits for a runner.
pub const FORGEJO_WAITING_EVENT: &str = "workflow_job_waiting";

/// What a signed delivery announces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Announced {
    /// A job waits for a runner with these runs-on labels.
    Waiting(Vec<String>),
    /// Another event or another state: nothing to do.
    Other,
}

#[derive(Deserialize)]
struct GiteaDelivery {
    action: String,
    workflow_job: GiteaJob,
}

#[derive(Deserialize)]
struct GiteaJob {
    #[serde(default)]
    labels: Vec<String>,
}

#[derive(Deserialize)]
struct ForgejoDelivery {
    job: ForgejoJob,
}

#[derive(Deserialize)]
struct ForgejoJob {
    #[serde(default)]
    runs_on: Vec<String>,
}

/// The announcement of a delivery of `event` with `body`; `Err` when the body of an event we
/// read does not have its forge's shape.
pub fn announced(event: Option<&str>, body: &[u8]) -> Result<Announced, serde_json::Error> {
    match event {
        Some(GITEA_EVENT) => {
            let d: GiteaDelivery = serde_json::from_slice(body)?;
            Ok(if d.action == "queued" {
                Announced::Waiting(d.workflow_job.labels)
            } else {
                Announced::Other
            })
        }
        Some(FORGEJO_WAITING_EVENT) => {
            let d: ForgejoDelivery = serde_json::from_slice(body)?;
            Ok(Announced::Waiting(d.job.runs_on))
        }
        _ => Ok(Announced::Other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forges_announce_a_waiting_job_with_its_labels() {
        let gitea = br#"{"action":"queued","workflow_job":{"id":1,"labels":["pod"]}}"#;
        assert_eq!(
            announced(Some("workflow_job"), gitea).unwrap(),
            Announced::Waiting(vec!["pod".into()])
        );
        let done = br#"{"action":"completed","workflow_job":{"labels":["pod"]}}"#;
        assert_eq!(
            announced(Some("workflow_job"), done).unwrap(),
            Announced::Other
        );
        let forgejo = br#"{"action":"new_attempt","job":{"id":9,"runs_on":["docker"],"status":"waiting","handle":"h"},"run":{"id":3},"repository":{"id":62}}"#;
        assert_eq!(
            announced(Some("workflow_job_waiting"), forgejo).unwrap(),
            Announced::Waiting(vec!["docker".into()])
        );
        assert_eq!(
            announced(Some("workflow_job_running"), forgejo).unwrap(),
            Announced::Other
        );
        assert_eq!(announced(None, b"junk").unwrap(), Announced::Other);
        assert!(announced(Some("workflow_job_waiting"), b"{}").is_err());
        assert!(announced(Some("workflow_job"), b"{not json").is_err());
    }
}
