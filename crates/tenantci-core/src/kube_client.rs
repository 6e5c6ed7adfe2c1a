//! A kube client from a kubeconfig file (or one held in memory), with errors that name it, and
//! the one sentence a failed apiserver call becomes ([`api_error`]). Every client built here
//! counts its requests in one process-wide counter ([`requests`]), so commands can report how
//! many apiserver round trips they cost (`bootstrap runner` does, and its benchmark).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::{Error, Result};

static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// Requests sent since the process started by every client built here ([`from_kubeconfig`],
/// [`from_kubeconfig_yaml`]).
pub fn requests() -> u64 {
    REQUESTS.load(Ordering::Relaxed)
}

/// Builds a client for the kubeconfig's current context.
pub async fn from_kubeconfig(path: &Path) -> Result<kube::Client> {
    // The kind and size first: kube reads whatever the path names, a FIFO or /dev/zero too.
    crate::input::read_bytes("the kubeconfig", path, crate::input::MAX_CONFIG)?;
    let kc = Kubeconfig::read_from(path).map_err(|e| {
        Error::bad_input(format!("cannot read the kubeconfig `{}`", path.display())).caused_by(e)
            .hint("pass --kubeconfig naming a kubeconfig file (e.g. the credential's `kubeconfig` or the cluster's tenant-admin.kubeconfig)")
    })?;
    from_parsed(kc, &format!("`{}`", path.display())).await
}

/// Builds a client from a kubeconfig held in memory (`kubeconfig::render`); `what` names it
/// in errors ("the runner entry's credential").
pub async fn from_kubeconfig_yaml(yaml: &str, what: &str) -> Result<kube::Client> {
    let kc = Kubeconfig::from_yaml(yaml)
        .map_err(|e| Error::bad_input(format!("{what} does not make a kubeconfig")).caused_by(e))?;
    from_parsed(kc, what).await
}

async fn from_parsed(kc: Kubeconfig, what: &str) -> Result<kube::Client> {
    crate::tls::ensure_crypto_provider();
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| {
            Error::bad_input(format!("the kubeconfig {what} is not usable"))
                .caused_by(e)
                .hint(
                    "check that the certificate, key and CA files it names exist and are readable",
                )
        })?;
    let builder = kube::client::ClientBuilder::try_from(config)
        .map_err(|e| Error::bad_input(format!("cannot build a client from {what}")).caused_by(e))?;
    let counting = tower::util::MapRequestLayer::new(|req: http::Request<kube::client::Body>| {
        REQUESTS.fetch_add(1, Ordering::Relaxed);
        req
    });
    Ok(builder.with_layer(&counting).build())
}

/// One sentence for a failed apiserver call: `what` is the action ("apply Namespace `x`"),
/// `forbidden_hint` the fix for a 403 (it depends on which credential the caller used).
pub fn api_error(e: kube::Error, what: &str, forbidden_hint: &str) -> Error {
    // The Status message, bounded; without one, the HTTP status (a proxy's page has none).
    let detail = |code: u16, message: &str| crate::upstream::detail(code, "", message, b"");
    match &e {
        kube::Error::Api(s) if s.code == 403 => {
            Error::bad_input(format!("the tenant apiserver refused to {what}: {}", detail(s.code, &s.message))).hint(forbidden_hint.to_string())
        }
        kube::Error::Api(s) if s.code == 401 => Error::bad_input(format!("the tenant apiserver did not accept the credential when trying to {what}"))
            .hint("the kubeconfig's certificate is not signed by this cluster's ClientCA"),
        kube::Error::Api(s) => Error::external(format!("the tenant apiserver failed to {what}: {} ({})", detail(s.code, &s.message), s.code)),
        _ => Error::external(format!("cannot reach the tenant apiserver to {what}")).caused_by(e)
            .hint("the apiserver binds loopback on the gateway host; is the gateway up? (`tenantci check-host`)"),
    }
}
