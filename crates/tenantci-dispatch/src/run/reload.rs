//! Renewed files taken up by a running dispatcher, without a restart: the facade certificate
//! (`facade.cert_file` / `key_file`) and, on the gateway path, the client credential the
//! kubeconfig names. `dispatch renew` (or `dispatch init`) writes them; every
//! [`CHECK_EVERY`] and at SIGHUP this compares what is on disk with what is in use.
//!
//! A changed file is checked before it is used, as at start: the facade pair with
//! `facade::cert::check` (key, facade CA, host, clock), the credential's certificate against
//! its key and the clock, then a client built from the kubeconfig. A pair that fails is
//! refused with one warning naming the file, and the one in use stays (a half-written renewal
//! is seen again, whole, at the next check). What was taken is logged and its end exported
//! (`facade_cert_expiry_days`, `credential_expiry_days`).
//!
//! Comparing contents rather than watching for events keeps one mechanism for a host's files
//! (renamed into place) and a Pod's Secret volume (the kubelet swaps a symlink): both show up
//! as other bytes at the next check.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::config::Config;
use crate::facade::cert as facade_cert;
use crate::facade::serving::ServingCert;
use crate::metrics::Metrics;
use crate::run::credential;
use crate::run::kube_swap::SwappableClient;
use tenantci_core::input::{self, MAX_PEM};
use tenantci_core::pki::inspect::rfc3339;
use tenantci_core::{Error, Result};

/// How often the files are compared (a renewal runs days before anything expires).
pub const CHECK_EVERY: Duration = Duration::from_secs(60);

/// The facade's files and the certificate serving them.
pub struct FacadeFiles {
    /// `[facade]`: the certificate, key and CA files.
    pub facade: crate::facade::settings::Facade,
    /// `facade.url`'s host, which a new certificate must cover.
    pub host: String,
    /// What the facade's TLS server presents; a new pair is swapped in here.
    pub serving: Arc<ServingCert>,
}

/// The kubeconfig of the gateway path and the client built from it.
pub struct KubeFiles {
    /// `cluster.kubeconfig`.
    pub kubeconfig: PathBuf,
    /// The dispatcher's client; a client for a new credential is swapped in here.
    pub client: SwappableClient,
}

/// What the reloader compares against: the digest of what is in use, and of the last
/// refused contents (so a bad file is reported once, not every minute).
#[derive(Default)]
struct Seen {
    in_use: Option<[u8; 32]>,
    refused: Option<[u8; 32]>,
}

impl Seen {
    fn using(in_use: Option<[u8; 32]>) -> Seen {
        Seen {
            in_use,
            refused: None,
        }
    }

    /// True when `digest` is neither in use nor already refused.
    fn is_new(&self, digest: [u8; 32]) -> bool {
        self.in_use != Some(digest) && self.refused != Some(digest)
    }
}

/// Takes up renewed files: the facade pair and (gateway path) the client credential.
pub struct Reloader {
    facade: Option<(FacadeFiles, Seen)>,
    kube: Option<(KubeFiles, Seen)>,
    metrics: Arc<Metrics>,
}

fn digest(parts: &[&str]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    h.finalize().into()
}

impl Reloader {
    /// Starts from the files as `dispatch run` loaded them.
    pub fn new(
        facade: Option<FacadeFiles>,
        kube: Option<KubeFiles>,
        metrics: Arc<Metrics>,
    ) -> Reloader {
        let facade = facade.map(|f| {
            let seen = Seen::using(facade_digest(&f.facade).ok());
            (f, seen)
        });
        let kube = kube.map(|k| {
            let seen = Seen::using(kube_digest(&k.kubeconfig));
            (k, seen)
        });
        Reloader {
            facade,
            kube,
            metrics,
        }
    }

    /// Compares every file once and takes up what changed and passes.
    pub async fn check(&mut self) {
        if let Some((files, seen)) = &mut self.facade {
            reload_facade(files, seen, &self.metrics);
        }
        if let Some((files, seen)) = &mut self.kube {
            reload_kube(files, seen, &self.metrics).await;
        }
    }

