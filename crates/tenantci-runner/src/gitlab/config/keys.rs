//! THE list of gitlab-runner config.toml keys tenantci knows, with their TOML types.
//!
//! gitlab-runner decodes config.toml with BurntSushi/toml and silently ignores unknown keys, so
//! a misspelt key would simply have no effect. Everything tenantci writes comes from these
//! lists ([`super::entry`] names keys only through the constants below), and [`check_document`]
//! checks a whole file against them (the runner-configs/ example is tested with it).
//! Sub-tables we never write (`[runners.cache]`, `affinity`, `volumes`, ...) are listed as
//! [`KeyType::OpaqueTable`]: their name is checked, their contents are not. The pause-pod
//! `autoscaler` (GitLab Runner 18.10+) is listed key by key, since tenantci writes it.

/// The TOML type gitlab-runner decodes a key into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// A string.
    Str,
    /// An integer.
    Int,
    /// A float; an integer decodes into Go's float64 as well (`scale_factor`).
    Float,
    /// A boolean.
    Bool,
    /// A TOML offset datetime (`token_expires_at = 0001-01-01T00:00:00Z`).
    Datetime,
    /// An array of strings.
    StrArray,
    /// An array of integers.
    IntArray,
    /// A string or an array of strings (`pull_policy`).
    StrOrArray,
    /// A table of string values (`node_selector`, `pod_labels`).
    StrTable,
    /// A table of bool values (`feature_flags`).
    BoolTable,
    /// A table whose keys the section lists.
    Table(Section),
    /// An array of tables whose keys the section lists (`[[runners]]`).
    TableArray(Section),
    /// A table or array of tables tenantci does not look inside.
    OpaqueTable,
}

/// A table of config.toml with its own key list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The top level of the file.
    TopLevel,
    /// `[session_server]`.
    SessionServer,
    /// One `[[runners]]` entry.
    Runner,
    /// `[runners.kubernetes]`.
    Kubernetes,
    /// `[runners.kubernetes.pod_security_context]`.
    PodSecurityContext,
    /// `[runners.kubernetes.autoscaler]`.
    Autoscaler,
    /// `[[runners.kubernetes.autoscaler.policy]]`.
    AutoscalerPolicy,
}

impl Section {
    /// The keys the section lists (for [`Section::Kubernetes`] without the resource keys, which
    /// [`lookup`] adds).
    pub fn keys(self) -> &'static [Key] {
        match self {
            Section::TopLevel => TOP_LEVEL_KEYS,
            Section::SessionServer => SESSION_SERVER_KEYS,
            Section::Runner => RUNNER_KEYS,
            Section::Kubernetes => KUBERNETES_KEYS,
            Section::PodSecurityContext => POD_SECURITY_CONTEXT_KEYS,
            Section::Autoscaler => AUTOSCALER_KEYS,
            Section::AutoscalerPolicy => AUTOSCALER_POLICY_KEYS,
        }
    }
}

/// One known key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The key as written in config.toml.
    pub name: &'static str,
    /// The TOML type gitlab-runner decodes it into.
    pub ty: KeyType,
}

const fn k(name: &'static str, ty: KeyType) -> Key {
    Key { name, ty }
}

use KeyType::*;

