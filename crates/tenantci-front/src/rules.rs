//! The rules in force, as one value: the config (allow-lists, limits), each cluster's ClientCA,
//! the front's serving pair and the deny-list, with the TLS configs built from them. Immutable:
//! `reload` builds the next one and publishes it, whole, on a watch channel. The admission path
//! reads the current one once per connection (its handshake, its caps); an open tunnel checks
//! its client against each new one and is closed when it no longer passes (`serve`), the way a
//! revoked serial always was. Reads files; decides nothing itself (`admit` does).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::server::ClientHello;
use rustls::sign::CertifiedKey;

use tenantci_core::gateway::layout::StateDir;
use tenantci_core::pki::inspect::CertInfo;
use tenantci_core::{Error, Result};

use super::admit::{self, Client, Refusal};
use super::config::FrontConfig;
use super::deny::DenyList;
use super::handshake::{self, ClientRoots, Configs};

/// Everything a connection is judged by, read at one moment.
pub struct Rules {
    config: Arc<FrontConfig>,
    deny: Arc<DenyList>,
    roots: HashMap<String, ClientRoots>,
    serving: Arc<CertifiedKey>,
    serving_info: CertInfo,
    tls: Configs,
}

impl Rules {
    /// Reads every cluster's ClientCA and the serving pair `config` names; refuses (naming the
    /// file) anything that does not read or a pair that does not match.
    pub fn read(config: FrontConfig, deny: Arc<DenyList>) -> Result<Self> {
        let state = StateDir::new(&config.state_dir);
        let mut roots = HashMap::new();
        for rule in &config.clusters {
            roots.insert(
                rule.name.clone(),
                handshake::client_roots(&state, &rule.name)?,
            );
        }
        let serving = handshake::serving_key(&config)?;
        Self::assemble(Arc::new(config), deny, roots, serving)
    }

    /// The same config, ClientCAs and serving pair under another deny-list: nothing re-read.
    pub fn with_deny(&self, deny: Arc<DenyList>) -> Result<Self> {
        Self::assemble(
            self.config.clone(),
            deny,
            self.roots.clone(),
            self.serving.clone(),
        )
    }

    fn assemble(
        config: Arc<FrontConfig>,
        deny: Arc<DenyList>,
        roots: HashMap<String, ClientRoots>,
        serving: Arc<CertifiedKey>,
    ) -> Result<Self> {
        let leaf = serving.end_entity_cert().map_err(|e| {
            Error::bad_input("the front's serving certificate chain is empty").caused_by(e)
        })?;
        let serving_info = CertInfo::from_der(leaf).map_err(|e| {
            Error::bad_input(format!(
                "`{}` is not a certificate: {e}",
                config.serving_cert.display()
            ))
            .hint("give the front's PEM serving certificate (`front init` writes tls.crt)")
        })?;
        let tls = Configs::build(&config, &deny, &roots, &serving)?;
        Ok(Rules {
            config,
            deny,
            roots,
            serving,
            serving_info,
            tls,
        })
    }

    /// The config in force.
    pub fn config(&self) -> &FrontConfig {
        &self.config
    }

    /// The deny-list in force.
    pub fn deny(&self) -> &DenyList {
        &self.deny
    }

    /// The serving certificate a new client is shown.
    pub fn serving_cert(&self) -> &CertInfo {
        &self.serving_info
    }

    /// The cluster a ClientHello names and its server config, if the front serves it.
    pub fn pick(&self, hello: &ClientHello<'_>) -> Option<(String, Arc<ServerConfig>)> {
        self.tls.pick(hello)
    }

    /// Whether `client` (whose chain verified at its handshake) may still pass to `cluster`:
    /// the check an open tunnel repeats under each new rules value. A cluster the config no
    /// longer serves admits no one.
    pub fn admits(&self, cluster: &str, client: &Client) -> std::result::Result<(), Refusal> {
        match self.config.cluster(cluster) {
            Some(rule) => admit::decide(rule, client, &self.deny),
            None => Err(Refusal::NotAllowed),
        }
    }
}

/// The files rules read from `config` besides the config itself (the serving pair, each
/// cluster's ClientCA): where a change on disk is looked for (the deny-list has its own watch).
pub fn files_of(config: &FrontConfig) -> Vec<PathBuf> {
    let state = StateDir::new(&config.state_dir);
    let mut files = vec![config.serving_cert.clone(), config.serving_key.clone()];
    files.extend(
        config
            .clusters
            .iter()
            .map(|c| state.cluster(&c.name).client_ca_cert),
    );
    files
}
