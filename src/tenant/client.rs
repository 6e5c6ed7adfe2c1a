//! A kube client from a kubeconfig file, with errors that name the file.

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::{Error, Result};

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
    kube::Client::try_from(config).map_err(|e| {
        Error::bad_input(format!(
            "cannot build a client from `{}`: {e}",
            path.display()
        ))
    })
}