// Names tenantci writes, as constants so a typo is a compile error rather than a dead key.
/// `[[runners]]`: the runner's name; tenantci finds its entry by it.
pub const NAME: &str = "name";
/// `[[runners]]`: the GitLab URL.
pub const URL: &str = "url";
/// `[[runners]]`: the runner authentication token, or a `$VAR` reference to it.
pub const TOKEN: &str = "token";
/// `[[runners]]`: the runner's id at GitLab.
pub const ID: &str = "id";
/// `[[runners]]`: when the token was obtained (a datetime).
pub const TOKEN_OBTAINED_AT: &str = "token_obtained_at";
/// `[[runners]]`: when the token expires (a datetime; `0001-01-01T00:00:00Z` for never).
pub const TOKEN_EXPIRES_AT: &str = "token_expires_at";
/// `[[runners]]`: the CA file gitlab-runner trusts for GitLab's certificate.
pub const TLS_CA_FILE: &str = "tls-ca-file";
/// `[[runners]]`: the executor; tenantci writes `kubernetes`.
pub const EXECUTOR: &str = "executor";
/// `[[runners]]`: how many jobs the runner runs at once (0: no limit of its own).
pub const LIMIT: &str = "limit";
/// `[[runners]]`: how many job requests the runner makes to GitLab at once.
pub const REQUEST_CONCURRENCY: &str = "request_concurrency";
/// `[[runners]]`: the Kubernetes executor's table.
pub const KUBERNETES: &str = "kubernetes";
/// Top level: how many jobs all the file's runners run at once.
pub const CONCURRENT: &str = "concurrent";
/// Top level: the `[[runners]]` array.
pub const RUNNERS: &str = "runners";

/// `[runners.kubernetes]`: the apiserver's URL.
pub const HOST: &str = "host";
/// `[runners.kubernetes]`: the client certificate file.
pub const CERT_FILE: &str = "cert_file";
/// `[runners.kubernetes]`: the client certificate's key file.
pub const KEY_FILE: &str = "key_file";
/// `[runners.kubernetes]`: the CA file that verifies the apiserver.
pub const CA_FILE: &str = "ca_file";
/// `[runners.kubernetes]`: the namespace job pods run in.
pub const NAMESPACE: &str = "namespace";
/// `[runners.kubernetes]`: seconds gitlab-runner waits for a job pod to start.
pub const POLL_TIMEOUT: &str = "poll_timeout";
/// `[runners.kubernetes]`: the image of jobs that name none.
pub const IMAGE: &str = "image";
/// `[runners.kubernetes]`: the helper container's image.
pub const HELPER_IMAGE: &str = "helper_image";
/// `[runners.kubernetes]`: whether job containers run privileged (tenantci writes false).
pub const PRIVILEGED: &str = "privileged";
/// `[runners.kubernetes]`: the node labels job pods require.
pub const NODE_SELECTOR: &str = "node_selector";
/// `[runners.kubernetes]`: the taints job pods tolerate.
pub const NODE_TOLERATIONS: &str = "node_tolerations";
/// `[runners.kubernetes]`: the labels put on job pods.
pub const POD_LABELS: &str = "pod_labels";
/// `[runners.kubernetes]`: the job pods' security context table.
pub const POD_SECURITY_CONTEXT: &str = "pod_security_context";
/// `[runners.kubernetes.pod_security_context]`: the UID containers run as.
pub const RUN_AS_USER: &str = "run_as_user";
/// `[runners.kubernetes.pod_security_context]`: the GID containers run as.
pub const RUN_AS_GROUP: &str = "run_as_group";
/// `[runners.kubernetes.pod_security_context]`: the group that owns the volumes.
pub const FS_GROUP: &str = "fs_group";
/// `[runners.kubernetes.pod_security_context]`: whether root containers are refused.
pub const RUN_AS_NON_ROOT: &str = "run_as_non_root";
/// `[runners.kubernetes]`: gitlab-runner's own pause pods (Runner 18.10+).
pub const AUTOSCALER: &str = "autoscaler";
/// `[runners.kubernetes.autoscaler]`: the most pause pods (0 is unlimited).
pub const MAX_PAUSE_PODS: &str = "max_pause_pods";
/// `[runners.kubernetes.autoscaler]`: the pause pods' image.
pub const PAUSE_POD_IMAGE: &str = "pause_pod_image";
/// `[runners.kubernetes.autoscaler]`: the `[[policy]]` array.
pub const POLICY: &str = "policy";
/// `[[runners.kubernetes.autoscaler.policy]]`: how many pause pods to keep.
pub const IDLE_COUNT: &str = "idle_count";
/// `[[runners.kubernetes.autoscaler.policy]]`: how long (a Go duration) before idle pause pods are
/// scaled down.
pub const IDLE_TIME: &str = "idle_time";
/// `[[runners.kubernetes.autoscaler.policy]]`: the cron expressions during which the policy holds.
pub const PERIODS: &str = "periods";
/// `[[runners.kubernetes.autoscaler.policy]]`: pause pods to keep as a factor of the jobs running;
/// tenantci reads it, never writes it.
pub const SCALE_FACTOR: &str = "scale_factor";

