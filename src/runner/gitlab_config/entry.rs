//! The desired `[[runners]]` entry for the Kubernetes executor, computed as data.
//!
//! [`RunnerEntry`] is what the operator asked for; [`RunnerEntry::validate`] refuses what
//! gitlab-runner would reject at job time (cert_file without key_file/ca_file, files without
//! host); [`RunnerEntry::fields`] turns it into the ordered key/value list that
//! [`super::merge`] writes. Key names come only from [`super::keys`]. No I/O here.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use super::keys;
use crate::{Error, Result};

/// A secret string: never shown by `Debug` or `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    /// The secret itself; call only where it is sent or written to a 0600 file.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// What goes into `token = "..."`: the runner authentication token itself, or a `$VAR`
/// reference that gitlab-runner expands from its environment at start-up (the token then
/// stays out of the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunnerToken {
    Literal(Secret),
    EnvRef(String),
}

/// How output shows a literal token.
pub const REDACTED: &str = "[redacted]";

impl RunnerToken {
    /// `$NAME` / `${NAME}` becomes a reference; anything else a literal token.
    pub fn parse(raw: &str) -> Result<Self> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(Error::bad_input("the runner token is empty")
                .hint("give the runner authentication token (glrt-...) or a $VAR reference"));
        }
        if let Some(rest) = raw.strip_prefix('$') {
            let name = rest
                .strip_prefix('{')
                .and_then(|r| r.strip_suffix('}'))
                .unwrap_or(rest);
            let valid = !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(Error::bad_input(format!(
                    "the runner token reference `{raw}` is not a valid environment variable name"
                ))
                .hint("use $NAME with letters, digits and underscores, e.g. $RUNNER_TOKEN"));
            }
            return Ok(RunnerToken::EnvRef(raw.to_string()));
        }
        if raw
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '\\')
        {
            return Err(Error::bad_input(
                "the runner token contains whitespace, quotes or control characters",
            )
            .hint("check the token file holds only the token (glrt-...)"));
        }
        Ok(RunnerToken::Literal(Secret::new(raw)))
    }

    /// The string written into config.toml.
    pub fn file_value(&self) -> &str {
        match self {
            RunnerToken::Literal(s) => s.expose(),
            RunnerToken::EnvRef(r) => r,
        }
    }

    /// How output shows it: references as they are, literals as [`REDACTED`].
    pub fn redacted(&self) -> String {
        match self {
            RunnerToken::Literal(_) => REDACTED.to_string(),
            RunnerToken::EnvRef(r) => r.clone(),
        }
    }

    /// The literal secret, if any (for redacting text that contains it).
    pub fn secret(&self) -> Option<&str> {
        match self {
            RunnerToken::Literal(s) => Some(s.expose()),
            RunnerToken::EnvRef(_) => None,
        }
    }
}

/// `[runners.kubernetes.pod_security_context]`; the table is written only when a field is set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodSecurityContext {
    pub run_as_user: Option<i64>,
    pub run_as_group: Option<i64>,
    pub fs_group: Option<i64>,
    pub run_as_non_root: Option<bool>,
}

/// `[runners.kubernetes]` as tenantci writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesSettings {
    /// The tenant apiserver, `https://127.0.0.1:<port>`.
    pub host: Option<String>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
    pub namespace: String,
    /// gitlab-runner resource key (see [`keys::RESOURCE_KEYS`], also `*_overwrite_max_allowed`)
    /// to Kubernetes quantity.
    pub resources: BTreeMap<String, String>,
    /// Seconds a job pod may stay Pending; see [`DEFAULT_POLL_TIMEOUT`].
    pub poll_timeout: u32,
    pub image: Option<String>,
    pub helper_image: Option<String>,
    pub node_selector: BTreeMap<String, String>,
    /// `"key=value"` (or `"key"`) to effect (`NoSchedule`, `PreferNoSchedule`, `NoExecute`).
    pub node_tolerations: BTreeMap<String, String>,
    pub pod_labels: BTreeMap<String, String>,
    pub pod_security_context: PodSecurityContext,
}

/// 600 s rather than gitlab-runner's 180: a job pod may wait for a node to be rented and boot.
pub const DEFAULT_POLL_TIMEOUT: u32 = 600;

