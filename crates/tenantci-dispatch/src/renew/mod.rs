//! `tenantci dispatch renew`: the facade certificate and (gateway path) the dispatcher's
//! client credential renewed before they expire, while `dispatch run` keeps running.
//!
//! Phase one changes nothing: the config, what is due (`plan`: a third or less of its life
//! left, `--within`, `--force`), and for each due certificate the new one issued in memory
//! and proven: the facade pair checked as `dispatch run` checks it, the credential used for
//! the access reviews at the apiserver. Any refusal there is exit 2 (bad input) or 3 (the
//! apiserver did not answer) with every file as it was. Phase two writes the new files (0600,
//! atomically). A running dispatcher takes them up at its next check (every minute, or at
//! SIGHUP: `run::reload`); new facade connections and later apiserver requests use them,
//! tasks in progress are not touched. Nothing due: says so, exit 0.
//!
//! Why a command and not something inside `dispatch run`: the facade CA key and the
//! gateway's ClientCA key are the two keys that can impersonate the facade and the
//! dispatcher; `dispatch run` has no need to hold them, and in the cluster it must not (the
//! dispatcher's Secret shares a namespace with untrusted jobs). The host runs this from a
//! systemd timer (packaging/systemd/tenantci-dispatch-renew@.*); in the cluster it runs on
//! the administrator's host and the Secret is updated (docs/runbooks/gitea-dispatcher.md).

pub mod credential;
pub mod facade;
pub mod plan;

use std::path::PathBuf;

use serde::Serialize;
use time::OffsetDateTime;

use crate::config::Config;
use tenantci_core::Result;
use tenantci_core::pki::inspect::rfc3339;
use tenantci_runner::steps::{Outcome, Step, Steps};

pub use credential::Gateway;
pub use plan::Policy;

/// What the command was given.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The dispatcher config (`--config`).
    pub config: PathBuf,
    /// Where the gateway's ClientCA is; None: a due credential is refused, not renewed.
    pub gateway: Option<Gateway>,
    /// `--within` and `--force`.
    pub policy: Policy,
}

/// `-o json`'s shape (docs/cli.md).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HandBack {
    /// The config renewed for.
    pub config: PathBuf,
    /// Whether any file was replaced.
    pub renewed: bool,
    /// One line per certificate: `facade-cert`, `credential`.
    pub steps: Vec<Step>,
}

/// Runs the renewal; `on_step` sees each line (`facade-cert`, `credential`) as it completes.
pub async fn run(i: &Inputs, mut on_step: impl FnMut(&Step)) -> Result<HandBack> {
    let cfg = Config::load(&i.config)?;
    let now = OffsetDateTime::now_utc();
    // Phase one: both decided, issued and proven before either is written.
    let facade = facade::prepare(&i.config, &cfg, i.policy, now)?;
    let credential = credential::prepare(&cfg, i.gateway.as_ref(), i.policy, now).await?;
    // Phase two.
    let mut steps = Steps::new(&mut on_step, false);
    let mut renewed = false;
    let cert_file = cfg.facade.cert_file.display();
    match &facade {
        facade::Facade::Keep { until } => steps.record(
            "facade-cert",
            Outcome::Kept,
            format!("{cert_file} (valid until {}; not due)", rfc3339(*until)),
        ),
        facade::Facade::Renew { why, issued } => {
            facade::write(&cfg, issued)?;
            renewed = true;
            let detail = format!(
                "{cert_file} from the facade CA, valid until {}; {why}",
                rfc3339(issued.not_after)
            );
            steps.record("facade-cert", Outcome::Reissued, detail);
        }
    }
    match &credential {
        credential::Credential::None => steps.record(
            "credential",
            Outcome::Skipped,
            "none of its own: in the cluster the ServiceAccount token is the credential, and the kubelet renews it",
        ),
        credential::Credential::Keep { until } => steps.record(
            "credential",
            Outcome::Kept,
            format!("valid until {}; not due", rfc3339(*until)),
        ),
        credential::Credential::Renew { why, renewed: r } => {
            credential::write(r, now)?;
            renewed = true;
            let detail = format!(
                "{} valid until {} (the access reviews passed with it); {why}",
                r.files.cert.display(),
                credential::until(r)
            );
            steps.record("credential", Outcome::Rotated, detail);
        }
    }
    Ok(HandBack {
        config: i.config.clone(),
        renewed,
        steps: steps.into_vec(),
    })
}