/// Declares the resource keys and their `_overwrite_max_allowed` twins from one list.
macro_rules! resource_keys {
    ($($key:literal),* $(,)?) => {
        /// Resource keys of `[runners.kubernetes]` (Kubernetes quantity strings), in the order
        /// tenantci writes them.
        pub const RESOURCE_KEYS: &[&str] = &[$($key),*];
        /// The same keys with the `_overwrite_max_allowed` suffix: the ceiling for the
        /// `KUBERNETES_*` CI variables a job may set (`KUBERNETES_CPU_REQUEST`, ...).
        pub const RESOURCE_OVERWRITE_KEYS: &[&str] =
            &[$(concat!($key, "_overwrite_max_allowed")),*];
    };
}

resource_keys!(
    "cpu_request",
    "cpu_limit",
    "memory_request",
    "memory_limit",
    "ephemeral_storage_request",
    "ephemeral_storage_limit",
    "helper_cpu_request",
    "helper_cpu_limit",
    "helper_memory_request",
    "helper_memory_limit",
    "helper_ephemeral_storage_request",
    "helper_ephemeral_storage_limit",
    "service_cpu_request",
    "service_cpu_limit",
    "service_memory_request",
    "service_memory_limit",
    "service_ephemeral_storage_request",
    "service_ephemeral_storage_limit",
    "pod_cpu_request",
    "pod_cpu_limit",
    "pod_memory_request",
    "pod_memory_limit",
);

/// The suffix that turns a resource key into its CI-variable overwrite ceiling.
pub const OVERWRITE_SUFFIX: &str = "_overwrite_max_allowed";

/// Whether `key` is a resource key or a resource key's `_overwrite_max_allowed` twin.
pub fn is_resource_key(key: &str) -> bool {
    RESOURCE_KEYS.contains(&key) || RESOURCE_OVERWRITE_KEYS.contains(&key)
}

/// `[runners.kubernetes.pod_security_context]`.
pub const POD_SECURITY_CONTEXT_KEYS: &[Key] = &[
    k(FS_GROUP, Int),
    k(RUN_AS_USER, Int),
    k(RUN_AS_GROUP, Int),
    k(RUN_AS_NON_ROOT, Bool),
    k("supplemental_groups", IntArray),
    k("selinux_type", Str),
];

/// `[[runners.kubernetes.autoscaler.policy]]` (Runner 18.10+); the last policy whose cron
/// `periods` match now is used.
pub const AUTOSCALER_POLICY_KEYS: &[Key] = &[
    k(PERIODS, StrArray),
    k("timezone", Str),
    k(IDLE_COUNT, Int),
    // A Go duration; the runner waits this long before it scales pause pods down.
    k(IDLE_TIME, Str),
    k(SCALE_FACTOR, Float),
    k("scale_factor_limit", Int),
];

/// `[runners.kubernetes.autoscaler]`: pause pods the runner keeps itself (Runner 18.10+).
pub const AUTOSCALER_KEYS: &[Key] = &[
    // 0 means unlimited upstream.
    k(MAX_PAUSE_PODS, Int),
    k(PAUSE_POD_IMAGE, Str),
    k("pause_pod_priority_class_name", Str),
    k(POLICY, TableArray(Section::AutoscalerPolicy)),
];

