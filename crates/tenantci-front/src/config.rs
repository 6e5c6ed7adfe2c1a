//! `front.toml`: what `tenantci front serve` starts from. Nothing is published without it, and a
//! cluster with no allowed subject is not reachable at all. Read and checked whole at start;
//! does not read certificates (`handshake` does) or the deny-list (`deny`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use tenantci_core::duration::GoDuration;
use tenantci_core::{Error, Result};

/// The whole of `front.toml` (unknown keys refused). Built by [`FrontConfig::load`], which
/// also checks it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FrontConfig {
    /// The one published address, e.g. `0.0.0.0:7443`.
    pub listen: SocketAddr,
    /// The gateway's state directory: Clusters are resolved through it at each connection.
    pub state_dir: PathBuf,
    /// The front's serving certificate (PEM, its chain): from `front init` or the operator's.
    pub serving_cert: PathBuf,
    /// The serving certificate's private key (PEM).
    pub serving_key: PathBuf,
    /// Serials refused (`front revoke`). Default: `denied-serials` beside the config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny_list: Option<PathBuf>,
    /// Prometheus `/metrics` (keep it on loopback). None: no metrics listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<SocketAddr>,
    /// `[limits]`: what one public port accepts; absent keys take [`Limits::default`].
    #[serde(default)]
    pub limits: Limits,
    /// `[renewal]`: runners renewing their certificate through the front (`front signer`).
    #[serde(default)]
    pub renewal: Renewal,
    /// `[[cluster]]`: the clusters the front serves and who may pass to each.
    #[serde(default, rename = "cluster")]
    pub clusters: Vec<ClusterRule>,
}

/// `[renewal]`, read by the front and by `front signer` (each on its own). Defaults in
/// [`Renewal::default`].
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Renewal {
    /// The longest lifetime the signer gives a renewed certificate; a request for more is
    /// refused.
    pub max_lifetime: GoDuration,
    /// How long a renewed certificate's predecessor still opens new tunnels (another host
    /// carrying it, a dial already under way); open tunnels run on until they close.
    pub overlap: GoDuration,
    /// The signer's Unix socket (relative: beside the config).
    pub signer_socket: PathBuf,
    /// The only uid the signer answers (the front's user); default: the signer's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub front_uid: Option<u32>,
}

impl Default for Renewal {
    fn default() -> Self {
        Renewal {
            max_lifetime: std::time::Duration::from_secs(720 * 3600).into(),
            overlap: std::time::Duration::from_secs(600).into(),
            signer_socket: PathBuf::from("signer.sock"),
            front_uid: None,
        }
    }
}

/// Who may pass to one cluster.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterRule {
    /// The gateway's Cluster name, which the client names in ALPN.
    pub name: String,
    /// `[[cluster.allow]]`: the subjects allowed to this cluster.
    #[serde(default)]
    pub allow: Vec<Subject>,
}

/// An allowed certificate subject: the CommonName (the Kubernetes user) and one Organization
/// the certificate must carry (a group). Both given, so a rule names one identity.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Subject {
    /// The CN: the Kubernetes user.
    pub common_name: String,
    /// An O: one Kubernetes group.
    pub organization: String,
}

/// What a public port needs. Defaults in [`Limits::default`].
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// From TCP accept to a finished mutual-TLS handshake.
    pub handshake_timeout: GoDuration,
    /// A tunnel with no byte either way for this long is closed (above the apiserver's own
    /// watch timeout, so a quiet watch is not cut).
    pub idle_timeout: GoDuration,
    /// Open tunnels in total.
    pub max_connections: u32,
    /// Connections still in their handshake; more are closed at once.
    pub max_handshakes: u32,
    /// Open tunnels per certificate subject.
    pub max_per_subject: u32,
    /// New connections accepted per second (a burst of as many is allowed).
    pub new_per_second: u32,
    /// Handshakes in progress from one source (an IPv4 address, an IPv6 /64), so that one
    /// address cannot hold every slot of `max_handshakes`. At most `max_handshakes`.
    pub max_handshakes_per_source: u32,
    /// New connections per second from one source (a burst of as many), so that one address
    /// cannot spend all of `new_per_second`. At most `new_per_second`.
    pub new_per_second_per_source: u32,
}

