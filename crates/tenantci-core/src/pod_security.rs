//! The Pod Security Standards' `restricted` profile (which includes `baseline`), as
//! kube-apiserver's PodSecurity admission applies it to a Pod spec under
//! `pod-security.kubernetes.io/enforce: restricted` (k8s.io/pod-security-admission, policy
//! version 1.32; the rules are those of kubernetes.io/docs/concepts/security/pod-security-standards).
//!
//! [`restricted`] returns every violation, each naming its check as the admission does
//! (`allowPrivilegeEscalation != false`, ...), so a test can prove that every Pod tenantci
//! creates (executor, pause, dispatcher) is admitted in a namespace that enforces it.

use k8s_openapi::api::core::v1::{Container, PodSpec, SeccompProfile, SecurityContext};

/// Volume types `restricted` allows.
const VOLUME_TYPES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// Sysctls `baseline` allows.
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// Every container of the spec (init, regular, ephemeral), with its name.
fn containers(spec: &PodSpec) -> Vec<(&str, Option<&SecurityContext>, &Container)> {
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c| (c.name.as_str(), c.security_context.as_ref(), c))
        .collect()
}

/// The violations of `restricted` in `spec`; empty: admitted.
pub fn restricted(spec: &PodSpec) -> Vec<String> {
    let mut v = baseline(spec);
    let pod = spec.security_context.as_ref();
    let all = containers(spec);
    for vol in spec.volumes.iter().flatten() {
        let json = serde_json::to_value(vol).unwrap_or_default();
        let kinds: Vec<&String> = json
            .as_object()
            .map(|o| o.keys().filter(|k| *k != "name").collect())
            .unwrap_or_default();
        if let Some(bad) = kinds.iter().find(|k| !VOLUME_TYPES.contains(&k.as_str())) {
            v.push(format!(
                "restricted volume types: volume {} uses {bad}",
                vol.name
            ));
        }
    }
    for (name, sc, _) in &all {
        if sc.and_then(|s| s.allow_privilege_escalation) != Some(false) {
            v.push(format!(
                "allowPrivilegeEscalation != false: container {name}"
            ));
        }
        let caps = sc.and_then(|s| s.capabilities.as_ref());
        let drops_all = caps
            .and_then(|c| c.drop.as_ref())
            .is_some_and(|d| d.iter().any(|x| x == "ALL"));
        if !drops_all {
            v.push(format!(
                "unrestricted capabilities: container {name} does not drop ALL"
            ));
        }
        if let Some(add) = caps.and_then(|c| c.add.as_ref())
            && add.iter().any(|a| a != "NET_BIND_SERVICE")
        {
            v.push(format!(
                "unrestricted capabilities: container {name} adds {add:?}"
            ));
        }
        let non_root = sc
            .and_then(|s| s.run_as_non_root)
            .or(pod.and_then(|p| p.run_as_non_root));
        if non_root != Some(true) {
            v.push(format!("runAsNonRoot != true: container {name}"));
        }
        if sc.and_then(|s| s.run_as_user) == Some(0) {
            v.push(format!("runAsUser=0: container {name}"));
        }
        let seccomp = sc
            .and_then(|s| s.seccomp_profile.as_ref())
            .or(pod.and_then(|p| p.seccomp_profile.as_ref()));
        if !seccomp.is_some_and(confined) {
            v.push(format!(
                "seccompProfile: container {name} must be RuntimeDefault or Localhost"
            ));
        }
    }
    if pod.and_then(|p| p.run_as_user) == Some(0) {
        v.push("runAsUser=0: the Pod".into());
    }
    v
}

fn confined(p: &SeccompProfile) -> bool {
    p.type_ == "RuntimeDefault" || p.type_ == "Localhost"
}

