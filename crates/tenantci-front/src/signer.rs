//! `tenantci front signer`: the one process of the front that reads a ClientCA key. It listens
//! on a Unix socket (0660), answers only the uid `[renewal] front_uid` names (checked with
//! SO_PEERCRED, whatever the socket's mode), and for each request re-reads the front's config
//! and deny-list itself and applies [`renew::decide`] again: a front that is taken over can
//! ask for renewals of allowed subjects only, never for another subject, a `system:` group or
//! a longer life. One audit line per certificate signed and per refusal (target
//! `tenantci::front::signer::audit`). [`ask`] is the front's side of the socket.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::admit::Client;
use super::config::FrontConfig;
use super::deny::DenyList;
use super::renew::{self, Answer, SignRequest};
use tenantci_core::gateway::layout::StateDir;
use tenantci_core::pki::{CertificateAuthority, ClientCertSpec, KeyType, csr, issue};
use tenantci_core::{Error, Result};

/// Binds the config's `signer_socket` (0660), replacing a socket no signer answers on; refuses
/// when another signer does.
pub fn bind(config: &FrontConfig) -> Result<UnixListener> {
    let path = &config.renewal.signer_socket;
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(Error::bad_input(format!(
                "another signer already answers on `{}`",
                path.display()
            ))
            .hint("stop it first (systemctl stop tenantci-front-signer), or set another [renewal] signer_socket"));
        }
        let _ = std::fs::remove_file(path);
    }
    let listener = UnixListener::bind(path).map_err(|e| {
        Error::bad_input(format!("cannot listen on `{}`", path.display()))
            .caused_by(e)
            .hint("is its directory there and writable by the signer's user?")
    })?;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .map_err(|e| Error::unwritable("the signer's socket", path, e))?;
    Ok(listener)
}

/// The uid the signer answers: the config's `front_uid`, else its own.
pub fn allowed_uid(config: &FrontConfig) -> u32 {
    config.renewal.front_uid.unwrap_or_else(own_uid)
}

fn own_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Answers until `shutdown` turns true; each request re-reads `config_path`.
pub async fn serve(
    config_path: PathBuf,
    listener: UnixListener,
    uid: u32,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                conns.spawn(answer(stream, config_path.clone(), uid));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
}

async fn answer(mut stream: UnixStream, config_path: PathBuf, uid: u32) {
    let peer = stream.peer_cred().map(|c| c.uid()).ok();
    if peer != Some(uid) {
        let shown = peer.map_or_else(|| "unknown".to_string(), |u| u.to_string());
        let line = Outcome::refused("peer_uid", format!("peer uid {shown} is not {uid}"));
        return line.audit("", None, peer);
    }
    let req: SignRequest = match renew::read(&mut stream).await {
        Ok(r) => r,
        Err(why) => return Outcome::refused("bad_message", why).audit("", None, peer),
    };
    let cluster = req.cluster.clone();
    let signed = tokio::task::spawn_blocking(move || sign(&config_path, &req)).await;
    let (outcome, client) = signed.unwrap_or_else(|e| {
        let o = Outcome::refused("signer_failed", format!("the signing task failed: {e}"));
        (o, None)
    });
    outcome.audit(&cluster, client.as_ref(), peer);
    let _ = renew::write(&mut stream, &outcome.answer).await;
}

/// What the signer answered and its audit's fields.
struct Outcome {
    answer: Answer,
}

impl Outcome {
    fn refused(reason: &str, message: impl Into<String>) -> Self {
        Outcome {
            answer: Answer::refused(reason, message),
        }
    }

    fn audit(&self, cluster: &str, client: Option<&Client>, peer_uid: Option<u32>) {
        let subject = client.map(Client::subject).unwrap_or_default();
        let serial = client.map(|c| c.serial.as_str()).unwrap_or("");
        let peer_uid = peer_uid.map_or(-1, i64::from);
        match &self.answer {
            Answer::Signed {
                serial: new_serial,
                not_after,
                ..
            } => tracing::info!(
                target: "tenantci::front::signer::audit",
                cluster, subject = subject.as_str(), serial, peer_uid,
                outcome = "signed", new_serial = new_serial.as_str(), not_after = not_after.as_str(),
                "front signer"
            ),
            Answer::Refused {
                reason, message, ..
            } => tracing::info!(
                target: "tenantci::front::signer::audit",
                cluster, subject = subject.as_str(), serial, peer_uid,
                outcome = "refused", reason = reason.as_str(), message = message.as_str(),
                "front signer"
            ),
        }
    }
}

