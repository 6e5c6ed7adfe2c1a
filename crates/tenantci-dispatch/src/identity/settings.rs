//! The `[identity]` section of the dispatcher config: SPIFFE mTLS between executors and the
//! facade (issue 15). Absent: off, and everything is as without it (the capability alone).
//! Present: the facade presents its SVID and requires each executor's, and a request is
//! served only when the client's SPIFFE ID is its task's (`identity::task_id`).
//!
//! Pure: the values are kept as the operator spelled them and checked by [`Identity::validate`]
//! with core's parsers (`spiffe::id`, `spiffe::SourceSpec`), so a loaded config renders.

use serde::{Deserialize, Serialize};

use tenantci_core::spiffe::id::{self, IdTemplate};
use tenantci_core::spiffe::server_api;
use tenantci_core::spiffe::{SourceSpec, SpiffeId, TrustDomain};

/// The `[identity]` section as the operator spelled it; [`Identity::parse`] checks it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    /// The SPIFFE trust domain of the facade and every executor (`example.org`).
    pub trust_domain: String,
    /// Each task's SPIFFE ID; placeholders `{trust_domain}`, `{repository}`, `{job}`.
    #[serde(default = "defaults::id_template")]
    pub id_template: String,
    /// The parent of a task's ClusterStaticEntry: the SPIRE agent of the Pod's node.
    #[serde(default = "defaults::parent_template")]
    pub parent_template: String,
    /// The cluster's name as SPIRE's k8s_psat node attestor knows it (`{cluster}` in the
    /// parent template): the agents' IDs carry it. Needed when the parent template uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The facade's own SPIFFE ID: what the executor-proxy accepts and nothing else.
    pub facade_id: String,
    /// Where the dispatcher (and each executor-proxy) gets its SVID: `workload-api`
    /// (`SPIFFE_ENDPOINT_SOCKET`) or `files:DIR` (spiffe-helper's files).
    #[serde(default = "defaults::source")]
    pub source: String,
    /// The SPIRE Server API (`HOST:PORT`, its TCP port 8081): where the dispatcher, an admin
    /// workload there, mints the X509-SVIDs of VM executors, which run no SPIRE agent.
    /// Needed with `[vm]`; unused by Pod executors (their node's agent serves them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_address: Option<String>,
    /// The SPIRE server's SPIFFE ID, the only one the dispatcher accepts at `server_address`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_id: Option<String>,
    /// The `className` of the per-task ClusterStaticEntry objects: the class the cluster's
    /// spire-controller-manager serves. SPIRE's hardened Helm chart ignores classless objects
    /// (`watchClassless: false`) and names its class `<release namespace>-<release name>`,
    /// `spire-server-spire` as its install instructions deploy it. Empty: no className.
    #[serde(default = "defaults::class_name")]
    pub class_name: String,
}

/// The section's defaults (`init` uses them for flags not given).
pub mod defaults {
    /// `spiffe://{trust_domain}/gitea/{repository}/{job}`: one ID per repository and job.
    pub fn id_template() -> String {
        tenantci_core::spiffe::id::DEFAULT_ID_TEMPLATE.into()
    }
    /// The SPIRE agent of the Pod's node under k8s_psat attestation:
    /// `spiffe://{trust_domain}/spire/agent/k8s_psat/{cluster}/{node_uid}`.
    pub fn parent_template() -> String {
        tenantci_core::spiffe::id::DEFAULT_PARENT_TEMPLATE.into()
    }
    /// `workload-api`: the SPIFFE Workload API at `SPIFFE_ENDPOINT_SOCKET`.
    pub fn source() -> String {
        "workload-api".into()
    }
    /// SPIRE's hardened chart's class for `helm install -n spire-server spire`
    /// (`<release namespace>-<release name>`).
    pub fn class_name() -> String {
        "spire-server-spire".into()
    }
    /// The Kubernetes-style ID of the dispatcher's ServiceAccount, as SPIRE's usual
    /// `ClusterSPIFFEID` template (`ns/<namespace>/sa/<service account>`) gives it.
    pub fn facade_id(trust_domain: &str, namespace: &str) -> String {
        format!("spiffe://{trust_domain}/ns/{namespace}/sa/tenantci-dispatcher")
    }
}