impl Default for KubernetesSettings {
    fn default() -> Self {
        KubernetesSettings {
            host: None,
            cert_file: None,
            key_file: None,
            ca_file: None,
            namespace: "gitlab-runner".into(),
            resources: BTreeMap::new(),
            poll_timeout: DEFAULT_POLL_TIMEOUT,
            image: None,
            helper_image: None,
            node_selector: BTreeMap::new(),
            node_tolerations: BTreeMap::new(),
            pod_labels: BTreeMap::new(),
            pod_security_context: PodSecurityContext::default(),
        }
    }
}

/// One `[[runners]]` entry, found in config.toml by `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerEntry {
    pub name: String,
    /// The GitLab URL (or a `$VAR` reference, which gitlab-runner expands).
    pub url: String,
    pub token: RunnerToken,
    /// Jobs this runner runs at once (0 = unlimited, bounded by `concurrent`).
    pub limit: u32,
    /// Concurrent job requests to GitLab.
    pub request_concurrency: u32,
    pub kubernetes: KubernetesSettings,
    /// Set when tenantci created the runner: written as `id`, `token_obtained_at`,
    /// `token_expires_at` (gitlab-runner rotates a token with an expiry). `None` leaves those
    /// keys as they are.
    pub registration: Option<TokenMetadata>,
}

/// What GitLab said about a runner token it issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenMetadata {
    pub id: u64,
    /// RFC 3339.
    pub obtained_at: String,
    /// RFC 3339; `None`: the token does not expire (written as `0001-01-01T00:00:00Z`).
    pub expires_at: Option<String>,
}

/// gitlab-runner's "no expiry" value.
pub const NO_EXPIRY: &str = "0001-01-01T00:00:00Z";

fn datetime(what: &str, raw: &str) -> Result<toml_edit::Datetime> {
    let parsed: toml_edit::Datetime = raw.parse().map_err(|_| {
        Error::external(format!(
            "GitLab's {what} `{raw}` is not an RFC 3339 datetime"
        ))
    })?;
    if parsed.date.is_none() || parsed.time.is_none() || parsed.offset.is_none() {
        return Err(Error::external(format!(
            "GitLab's {what} `{raw}` is not an offset datetime"
        )));
    }
    Ok(parsed)
}

/// The only executor tenantci writes.
pub const EXECUTOR_KUBERNETES: &str = "kubernetes";

/// A value to write, in the order it is written.
#[derive(Debug, Clone, PartialEq)]
pub enum Field {
    Str(String),
    Int(i64),
    Bool(bool),
    /// An unquoted TOML offset datetime.
    Datetime(toml_edit::Datetime),
    /// A `[parent.key]` table of strings, owned as a whole.
    StrTable(BTreeMap<String, String>),
    /// A sub-table; `owned` lists the keys tenantci manages inside it.
    Table {
        fields: Vec<(&'static str, Field)>,
        owned: Vec<&'static str>,
    },
}

const RUNNER_OWNED: &[&str] = &[
    keys::NAME,
    keys::URL,
    keys::TOKEN,
    keys::EXECUTOR,
    keys::LIMIT,
    keys::REQUEST_CONCURRENCY,
    keys::KUBERNETES,
];

const KUBERNETES_OWNED: &[&str] = &[
    keys::HOST,
    keys::CERT_FILE,
    keys::KEY_FILE,
    keys::CA_FILE,
    keys::NAMESPACE,
    keys::POLL_TIMEOUT,
    keys::IMAGE,
    keys::HELPER_IMAGE,
    keys::PRIVILEGED,
    keys::NODE_SELECTOR,
    keys::NODE_TOLERATIONS,
    keys::POD_LABELS,
    keys::POD_SECURITY_CONTEXT,
];

const POD_SECURITY_CONTEXT_OWNED: &[&str] = &[
    keys::RUN_AS_USER,
    keys::RUN_AS_GROUP,
    keys::FS_GROUP,
    keys::RUN_AS_NON_ROOT,
];

const EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

impl RunnerEntry {
    /// Refuses values gitlab-runner would reject or misread; names the offending input.
    pub fn validate(&self) -> Result<()> {
        if self.name.trim().is_empty() {
            return Err(Error::bad_input("the runner name is empty").hint("pass --name"));
        }
        let url_ok = self.url.starts_with("https://")
            || self.url.starts_with("http://")
            || self.url.starts_with('$');
        if !url_ok || self.url.chars().any(char::is_whitespace) {
            return Err(Error::bad_input(format!(
                "the GitLab URL `{}` is not an http(s) URL",
                self.url
            ))
            .hint("pass --url https://gitlab.example.com (or a $VAR reference)"));
        }
        if self.request_concurrency == 0 {
            return Err(Error::bad_input("request_concurrency must be at least 1"));
        }
        if let Some(reg) = &self.registration {
            datetime("token_obtained_at", &reg.obtained_at)?;
            datetime(
                "token_expires_at",
                reg.expires_at.as_deref().unwrap_or(NO_EXPIRY),
            )?;
        }
        self.kubernetes.validate()
    }

