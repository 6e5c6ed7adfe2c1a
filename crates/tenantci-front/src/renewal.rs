//! `front connect`'s renewal of the runner's certificate before it ends, as the kubelet renews
//! its own: at a fraction of its life ([`schedule`], pure) a new key is made here (it never
//! leaves this host), a request for the same subject goes to the front over the outer session
//! ([`super::renew_alpn_for`]), and the certificate signed by the cluster's ClientCA is written
//! with the new key (0600) into the bundle (what `connect` reads) and gitlab-runner's credential
//! directory, the pair swapped by one rename (its config.toml unchanged). New tunnels then
//! present it; open ones run on. A failure is retried with backoff, logged with what to do,
//! and counted; the current certificate's end is a metric (`tenantci_front_connect_*`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::bundle::Bundle;
use super::connect::Dialer;
use super::metrics::ConnectMetrics;
use super::renew::{self, Answer, RenewRequest};
use tenantci_core::pki::inspect::CertInfo;
use tenantci_core::pki::issue::CLOCK_SKEW_ALLOWANCE;
use tenantci_core::pki::{KeyType, csr};
use tenantci_core::secret::Secret;

/// The default point of renewal: two thirds of the certificate's life.
pub const DEFAULT_RENEW_AT: f64 = 2.0 / 3.0;
/// The first retry's wait; each next one doubles, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(2);
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// When to renew a certificate valid from `not_before` to `not_after` (Unix seconds), and the
/// lifetime to ask for: its own. tenantci's certificates start [`CLOCK_SKEW_ALLOWANCE`] before
/// they were issued, so a validity longer than that is counted from then.
pub fn schedule(not_before: i64, not_after: i64, fraction: f64) -> (i64, u64) {
    let skew = i64::try_from(CLOCK_SKEW_ALLOWANCE.as_secs()).unwrap_or(0);
    let total = not_after.saturating_sub(not_before);
    let issued = if total > skew {
        not_before.saturating_add(skew)
    } else {
        not_before
    };
    let life = not_after.saturating_sub(issued).max(1);
    let after = (life as f64 * fraction.clamp(0.0, 1.0)) as i64;
    (issued.saturating_add(after), life.unsigned_abs())
}

/// What renewal needs besides the bundle.
#[derive(Debug, Clone)]
pub struct Options {
    /// The bundle file `connect` reads: rewritten with each new certificate and key.
    pub bundle_path: PathBuf,
    /// gitlab-runner's credential directory (`front unpack`'s): its tls.crt and tls.key are
    /// replaced too. None: only the bundle.
    pub runner_dir: Option<PathBuf>,
    /// The fraction of the life after which to renew, in (0, 1).
    pub renew_at: f64,
    /// The lifetime to ask for; None: the current certificate's.
    pub valid_for: Option<Duration>,
}

/// Renews until `shutdown`; each new certificate's dialer is sent on `dialers`.
pub async fn run(
    mut bundle: Bundle,
    options: Options,
    dialers: watch::Sender<Arc<Dialer>>,
    metrics: Arc<ConnectMetrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let Ok(info) = CertInfo::from_pem(&bundle.cert) else {
            return tracing::warn!(
                "front connect: the bundle's certificate does not read; no renewal (write a new bundle with `tenantci front bundle`)"
            );
        };
        let (not_before, not_after) = (
            info.not_before.unix_timestamp(),
            info.not_after.unix_timestamp(),
        );
        metrics.set_cert(not_before, not_after);
        let (at, life) = schedule(not_before, not_after, options.renew_at);
        let life = options.valid_for.map_or(life, |d| d.as_secs());
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let wait = Duration::from_secs(u64::try_from(at.saturating_sub(now)).unwrap_or(0));
        tracing::info!(
            serial = info.serial_hex.as_str(),
            renew_in_seconds = wait.as_secs(),
            "front connect: certificate valid until {}",
            tenantci_core::pki::inspect::rfc3339(info.not_after)
        );
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => return,
        }
        let Some(next) = renew_with_retries(&bundle, &options, life, &metrics, &mut shutdown).await
        else {
            return;
        };
        match Dialer::new(&next) {
            Ok(d) => {
                let _ = dialers.send(Arc::new(d));
                bundle = next;
            }
            Err(e) => tracing::warn!(
                "front connect: the renewed certificate cannot be used: {}; still presenting the old one",
                e.message()
            ),
        }
    }
}