/// Checks `req` against the config, deny-list and ClientCA read now, and signs it or says why
/// not; the client is the presented certificate, when it parsed.
fn sign(config_path: &Path, req: &SignRequest) -> (Outcome, Option<Client>) {
    let refused = |reason: &str, e: Error| {
        let message = match e.hint_text() {
            Some(h) => format!("{}; {h}", e.message()),
            None => e.message().to_string(),
        };
        Outcome::refused(reason, message)
    };
    let config = match FrontConfig::load(config_path) {
        Ok(c) => c,
        Err(e) => return (refused("signer_config", e), None),
    };
    let deny = match DenyList::load(config.deny_list_path()) {
        Ok(d) => d,
        Err(e) => return (refused("deny_list", e), None),
    };
    let state = StateDir::new(&config.state_dir);
    let paths = state.cluster(&req.cluster);
    let presented = match presented(&req.presented, &paths.client_ca_cert) {
        Ok(c) => c,
        Err(why) => return (Outcome::refused("bad_certificate", why), None),
    };
    let request = match csr::read(&req.csr) {
        Ok(r) => r,
        Err(why) => {
            let o = Outcome::refused("bad_request", format!("the request: {why}"));
            return (o, Some(presented));
        }
    };
    let rule = config.cluster(&req.cluster);
    let max = config.renewal.max_lifetime.get();
    let decided = renew::decide(
        rule,
        &presented,
        &request.subject,
        req.valid_for_seconds,
        max,
        &deny,
    );
    if let Err(r) = decided {
        return (Outcome::refused(r.reason(), r.to_string()), Some(presented));
    }
    let valid_for = Duration::from_secs(req.valid_for_seconds);
    let issued =
        CertificateAuthority::load(&paths.client_ca_cert, &paths.client_ca_key).and_then(|ca| {
            let now = time::OffsetDateTime::now_utc();
            tenantci_core::pki::policy::check_within_ca(valid_for, now, ca.not_after())?;
            let spec = ClientCertSpec {
                common_name: presented.common_name.clone(),
                organizations: presented.organizations.clone(),
                valid_for,
                key_type: KeyType::default(),
            };
            issue::client_cert_for_key(&ca, &spec, &request.public_key)
        });
    let outcome = match issued {
        Ok(cert) => Outcome {
            answer: Answer::Signed {
                version: renew::VERSION,
                serial: super::deny::normalize(&cert.serial_hex).unwrap_or(cert.serial_hex),
                not_after: tenantci_core::pki::inspect::rfc3339(cert.not_after),
                cert: cert.cert_pem,
            },
        },
        Err(e) => refused("signing_failed", e),
    };
    (outcome, Some(presented))
}

/// The presented certificate, checked to chain to the cluster's ClientCA and be valid now.
fn presented(pem_text: &str, client_ca: &Path) -> std::result::Result<Client, String> {
    let der = pem::parse(pem_text.as_bytes())
        .map_err(|e| format!("the presented certificate is not PEM: {e}"))?
        .into_contents();
    let ca = std::fs::read_to_string(client_ca)
        .map_err(|e| format!("cannot read the ClientCA `{}`: {e}", client_ca.display()))?;
    tenantci_core::pki::verify::chains_to(&der, &ca, time::OffsetDateTime::now_utc()).map_err(
        |e| format!("the presented certificate is not a valid one of this cluster's ClientCA: {e}"),
    )?;
    Client::from_der(&der)
}

/// The front's side: one request to the signer on `socket`, its answer. An error says the
/// signer could not be asked (not running, the socket's permissions, a cut answer).
pub async fn ask(socket: &Path, req: &SignRequest) -> std::result::Result<Answer, String> {
    let mut stream = UnixStream::connect(socket)
        .await
        .map_err(|e| format!("cannot reach the signer on `{}`: {e}", socket.display()))?;
    renew::write(&mut stream, req)
        .await
        .map_err(|e| format!("cannot send to the signer: {e}"))?;
    renew::read(&mut stream).await
}
