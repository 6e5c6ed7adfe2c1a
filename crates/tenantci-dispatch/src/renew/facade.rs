//! The facade certificate's renewal: a new serving certificate (and key) from the facade CA
//! beside the config, for the host of `facade.url`, checked as `dispatch run` checks it before
//! either file is replaced. The CA stays: executors trust it (its certificate is what each
//! executor was given), so a running executor accepts the new certificate at its next
//! handshake.

use std::path::{Path, PathBuf};

use time::OffsetDateTime;

use super::plan::{self, Due, Policy};
use crate::config::Config;
use crate::config::Paths;
use crate::facade::cert as facade_cert;
use crate::provision::facade_pki::{self, SERVING_VALIDITY};
use tenantci_core::fsutil::{self, MODE_SECRET};
use tenantci_core::input::{self, MAX_PEM};
use tenantci_core::pki::CertificateAuthority;
use tenantci_core::pki::inspect::{CertInfo, rfc3339};
use tenantci_core::pki::issue::{IssuedCert, server_cert};
use tenantci_core::{Error, Result};

/// What phase one found: due or not, and with what to renew.
pub enum Facade {
    /// Not due.
    Keep {
        /// The certificate's end.
        until: OffsetDateTime,
    },
    /// Due: the new pair, issued and checked.
    Renew {
        /// Why it is due.
        why: String,
        /// The new certificate and key.
        issued: IssuedCert,
    },
}

/// The facade CA's key: beside the config, where `dispatch init` wrote it.
pub fn ca_key(config: &Path) -> PathBuf {
    Paths::beside(config).facade_ca_key
}

/// Phase one: reads the facade files, decides, and when due issues and checks the new pair
/// in memory (nothing written).
pub fn prepare(
    config_path: &Path,
    cfg: &Config,
    policy: Policy,
    now: OffsetDateTime,
) -> Result<Facade> {
    let f = &cfg.facade;
    let host = tenantci_core::input::url_host(&f.url, &["https"])
        .ok_or_else(|| Error::bad_input("facade.url has no host").hint("fix facade.url"))?;
    let cert_pem = input::read_text("the facade certificate", &f.cert_file, MAX_PEM)?;
    let info = CertInfo::from_pem(&cert_pem).map_err(|e| {
        Error::bad_input(format!(
            "the facade certificate `{}` is not a PEM certificate ({e})",
            f.cert_file.display()
        ))
        .hint("re-run `tenantci dispatch init`, which issues a new one from the facade CA")
    })?;
    let due = match plan::due(info.not_before, info.not_after, now, policy) {
        Due::Keep { until } => return Ok(Facade::Keep { until }),
        Due::Renew { why } => why,
    };
    let ca = load_ca(config_path, &f.ca_cert_file)?;
    refuse_a_ca_about_to_end(&ca, &f.ca_cert_file, now)?;
    let issued = server_cert(&ca, &host, std::slice::from_ref(&host), SERVING_VALIDITY)?;
    // The check `dispatch run` makes at start and at each reload, on the new pair.
    let ca_pem = input::read_text("the facade CA certificate", &f.ca_cert_file, MAX_PEM)?;
    facade_cert::check(
        &facade_cert::Files {
            cert: (&f.cert_file, &issued.cert_pem),
            key: (&f.key_file, &issued.key_pem),
            ca: (&f.ca_cert_file, &ca_pem),
        },
        &host,
        now,
    )?;
    Ok(Facade::Renew { why: due, issued })
}

fn load_ca(config_path: &Path, ca_cert: &Path) -> Result<CertificateAuthority> {
    let key = ca_key(config_path);
    if !key.is_file() {
        return Err(Error::bad_input(format!(
            "the facade CA key `{}` is not here, and only it can sign a facade certificate executors trust",
            key.display()
        ))
        .hint("run `tenantci dispatch renew` on the host where `dispatch init` wrote this config (in the cluster: the administrator's, then update the Secret); nothing was written"));
    }
    CertificateAuthority::load(ca_cert, &key).map_err(|e| {
        Error::bad_input(format!(
            "the facade CA `{}` with its key `{}` cannot sign: {}",
            ca_cert.display(),
            key.display(),
            e.message()
        ))
        .hint("restore both files from the host's backup; nothing was written")
    })
}

/// A CA that ends before a new serving certificate would needs a new CA, which executors must
/// be given first: that is `dispatch init`'s job, not a renewal's.
fn refuse_a_ca_about_to_end(
    ca: &CertificateAuthority,
    path: &Path,
    now: OffsetDateTime,
) -> Result<()> {
    let info = CertInfo::from_pem(ca.cert_pem())
        .map_err(|e| Error::bad_input(format!("`{}` cannot be read back ({e})", path.display())))?;
    match facade_pki::decide(Some(&info), None, "", now) {
        facade_pki::Plan::NewCa { .. } => Err(Error::bad_input(format!(
            "the facade CA `{}` expires at {}, before a renewed facade certificate would",
            path.display(),
            rfc3339(info.not_after)
        ))
        .hint("re-run `tenantci dispatch init` (it creates a new facade CA) and restart the dispatchers; nothing was written")),
        _ => Ok(()),
    }
}

/// Phase two: the key first, then the certificate naming it, each replaced atomically (0600).
/// A running dispatcher that looks between the two sees a pair that does not fit, refuses it
/// and takes the whole pair at its next check.
pub fn write(cfg: &Config, issued: &IssuedCert) -> Result<()> {
    let f = &cfg.facade;
    fsutil::write_atomic(&f.key_file, issued.key_pem.as_bytes(), MODE_SECRET)
        .map_err(|e| Error::unwritable("the facade key", &f.key_file, e))?;
    fsutil::write_atomic(&f.cert_file, issued.cert_pem.as_bytes(), MODE_SECRET)
        .map_err(|e| Error::unwritable("the facade certificate", &f.cert_file, e))
}
