//! The desired `[[runners]]` entry for the Kubernetes executor, computed as data.
//!
//! [`RunnerEntry`] is what the operator asked for; [`RunnerEntry::validate`] refuses what
//! gitlab-runner would reject at job time (cert_file without key_file/ca_file, files without
//! host); [`RunnerEntry::fields`] turns it into the ordered key/value list that
//! [`super::merge`] writes. Key names come only from [`super::keys`]. No I/O here.
//!
//! `[runners.kubernetes.autoscaler]` (gitlab-runner's own pause pods) is tenantci's only while
//! [`Autoscaler::Native`] asks for it: by default it is neither read nor written, and leaving
//! native mode is an explicit [`Autoscaler::Remove`], never a side effect of a missing flag.

use std::collections::BTreeMap;

use std::path::PathBuf;

use super::keys;
pub use tenantci_core::Secret;
use tenantci_core::{Error, Result};

/// What goes into `token = "..."`: the runner authentication token itself, or a `$VAR`
/// reference that gitlab-runner expands from its environment at start-up (the token then
/// stays out of the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunnerToken {
    /// The token itself, written into the file.
    Literal(Secret),
    /// A `$NAME` or `${NAME}` reference, written as given.
    EnvRef(String),
}

/// How output shows a literal token.
pub const REDACTED: &str = "[redacted]";

/// The placeholder token a plan carries before GitLab has issued one; never taken for a
/// token to reuse.
pub const PENDING_TOKEN: &str = "$TENANTCI_PENDING_RUNNER_TOKEN";

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
    /// The UID job containers run as.
    pub run_as_user: Option<i64>,
    /// The primary GID job containers run as.
    pub run_as_group: Option<i64>,
    /// The group that owns the pod's volumes.
    pub fs_group: Option<i64>,
    /// Whether the kubelet refuses containers that would run as root.
    pub run_as_non_root: Option<bool>,
}

/// `[runners.kubernetes]` as tenantci writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesSettings {
    /// The tenant apiserver, `https://127.0.0.1:<port>`.
    pub host: Option<String>,
    /// The credential's client certificate, absolute; needs `key_file`, `ca_file` and `host`.
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key, absolute.
    pub key_file: Option<PathBuf>,
    /// The serving CA that verifies `host`, absolute.
    pub ca_file: Option<PathBuf>,
    /// The namespace job pods run in.
    pub namespace: String,
    /// gitlab-runner resource key (see [`keys::RESOURCE_KEYS`], also `*_overwrite_max_allowed`)
    /// to Kubernetes quantity.
    pub resources: BTreeMap<String, String>,
    /// Seconds a job pod may stay Pending; see [`DEFAULT_POLL_TIMEOUT`].
    pub poll_timeout: u32,
    /// The job image for jobs that name none; `None` writes no `image` key.
    pub image: Option<String>,
    /// gitlab-runner's helper image; `None` writes none, so gitlab-runner uses the one of its
    /// version.
    pub helper_image: Option<String>,
    /// Labels a node must carry to run job pods; empty for none.
    pub node_selector: BTreeMap<String, String>,
    /// `"key=value"` (or `"key"`) to effect (`NoSchedule`, `PreferNoSchedule`, `NoExecute`).
    pub node_tolerations: BTreeMap<String, String>,
    /// Labels put on job pods; empty for none.
    pub pod_labels: BTreeMap<String, String>,
    /// The job pods' security context.
    pub pod_security_context: PodSecurityContext,
    /// What to do with `[runners.kubernetes.autoscaler]`.
    pub autoscaler: Autoscaler,
}

/// What tenantci does with `[runners.kubernetes.autoscaler]` (GitLab Runner 18.10+ pause pods).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Autoscaler {
    /// Not tenantci's: the table is neither read nor written, so one an operator wrote stays.
    #[default]
    LeaveAlone,
    /// tenantci owns `max_pause_pods`, `pause_pod_image` and the `policy` array (one policy);
    /// other keys of the table (`pause_pod_priority_class_name`, ...) stay.
    Native(NativePausePods),
    /// Leaving native mode: remove the keys [`Autoscaler::Native`] owns, and the table once
    /// nothing else is left in it.
    Remove,
}

