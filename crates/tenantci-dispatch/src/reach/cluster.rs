//! The dispatcher's namespace as a reader's kubeconfig sees it: the client (a kubeconfig that
//! does not parse, a context it lacks: one sentence each), the leader from the Lease, and one
//! sentence with its fix for every refusal.

use std::path::PathBuf;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::lease::{self, Holder};
use crate::leader::LEASE_NAME;
use tenantci_core::{Error, Result};

/// The reader's Role the manifests ship, named in every RBAC refusal.
pub const READER_ROLE: &str = "tenantci-status-reader";
/// Where the in-cluster Deployment's status API listens in its Pod (`status.listen`,
/// `127.0.0.1:9464`).
pub const DEFAULT_STATUS_PORT: u16 = 9464;
/// The in-cluster dispatcher's namespace in the manifests.
pub const DEFAULT_NAMESPACE: &str = "tenantci-system";

/// Which cluster and dispatcher to reach.
#[derive(Debug, Clone)]
pub struct Target {
    /// A kubeconfig file; None: kube's default (`KUBECONFIG`, else `~/.kube/config`).
    pub kubeconfig: Option<PathBuf>,
    /// A context of it; None: its current context.
    pub context: Option<String>,
    /// The dispatcher's namespace (its Lease and Pods).
    pub namespace: String,
    /// The status API's port inside the Pod.
    pub status_port: u16,
}

/// A dispatcher's namespace as this client may read it.
pub struct Dispatcher {
    /// Its namespace.
    pub namespace: String,
    /// The status API's port inside its Pods.
    pub status_port: u16,
    leases: Api<Lease>,
    pub(super) pods: Api<Pod>,
}

/// A kube client for `kubeconfig` (or kube's default file) and `context`: one sentence for a
/// file that does not parse and for a context it does not have.
pub async fn client(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> Result<kube::Client> {
    let (kc, what) = match kubeconfig {
        Some(path) => {
            let what = format!("the kubeconfig `{}`", path.display());
            tenantci_core::input::read_bytes(
                "the kubeconfig",
                path,
                tenantci_core::input::MAX_CONFIG,
            )?;
            let kc = Kubeconfig::read_from(path).map_err(|e| {
                Error::bad_input(format!("{what} does not parse as a kubeconfig"))
                    .caused_by(e)
                    .hint("give --kubeconfig a file kubectl reads (`kubectl --kubeconfig FILE config view`)")
            })?;
            (kc, what)
        }
        None => {
            let kc = Kubeconfig::read().map_err(|e| {
                Error::bad_input("no kubeconfig to read: KUBECONFIG and ~/.kube/config are missing or do not parse")
                    .caused_by(e)
                    .hint("give --kubeconfig FILE (the cluster's kubeconfig), or --config / --status-address for a dispatcher on this host")
            })?;
            (
                kc,
                "the default kubeconfig (KUBECONFIG or ~/.kube/config)".to_string(),
            )
        }
    };
    if let Some(context) = context
        && !kc.contexts.iter().any(|c| c.name == context)
    {
        let names: Vec<&str> = kc.contexts.iter().map(|c| c.name.as_str()).collect();
        return Err(Error::bad_input(format!(
            "{what} has no context `{}` (it has: {})",
            tenantci_core::input::shown(context),
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ))
        .hint("give --context one of them (`kubectl config get-contexts`)"));
    }
    tenantci_core::tls::ensure_crypto_provider();
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kc, &options)
        .await
        .map_err(|e| {
            Error::bad_input(format!("{what} is not usable"))
                .caused_by(e)
                .hint("check its current context, and that the certificate, key and CA files it names exist")
        })?;
    kube::Client::try_from(config)
        .map_err(|e| Error::bad_input(format!("cannot build a client from {what}")).caused_by(e))
}

impl Dispatcher {
    /// The dispatcher's namespace through `target`'s kubeconfig and context.
    pub async fn connect(target: &Target) -> Result<Dispatcher> {
        let client = client(target.kubeconfig.as_deref(), target.context.as_deref()).await?;
        Ok(Dispatcher {
            namespace: target.namespace.clone(),
            status_port: target.status_port,
            leases: Api::namespaced(client.clone(), &target.namespace),
            pods: Api::namespaced(client, &target.namespace),
        })
    }