/// Where VM executors' SVIDs are minted (`identity.server_address`, `identity.server_id`).
#[derive(Debug, Clone)]
pub struct SpireServer {
    /// `HOST:PORT` of the SPIRE Server API.
    pub address: String,
    /// The server's SPIFFE ID: the only one accepted there.
    pub id: SpiffeId,
}

/// The section parsed: what `run` and the worker use.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// The SPIFFE trust domain.
    pub trust_domain: TrustDomain,
    /// Each task's SPIFFE ID.
    pub id_template: IdTemplate,
    /// A task entry's parent: the SPIRE agent of its Pod's node.
    pub parent_template: IdTemplate,
    /// The cluster's name as SPIRE's k8s_psat attestor knows it; None: not set.
    pub cluster: Option<String>,
    /// The facade's own SPIFFE ID.
    pub facade_id: SpiffeId,
    /// Where the dispatcher and each executor-proxy get their SVIDs.
    pub source: SourceSpec,
    /// Set when `identity.server_address` is.
    pub server: Option<SpireServer>,
    /// The entries' `className`; None: classless.
    pub class_name: Option<String>,
}

impl Identity {
    /// Parses every value; the message follows "the config ... " (`Config::validate`).
    pub fn parse(&self) -> Result<Parsed, String> {
        let at =
            |key: &str, e: tenantci_core::Error| format!("has identity.{key}: {}", e.message());
        let trust_domain = id::trust_domain("identity.trust_domain", &self.trust_domain)
            .map_err(|e| at("trust_domain", e))?;
        let id_template = IdTemplate::parse("identity.id_template", &self.id_template)
            .map_err(|e| at("id_template", e))?;
        if id_template.uses("node_uid") || id_template.uses("cluster") {
            return Err(format!(
                "has identity.id_template = `{}`, which uses {{cluster}} or {{node_uid}}; a task's ID is known before its Pod is scheduled, so only {{trust_domain}}, {{repository}} and {{job}} may be used",
                self.id_template
            ));
        }
        let parent_template = IdTemplate::parse("identity.parent_template", &self.parent_template)
            .map_err(|e| at("parent_template", e))?;
        if parent_template.uses("cluster") && self.cluster.as_deref().unwrap_or("").is_empty() {
            return Err(format!(
                "has identity.parent_template = `{}`, which uses {{cluster}}, but no identity.cluster (the cluster name SPIRE's k8s_psat attestor is configured with)",
                self.parent_template
            ));
        }
        let facade_id =
            id::spiffe_id("identity.facade_id", &self.facade_id).map_err(|e| at("facade_id", e))?;
        if !facade_id.is_member_of(&trust_domain) {
            return Err(format!(
                "has identity.facade_id = `{facade_id}`, outside identity.trust_domain `{trust_domain}`"
            ));
        }
        let source =
            SourceSpec::parse("identity.source", &self.source).map_err(|e| at("source", e))?;
        let server = self.spire_server(&trust_domain)?;
        Ok(Parsed {
            trust_domain,
            id_template,
            parent_template,
            cluster: self.cluster.clone(),
            facade_id,
            source,
            server,
            class_name: class_name(&self.class_name)?,
        })
    }

    fn spire_server(&self, trust_domain: &TrustDomain) -> Result<Option<SpireServer>, String> {
        let Some(address) = &self.server_address else {
            if let Some(id) = &self.server_id {
                return Err(format!(
                    "has identity.server_id = `{id}` but no identity.server_address (the SPIRE Server API it names)"
                ));
            }
            return Ok(None);
        };
        server_api::check_address(address)
            .map_err(|e| format!("has identity.server_address: {}", e.message()))?;
        let id = self
            .server_id
            .clone()
            .unwrap_or_else(|| server_api::default_server_id(trust_domain.as_ref()));
        let id = id::spiffe_id("identity.server_id", &id)
            .map_err(|e| format!("has identity.server_id: {}", e.message()))?;
        if !id.is_member_of(trust_domain) {
            return Err(format!(
                "has identity.server_id = `{id}`, outside identity.trust_domain `{trust_domain}`"
            ));
        }
        Ok(Some(SpireServer {
            address: address.clone(),
            id,
        }))
    }

