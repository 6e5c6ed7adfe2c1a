//! `dispatch init`'s part for the VM backend, pure: the `--opensandbox-*` and `--vm-*` flags
//! checked, the `[vm]` section they give, and the labels registered at Gitea. Without
//! `--opensandbox-url` the backend is off and `vm` is not registered (a `vm` job then waits
//! for a runner that has it, instead of being claimed and failed here).
//!
//! Reading the key file and reaching the API are phase one's I/O (`init::local`, `init`).

use std::path::PathBuf;

use crate::backend::vm::settings::{self, LABEL, Vm};
use tenantci_core::{Error, Result};

/// The flags as typed.
#[derive(Debug, Clone, Default)]
pub struct VmInputs {
    /// `--opensandbox-url`: the OpenSandbox server; None: the VM backend is off.
    pub opensandbox_url: Option<String>,
    /// `--opensandbox-api-key-file`: the file holding the Lifecycle API key.
    pub api_key_file: Option<PathBuf>,
    /// `--vm-image`: the sandboxes' image, pinned by digest (None: `executor.image`).
    pub image: Option<String>,
    /// `--vm-cpu`: each sandbox's CPU limit (None: the default).
    pub cpu: Option<String>,
    /// `--vm-memory`: each sandbox's memory limit (None: the default).
    pub memory: Option<String>,
    /// `--vm-timeout`: each sandbox's lifetime, a Go duration (None: the default).
    pub timeout: Option<String>,
}

/// The `[vm]` section the flags give (None: the backend is off), checked.
pub fn section(v: &VmInputs) -> Result<Option<Vm>> {
    let Some(url) = &v.opensandbox_url else {
        let stray = [
            ("--opensandbox-api-key-file", v.api_key_file.is_some()),
            ("--vm-image", v.image.is_some()),
            ("--vm-cpu", v.cpu.is_some()),
            ("--vm-memory", v.memory.is_some()),
            ("--vm-timeout", v.timeout.is_some()),
        ];
        if let Some((flag, _)) = stray.iter().find(|(_, given)| *given) {
            return Err(Error::bad_input(format!("{flag} is given without --opensandbox-url"))
                .hint("pass --opensandbox-url URL (the OpenSandbox server) to turn the VM backend on, or leave the --vm-* flags out"));
        }
        return Ok(None);
    };
    let Some(key_file) = &v.api_key_file else {
        return Err(Error::bad_input("--opensandbox-url is given without --opensandbox-api-key-file")
            .hint("pass --opensandbox-api-key-file FILE holding the Lifecycle API key (OPEN-SANDBOX-API-KEY), mode 0600"));
    };
    let api_key_file = std::path::absolute(key_file).map_err(|e| {
        Error::bad_input(format!(
            "cannot resolve --opensandbox-api-key-file `{}`",
            key_file.display()
        ))
        .caused_by(e)
    })?;
    let timeout = match &v.timeout {
        None => settings::defaults::timeout(),
        Some(t) => t.parse().map_err(|e| {
            Error::bad_input(format!("--vm-timeout `{t}` {e}"))
                .hint("pass a Go duration of at least 3h, e.g. --vm-timeout 3h10m")
        })?,
    };
    let vm = Vm {
        opensandbox_url: url.trim_end_matches('/').to_string(),
        api_key_file,
        image: v.image.clone(),
        cpu: v.cpu.clone().unwrap_or_else(settings::defaults::cpu),
        memory: v.memory.clone().unwrap_or_else(settings::defaults::memory),
        timeout,
    };
    vm.validate().map_err(|e| {
        Error::bad_input(format!("the VM backend's settings {e}"))
            .hint("fix --opensandbox-url, --vm-image (IMAGE@sha256:<64 hex>), --vm-cpu, --vm-memory or --vm-timeout (at least 3h)")
    })?;
    Ok(Some(vm))
}

/// The labels registered at Gitea: `vm` only while the backend is on. With the backend on,
/// `vm` must be among them, or no job would ever reach it.
pub fn registered_labels(labels: &[String], vm: Option<&Vm>) -> Result<Vec<String>> {
    let has_vm = labels.iter().any(|l| l.eq_ignore_ascii_case(LABEL));
    match (vm, has_vm) {
        (Some(_), false) => Err(Error::bad_input("--opensandbox-url is given but --labels has no `vm`, so no job would reach the VM backend")
            .hint("add vm to --labels, e.g. --labels self-hosted,pod,vm")),
        (Some(_), true) | (None, false) => Ok(labels.to_vec()),
        (None, true) => Ok(labels
            .iter()
            .filter(|l| !l.eq_ignore_ascii_case(LABEL))
            .cloned()
            .collect()),
    }
}

/// The init line when `--labels` asked for `vm` but the backend is off.
pub const VM_DROPPED: &str =
    "`vm` is not registered at Gitea: no --opensandbox-url (vm jobs wait for another runner)";

#[cfg(test)]
mod tests {
    use super::*;

    fn on() -> VmInputs {
        VmInputs {
            opensandbox_url: Some("https://sandbox.example/".into()),
            api_key_file: Some("/etc/tenantci/opensandbox.key".into()),
            ..Default::default()
        }
    }

    fn labels(s: &[&str]) -> Vec<String> {
        s.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn without_a_url_the_backend_is_off_and_vm_unregistered() {
        assert_eq!(section(&VmInputs::default()).unwrap(), None);
        let l = registered_labels(&labels(&["self-hosted", "pod", "vm"]), None).unwrap();
        assert_eq!(l, ["self-hosted", "pod"]);
        let stray = VmInputs {
            cpu: Some("2".into()),
            ..Default::default()
        };
        assert!(section(&stray).unwrap_err().message().contains("--vm-cpu"));
    }

    #[test]
    fn with_a_url_the_flags_give_a_checked_section() {
        let vm = section(&on()).unwrap().unwrap();
        assert_eq!(vm.opensandbox_url, "https://sandbox.example");
        assert_eq!((vm.cpu.as_str(), vm.memory.as_str()), ("2", "4Gi"));
        assert_eq!(vm.timeout.as_str(), "3h10m");
        let l = labels(&["self-hosted", "pod", "vm"]);
        assert_eq!(registered_labels(&l, Some(&vm)).unwrap(), l);
        let e = registered_labels(&labels(&["pod"]), Some(&vm)).unwrap_err();
        assert!(e.message().contains("no `vm`"), "{}", e.message());
    }

    #[test]
    fn bad_flags_are_refused_by_name() {
        let mut v = on();
        v.api_key_file = None;
        assert!(
            section(&v)
                .unwrap_err()
                .message()
                .contains("--opensandbox-api-key-file")
        );
        let mut v = on();
        v.timeout = Some("1h".into());
        assert!(section(&v).unwrap_err().message().contains("vm.timeout"));
        let mut v = on();
        v.timeout = Some("3 hours".into());
        assert!(section(&v).unwrap_err().message().contains("--vm-timeout"));
        let mut v = on();
        v.image = Some("executor:latest".into());
        assert!(section(&v).unwrap_err().message().contains("vm.image"));
    }
}