    /// The leader's Pod: the Lease's live holder, which must exist.
    pub async fn leader(&self) -> Result<String> {
        let ns = &self.namespace;
        let lease = self
            .leases
            .get_opt(LEASE_NAME)
            .await
            .map_err(|e| self.refused(e, &format!("read the Lease {LEASE_NAME}")))?
            .ok_or_else(|| {
                Error::bad_input(format!(
                    "no dispatcher in namespace {ns}: it has no Lease {LEASE_NAME}"
                ))
                .hint("give --namespace the namespace the dispatcher's Deployment runs in (`kubectl get leases -A --field-selector metadata.name=dynamic-runner-scheduler`)")
            })?;
        let pod = match lease::holder(lease.spec.as_ref(), k8s_openapi::jiff::Timestamp::now()) {
            Holder::Live(pod) => pod,
            Holder::Nobody => {
                return Err(Error::bad_input(format!(
                    "no dispatcher leads in namespace {ns}: the Lease {LEASE_NAME} has no holder (released, or no replica has started)"
                ))
                .hint(format!("check the dispatcher's Pods (`kubectl -n {ns} get pods`) and try again once one leads")));
            }
            Holder::Expired {
                holder,
                age_seconds,
            } => {
                let since = age_seconds.map_or_else(|| "ever".to_string(), |s| format!("{s}s"));
                return Err(Error::bad_input(format!(
                    "no live leader in namespace {ns}: the Lease {LEASE_NAME}'s holder {holder} has not renewed it for {since}"
                ))
                .hint(format!("the leader is gone or cut off from the apiserver and no standby took over: check the Pods (`kubectl -n {ns} get pods`)")));
            }
        };
        match self.pods.get_opt(&pod).await {
            Ok(Some(_)) => Ok(pod),
            Ok(None) => Err(self.pod_gone(&pod)),
            Err(e) => Err(self.refused(e, &format!("read Pod {pod}"))),
        }
    }

    fn pod_gone(&self, pod: &str) -> Error {
        let ns = &self.namespace;
        Error::bad_input(format!(
            "the Lease {LEASE_NAME} names Pod {pod} as the leader, but that Pod is gone from namespace {ns}"
        ))
        .hint("a standby takes the Lease over within its duration: try again in a few seconds")
    }

    /// One sentence for a refused or failed call, `what` the action.
    fn refused(&self, e: kube::Error, what: &str) -> Error {
        let ns = &self.namespace;
        match &e {
            kube::Error::Api(s) if s.code == 403 => Error::bad_input(format!(
                "the apiserver refused to {what} in namespace {ns}: {}",
                bounded(&s.message)
            ))
            .hint(format!(
                "bind the Role {READER_ROLE} (manifests/dispatch/status-reader.yaml) in namespace {ns} to this kubeconfig's user or group"
            )),
            kube::Error::Api(s) if s.code == 401 => Error::bad_input(format!(
                "the apiserver did not accept this kubeconfig's credential when trying to {what}"
            ))
            .hint("renew the kubeconfig's credential"),
            _ => tenantci_core::kube_client::api_error(e, &format!("{what} in namespace {ns}"), ""),
        }
    }

    /// One sentence for a refused port-forward to `pod`.
    pub fn forward_refused(&self, pod: &str, e: kube::Error) -> Error {
        match &e {
            kube::Error::Api(s) if s.code == 404 => self.pod_gone(pod),
            _ => self.refused(
                e,
                &format!("port-forward to Pod {pod} (pods/portforward: get and create)"),
            ),
        }
    }
}

/// An apiserver's or kubelet's message, bounded: its Status text names the user, the verb and
/// the resource, which the reader needs whole; a hostile server's megabyte is cut.
pub(crate) fn bounded(message: &str) -> String {
    const MAX: usize = 400;
    match message.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}... ({} bytes)", &message[..at], message.len()),
        None => message.to_string(),
    }
}