/// `[runners.kubernetes]`, without the resource keys (see [`RESOURCE_KEYS`]).
pub const KUBERNETES_KEYS: &[Key] = &[
    k(HOST, Str),
    k("context", Str),
    k(CERT_FILE, Str),
    k(KEY_FILE, Str),
    k(CA_FILE, Str),
    k("bearer_token", Str),
    k("bearer_token_overwrite_allowed", Bool),
    k(NAMESPACE, Str),
    k("namespace_overwrite_allowed", Str),
    k("namespace_per_job", Bool),
    k("service_account", Str),
    k("service_account_overwrite_allowed", Str),
    k("automount_service_account_token", Bool),
    k(IMAGE, Str),
    k(HELPER_IMAGE, Str),
    k("helper_image_flavor", Str),
    k("pull_policy", StrOrArray),
    k("image_pull_secrets", StrArray),
    k("allowed_images", StrArray),
    k("allowed_services", StrArray),
    k("allowed_pull_policies", StrArray),
    k(PRIVILEGED, Bool),
    k("allow_privilege_escalation", Bool),
    k("runtime_class_name", Str),
    k("scheduler_name", Str),
    k("priority_class_name", Str),
    k("dns_policy", Str),
    k("cap_add", StrArray),
    k("cap_drop", StrArray),
    k("poll_interval", Int),
    k(POLL_TIMEOUT, Int),
    k("cleanup_resources_timeout", Str),
    k("pod_termination_grace_period_seconds", Int),
    k("cleanup_grace_period_seconds", Int),
    k("retry_limit", Int),
    k("retry_backoff_max", Int),
    k(NODE_SELECTOR, StrTable),
    k("node_selector_overwrite_allowed", Str),
    k(NODE_TOLERATIONS, StrTable),
    k("node_tolerations_overwrite_allowed", Str),
    k(POD_LABELS, StrTable),
    k("pod_labels_overwrite_allowed", Str),
    k("pod_annotations", StrTable),
    k("pod_annotations_overwrite_allowed", Str),
    k(POD_SECURITY_CONTEXT, Table(Section::PodSecurityContext)),
    k("build_container_security_context", OpaqueTable),
    k("helper_container_security_context", OpaqueTable),
    k("service_container_security_context", OpaqueTable),
    k("affinity", OpaqueTable),
    k("volumes", OpaqueTable),
    k(AUTOSCALER, Table(Section::Autoscaler)),
    k("dns_config", OpaqueTable),
    k("host_aliases", OpaqueTable),
    k("services", OpaqueTable),
    k("init_permissions_container_security_context", OpaqueTable),
];

/// One `[[runners]]` entry.
pub const RUNNER_KEYS: &[Key] = &[
    k(NAME, Str),
    k(URL, Str),
    k("clone_url", Str),
    k(ID, Int),
    k(TOKEN, Str),
    k(TOKEN_OBTAINED_AT, Datetime),
    k(TOKEN_EXPIRES_AT, Datetime),
    k("tls-ca-file", Str),
    k("tls-cert-file", Str),
    k("tls-key-file", Str),
    k(EXECUTOR, Str),
    k("shell", Str),
    k(LIMIT, Int),
    k(REQUEST_CONCURRENCY, Int),
    k("output_limit", Int),
    k("environment", StrArray),
    k("pre_get_sources_script", Str),
    k("post_get_sources_script", Str),
    k("pre_build_script", Str),
    k("post_build_script", Str),
    k("builds_dir", Str),
    k("cache_dir", Str),
    k("debug_trace_disabled", Bool),
    k("unhealthy_requests_limit", Int),
    k("unhealthy_interval", Str),
    k("feature_flags", BoolTable),
    k("cache", OpaqueTable),
    k("custom_build_dir", OpaqueTable),
    k(KUBERNETES, Table(Section::Kubernetes)),
];

