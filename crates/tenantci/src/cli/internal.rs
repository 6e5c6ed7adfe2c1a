//! `tenantci internal ...`: fixed environment interfaces, so the runbook's commands work with
//! the binary name swapped.

use std::path::PathBuf;

use clap::Subcommand;

use tenantci_core::pki::KeyType;
use tenantci_core::{Error, Result};
use tenantci_runner::credential::{self, MintRequest};

const PREFIX: &str = "SOCIALWEB_TENANTCREDENTIAL_";

#[derive(Debug, Subcommand)]
pub enum InternalCommand {
    /// Mint a runner credential from SOCIALWEB_TENANTCREDENTIAL_* variables only (the runbook's
    /// interface): STATE_DIR, CLUSTER, SERVER, COMMON_NAME, ORGANIZATIONS (comma-separated),
    /// OUT_DIR, VALID_FOR (optional, default 720h). Same checks and files as `credential mint`.
    Tenantcredential,
}

pub async fn run(cmd: InternalCommand) -> Result<i32> {
    match cmd {
        InternalCommand::Tenantcredential => {
            let request = request_from_env(|k| std::env::var(k).ok())?;
            let hand_back = credential::mint(&request)?;
            super::credential::print_hand_back(&hand_back, false)?;
            Ok(0)
        }
    }
}

/// Builds the request from the runbook's variables; `get` is the environment (a parameter so
/// the mapping is unit-tested without touching the process environment).
fn request_from_env(get: impl Fn(&str) -> Option<String>) -> Result<MintRequest> {
    let var = |name: &str| get(&format!("{PREFIX}{name}")).filter(|v| !v.is_empty());
    let required = |name: &str, example: &str| {
        var(name).ok_or_else(|| {
            Error::bad_input(format!("{PREFIX}{name} is not set"))
                .hint(format!("set it, e.g. {PREFIX}{name}={example}"))
        })
    };
    let ca = super::credential::ca_source(
        var("STATE_DIR").map(PathBuf::from),
        var("CLUSTER"),
        None,
        None,
        None,
    )?;
    Ok(MintRequest {
        ca,
        server: required("SERVER", "https://127.0.0.1:6443")?,
        common_name: required("COMMON_NAME", "gitlab-runner")?,
        organizations: required("ORGANIZATIONS", "gitlab-runner")?
            .split(',')
            .map(|s| s.to_string())
            .collect(),
        out_dir: PathBuf::from(required("OUT_DIR", "/etc/gitlab-runner/tenant-ci")?),
        valid_for: var("VALID_FOR"),
        key_type: KeyType::EcdsaP256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (format!("{PREFIX}{k}"), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn maps_the_runbook_variables() {
        let req = request_from_env(env(&[
            ("STATE_DIR", "/var/lib/socialweb"),
            ("CLUSTER", "ci"),
            ("SERVER", "https://127.0.0.1:1"),
            ("COMMON_NAME", "gitlab-runner"),
            ("ORGANIZATIONS", "gitlab-runner,ci"),
            ("OUT_DIR", "/etc/gitlab-runner/tenant-ci"),
        ]))
        .unwrap();
        assert_eq!(req.organizations, vec!["gitlab-runner", "ci"]);
        assert_eq!(req.valid_for, None);
    }

    #[test]
    fn names_the_missing_variable() {
        let e = request_from_env(env(&[("STATE_DIR", "/s"), ("CLUSTER", "ci")])).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.message().contains("SOCIALWEB_TENANTCREDENTIAL_SERVER"),
            "{}",
            e.message()
        );
    }
}