/// gitlab-runner's own pause pods, sized and placed by the runner from the same
/// `[runners.kubernetes]` table (its requests, `node_selector`, `node_tolerations`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativePausePods {
    /// `max_pause_pods` and the policy's `idle_count` (the pre-warm count; upstream reads a
    /// `max_pause_pods` of 0 as unlimited, so it must be positive).
    pub count: u32,
    /// `pause_pod_image`: the pause pods' image.
    pub image: String,
    /// Go duration the runner waits before it scales pause pods down.
    pub idle_time: String,
    /// Cron expressions (five fields) during which the policy holds.
    pub periods: Vec<String>,
}

/// The image upstream defaults to, and tenantci's Deployment runs (`tenant::prewarm`).
pub const DEFAULT_PAUSE_POD_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// Long enough that pause pods survive a lull between pipelines.
pub const DEFAULT_PAUSE_IDLE_TIME: &str = "30m";
/// Always.
pub const DEFAULT_PAUSE_PERIOD: &str = "* * * * *";

impl NativePausePods {
    /// `count` pause pods at all times, from the default image.
    pub fn new(count: u32) -> Self {
        NativePausePods {
            count,
            image: DEFAULT_PAUSE_POD_IMAGE.into(),
            idle_time: DEFAULT_PAUSE_IDLE_TIME.into(),
            periods: vec![DEFAULT_PAUSE_PERIOD.into()],
        }
    }

    /// Refuses what gitlab-runner would reject (it drops the whole autoscaler then).
    pub fn validate(&self) -> Result<()> {
        if self.count == 0 {
            return Err(Error::bad_input(
                "native pause pods need a count above 0 (gitlab-runner reads max_pause_pods = 0 as unlimited); pass --prewarm N with N > 0",
            ));
        }
        if self.image.is_empty() || self.image.chars().any(char::is_whitespace) {
            return Err(Error::bad_input(format!(
                "the pause pod image `{}` is not an image reference",
                self.image
            ))
            .hint(format!("e.g. --pause-pod-image {DEFAULT_PAUSE_POD_IMAGE}")));
        }
        let idle = tenantci_core::duration::parse(&self.idle_time).map_err(|e| {
            Error::bad_input(format!("--pause-idle-time `{}` {e}", self.idle_time))
                .hint("pass a Go duration such as 30m")
        })?;
        if idle < std::time::Duration::from_secs(1) {
            return Err(Error::bad_input(format!(
                "--pause-idle-time `{}` is below gitlab-runner's minimum of 1s",
                self.idle_time
            ))
            .hint("pass a Go duration such as 30m"));
        }
        if self.periods.is_empty() {
            return Err(
                Error::bad_input("the pause pod policy has no periods").hint(format!(
                    "pass --pause-period '{DEFAULT_PAUSE_PERIOD}' (always)"
                )),
            );
        }
        for period in &self.periods {
            if !is_cron(period) {
                return Err(Error::bad_input(format!(
                    "--pause-period `{period}` is not a five-field cron expression"
                ))
                .hint("e.g. '* 8-17 * * mon-fri' (minute hour day-of-month month day-of-week); gitlab-runner would drop the whole autoscaler on a bad one"));
            }
        }
        Ok(())
    }

    fn fields(&self) -> Vec<(&'static str, Field)> {
        let policy = vec![
            (keys::IDLE_COUNT, Field::Int(self.count.into())),
            (keys::IDLE_TIME, Field::Str(self.idle_time.clone())),
            (keys::PERIODS, Field::StrArray(self.periods.clone())),
        ];
        vec![
            (keys::MAX_PAUSE_PODS, Field::Int(self.count.into())),
            (keys::PAUSE_POD_IMAGE, Field::Str(self.image.clone())),
            (
                keys::POLICY,
                Field::TableArray {
                    tables: vec![policy],
                    owned: POLICY_OWNED.to_vec(),
                },
            ),
        ]
    }
}