/// `[session_server]`: the listener of the interactive web terminal.
pub const SESSION_SERVER_KEYS: &[Key] = &[
    k("listen_address", Str),
    k("advertise_address", Str),
    k("session_timeout", Int),
];

/// The top level of config.toml.
pub const TOP_LEVEL_KEYS: &[Key] = &[
    k(CONCURRENT, Int),
    k("check_interval", Int),
    k("log_level", Str),
    k("log_format", Str),
    k("shutdown_timeout", Int),
    k("listen_address", Str),
    k("connection_max_age", Str),
    k("sentry_dsn", Str),
    k("session_server", Table(Section::SessionServer)),
    k(RUNNERS, TableArray(Section::Runner)),
];

/// Looks up `name` in `keys`; resource keys are implied in `[runners.kubernetes]`.
pub fn lookup(section: Section, name: &str) -> Option<KeyType> {
    if let Some(key) = section.keys().iter().find(|key| key.name == name) {
        return Some(key.ty);
    }
    if section == Section::Kubernetes && is_resource_key(name) {
        return Some(Str);
    }
    None
}

/// A key that gitlab-runner would ignore or fail to decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyProblem {
    /// Dotted path, e.g. `runners[0].kubernetes.poll_timout`.
    pub path: String,
    /// What is wrong, for a human (an unknown key, a wrong type).
    pub problem: String,
}

impl std::fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.problem)
    }
}

/// Checks every key of a config.toml against the lists above.
pub fn check_document(doc: &toml_edit::DocumentMut) -> Vec<KeyProblem> {
    let mut problems = Vec::new();
    check_table(doc.as_table(), Section::TopLevel, "", &mut problems);
    problems
}