    /// The entry's keys and values in the order they are written (call after `validate`).
    pub fn fields(&self) -> Vec<(&'static str, Field)> {
        let mut out = vec![
            (keys::NAME, Field::Str(self.name.clone())),
            (keys::URL, Field::Str(self.url.clone())),
        ];
        if let Some(reg) = &self.registration {
            let at = |raw: &str| datetime("", raw).map(Field::Datetime).ok();
            out.push((keys::ID, Field::Int(reg.id as i64)));
            out.push((keys::TOKEN, Field::Str(self.token.file_value().to_string())));
            out.extend(at(&reg.obtained_at).map(|f| (keys::TOKEN_OBTAINED_AT, f)));
            out.extend(
                at(reg.expires_at.as_deref().unwrap_or(NO_EXPIRY))
                    .map(|f| (keys::TOKEN_EXPIRES_AT, f)),
            );
        } else {
            out.push((keys::TOKEN, Field::Str(self.token.file_value().to_string())));
        }
        out.extend([
            (keys::EXECUTOR, Field::Str(EXECUTOR_KUBERNETES.into())),
            (keys::LIMIT, Field::Int(self.limit.into())),
            (
                keys::REQUEST_CONCURRENCY,
                Field::Int(self.request_concurrency.into()),
            ),
            (
                keys::KUBERNETES,
                Field::Table {
                    fields: self.kubernetes.fields(),
                    owned: kubernetes_owned(),
                },
            ),
        ]);
        out
    }

    /// Keys of `[[runners]]` tenantci manages; others in the entry are left alone. The token
    /// metadata keys are owned only when this run knows them.
    pub fn owned(&self) -> Vec<&'static str> {
        let mut owned = RUNNER_OWNED.to_vec();
        if self.registration.is_some() {
            owned.extend([keys::ID, keys::TOKEN_OBTAINED_AT, keys::TOKEN_EXPIRES_AT]);
        }
        owned
    }
}

fn kubernetes_owned() -> Vec<&'static str> {
    let mut owned = KUBERNETES_OWNED.to_vec();
    owned.extend(all_resource_keys());
    owned
}

/// Every resource key and its overwrite twin, in writing order.
pub fn all_resource_keys() -> Vec<&'static str> {
    keys::RESOURCE_KEYS
        .iter()
        .zip(keys::RESOURCE_OVERWRITE_KEYS)
        .flat_map(|(key, max)| [*key, *max])
        .collect()
}