/// `baseline`'s checks (part of `restricted`).
fn baseline(spec: &PodSpec) -> Vec<String> {
    let mut v = Vec::new();
    for (flag, on) in [
        ("hostNetwork", spec.host_network),
        ("hostPID", spec.host_pid),
        ("hostIPC", spec.host_ipc),
    ] {
        if on == Some(true) {
            v.push(format!("host namespaces: {flag}=true"));
        }
    }
    if let Some(sysctls) = spec
        .security_context
        .as_ref()
        .and_then(|p| p.sysctls.as_ref())
        && let Some(bad) = sysctls
            .iter()
            .find(|s| !SAFE_SYSCTLS.contains(&s.name.as_str()))
    {
        v.push(format!("forbidden sysctls: {}", bad.name));
    }
    let pod_seccomp = spec
        .security_context
        .as_ref()
        .and_then(|p| p.seccomp_profile.as_ref());
    if pod_seccomp.is_some_and(|p| p.type_ == "Unconfined") {
        v.push("seccompProfile: the Pod is Unconfined".into());
    }
    for vol in spec.volumes.iter().flatten() {
        if vol.host_path.is_some() {
            v.push(format!("hostPath volumes: {}", vol.name));
        }
    }
    for (name, sc, c) in containers(spec) {
        if sc.and_then(|s| s.privileged) == Some(true) {
            v.push(format!("privileged: container {name}"));
        }
        if sc
            .and_then(|s| s.proc_mount.as_deref())
            .is_some_and(|m| m != "Default")
        {
            v.push(format!("procMount: container {name}"));
        }
        if sc
            .and_then(|s| s.seccomp_profile.as_ref())
            .is_some_and(|p| p.type_ == "Unconfined")
        {
            v.push(format!("seccompProfile: container {name} is Unconfined"));
        }
        if sc
            .and_then(|s| s.app_armor_profile.as_ref())
            .is_some_and(|p| p.type_ == "Unconfined")
        {
            v.push(format!("appArmorProfile: container {name} is Unconfined"));
        }
        if sc
            .and_then(|s| s.se_linux_options.as_ref())
            .is_some_and(|o| o.user.is_some() || o.role.is_some())
        {
            v.push(format!(
                "seLinuxOptions: container {name} sets user or role"
            ));
        }
        let host_port = c
            .ports
            .iter()
            .flatten()
            .any(|p| p.host_port.is_some_and(|h| h != 0));
        if host_port {
            v.push(format!("hostPort: container {name}"));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> PodSpec {
        serde_json::from_value(json).unwrap()
    }

    fn locked() -> serde_json::Value {
        serde_json::json!({
            "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]},
        })
    }

    #[test]
    fn a_locked_down_pod_passes_and_each_loosening_is_named() {
        let good = serde_json::json!({
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000,
                "seccompProfile": {"type": "RuntimeDefault"}},
            "initContainers": [{"name": "sidecar", "securityContext": locked()}],
            "containers": [{"name": "main", "securityContext": locked()}],
            "volumes": [{"name": "s", "secret": {"secretName": "x"}},
                        {"name": "c", "csi": {"driver": "csi.spiffe.io"}}],
        });
        assert_eq!(restricted(&spec(good.clone())), Vec::<String>::new());
        let cases: &[(&str, serde_json::Value, &str)] = &[
            (
                "/securityContext/seccompProfile",
                serde_json::Value::Null,
                "seccompProfile",
            ),
            (
                "/securityContext/runAsNonRoot",
                serde_json::Value::Null,
                "runAsNonRoot",
            ),
            ("/securityContext/runAsUser", 0.into(), "runAsUser=0"),
            (
                "/initContainers/0/securityContext/allowPrivilegeEscalation",
                true.into(),
                "allowPrivilegeEscalation != false: container sidecar",
            ),
            (
                "/containers/0/securityContext/capabilities",
                serde_json::json!({"drop": ["ALL"], "add": ["SYS_ADMIN"]}),
                "adds",
            ),
            (
                "/containers/0/securityContext/capabilities",
                serde_json::Value::Null,
                "drop ALL",
            ),
            (
                "/containers/0/securityContext/privileged",
                true.into(),
                "privileged",
            ),
            (
                "/volumes/1",
                serde_json::json!({"name": "h", "hostPath": {"path": "/"}}),
                "hostPath",
            ),
            ("/hostNetwork", true.into(), "hostNetwork"),
        ];
        for (pointer, value, needle) in cases {
            let mut j = good.clone();
            let (parent, key) = pointer.rsplit_once('/').unwrap();
            let target = j.pointer_mut(parent).unwrap();
            match target {
                serde_json::Value::Array(a) => a[key.parse::<usize>().unwrap()] = value.clone(),
                serde_json::Value::Object(o) => {
                    if value.is_null() {
                        o.remove(key);
                    } else {
                        o.insert(key.to_string(), value.clone());
                    }
                }
                _ => unreachable!(),
            }
            let v = restricted(&spec(j));
            assert!(v.iter().any(|m| m.contains(needle)), "{pointer}: {v:?}");
        }
    }
}