    /// Checks every [`CHECK_EVERY`] and at each SIGHUP until `stop` turns true.
    /// The SIGHUP handler is installed before this returns (so before `dispatch run` says it
    /// listens): a SIGHUP's default action would end the process.
    pub fn spawn(mut self, mut stop: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
        let hangup = tokio::signal::unix::SignalKind::hangup();
        let mut hup = match tokio::signal::unix::signal(hangup) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGHUP; renewed files are checked every minute only");
                None
            }
        };
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(CHECK_EVERY);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tick.tick() => {}
                    Some(()) = async { match &mut hup { Some(h) => h.recv().await, None => None } } => {
                        tracing::info!("SIGHUP: checking the facade certificate and the credential for renewed files");
                    }
                }
                self.check().await;
            }
        })
    }
}

fn facade_digest(f: &crate::facade::settings::Facade) -> Result<[u8; 32]> {
    let cert = input::read_text("the facade certificate", &f.cert_file, MAX_PEM)?;
    let key = input::read_private("the facade key", &f.key_file, MAX_PEM)?;
    let ca = input::read_text("the facade CA certificate", &f.ca_cert_file, MAX_PEM)?;
    Ok(digest(&[&cert, &key, &ca]))
}

fn reload_facade(files: &FacadeFiles, seen: &mut Seen, metrics: &Metrics) {
    let Ok(d) = facade_digest(&files.facade) else {
        // Unreadable now (a rename in progress, a Secret volume being swapped): the next
        // check sees the whole file; a file that stays away is refused by the load below.
        return;
    };
    if !seen.is_new(d) {
        return;
    }
    let taken = facade_cert::load(&files.facade, &files.host, time::OffsetDateTime::now_utc())
        .and_then(|l| {
            files.serving.swap(&l.cert_pem, &l.key_pem)?;
            Ok(l.valid)
        });
    match taken {
        Ok(valid) => {
            seen.in_use = Some(d);
            metrics.facade_cert_expiry(valid.not_after);
            tracing::info!(
                cert = %files.facade.cert_file.display(),
                "took up the renewed facade certificate, valid until {}; new connections get it",
                rfc3339(valid.not_after)
            );
        }
        Err(e) => {
            seen.refused = Some(d);
            tracing::warn!(
                cert = %files.facade.cert_file.display(),
                "refused the changed facade certificate, the one in use stays: {}",
                e.message()
            );
        }
    }
}

fn kube_digest(kubeconfig: &std::path::Path) -> Option<[u8; 32]> {
    let text = input::read_text("the kubeconfig", kubeconfig, input::MAX_CONFIG).ok()?;
    let m = credential::material(kubeconfig)?;
    Some(digest(&[
        &text,
        &m.cert_pem,
        m.key_pem.as_deref().unwrap_or(""),
    ]))
}

async fn reload_kube(files: &KubeFiles, seen: &mut Seen, metrics: &Metrics) {
    let Some(d) = kube_digest(&files.kubeconfig) else {
        return;
    };
    if !seen.is_new(d) {
        return;
    }
    match renewed_client(&files.kubeconfig).await {
        Ok((client, m)) => {
            files.client.swap(client);
            seen.in_use = Some(d);
            let user = m.cert.common_name.clone().unwrap_or_default();
            metrics.credential_expiry(&user, m.cert.not_after);
            tracing::info!(
                kubeconfig = %files.kubeconfig.display(),
                serial = %m.cert.serial_hex,
                "took up the renewed client credential, valid until {}; later apiserver requests use it",
                rfc3339(m.cert.not_after)
            );
        }
        Err(e) => {
            seen.refused = Some(d);
            tracing::warn!(
                kubeconfig = %files.kubeconfig.display(),
                "refused the changed client credential, the one in use stays: {}",
                e.message()
            );
        }
    }
}

/// The credential the kubeconfig names, checked (its key, its validity), and a client on it.
async fn renewed_client(
    kubeconfig: &std::path::Path,
) -> Result<(kube::Client, credential::Material)> {
    let shown = kubeconfig.display();
    let m = credential::material(kubeconfig).ok_or_else(|| {
        Error::bad_input(format!("`{shown}` names no readable client certificate"))
    })?;
    let key = m
        .key_pem
        .as_deref()
        .ok_or_else(|| Error::bad_input(format!("`{shown}` names no readable client key")))?;
    if !tenantci_core::pki::verify::key_matches(&m.cert.spki_der, key).unwrap_or(false) {
        return Err(Error::bad_input(format!(
            "the client key `{shown}` names is not the key of its certificate"
        )));
    }
    let now = time::OffsetDateTime::now_utc();
    if now < m.cert.not_before || now >= m.cert.not_after {
        return Err(Error::bad_input(format!(
            "the client certificate `{shown}` names is valid only from {} to {}",
            rfc3339(m.cert.not_before),
            rfc3339(m.cert.not_after)
        )));
    }
    let client = tenantci_core::kube_client::from_kubeconfig(kubeconfig).await?;
    Ok((client, m))
}