    /// [`Self::parse`], the result dropped: whether the section is valid, the error in the
    /// config's message form ("has identity.KEY ...").
    pub fn validate(&self) -> Result<(), String> {
        self.parse().map(|_| ())
    }
}

/// A class name is a label value (spire-controller-manager matches it against its own
/// `className` and puts it in a label): at most 63 of letters, digits, `-`, `_`, `.`.
fn class_name(raw: &str) -> Result<Option<String>, String> {
    if raw.is_empty() {
        return Ok(None);
    }
    if !tenantci_core::opensandbox::label::is_name(raw) {
        return Err(format!(
            "has identity.class_name = `{}`, which is not a label value (at most 63 letters, digits, `-`, `_`, `.`); set the className of the cluster's spire-controller-manager, or \"\" for none",
            tenantci_core::input::shown(raw)
        ));
    }
    Ok(Some(raw.to_string()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn identity() -> Identity {
        Identity {
            trust_domain: "example.org".into(),
            id_template: defaults::id_template(),
            parent_template: defaults::parent_template(),
            cluster: Some("ci".into()),
            facade_id: defaults::facade_id("example.org", "dynamic-runner"),
            source: defaults::source(),
            server_address: None,
            server_id: None,
            class_name: defaults::class_name(),
        }
    }

    #[test]
    fn the_class_name_is_a_label_value_or_none() {
        let mut i = identity();
        assert_eq!(
            i.parse().unwrap().class_name.as_deref(),
            Some("spire-server-spire")
        );
        i.class_name = String::new();
        assert_eq!(i.parse().unwrap().class_name, None);
        i.class_name = "has space".into();
        let e = i.parse().unwrap_err();
        assert!(e.contains("identity.class_name"), "{e}");
    }

    #[test]
    fn the_defaults_parse() {
        let p = identity().parse().unwrap();
        assert_eq!(p.trust_domain.to_string(), "example.org");
        assert_eq!(
            p.facade_id.to_string(),
            "spiffe://example.org/ns/dynamic-runner/sa/tenantci-dispatcher"
        );
        assert_eq!(p.source, SourceSpec::WorkloadApi);
        assert!(p.server.is_none());
        let mut i = identity();
        i.server_address = Some("spire-server.spire:8081".into());
        let server = i.parse().unwrap().server.unwrap();
        assert_eq!(server.id.to_string(), "spiffe://example.org/spire/server");
    }

    #[test]
    fn each_bad_value_is_refused_by_its_key() {
        type Spoil = fn(&mut Identity);
        let cases: [(&str, Spoil); 10] = [
            ("identity.trust_domain", |i| {
                i.trust_domain = "exa mple".into()
            }),
            ("identity.id_template", |i| {
                i.id_template = "spiffe://{trust_domain}/{repo}".into()
            }),
            ("identity.id_template", |i| {
                i.id_template = "spiffe://{trust_domain}/{node_uid}/{job}".into()
            }),
            ("identity.parent_template", |i| {
                i.parent_template = "spiffe://other.org/agent".into()
            }),
            ("identity.cluster", |i| i.cluster = None),
            ("identity.facade_id", |i| {
                i.facade_id = "spiffe://other.org/dispatcher".into()
            }),
            ("identity.source", |i| i.source = "sds".into()),
            ("identity.server_address", |i| {
                i.server_address = Some("spire-server".into())
            }),
            ("identity.server_address", |i| {
                i.server_id = Some("spiffe://example.org/spire/server".into())
            }),
            ("identity.server_id", |i| {
                i.server_address = Some("spire-server.spire:8081".into());
                i.server_id = Some("spiffe://other.org/spire/server".into())
            }),
        ];
        for (key, spoil) in cases {
            let mut i = identity();
            spoil(&mut i);
            let e = i.validate().unwrap_err();
            assert!(e.contains(key), "{key}: {e}");
        }
    }
}
