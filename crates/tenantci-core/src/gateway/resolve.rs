//! Resolving a tenant cluster by name, as runbook step 2 does by hand: `gateway.json` names the
//! admin kubeconfig, whose apiserver lists `Cluster` objects; the Cluster's `status.url` is the
//! tenant apiserver (`https://127.0.0.1:<leased port>`), and the state dir holds its CAs.

use std::path::{Path, PathBuf};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde::{Deserialize, Serialize};

use super::layout::{ClusterPaths, StateDir, validate_cluster_name};
use crate::{Error, Result};

/// API group of the gateway's `Cluster` objects.
pub const CLUSTER_GROUP: &str = "tenancy.socialweb.computer";
/// API version of the gateway's `Cluster` objects.
pub const CLUSTER_VERSION: &str = "v1alpha1";
/// Kind of the gateway's `Cluster` objects (cluster-scoped).
pub const CLUSTER_KIND: &str = "Cluster";
/// Resource name (plural) of the gateway's `Cluster` objects.
pub const CLUSTER_PLURAL: &str = "clusters";

/// `gateway.json`: the fields tenantci reads; others are kept by the gateway.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayJson {
    /// The gateway admin's kubeconfig; relative to the state directory when not absolute.
    pub admin_kubeconfig: PathBuf,
    /// The state directory as the gateway records it; `None` when the file leaves it out.
    /// Resolution does not use it: paths are taken from the `StateDir` given.
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
}

impl GatewayJson {
    /// Reads `<state>/gateway.json` (bounded by `input::MAX_CONFIG`); bad input (exit 2) when it
    /// is missing, unreadable or not valid JSON with `adminKubeconfig`.
    pub fn load(state: &StateDir) -> Result<Self> {
        let path = state.gateway_json();
        let text = crate::input::read_text("the gateway's gateway.json", &path, crate::input::MAX_CONFIG)
            .map_err(|e| {
                if path.exists() {
                    return e;
                }
                Error::bad_input(format!("cannot read `{}`", path.display())).caused_by(e)
                    .hint("pass the gateway's --state-dir (the directory that holds gateway.json); is the gateway installed?")
            })?;
        serde_json::from_str(&text).map_err(|e| {
            Error::bad_input(format!("`{}` is not a valid gateway.json", path.display()))
                .caused_by(e)
                .hint("restore it from the gateway; it must name adminKubeconfig")
        })
    }
}

/// A tenant cluster, resolved.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedCluster {
    /// The cluster's name, as `metadata.name` of its `Cluster` object.
    pub name: String,
    /// The tenant apiserver, the Cluster's `status.url` (`https://127.0.0.1:<leased port>`).
    pub url: String,
    /// The CA certificate that signed the tenant apiserver's serving certificate.
    pub serving_ca: PathBuf,
    /// The ClientCA certificate, which signs tenant credentials.
    pub client_ca_cert: PathBuf,
    /// The ClientCA's private key (0600).
    pub client_ca_key: PathBuf,
    /// The tenant cluster's admin kubeconfig.
    pub tenant_admin_kubeconfig: PathBuf,
}

/// The `Cluster` resource, for a dynamic kube `Api`.
pub fn cluster_api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(CLUSTER_GROUP, CLUSTER_VERSION, CLUSTER_KIND),
        CLUSTER_PLURAL,
    )
}

/// Resolves `name` through the gateway's admin apiserver. The Cluster must be Ready.
pub async fn resolve(state: &StateDir, name: &str) -> Result<ResolvedCluster> {
    validate_cluster_name(name)?;
    Resolver::open(state).await?.resolve(name).await
}

/// One admin client kept for many resolutions (the front resolves at every connection, since
/// a cluster's leased port can change).
#[derive(Clone)]
pub struct Resolver {
    state: StateDir,
    admin: kube::Client,
}

impl Resolver {
    /// Reads `gateway.json` and builds a client from the admin kubeconfig it names; errors when
    /// either is missing or invalid.
    pub async fn open(state: &StateDir) -> Result<Self> {
        let gateway = GatewayJson::load(state)?;
        let admin_path = absolute_to(state.root(), &gateway.admin_kubeconfig);
        let admin = crate::kube_client::from_kubeconfig(&admin_path).await?;
        Ok(Resolver {
            state: state.clone(),
            admin,
        })
    }

    /// The Cluster `name`, which must be Ready.
    pub async fn resolve(&self, name: &str) -> Result<ResolvedCluster> {
        validate_cluster_name(name)?;
        read_cluster(&self.state, self.admin.clone(), name).await
    }
}

async fn read_cluster(
    state: &StateDir,
    admin: kube::Client,
    name: &str,
) -> Result<ResolvedCluster> {
    let api: Api<DynamicObject> = Api::all_with(admin, &cluster_api_resource());
    let cluster = api.get_opt(name).await.map_err(|e| {
        Error::external(format!(
            "cannot read Cluster `{name}` from the gateway's admin apiserver"
        ))
        .caused_by(e)
        .hint("is the gateway up? `kubectl --kubeconfig <admin> get clusters` should list it")
    })?;
    let Some(cluster) = cluster else {
        return Err(Error::bad_input(format!("the gateway has no Cluster `{name}`"))
            .hint("`kubectl --kubeconfig <admin> get clusters` lists the clusters; pass one of them as --cluster"));
    };
    let status = cluster.data.get("status");
    let phase = status
        .and_then(|s| s.get("phase"))
        .and_then(|p| p.as_str())
        .unwrap_or("");
    let url = status
        .and_then(|s| s.get("url"))
        .and_then(|u| u.as_str())
        .unwrap_or("");
    if phase != "Ready" || url.is_empty() {
        return Err(Error::check_failed(format!(
            "Cluster `{name}` is not Ready (phase `{phase}`{})",
            if url.is_empty() {
                ", no status.url"
            } else {
                ""
            }
        ))
        .hint("wait for the gateway to finish provisioning it, then re-run"));
    }
    let ClusterPaths {
        serving_ca_cert,
        client_ca_cert,
        client_ca_key,
        tenant_admin_kubeconfig,
        ..
    } = state.cluster(name);
    Ok(ResolvedCluster {
        name: name.to_string(),
        url: url.to_string(),
        serving_ca: serving_ca_cert,
        client_ca_cert,
        client_ca_key,
        tenant_admin_kubeconfig,
    })
}

fn absolute_to(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}