/// Five whitespace-separated fields of cron characters (names such as `mon-fri` included);
/// gitlab-runner parses the rest.
fn is_cron(s: &str) -> bool {
    let fields: Vec<&str> = s.split_whitespace().collect();
    fields.len() == 5
        && fields.iter().all(|f| {
            f.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '*' | ',' | '-' | '/' | '?'))
        })
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
            autoscaler: Autoscaler::LeaveAlone,
        }
    }
}

/// One `[[runners]]` entry, found in config.toml by `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerEntry {
    /// The entry's `name`, by which tenantci finds it again.
    pub name: String,
    /// The GitLab URL (or a `$VAR` reference, which gitlab-runner expands).
    pub url: String,
    /// The runner authentication token, or a `$VAR` reference to it.
    pub token: RunnerToken,
    /// Jobs this runner runs at once (0 = unlimited, bounded by `concurrent`).
    pub limit: u32,
    /// Concurrent job requests to GitLab.
    pub request_concurrency: u32,
    /// `[runners.kubernetes]`: the apiserver, the credential's files, and how job pods are sized
    /// and placed.
    pub kubernetes: KubernetesSettings,
    /// Set when tenantci created the runner: written as `id`, `token_obtained_at`,
    /// `token_expires_at` (gitlab-runner rotates a token with an expiry). `None` leaves those
    /// keys as they are.
    pub registration: Option<TokenMetadata>,
    /// `tls-ca-file`: how gitlab-runner trusts GitLab's certificate.
    pub tls_ca_file: TlsCaFile,
}

/// What tenantci does with `tls-ca-file`. It is owned by value, not by key: tenantci writes
/// the CA it trusted to reach GitLab, and when it no longer needs one it removes only the
/// path it manages itself, so an operator's own `tls-ca-file` survives every run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TlsCaFile {
    /// Neither read nor written.
    #[default]
    LeaveAlone,
    /// Written with this absolute path.
    Set(PathBuf),
    /// Removed when it holds exactly this path (tenantci's managed copy); otherwise left.
    RemoveIfManaged(PathBuf),
}