impl Default for Limits {
    fn default() -> Self {
        let secs = std::time::Duration::from_secs;
        Limits {
            handshake_timeout: secs(10).into(),
            idle_timeout: secs(3600).into(),
            max_connections: 1024,
            max_handshakes: 256,
            max_per_subject: 256,
            new_per_second: 200,
            max_handshakes_per_source: 16,
            new_per_second_per_source: 50,
        }
    }
}

/// The deny-list's file name beside the config when `deny_list` is not set.
pub const DENY_LIST_FILE: &str = "denied-serials";

impl FrontConfig {
    /// Reads and checks `path`; relative paths inside are taken from the config's directory.
    pub fn load(path: &Path) -> Result<Self> {
        if !path.exists() {
            return Err(Error::bad_input(format!(
                "there is no front config at `{}`: the front starts only from an explicit config",
                path.display()
            ))
            .hint("write one with `tenantci front init --state-dir DIR --cluster NAME --name HOST` (docs/runbooks/gitlab-runner.md, \"GitLab on its own VM\"), or pass --config"));
        }
        let text = tenantci_core::input::read_text(
            "the front's config",
            path,
            tenantci_core::input::MAX_CONFIG,
        )?;
        let mut config: FrontConfig = toml_edit::de::from_str(&text).map_err(|e| {
            Error::bad_input(format!("`{}` is not a valid front config", path.display()))
                .caused_by(e)
                .hint("see docs/cli.md (`front init` writes one); unknown keys are refused")
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        config.anchor(base);
        config.check()?;
        Ok(config)
    }

    fn anchor(&mut self, base: &Path) {
        let at = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        at(&mut self.state_dir);
        at(&mut self.serving_cert);
        at(&mut self.serving_key);
        at(&mut self.renewal.signer_socket);
        let deny = self
            .deny_list
            .take()
            .unwrap_or_else(|| PathBuf::from(DENY_LIST_FILE));
        self.deny_list = Some(if deny.is_relative() {
            base.join(deny)
        } else {
            deny
        });
    }

    /// The deny-list's path (set by [`FrontConfig::load`]).
    pub fn deny_list_path(&self) -> &Path {
        self.deny_list
            .as_deref()
            .unwrap_or(Path::new(DENY_LIST_FILE))
    }

    /// The `[[cluster]]` named `name`, if the front serves it.
    pub fn cluster(&self, name: &str) -> Option<&ClusterRule> {
        self.clusters.iter().find(|c| c.name == name)
    }

    /// The refusals, pure: each names the key and the fix.
    pub fn check(&self) -> Result<()> {
        if self.clusters.is_empty() {
            return Err(Error::bad_input(
                "the front config names no [[cluster]]: nothing would be reachable",
            )
            .hint("add a [[cluster]] with name and at least one [[cluster.allow]]"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for c in &self.clusters {
            tenantci_core::gateway::layout::validate_cluster_name(&c.name)?;
            if !seen.insert(c.name.as_str()) {
                return Err(Error::bad_input(format!(
                    "cluster `{}` appears twice in the front config",
                    c.name
                ))
                .hint("merge its allow lists into one [[cluster]]"));
            }
            for s in &c.allow {
                check_subject(&c.name, s)?;
            }
        }
        self.limits.check()
    }
}

/// `text` (a front config, read from `path`) with `subject` allowed to `cluster`, a
/// `[[cluster]]` added when the front does not serve it yet; None when it is allowed already,
/// so a re-run writes nothing. Pure: the text is edited in place (comments and order kept)
/// and the result is checked as `serve` reads it.
pub fn allow(text: &str, path: &Path, cluster: &str, subject: &Subject) -> Result<Option<String>> {
    let not_a_config = |e: toml_edit::TomlError| {
        Error::bad_input(format!("`{}` is not a valid front config", path.display()))
            .caused_by(e)
            .hint("fix it by hand first (see docs/cli.md); a running front keeps the rules it read last")
    };
    let current: FrontConfig = toml_edit::de::from_str(text).map_err(|e| {
        Error::bad_input(format!("`{}` is not a valid front config", path.display()))
            .caused_by(e)
            .hint("fix it by hand first; unknown keys are refused")
    })?;
    tenantci_core::gateway::layout::validate_cluster_name(cluster)?;
    check_subject(cluster, subject)?;
    if current
        .cluster(cluster)
        .is_some_and(|c| c.allow.contains(subject))
    {
        return Ok(None);
    }
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(not_a_config)?;
    let mut entry = toml_edit::Table::new();
    entry["common_name"] = toml_edit::value(subject.common_name.as_str());
    entry["organization"] = toml_edit::value(subject.organization.as_str());
    let clusters = doc
        .entry("cluster")
        .or_insert(toml_edit::Item::ArrayOfTables(Default::default()))
        .as_array_of_tables_mut()
        .ok_or_else(|| {
            Error::bad_input(format!(
                "`{}`: `cluster` is not [[cluster]] tables",
                path.display()
            ))
        })?;
    let at = clusters
        .iter()
        .position(|t| t.get("name").and_then(|n| n.as_str()) == Some(cluster));
    let table = match at {
        Some(i) => clusters.get_mut(i).expect("found above"),
        None => {
            let mut t = toml_edit::Table::new();
            t["name"] = toml_edit::value(cluster);
            clusters.push(t);
            clusters.get_mut(clusters.len() - 1).expect("pushed")
        }
    };
    table
        .entry("allow")
        .or_insert(toml_edit::Item::ArrayOfTables(Default::default()))
        .as_array_of_tables_mut()
        .ok_or_else(|| {
            Error::bad_input(format!(
                "`{}`: cluster `{cluster}`'s `allow` is not [[cluster.allow]] tables",
                path.display()
            ))
        })?
        .push(entry);
    let next = doc.to_string();
    let mut check: FrontConfig = toml_edit::de::from_str(&next)
        .map_err(|e| Error::bad_input("the edited front config does not read").caused_by(e))?;
    check.anchor(path.parent().unwrap_or(Path::new(".")));
    check.check()?;
    Ok(Some(next))
}

fn check_subject(cluster: &str, s: &Subject) -> Result<()> {
    for (key, value) in [
        ("common_name", &s.common_name),
        ("organization", &s.organization),
    ] {
        if value.trim().is_empty() || value.starts_with("system:") {
            return Err(Error::bad_input(format!(
                "cluster `{cluster}` allows {key} `{value}`: empty and `system:` names are refused (system:masters is cluster-admin)"
            ))
            .hint("allow the scoped runner identity `credential mint` gave it, e.g. gitlab-runner"));
        }
    }
    Ok(())
}

impl Limits {
    fn check(&self) -> Result<()> {
        for (key, value) in [
            ("max_connections", self.max_connections),
            ("max_handshakes", self.max_handshakes),
            ("max_per_subject", self.max_per_subject),
            ("new_per_second", self.new_per_second),
            ("max_handshakes_per_source", self.max_handshakes_per_source),
            ("new_per_second_per_source", self.new_per_second_per_source),
        ] {
            if value == 0 {
                return Err(Error::bad_input(format!(
                    "[limits] {key} is 0: the front would refuse every connection"
                ))
                .hint("give a positive number or drop the key for its default"));
            }
        }
        Ok(())
    }

    /// The per-source bounds in force, `(new_per_second, max_handshakes)` for one source: each
    /// at most its total (a larger one is lowered to it, see [`Limits::clamped`]).
    pub fn per_source(&self) -> (u32, u32) {
        (
            self.new_per_second_per_source.min(self.new_per_second),
            self.max_handshakes_per_source.min(self.max_handshakes),
        )
    }

    /// One sentence per per-source bound above its total, for the start's log. Lowered rather
    /// than refused: a config that lowers a total below a per-source default still starts.
    pub fn clamped(&self) -> Vec<String> {
        [
            (
                "max_handshakes_per_source",
                self.max_handshakes_per_source,
                "max_handshakes",
                self.max_handshakes,
            ),
            (
                "new_per_second_per_source",
                self.new_per_second_per_source,
                "new_per_second",
                self.new_per_second,
            ),
        ]
        .into_iter()
        .filter(|(_, per_source, _, total)| per_source > total)
        .map(|(key, per_source, total_key, total)| {
            format!(
                "[limits] {key} = {per_source} is above {total_key} = {total}: the front uses {total}, so one source can take all of it; set {key} to a fraction of {total_key}"
            )
        })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
listen = "127.0.0.1:7443"
state_dir = "state"
serving_cert = "tls.crt"
serving_key = "tls.key"
[limits]
idle_timeout = "5m"
[[cluster]]
name = "ci"
[[cluster.allow]]
common_name = "gitlab-runner"
organization = "gitlab-runner"
"#;

    fn parse(text: &str) -> Result<FrontConfig> {
        let mut c: FrontConfig =
            toml_edit::de::from_str(text).map_err(|e| Error::bad_input("bad").caused_by(e))?;
        c.anchor(Path::new("/etc/front"));
        c.check().map(|()| c)
    }

    #[test]
    fn a_config_reads_with_paths_beside_it_and_default_limits() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.state_dir, Path::new("/etc/front/state"));
        assert_eq!(c.deny_list_path(), Path::new("/etc/front/denied-serials"));
        assert_eq!(c.limits.idle_timeout.as_str(), "5m");
        assert_eq!(c.limits.max_connections, 1024);
        assert_eq!(c.limits.per_source(), (50, 16));
        assert!(c.limits.clamped().is_empty());
        assert_eq!(c.cluster("ci").unwrap().allow.len(), 1);
    }

    #[test]
    fn allowing_a_subject_edits_in_place_once_and_adds_a_cluster_when_needed() {
        let path = Path::new("/etc/front/front.toml");
        let text = format!("# kept\n{GOOD}");
        let remote = Subject {
            common_name: "remote-runner".into(),
            organization: "gitlab-runner".into(),
        };
        let next = allow(&text, path, "ci", &remote).unwrap().unwrap();
        assert!(next.starts_with("# kept\n"), "{next}");
        let c = parse(&next).unwrap();
        assert_eq!(c.cluster("ci").unwrap().allow.len(), 2);
        assert_eq!(
            allow(&next, path, "ci", &remote).unwrap(),
            None,
            "a re-run writes nothing"
        );
        let other = allow(&next, path, "other", &remote).unwrap().unwrap();
        assert_eq!(
            parse(&other).unwrap().cluster("other").unwrap().allow,
            vec![remote]
        );
        let masters = Subject {
            common_name: "x".into(),
            organization: "system:masters".into(),
        };
        assert_eq!(
            allow(&text, path, "ci", &masters).unwrap_err().exit_code(),
            2
        );
    }

    #[test]
    fn a_per_source_bound_above_its_total_is_lowered_to_it_and_said() {
        let c = parse(&GOOD.replace(
            "[limits]",
            "[limits]\nmax_handshakes = 8\nnew_per_second = 100\nnew_per_second_per_source = 100",
        ))
        .unwrap();
        assert_eq!(c.limits.per_source(), (100, 8));
        let said = c.limits.clamped();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].contains("max_handshakes_per_source = 16 is above max_handshakes = 8"),
            "{said:?}"
        );
    }

    #[test]
    fn system_names_unknown_keys_no_cluster_and_zero_limits_are_refused() {
        let masters = GOOD.replace(
            "organization = \"gitlab-runner\"",
            "organization = \"system:masters\"",
        );
        assert!(parse(&masters).unwrap_err().message().contains("system:"));
        for key in [
            "max_connections",
            "max_handshakes_per_source",
            "new_per_second_per_source",
        ] {
            let zero = GOOD.replace("[limits]", &format!("[limits]\n{key} = 0"));
            let said = parse(&zero).unwrap_err();
            assert!(said.message().contains(key), "{}", said.message());
        }
        assert!(parse(&GOOD.replace("[limits]", "[limits]\nfoo = 1")).is_err());
        let none = GOOD.split("[[cluster]]").next().unwrap();
        assert!(
            parse(none)
                .unwrap_err()
                .message()
                .contains("no [[cluster]]")
        );
    }
}