impl KubernetesSettings {
    fn validate(&self) -> Result<()> {
        let files = [
            (keys::CERT_FILE, &self.cert_file),
            (keys::KEY_FILE, &self.key_file),
            (keys::CA_FILE, &self.ca_file),
        ];
        if self.cert_file.is_some() && (self.key_file.is_none() || self.ca_file.is_none()) {
            return Err(Error::bad_input(
                "cert_file is set without key_file and ca_file; gitlab-runner needs all three for file based auth",
            )
            .hint("pass --cert-file, --key-file and --ca-file together"));
        }
        if self.key_file.is_some() && self.cert_file.is_none() {
            return Err(Error::bad_input("key_file is set without cert_file")
                .hint("pass --cert-file, --key-file and --ca-file together"));
        }
        if self.host.is_none() && files.iter().any(|(_, f)| f.is_some()) {
            return Err(Error::bad_input(
                "cert_file/key_file/ca_file are set without host; gitlab-runner ignores them then",
            )
            .hint("pass --host https://127.0.0.1:<port> (the tenant apiserver)"));
        }
        for (key, file) in files {
            if let Some(path) = file {
                if !path.is_absolute() {
                    return Err(Error::bad_input(format!(
                        "{key} `{}` is not an absolute path",
                        path.display()
                    ))
                    .hint("gitlab-runner resolves paths from its own working directory; give absolute paths"));
                }
            }
        }
        if let Some(host) = &self.host {
            if !host.starts_with("https://") || host.chars().any(char::is_whitespace) {
                return Err(Error::bad_input(format!(
                    "the Kubernetes host `{host}` is not an https:// URL"
                ))
                .hint("pass --host https://127.0.0.1:<port> (the Cluster's status.url)"));
            }
        }
        if !is_dns_label(&self.namespace) {
            return Err(Error::bad_input(format!(
                "the namespace `{}` is not a valid Kubernetes namespace name",
                self.namespace
            ))
            .hint("use lower-case letters, digits and '-', at most 63 characters"));
        }
        if self.poll_timeout == 0 {
            return Err(Error::bad_input(
                "poll_timeout must be a positive number of seconds",
            ));
        }
        for (key, quantity) in &self.resources {
            if !keys::is_resource_key(key) {
                return Err(Error::bad_input(format!(
                    "`{key}` is not a gitlab-runner resource key"
                ))
                .hint(format!(
                    "use one of {} (optionally with the suffix {})",
                    keys::RESOURCE_KEYS.join(", "),
                    keys::OVERWRITE_SUFFIX
                )));
            }
            if !is_quantity(quantity) {
                return Err(Error::bad_input(format!(
                    "{key} `{quantity}` is not a Kubernetes quantity"
                ))
                .hint("use e.g. 500m, 2, 512Mi, 4Gi"));
            }
        }
        for (key, effect) in &self.node_tolerations {
            if key.is_empty() || !EFFECTS.contains(&effect.as_str()) {
                return Err(Error::bad_input(format!(
                    "the toleration `{key}:{effect}` is not key=value:Effect"
                ))
                .hint("use e.g. dedicated=ci:NoSchedule; effects are NoSchedule, PreferNoSchedule, NoExecute"));
            }
        }
        for (what, map) in [
            ("node selector", &self.node_selector),
            ("pod label", &self.pod_labels),
        ] {
            if map.keys().any(|k| k.is_empty()) {
                return Err(Error::bad_input(format!("a {what} has an empty key")));
            }
        }
        Ok(())
    }

    fn fields(&self) -> Vec<(&'static str, Field)> {
        let mut out = Vec::new();
        let mut push_str = |key: &'static str, v: Option<String>| {
            if let Some(v) = v {
                out.push((key, Field::Str(v)));
            }
        };
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        push_str(keys::HOST, self.host.clone());
        push_str(keys::CERT_FILE, path(&self.cert_file));
        push_str(keys::KEY_FILE, path(&self.key_file));
        push_str(keys::CA_FILE, path(&self.ca_file));
        push_str(keys::NAMESPACE, Some(self.namespace.clone()));
        push_str(keys::IMAGE, self.image.clone());
        push_str(keys::HELPER_IMAGE, self.helper_image.clone());
        out.push((keys::PRIVILEGED, Field::Bool(false)));
        out.push((keys::POLL_TIMEOUT, Field::Int(self.poll_timeout.into())));
        for key in all_resource_keys() {
            if let Some(q) = self.resources.get(key) {
                out.push((key, Field::Str(q.clone())));
            }
        }
        for (key, map) in [
            (keys::NODE_SELECTOR, &self.node_selector),
            (keys::NODE_TOLERATIONS, &self.node_tolerations),
            (keys::POD_LABELS, &self.pod_labels),
        ] {
            out.push((key, Field::StrTable(map.clone())));
        }
        let psc = &self.pod_security_context;
        let mut sc = Vec::new();
        for (key, v) in [
            (keys::RUN_AS_USER, psc.run_as_user),
            (keys::RUN_AS_GROUP, psc.run_as_group),
            (keys::FS_GROUP, psc.fs_group),
        ] {
            if let Some(v) = v {
                sc.push((key, Field::Int(v)));
            }
        }
        if let Some(v) = psc.run_as_non_root {
            sc.push((keys::RUN_AS_NON_ROOT, Field::Bool(v)));
        }
        out.push((
            keys::POD_SECURITY_CONTEXT,
            Field::Table {
                fields: sc,
                owned: POD_SECURITY_CONTEXT_OWNED.to_vec(),
            },
        ));
        out
    }
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A Kubernetes quantity: a decimal number with an optional SI or binary suffix.
pub fn is_quantity(s: &str) -> bool {
    const SUFFIXES: &[&str] = &[
        "", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    ];
    let digits_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits_end);
    let number_ok = !number.is_empty()
        && number.matches('.').count() <= 1
        && !number.starts_with('.')
        && !number.ends_with('.');
    number_ok && SUFFIXES.contains(&suffix)
}

