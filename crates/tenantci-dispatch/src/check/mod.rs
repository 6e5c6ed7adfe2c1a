//! `tenantci dispatch check`: what this release needs that a live installation lacks, one
//! [`Need`] each with the command that fixes it, for before and after an upgrade
//! (docs/runbooks/upgrading.md). Changes nothing: it reads the config, tries the NATS users'
//! grants as those users with requests that store nothing ([`probe`]), reads the consumers
//! and buckets, and asks the apiserver what the dispatcher's credential may do
//! (SelfSubjectAccessReviews). Run it where `dispatch run` runs, with its config: it uses the
//! same credentials (in the cluster: `kubectl exec` into the Deployment).
//!
//! Does not fix anything (each need names the command that does), and does not read the
//! stored records (a newer release's are reported by `dispatch run` itself).

pub mod nats;
pub mod probe;

use std::path::Path;

use serde::Serialize;

use crate::config::Config;
use crate::provision::access::{self, Namespaces};
use tenantci_core::{Error, ErrorKind, Result};
use tenantci_runner::tenant::access::Reviewer;

/// One thing this release needs that the installation lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Need {
    /// What is missing, in one sentence.
    pub what: String,
    /// The command (or edit) that adds it.
    pub fix: String,
}

/// Everything the installation that `config` describes lacks; empty when nothing. A config
/// that cannot be read, or is not TOML, is bad input (the error); one this release refuses
/// (a key renamed or removed) is a need, and nothing else is checked until it is fixed.
pub async fn check(config: &Path) -> Result<Vec<Need>> {
    let text = tenantci_core::input::read_text(
        "the dispatcher config",
        config,
        tenantci_core::input::MAX_CONFIG,
    )?;
    if let Err(e) = text.parse::<toml_edit::DocumentMut>() {
        return Err(Error::bad_input(format!(
            "the dispatcher config {} is not valid TOML: {}",
            config.display(),
            e.message()
        ))
        .hint("pass the config `dispatch run` uses (--config)"));
    }
    let cfg = match Config::load(config) {
        Ok(cfg) => cfg,
        Err(e) if e.kind() == ErrorKind::BadInput => {
            return Ok(vec![Need {
                what: e.message().to_string(),
                fix: e
                    .hint_text()
                    .unwrap_or("edit the config as docs/runbooks/upgrading.md says")
                    .to_string(),
            }]);
        }
        Err(e) => return Err(e),
    };
    let mut needs = nats::grants(&cfg).await?;
    needs.extend(nats::topology(&cfg).await?);
    needs.extend(rbac(&cfg).await?);
    Ok(needs)
}

/// What the dispatcher's credential may not do that this release needs, as `dispatch init`
/// verifies it (what it may and must not is `dispatch init`'s to refuse, not an upgrade's).
async fn rbac(cfg: &Config) -> Result<Vec<Need>> {
    let client = match &cfg.cluster.kubeconfig {
        Some(path) => tenantci_core::kube_client::from_kubeconfig(path).await?,
        None => {
            tenantci_core::tls::ensure_crypto_provider();
            kube::Client::try_default().await.map_err(|e| {
                Error::bad_input("no in-cluster or KUBECONFIG credentials").caused_by(e)
                    .hint("run the check where `dispatch run` runs (in the cluster: kubectl exec into its Pod), or set cluster.kubeconfig")
            })?
        }
    };
    let ns = Namespaces::of(&cfg.cluster);
    let bad = access::missing(&Reviewer::Own(&client), ns, cfg.identity.is_some()).await?;
    Ok(bad
        .into_iter()
        .map(|e| Need {
            what: e.message().to_string(),
            fix: e.hint_text().unwrap_or_default().to_string(),
        })
        .collect())
}

/// The lines `dispatch check` prints: one per need, `<what>; fix: <command>` (pure).
pub fn render(needs: &[Need]) -> String {
    if needs.is_empty() {
        return "nothing needed: this installation has what this release needs\n".to_string();
    }
    needs
        .iter()
        .map(|n| format!("{}; fix: {}\n", n.what, n.fix))
        .collect()
}
