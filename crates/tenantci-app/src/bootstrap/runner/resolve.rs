//! Step 1: the tenant cluster from gateway.json and the admin apiserver, or as given; and the
//! node image to size job pods against.

use std::path::PathBuf;

use super::{Inputs, Run, Target};
use crate::credential::CaSource;
use crate::steps::{Outcome, Steps};
use crate::tenant::sizing::{self, SizingReport};
use tenantci_core::Result;
use tenantci_core::gateway::{StateDir, resolve as gateway};
use tenantci_core::node_image::NodeImage;

/// The cluster the inputs name, with the files later steps need.
pub(super) struct Resolved {
    pub cluster: String,
    pub server: String,
    pub ca: CaSource,
    pub client_ca_cert: PathBuf,
    pub tenant_kubeconfig: PathBuf,
    /// Only for a state-dir cluster that has one.
    pub node_image: Option<PathBuf>,
}

pub(super) async fn resolve(inputs: &Inputs, steps: &mut Steps<'_>) -> Result<Resolved> {
    let r = resolve_target(inputs).await?;
    steps.record(
        "resolve",
        Outcome::Ok,
        format!("cluster {} at {} (Ready)", r.cluster, r.server),
    );
    Ok(r)
}

async fn resolve_target(inputs: &Inputs) -> Result<Resolved> {
    match &inputs.target {
        Target::StateDir { state_dir, cluster } => {
            let state = StateDir::new(state_dir);
            let r = gateway::resolve(&state, cluster).await?;
            Ok(Resolved {
                cluster: cluster.clone(),
                server: r.url,
                ca: CaSource::StateDir {
                    state_dir: state_dir.clone(),
                    cluster: cluster.clone(),
                },
                client_ca_cert: r.client_ca_cert,
                tenant_kubeconfig: inputs
                    .tenant_kubeconfig
                    .clone()
                    .unwrap_or(r.tenant_admin_kubeconfig),
                node_image: Some(state.cluster(cluster).node_image).filter(|p| p.exists()),
            })
        }
        Target::Direct {
            server,
            server_ca,
            client_ca_cert,
            client_ca_key,
            tenant_kubeconfig,
            cluster,
        } => Ok(Resolved {
            cluster: cluster.clone(),
            server: server.clone(),
            ca: CaSource::Files {
                client_ca_cert: client_ca_cert.clone(),
                client_ca_key: client_ca_key.clone(),
                server_ca: server_ca.clone(),
            },
            client_ca_cert: client_ca_cert.clone(),
            tenant_kubeconfig: inputs
                .tenant_kubeconfig
                .clone()
                .unwrap_or(tenant_kubeconfig.clone()),
            node_image: None,
        }),
    }
}

impl Run<'_> {
    /// Sizing is pure and cheap: checked before anything is written, recorded in its place
    /// ([`Run::record_sizing`]).
    pub(super) fn check_sizing(&self) -> Result<Option<SizingReport>> {
        let Some(path) = &self.cluster.node_image else {
            return Ok(None);
        };
        let image = NodeImage::load(path)?;
        sizing::check(&self.inputs.job, &image, None).map(Some)
    }
}
