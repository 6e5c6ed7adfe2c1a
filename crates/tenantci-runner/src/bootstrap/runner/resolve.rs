//! Step 1: the tenant cluster from gateway.json and the admin apiserver, or as given; and the
//! node image to size job pods against.

use std::path::PathBuf;

use super::{Inputs, Run, Target};
use crate::credential::CaSource;
use crate::steps::{Outcome, Steps};
use crate::tenant::sizing::{self, SizingReport};
use tenantci_core::gateway::{StateDir, resolve as gateway};
use tenantci_core::kube_client as client;
use tenantci_core::node_image::NodeImage;
use tenantci_core::tls::probe::ServingCa;
use tenantci_core::{Error, Result};

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

/// The cluster, and a tenant-admin client that has reached its apiserver: nothing is minted
/// or applied for a server this run did not reach (exit 3 before any write).
pub(super) async fn resolve(
    inputs: &Inputs,
    steps: &mut Steps<'_>,
) -> Result<(Resolved, kube::Client)> {
    let r = resolve_target(inputs).await?;
    let named = kubeconfig_server(&r.tenant_kubeconfig)?;
    if named.trim_end_matches('/') != r.server.trim_end_matches('/') {
        return Err(Error::bad_input(format!(
            "the tenant kubeconfig `{}` names the apiserver {named}, but cluster `{}` is at {}",
            r.tenant_kubeconfig.display(),
            r.cluster,
            r.server
        ))
        .hint("pass the tenant-admin kubeconfig of that cluster (--tenant-kubeconfig), or the matching --server"));
    }
    verify_serving_ca(inputs, &r).await?;
    let admin = client::from_kubeconfig(&r.tenant_kubeconfig).await?;
    let version = admin.apiserver_version().await.map_err(|e| {
        Error::external(format!(
            "cannot reach the tenant apiserver of cluster `{}` at {}",
            r.cluster, r.server
        ))
        .caused_by(e)
        .hint(UNREACHABLE_HINT)
    })?;
    let state = match inputs.target {
        Target::StateDir { .. } => "Ready, reached",
        Target::Direct { .. } => "reached",
    };
    steps.record(
        "resolve",
        Outcome::Ok,
        format!(
            "cluster {} at {} ({state}: {})",
            r.cluster, r.server, version.git_version
        ),
    );
    Ok((r, admin))
}

/// The serving CA that the credential's `ca.crt` will hold must verify the apiserver: otherwise
/// the runner's every request fails, and only after the credential was minted and the RBAC
/// applied (the tenant-admin kubeconfig may carry a CA of its own that does verify it).
async fn verify_serving_ca(inputs: &Inputs, r: &Resolved) -> Result<()> {
    let (_, _, path) = r.ca.paths()?;
    let (what, fix) = match &inputs.target {
        Target::Direct { .. } => (
            "the serving CA given by --server-ca",
            format!(
                "pass --server-ca naming the CA that signed the certificate of the apiserver at {} (on the gateway: <state>/clusters/{}/pki/serving-ca.crt); nothing was written",
                r.server, r.cluster
            ),
        ),
        Target::StateDir { .. } => (
            "the state directory's serving CA",
            format!(
                "pass the --state-dir of the gateway that runs cluster `{1}` at {0}, or give the cluster directly with --server {0} and --server-ca naming the CA that signed its certificate; nothing was written",
                r.server, r.cluster
            ),
        ),
    };
    let server = format!("the tenant apiserver of cluster `{}`", r.cluster);
    ServingCa {
        what,
        path: &path,
        server: &server,
        url: &r.server,
        fix,
        unreachable_hint: UNREACHABLE_HINT,
    }
    .require()
    .await
}

const UNREACHABLE_HINT: &str = "check that the gateway runs the cluster (`tenantci check-host --role gateway`) and that --server / the tenant kubeconfig name it; nothing was written";

/// The server of the kubeconfig's current context.
fn kubeconfig_server(path: &std::path::Path) -> Result<String> {
    let bad = || {
        Error::bad_input(format!(
            "the tenant kubeconfig `{}` has no current context with a server",
            path.display()
        ))
        .hint("pass the cluster's tenant-admin kubeconfig (--tenant-kubeconfig)")
    };
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| {
        Error::bad_input(format!("cannot read the kubeconfig `{}`", path.display())).caused_by(e)
    })?;
    let context = kc.current_context.as_deref().ok_or_else(bad)?;
    let cluster = kc
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .ok_or_else(bad)?;
    kc.clusters
        .iter()
        .find(|c| c.name == cluster)
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.server.clone())
        .ok_or_else(bad)
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