/// Renews, retrying with backoff; None at shutdown.
async fn renew_with_retries(
    bundle: &Bundle,
    options: &Options,
    life: u64,
    metrics: &ConnectMetrics,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Bundle> {
    let mut backoff = FIRST_BACKOFF;
    loop {
        match renew_once(bundle, options, life).await {
            Ok((next, serial)) => {
                metrics.renewal("renewed");
                tracing::info!(
                    serial = serial.as_str(),
                    "front connect: renewed the certificate; new tunnels present serial {serial}"
                );
                return Some(next);
            }
            Err((reason, why)) => {
                metrics.renewal(&reason);
                tracing::warn!(
                    reason = reason.as_str(),
                    "front connect: cannot renew the certificate: {why}; retrying in {backoff:?}. If this goes on, the certificate expires and the runner stops: check the front's and the signer's audit (`journalctl -u tenantci-front-signer`), or write a new bundle with `tenantci front bundle`"
                );
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.changed() => return None,
        }
        backoff = backoff.saturating_mul(2).min(MAX_BACKOFF);
    }
}

type Failure = (String, String);

/// One renewal: the new key and request, the front asked, the answer checked and written.
async fn renew_once(
    bundle: &Bundle,
    options: &Options,
    life: u64,
) -> Result<(Bundle, String), Failure> {
    let failed = |reason: &str, why: String| (reason.to_string(), why);
    let info = CertInfo::from_pem(&bundle.cert).map_err(|e| failed("bad_certificate", e))?;
    let id = info
        .identity()
        .map_err(|a| failed("bad_certificate", a.to_string()))?;
    let request = csr::new_request(&id.user, &id.groups, KeyType::default())
        .map_err(|e| failed("key", e.message().to_string()))?;
    let answer = ask_front(bundle, &request.csr_pem, life).await?;
    let cert = match answer {
        Answer::Signed { cert, .. } => cert,
        Answer::Refused {
            reason, message, ..
        } => {
            return Err(failed(
                &format!("refused_{reason}"),
                format!("the front refused: {message}"),
            ));
        }
    };
    let signed = CertInfo::from_pem(&cert).map_err(|e| failed("bad_answer", e))?;
    let key_ok =
        tenantci_core::pki::verify::key_matches(&signed.spki_der, request.key_pem.expose());
    if signed.identity().ok() != Some(id) || key_ok != Ok(true) {
        return Err(failed(
            "bad_answer",
            "the answer is not a certificate of this subject and the new key".into(),
        ));
    }
    let serial = signed.serial_hex.clone();
    let next = Bundle {
        cert,
        key: Secret::new(request.key_pem.expose()),
        ..bundle.clone()
    };
    write_files(&next, options, &serial).map_err(|e| failed("write", e))?;
    Ok((next, serial))
}

async fn ask_front(bundle: &Bundle, csr_pem: &str, life: u64) -> Result<Answer, Failure> {
    let unreachable = |why: String| ("unreachable".to_string(), why);
    let dialer = Dialer::new(bundle).map_err(|e| unreachable(e.message().to_string()))?;
    let mut session = dialer
        .dial_renewal()
        .await
        .map_err(|e| unreachable(format!("cannot reach the front at {}: {e}", bundle.front)))?;
    let req = RenewRequest {
        version: renew::VERSION,
        csr: csr_pem.to_string(),
        valid_for_seconds: life,
    };
    renew::write(&mut session, &req)
        .await
        .map_err(|e| unreachable(format!("cannot send the request: {e}")))?;
    renew::read(&mut session).await.map_err(|why| {
        unreachable(format!("no answer from the front ({why}): is the certificate still admitted, and does the front run this release?"))
    })
}

/// The bundle, then gitlab-runner's pair ([`swap_pair`]).
fn write_files(next: &Bundle, options: &Options, serial: &str) -> Result<(), String> {
    tenantci_core::fsutil::write_atomic(&options.bundle_path, &next.to_json(), 0o600)
        .map_err(|e| format!("cannot write `{}`: {e}", options.bundle_path.display()))?;
    if let Some(dir) = &options.runner_dir {
        swap_pair(
            dir,
            next.cert.as_bytes(),
            next.key.expose().as_bytes(),
            serial,
        )
        .map_err(|e| format!("cannot replace the pair in `{}`: {e}", dir.display()))?;
    }
    Ok(())
}

/// The data directory's link: tls.crt and tls.key are links through it, as Kubernetes writes
/// a projected volume, so one rename replaces both. Two renames, one per file, would leave
/// the new key beside the old certificate for a moment, and a client reading both then (curl,
/// kubectl, gitlab-runner) fails. A reader opening one file before the rename and the other
/// after it can still see a mixed pair; that window is its own two opens.
const DATA: &str = "..data";

/// Writes the pair into `..<serial>` in `dir` (0700, files 0600) and points [`DATA`] at it;
/// the first time, the plain files `front unpack` wrote become links (their content kept
/// until the swap). The pair before is removed.
fn swap_pair(dir: &std::path::Path, cert: &[u8], key: &[u8], serial: &str) -> std::io::Result<()> {
    use tenantci_core::fsutil::{create_dir_all, write_atomic};
    let link = |target: &str, at: &std::path::Path| -> std::io::Result<()> {
        let tmp = dir.join(format!("..tmp-{serial}"));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(target, &tmp)?;
        std::fs::rename(&tmp, at)
    };
    let data = dir.join(DATA);
    let before = std::fs::read_link(&data).ok();
    if before.is_none() {
        let first = dir.join("..first");
        create_dir_all(&first, 0o700)?;
        for name in ["tls.crt", "tls.key"] {
            write_atomic(&first.join(name), &std::fs::read(dir.join(name))?, 0o600)?;
        }
        link("..first", &data)?;
        for name in ["tls.crt", "tls.key"] {
            link(&format!("{DATA}/{name}"), &dir.join(name))?;
        }
    }
    let name = format!("..{serial}");
    let new = dir.join(&name);
    create_dir_all(&new, 0o700)?;
    write_atomic(&new.join("tls.key"), key, 0o600)?;
    write_atomic(&new.join("tls.crt"), cert, 0o600)?;
    link(&name, &data)?;
    let old = before.unwrap_or_else(|| "..first".into());
    if old != std::path::Path::new(&name) {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pair_is_swapped_whole_and_the_old_one_removed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("tls.crt"), "c0").unwrap();
        std::fs::write(d.join("tls.key"), "k0").unwrap();
        swap_pair(d, b"c1", b"k1", "1a").unwrap();
        assert_eq!(std::fs::read_to_string(d.join("tls.crt")).unwrap(), "c1");
        assert_eq!(std::fs::read_to_string(d.join("tls.key")).unwrap(), "k1");
        swap_pair(d, b"c2", b"k2", "2b").unwrap();
        assert_eq!(std::fs::read_to_string(d.join("tls.key")).unwrap(), "k2");
        let mut left: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["..2b", "..data", "tls.crt", "tls.key"]);
    }

    #[test]
    fn renewal_comes_at_the_fraction_of_the_life_since_issue() {
        // A tenantci certificate: notBefore five minutes before its issue, 30 days after it.
        let issued = 1_000_000;
        let life = 30 * 86_400;
        let (at, asked) = schedule(issued - 300, issued + life, DEFAULT_RENEW_AT);
        assert_eq!(asked, life as u64);
        assert_eq!(at, issued + life * 2 / 3);
        // A validity shorter than the allowance is counted from notBefore.
        let (at, asked) = schedule(issued, issued + 90, 0.5);
        assert_eq!((at, asked), (issued + 45, 90));
        // An expired or empty validity renews at once and asks for at least a second.
        let (at, asked) = schedule(issued, issued, 0.5);
        assert!(at <= issued + 1 && asked == 1);
    }
}