/// Checks one `[[runners]]` entry (what tenantci writes must always pass this).
pub fn check_runner(table: &toml_edit::Table, path: &str) -> Vec<KeyProblem> {
    let mut problems = Vec::new();
    check_table(table, Section::Runner, path, &mut problems);
    problems
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn check_table(
    table: &toml_edit::Table,
    section: Section,
    path: &str,
    problems: &mut Vec<KeyProblem>,
) {
    for (name, item) in table.iter() {
        let here = join(path, name);
        match lookup(section, name) {
            None => problems.push(KeyProblem {
                path: here,
                problem: "unknown key (gitlab-runner would silently ignore it)".into(),
            }),
            Some(ty) => check_item(item, ty, &here, problems),
        }
    }
}

fn check_item(item: &toml_edit::Item, ty: KeyType, path: &str, problems: &mut Vec<KeyProblem>) {
    use toml_edit::{Item, Value};
    let value = item.as_value();
    let ok = match ty {
        Str => matches!(value, Some(Value::String(_))),
        Int => matches!(value, Some(Value::Integer(_))),
        Float => matches!(value, Some(Value::Float(_) | Value::Integer(_))),
        Bool => matches!(value, Some(Value::Boolean(_))),
        Datetime => matches!(value, Some(Value::Datetime(_))),
        StrArray => is_array_of(value, |v| v.is_str()),
        IntArray => is_array_of(value, |v| v.is_integer()),
        StrOrArray => matches!(value, Some(Value::String(_))) || is_array_of(value, |v| v.is_str()),
        StrTable => table_values(item).is_some_and(|vals| vals.iter().all(|v| v.is_str())),
        BoolTable => table_values(item).is_some_and(|vals| vals.iter().all(|v| v.is_bool())),
        OpaqueTable => item.is_table_like() || item.is_array_of_tables() || item.is_array(),
        Table(section) => match item.as_table_like() {
            Some(_) => {
                let owned;
                let table = match item {
                    Item::Table(t) => t,
                    _ => {
                        owned = item
                            .as_inline_table()
                            .cloned()
                            .unwrap_or_default()
                            .into_table();
                        &owned
                    }
                };
                check_table(table, section, path, problems);
                true
            }
            None => false,
        },
        TableArray(section) => match item.as_array_of_tables() {
            Some(array) => {
                for (i, table) in array.iter().enumerate() {
                    check_table(table, section, &format!("{path}[{i}]"), problems);
                }
                true
            }
            None => false,
        },
    };
    if !ok {
        problems.push(KeyProblem {
            path: path.to_string(),
            problem: format!("expected {}", describe(ty)),
        });
    }
}

fn is_array_of(value: Option<&toml_edit::Value>, pred: impl Fn(&toml_edit::Value) -> bool) -> bool {
    value
        .and_then(|v| v.as_array())
        .is_some_and(|a| a.iter().all(pred))
}

fn table_values(item: &toml_edit::Item) -> Option<Vec<toml_edit::Value>> {
    let table = item.as_table_like()?;
    let mut out = Vec::new();
    for (_, v) in table.iter() {
        out.push(v.as_value()?.clone());
    }
    Some(out)
}

fn describe(ty: KeyType) -> &'static str {
    match ty {
        Str => "a string",
        Int => "an integer",
        Float => "a number",
        Bool => "a boolean",
        Datetime => "an offset datetime",
        StrArray => "an array of strings",
        IntArray => "an array of integers",
        StrOrArray => "a string or an array of strings",
        StrTable => "a table of strings",
        BoolTable => "a table of booleans",
        Table(_) => "a table",
        TableArray(_) => "an array of tables ([[...]])",
        OpaqueTable => "a table",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_in_each_list() {
        for list in [
            TOP_LEVEL_KEYS,
            RUNNER_KEYS,
            KUBERNETES_KEYS,
            POD_SECURITY_CONTEXT_KEYS,
            SESSION_SERVER_KEYS,
            AUTOSCALER_KEYS,
            AUTOSCALER_POLICY_KEYS,
        ] {
            let mut names: Vec<_> = list.iter().map(|k| k.name).collect();
            names.sort();
            let before = names.len();
            names.dedup();
            assert_eq!(before, names.len());
        }
    }

    #[test]
    fn check_reports_typos_and_wrong_types() {
        let doc: toml_edit::DocumentMut = r#"
concurrent = "4"
[[runners]]
name = "a"
[runners.kubernetes]
poll_timout = 600
cpu_request = "1"
cpu_request_overwrite_max_allowed = "2"
node_selector = { "a" = 1 }
"#
        .parse()
        .unwrap();
        let problems: Vec<String> = check_document(&doc).iter().map(|p| p.to_string()).collect();
        assert_eq!(
            problems,
            vec![
                "concurrent: expected an integer",
                "runners[0].kubernetes.poll_timout: unknown key (gitlab-runner would silently ignore it)",
                "runners[0].kubernetes.node_selector: expected a table of strings",
            ]
        );
    }

    #[test]
    fn autoscaler_keys_are_checked_down_to_the_policies() {
        let doc: toml_edit::DocumentMut = r#"
[[runners]]
name = "a"
[runners.kubernetes.autoscaler]
max_pause_pods = 2
pause_pods = 2
[[runners.kubernetes.autoscaler.policy]]
idle_count = "2"
periods = ["* * * * *"]
scale_factor = 1
[[runners.kubernetes.autoscaler.policy]]
scale_factor = 0.5
idle_tme = "30m"
"#
        .parse()
        .unwrap();
        let problems: Vec<String> = check_document(&doc).iter().map(|p| p.to_string()).collect();
        assert_eq!(
            problems,
            vec![
                "runners[0].kubernetes.autoscaler.pause_pods: unknown key (gitlab-runner would silently ignore it)",
                "runners[0].kubernetes.autoscaler.policy[0].idle_count: expected an integer",
                "runners[0].kubernetes.autoscaler.policy[1].idle_tme: unknown key (gitlab-runner would silently ignore it)",
            ]
        );
    }
}