/// What `dispatch run` watches for `cfg`: the facade files unless the facade serves SPIFFE
/// mTLS, the kubeconfig unless the dispatcher runs in the cluster.
pub fn watched(
    cfg: &Config,
    host: String,
    serving: Option<Arc<ServingCert>>,
    client: Option<SwappableClient>,
) -> (Option<FacadeFiles>, Option<KubeFiles>) {
    let facade = serving.map(|serving| FacadeFiles {
        facade: cfg.facade.clone(),
        host,
        serving,
    });
    let kube = match (&cfg.cluster.kubeconfig, client) {
        (Some(path), Some(client)) => Some(KubeFiles {
            kubeconfig: path.clone(),
            client,
        }),
        _ => None,
    };
    (facade, kube)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tenantci_core::pki::CertificateAuthority;
    use tenantci_core::pki::issue::server_cert;

    fn write(path: &std::path::Path, text: &str) {
        tenantci_core::fsutil::write_atomic(path, text.as_bytes(), 0o600).unwrap();
    }

    fn facade_in(dir: &std::path::Path) -> crate::facade::settings::Facade {
        crate::facade::settings::Facade {
            listen: "127.0.0.1:0".parse().unwrap(),
            url: "https://127.0.0.1:8443".into(),
            capability_key_file: dir.join("capability.key"),
            ca_cert_file: dir.join("facade-ca.crt"),
            cert_file: dir.join("facade.crt"),
            key_file: dir.join("facade.key"),
        }
    }

    fn issue(ca: &CertificateAuthority, f: &crate::facade::settings::Facade, days: u64) -> String {
        let host = ["127.0.0.1".to_string()];
        let c = server_cert(ca, &host[0], &host, Duration::from_secs(86400 * days)).unwrap();
        write(&f.key_file, &c.key_pem);
        write(&f.cert_file, &c.cert_pem);
        c.cert_pem
    }

    fn served(s: &ServingCert) -> Vec<u8> {
        s.current_der()
    }

    #[tokio::test]
    async fn a_renewed_pair_is_taken_up_and_a_foreign_one_refused_once() {
        let dir = tempfile::tempdir().unwrap();
        let f = facade_in(dir.path());
        let ca =
            CertificateAuthority::generate("facade", Duration::from_secs(86400 * 400)).unwrap();
        write(&f.ca_cert_file, ca.cert_pem());
        let first = issue(&ca, &f, 10);
        let key = std::fs::read_to_string(&f.key_file).unwrap();
        let serving = ServingCert::new(&first, &key).unwrap();
        let metrics = Arc::new(Metrics::default());
        let files = FacadeFiles {
            facade: f.clone(),
            host: "127.0.0.1".into(),
            serving: serving.clone(),
        };
        let mut r = Reloader::new(Some(files), None, metrics.clone());
        r.check().await;
        assert_eq!(
            served(&serving),
            der(&first),
            "unchanged files: nothing to do"
        );

        let renewed = issue(&ca, &f, 365);
        r.check().await;
        assert_eq!(served(&serving), der(&renewed));
        assert!(
            metrics
                .render()
                .contains("tenantci_dispatch_facade_cert_expiry_days 36")
        );

        let other =
            CertificateAuthority::generate("other", Duration::from_secs(86400 * 400)).unwrap();
        issue(&other, &f, 365);
        r.check().await;
        assert_eq!(served(&serving), der(&renewed), "the one in use stays");
        let (_, seen) = r.facade.as_ref().unwrap();
        assert!(seen.refused.is_some() && seen.in_use.is_some());
        assert!(
            !seen.is_new(seen.refused.unwrap()),
            "refused once, not every minute"
        );
    }

    fn der(pem_text: &str) -> Vec<u8> {
        pem::parse(pem_text).unwrap().contents().to_vec()
    }
}