/// A complete, valid entry (literal token `glrt-example`), for tests, fuzzing and docs.
#[doc(hidden)]
pub fn example_entry() -> RunnerEntry {
    RunnerEntry {
        name: "tenant-a".into(),
        url: "https://gitlab.example.com".into(),
        token: RunnerToken::Literal(Secret::new("glrt-example")),
        limit: 4,
        request_concurrency: 1,
        registration: None,
        kubernetes: KubernetesSettings {
            host: Some("https://127.0.0.1:6443".into()),
            cert_file: Some("/etc/gitlab-runner/tenant-a/tls.crt".into()),
            key_file: Some("/etc/gitlab-runner/tenant-a/tls.key".into()),
            ca_file: Some("/etc/gitlab-runner/tenant-a/ca.crt".into()),
            resources: [
                ("cpu_request", "500m"),
                ("cpu_request_overwrite_max_allowed", "2"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            node_selector: [("tenantci.io/pool".to_string(), "ci".to_string())].into(),
            ..Default::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RunnerEntry {
        RunnerEntry {
            name: "tenant-a".into(),
            url: "https://gitlab.example.com".into(),
            token: RunnerToken::parse("glrt-secret").unwrap(),
            limit: 4,
            request_concurrency: 1,
            registration: None,
            kubernetes: KubernetesSettings {
                host: Some("https://127.0.0.1:6443".into()),
                cert_file: Some("/etc/gitlab-runner/tenant/tls.crt".into()),
                key_file: Some("/etc/gitlab-runner/tenant/tls.key".into()),
                ca_file: Some("/etc/gitlab-runner/tenant/ca.crt".into()),
                ..Default::default()
            },
        }
    }

    #[test]
    fn entry_token_parse_tells_references_from_literals() {
        assert_eq!(
            RunnerToken::parse("$RUNNER_TOKEN").unwrap(),
            RunnerToken::EnvRef("$RUNNER_TOKEN".into())
        );
        assert!(matches!(
            RunnerToken::parse("glrt-x\n").unwrap(),
            RunnerToken::Literal(_)
        ));
        assert!(RunnerToken::parse("$1X").is_err());
        assert!(RunnerToken::parse("a b").is_err());
        assert_eq!(
            format!("{:?}", RunnerToken::parse("glrt-x").unwrap()),
            "Literal(Secret([redacted]))"
        );
    }

    #[test]
    fn entry_validation_refuses_partial_file_auth() {
        let mut e = sample();
        e.kubernetes.key_file = None;
        assert_eq!(e.validate().unwrap_err().exit_code(), 2);
        let mut e = sample();
        e.kubernetes.host = None;
        assert!(e.validate().unwrap_err().message().contains("without host"));
        let mut e = sample();
        e.kubernetes.ca_file = Some("relative/ca.crt".into());
        assert!(e.validate().is_err());
        assert!(sample().validate().is_ok());
    }

    #[test]
    fn entry_quantities() {
        for ok in ["1", "500m", "2.5", "512Mi", "4Gi", "1k"] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "1 Gi", "1gb", ".5", "1..2", "-1", "1Gi\""] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn entry_fields_use_only_known_keys() {
        let mut e = sample();
        for key in all_resource_keys() {
            e.kubernetes.resources.insert(key.to_string(), "1".into());
        }
        for (key, field) in e.fields() {
            assert!(keys::lookup(keys::Section::Runner, key).is_some(), "{key}");
            if let Field::Table { fields, .. } = field {
                for (sub, _) in fields {
                    assert!(
                        keys::lookup(keys::Section::Kubernetes, sub).is_some(),
                        "{sub}"
                    );
                }
            }
        }
    }
}