/// What GitLab said about a runner token it issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenMetadata {
    /// The runner's id at GitLab.
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
    /// A TOML string.
    Str(String),
    /// A TOML integer.
    Int(i64),
    /// A TOML boolean.
    Bool(bool),
    /// An unquoted TOML offset datetime.
    Datetime(toml_edit::Datetime),
    /// An array of strings.
    StrArray(Vec<String>),
    /// A `[parent.key]` table of strings, owned as a whole.
    StrTable(BTreeMap<String, String>),
    /// A sub-table; `owned` lists the keys tenantci manages inside it.
    Table {
        /// The sub-table's keys and values, in order.
        fields: Vec<(&'static str, Field)>,
        /// The keys tenantci manages inside it; the others stay.
        owned: Vec<&'static str>,
    },
    /// A `[[parent.key]]` array with exactly these tables; `owned` lists the keys tenantci
    /// manages inside each (others in the first tables stay, extra tables are removed).
    TableArray {
        /// Each table's keys and values, in order.
        tables: Vec<Vec<(&'static str, Field)>>,
        /// The keys tenantci manages inside each table.
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

const AUTOSCALER_OWNED: &[&str] = &[keys::MAX_PAUSE_PODS, keys::PAUSE_POD_IMAGE, keys::POLICY];

const POLICY_OWNED: &[&str] = &[keys::IDLE_COUNT, keys::IDLE_TIME, keys::PERIODS];

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
        if let TlsCaFile::Set(path) = &self.tls_ca_file
            && !path.is_absolute()
        {
            return Err(Error::bad_input(format!(
                    "tls-ca-file `{}` is not an absolute path",
                    path.display()
                ))
                .hint("gitlab-runner resolves paths from its own working directory; give an absolute --gitlab-ca-file"));
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
        if let TlsCaFile::Set(path) = &self.tls_ca_file {
            out.push((keys::TLS_CA_FILE, Field::Str(path.display().to_string())));
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
                    owned: self.kubernetes.owned(),
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
        if matches!(self.tls_ca_file, TlsCaFile::Set(_)) {
            owned.push(keys::TLS_CA_FILE);
        }
        owned
    }
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
    /// Keys of `[runners.kubernetes]` tenantci manages: `autoscaler` only when this run
    /// writes or removes native pause pods.
    fn owned(&self) -> Vec<&'static str> {
        let mut owned = KUBERNETES_OWNED.to_vec();
        owned.extend(all_resource_keys());
        if self.autoscaler != Autoscaler::LeaveAlone {
            owned.push(keys::AUTOSCALER);
        }
        owned
    }

    /// Why native pause pods may warm the wrong nodes with these settings (shown as warnings):
    /// gitlab-runner gives its pause pods the node selector, tolerations and build requests
    /// of this table, but not `pod_labels`.
    pub fn native_pause_pod_caveats(&self) -> Vec<String> {
        let mut out = Vec::new();
        if matches!(self.autoscaler, Autoscaler::Native(_)) && !self.pod_labels.is_empty() {
            out.push(format!(
                "gitlab-runner does not put pod_labels ({}) on its own pause pods: if anything places job pods by these labels, the pause pods warm other nodes; use tenantci's Deployment (without --gitlab-native-pause-pods), which copies them",
                self.pod_labels.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        out
    }

    fn validate(&self) -> Result<()> {
        if let Autoscaler::Native(native) = &self.autoscaler {
            native.validate()?;
        }
        self.validate_access()?;
        if !tenantci_core::dns::is_label(&self.namespace) {
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
        self.validate_placement()
    }

    /// How gitlab-runner reaches the apiserver: `host` with the three files, all absolute.
    fn validate_access(&self) -> Result<()> {
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
            if let Some(path) = file
                && !path.is_absolute()
            {
                return Err(Error::bad_input(format!(
                        "{key} `{}` is not an absolute path",
                        path.display()
                    ))
                    .hint("gitlab-runner resolves paths from its own working directory; give absolute paths"));
            }
        }
        if let Some(host) = &self.host
            && (!host.starts_with("https://") || host.chars().any(char::is_whitespace))
        {
            return Err(Error::bad_input(format!(
                "the Kubernetes host `{host}` is not an https:// URL"
            ))
            .hint("pass --host https://127.0.0.1:<port> (the Cluster's status.url)"));
        }
        Ok(())
    }

    /// What sizes and places job pods: resources, tolerations, node selector, pod labels.
    fn validate_placement(&self) -> Result<()> {
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
            if tenantci_core::quantity::parse_resource(quantity).is_none() {
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
        let autoscaler = match &self.autoscaler {
            Autoscaler::LeaveAlone => None,
            Autoscaler::Native(native) => Some(native.fields()),
            Autoscaler::Remove => Some(Vec::new()),
        };
        if let Some(fields) = autoscaler {
            out.push((
                keys::AUTOSCALER,
                Field::Table {
                    fields,
                    owned: AUTOSCALER_OWNED.to_vec(),
                },
            ));
        }
        out
    }
}

/// [`example_entry`] with two native pause pods, for tests, fuzzing and docs.
#[doc(hidden)]
pub fn example_native_entry() -> RunnerEntry {
    let mut entry = example_entry();
    entry.kubernetes.autoscaler = Autoscaler::Native(NativePausePods::new(2));
    entry
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
        tls_ca_file: TlsCaFile::LeaveAlone,
        kubernetes: KubernetesSettings {
            host: Some("https://127.0.0.1:6443".into()),
            cert_file: Some("/etc/gitlab-runner/tenant-a/tls.crt".into()),
            key_file: Some("/etc/gitlab-runner/tenant-a/tls.key".into()),
            ca_file: Some("/etc/gitlab-runner/tenant-a/ca.crt".into()),
            resources: [
                ("cpu_request", "500m"),
                ("cpu_request_overwrite_max_allowed", "1800m"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            node_selector: [("socialweb.computer/pool".to_string(), "ci".to_string())].into(),
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
            tls_ca_file: TlsCaFile::LeaveAlone,
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
    fn entry_quantities_follow_the_core_grammar() {
        let with = |q: &str| {
            let mut e = sample();
            e.kubernetes
                .resources
                .insert("cpu_request".into(), q.into());
            e.validate()
        };
        for ok in ["1", "500m", "2.5", "512Mi", "2Gi", "1k", "1e3", "1E3"] {
            assert!(with(ok).is_ok(), "{ok}: {:?}", with(ok));
            assert!(
                tenantci_core::quantity::parse_resource(ok).is_some(),
                "{ok}"
            );
        }
        for bad in [
            "", "1 Gi", " 1", "1gb", "1..2", "1.5.2", "Gi", "-1", "1Gi\"",
        ] {
            let e = with(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
            assert!(
                e.message().contains("is not a Kubernetes quantity"),
                "{bad}: {e:?}"
            );
            assert!(
                tenantci_core::quantity::parse_resource(bad).is_none(),
                "{bad}"
            );
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

    #[test]
    fn native_autoscaler_validation_refuses_what_the_runner_would_drop() {
        let with = |f: &dyn Fn(&mut NativePausePods)| {
            let mut e = sample();
            let mut n = NativePausePods::new(2);
            f(&mut n);
            e.kubernetes.autoscaler = Autoscaler::Native(n);
            e.validate()
        };
        assert!(with(&|_| {}).is_ok());
        let zero = with(&|n| n.count = 0).unwrap_err();
        assert_eq!(zero.exit_code(), 2);
        assert!(zero.message().contains("--prewarm"), "{}", zero.message());
        assert!(with(&|n| n.idle_time = "30".into()).is_err());
        assert!(with(&|n| n.idle_time = "500ms".into()).is_err());
        assert!(with(&|n| n.periods = vec![]).is_err());
        assert!(with(&|n| n.periods = vec!["* * * *".into()]).is_err());
        assert!(with(&|n| n.periods = vec!["* 8-17 * * mon-fri".into()]).is_ok());
        assert!(with(&|n| n.image = "pause 3".into()).is_err());
    }

    #[test]
    fn native_autoscaler_is_owned_only_when_asked_for() {
        let mut e = sample();
        assert!(!e.kubernetes.owned().contains(&keys::AUTOSCALER));
        assert!(
            !e.kubernetes
                .fields()
                .iter()
                .any(|(k, _)| *k == keys::AUTOSCALER)
        );
        e.kubernetes.autoscaler = Autoscaler::Remove;
        assert!(e.kubernetes.owned().contains(&keys::AUTOSCALER));
        e.kubernetes.autoscaler = Autoscaler::Native(NativePausePods::new(3));
        let fields = e.kubernetes.fields();
        let Some((_, Field::Table { fields, owned })) =
            fields.iter().find(|(k, _)| *k == keys::AUTOSCALER)
        else {
            panic!("no autoscaler table")
        };
        assert_eq!(owned, &AUTOSCALER_OWNED.to_vec());
        assert!(fields.contains(&(keys::MAX_PAUSE_PODS, Field::Int(3))));
        assert!(fields.contains(&(
            keys::PAUSE_POD_IMAGE,
            Field::Str(DEFAULT_PAUSE_POD_IMAGE.into())
        )));
    }

    #[test]
    fn native_autoscaler_caveats_name_pod_labels() {
        let mut e = sample();
        e.kubernetes.pod_labels.insert("team".into(), "a".into());
        assert!(e.kubernetes.native_pause_pod_caveats().is_empty());
        e.kubernetes.autoscaler = Autoscaler::Native(NativePausePods::new(1));
        let caveats = e.kubernetes.native_pause_pod_caveats();
        assert_eq!(caveats.len(), 1);
        assert!(caveats[0].contains("team"), "{}", caveats[0]);
    }
}
