//! A kube client from a kubeconfig file, with errors that name the file. Every client built
//! here counts its requests in one process-wide counter ([`requests`]), so commands can report
//! how many apiserver round trips they cost (`bootstrap runner` does, and its benchmark).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::{Error, Result};

static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// Requests sent by clients from [`from_kubeconfig`] since the process started.
pub fn requests() -> u64 {
    REQUESTS.load(Ordering::Relaxed)
}

/// Builds a client for the kubeconfig's current context.
pub async fn from_kubeconfig(path: &Path) -> Result<kube::Client> {
    crate::tls::ensure_crypto_provider();
    let kc = Kubeconfig::read_from(path).map_err(|e| {
        Error::bad_input(format!("cannot read the kubeconfig `{}`: {e}", path.display()))
            .hint("pass --kubeconfig naming a kubeconfig file (e.g. the credential's `kubeconfig` or the cluster's tenant-admin.kubeconfig)")
    })?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| {
            Error::bad_input(format!(
                "the kubeconfig `{}` is not usable: {e}",
                path.display()
            ))
            .hint("check that the certificate, key and CA files it names exist and are readable")
        })?;
    let builder = kube::client::ClientBuilder::try_from(config).map_err(|e| {
        Error::bad_input(format!(
            "cannot build a client from `{}`: {e}",
            path.display()
        ))
    })?;
    let counting = tower::util::MapRequestLayer::new(|req: http::Request<kube::client::Body>| {
        REQUESTS.fetch_add(1, Ordering::Relaxed);
        req
    });
    Ok(builder.with_layer(&counting).build())
}
