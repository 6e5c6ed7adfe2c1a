//! The `[vm]` section of the dispatcher config: where OpenSandbox's Lifecycle API is, the
//! file holding its key, and what each sandbox gets (image by digest, CPU and memory limits,
//! a timeout covering Gitea's 3 h limit). Absent: the VM backend is off and `vm` is not
//! registered at Gitea. Pure: reading the key file and reaching the API happen in `init` and
//! `run`.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use tenantci_core::duration::GoDuration;

/// Gitea stops a task that ran this long ("endless task"); a sandbox must outlive it so the
/// runner can report the end, not be cut off before.
pub const GITEA_TASK_LIMIT: Duration = Duration::from_secs(3 * 3600);

/// The label that routes a job to this backend.
pub const LABEL: &str = "vm";

/// The `[vm]` section: the OpenSandbox server and what each sandbox gets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vm {
    /// The OpenSandbox server root (the Lifecycle API is under `/v1`).
    pub opensandbox_url: String,
    /// The Lifecycle API key (sent as OPEN-SANDBOX-API-KEY), 0600; absolute, the operator's.
    pub api_key_file: PathBuf,
    /// The executor image for sandboxes, pinned by digest; absent: `executor.image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Each sandbox's CPU limit (Kubernetes quantity).
    #[serde(default = "defaults::cpu")]
    pub cpu: String,
    /// Each sandbox's memory limit (Kubernetes quantity).
    #[serde(default = "defaults::memory")]
    pub memory: String,
    /// Each sandbox's lifetime; at least Gitea's 3 h task limit.
    #[serde(default = "defaults::timeout")]
    pub timeout: GoDuration,
}

/// The values of the keys `[vm]` may leave out.
pub mod defaults {
    use std::time::Duration;

    use tenantci_core::duration::GoDuration;

    /// Two CPUs per sandbox.
    pub fn cpu() -> String {
        "2".into()
    }
    /// 4 GiB per sandbox.
    pub fn memory() -> String {
        "4Gi".into()
    }
    /// 3h10m: Gitea ends a task at 3 h; ten more minutes let the runner send its final
    /// reports and the dispatcher delete the sandbox itself.
    pub fn timeout() -> GoDuration {
        Duration::from_secs(3 * 3600 + 600).into()
    }
}

impl Vm {
    /// Checks what `run` would trip over; the message follows "the config ... "
    /// (`Config::validate`).
    pub fn validate(&self) -> Result<(), String> {
        let scheme = self.opensandbox_url.split_once("://").map(|(s, _)| s);
        let host = self
            .opensandbox_url
            .split_once("://")
            .map(|(_, rest)| rest.split(['/', '?']).next().unwrap_or_default())
            .unwrap_or_default();
        if !matches!(scheme, Some("http" | "https")) || host.is_empty() {
            return Err(format!(
                "has vm.opensandbox_url = `{}`, which is not an http(s):// URL with a host",
                self.opensandbox_url
            ));
        }
        if let Some(image) = &self.image {
            crate::task::spec::check_image_digest(image)
                .map_err(|e| format!("has vm.image: {}", e.message()))?;
        }
        for (key, v) in [("vm.cpu", &self.cpu), ("vm.memory", &self.memory)] {
            if tenantci_core::quantity::parse_resource(v).is_none_or(|m| m.0 <= 0) {
                return Err(format!(
                    "has {key} = `{v}`, which is not a positive quantity (e.g. `2`, `4Gi`)"
                ));
            }
        }
        if self.timeout.get() < GITEA_TASK_LIMIT {
            return Err(format!(
                "has vm.timeout = {}, shorter than Gitea's 3h task limit (a job Gitea still runs would lose its VM)",
                self.timeout.as_str()
            ));
        }
        Ok(())
    }

    /// The timeout in whole seconds, as the Lifecycle API takes it.
    pub fn timeout_seconds(&self) -> u64 {
        self.timeout.get().as_secs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn vm() -> Vm {
        Vm {
            opensandbox_url: "https://sandbox.example".into(),
            api_key_file: "/etc/tenantci/opensandbox.key".into(),
            image: None,
            cpu: defaults::cpu(),
            memory: defaults::memory(),
            timeout: defaults::timeout(),
        }
    }

    #[test]
    fn defaults_are_valid_and_cover_gitea_s_limit() {
        vm().validate().unwrap();
        assert_eq!(vm().timeout.as_str(), "3h10m");
        assert_eq!(vm().timeout_seconds(), 11400);
    }

    #[test]
    fn refuses_each_bad_value_by_its_key() {
        type Spoil = fn(&mut Vm);
        let cases: [(&str, Spoil); 6] = [
            ("vm.opensandbox_url", |v| {
                v.opensandbox_url = "sandbox.example".into()
            }),
            ("vm.opensandbox_url", |v| {
                v.opensandbox_url = "ftp://x".into()
            }),
            ("vm.image", |v| v.image = Some("executor:latest".into())),
            ("vm.cpu", |v| v.cpu = "two".into()),
            ("vm.memory", |v| v.memory = "0".into()),
            ("vm.timeout", |v| v.timeout = "2h".parse().unwrap()),
        ];
        for (key, spoil) in cases {
            let mut v = vm();
            spoil(&mut v);
            let e = v.validate().unwrap_err();
            assert!(e.contains(key), "{key}: {e}");
        }
    }
}
