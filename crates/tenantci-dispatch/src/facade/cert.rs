//! The facade's serving certificate as `dispatch run` loads it: refused (exit 2, naming the
//! file and the fix) when it is expired, not yet valid, not the certificate of `facade.key`,
//! not signed by the facade CA executors trust, or not for the host executors are given in
//! `facade.url`; otherwise the days it has left, for the start-up warning and the
//! `facade_cert_expiry_days` metric.
//!
//! `check` is pure (the PEM texts, the facade host and the time in, a verdict out); `load`
//! reads the two files (bounded, the key private) and calls it. Re-issuing is `dispatch renew`'s
//! job (`renew::facade`) or `dispatch init`'s (`provision::facade_pki`), which this module's fix
//! names; `run::reload` calls `load` again for a renewed pair before serving it.

use std::path::Path;

use time::OffsetDateTime;

use tenantci_core::input::{self, MAX_PEM};
use tenantci_core::pki::inspect::{CertInfo, rfc3339, subject_alt_names};
use tenantci_core::pki::verify::key_matches;
use tenantci_core::{Error, Result};

/// Fewer days left than this: `dispatch run` warns at start.
pub const WARN_DAYS: i64 = 30;

const REISSUE: &str = "run `tenantci dispatch renew --config FILE --force` (or re-run `tenantci dispatch init` with the same --out and --facade-url): it issues a new facade certificate from the facade CA (executors keep trusting it)";

/// Whether a SAN list covers `host` (an address as an IP SAN, a name as a DNS SAN).
pub fn covers(sans: &[String], host: &str) -> bool {
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => sans
            .iter()
            .any(|s| s.parse::<std::net::IpAddr>().ok() == Some(ip)),
        Err(_) => sans.iter().any(|s| s.eq_ignore_ascii_case(host)),
    }
}

/// A certificate that passed: when it ends and how many whole days that is from `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Valid {
    /// The certificate's end.
    pub not_after: OffsetDateTime,
    /// Whole days from the check to `not_after`.
    pub days_left: i64,
}

/// The three PEM files, each with the path it came from (errors name it).
pub struct Files<'a> {
    /// The serving certificate.
    pub cert: (&'a Path, &'a str),
    /// Its private key.
    pub key: (&'a Path, &'a str),
    /// The facade CA's certificate.
    pub ca: (&'a Path, &'a str),
}

/// The facade certificate with its key and CA, for executors that dial `host`, at `now`.
pub fn check(files: &Files, host: &str, now: OffsetDateTime) -> Result<Valid> {
    let ((cert_path, cert), (key_path, key)) = (files.cert, files.key);
    let c = cert_path.display();
    let refuse = |what: String| Error::bad_input(what).hint(REISSUE);
    let info = CertInfo::from_pem(cert).map_err(|e| {
        refuse(format!(
            "the facade certificate `{c}` is not a PEM certificate ({e})"
        ))
    })?;
    if now < info.not_before {
        return Err(refuse(format!(
            "the facade certificate `{c}` is not valid before {} (check this host's clock)",
            rfc3339(info.not_before)
        )));
    }
    if now >= info.not_after {
        return Err(refuse(format!(
            "the facade certificate `{c}` expired at {}",
            rfc3339(info.not_after)
        )));
    }
    match key_matches(&info.spki_der, key) {
        Ok(true) => {}
        Ok(false) => {
            return Err(refuse(format!(
                "the facade key `{}` is not the key of the facade certificate `{c}`",
                key_path.display()
            )));
        }
        Err(e) => {
            return Err(refuse(format!(
                "the facade key `{}` is not a usable private key ({e})",
                key_path.display()
            )));
        }
    }
    let (ca_path, ca) = files.ca;
    let ca_key_id = CertInfo::from_pem(ca).ok().and_then(|i| i.subject_key_id);
    if ca_key_id.is_none() || info.authority_key_id != ca_key_id {
        return Err(refuse(format!(
            "the facade certificate `{c}` is not signed by the facade CA `{}`, the only CA executors trust",
            ca_path.display()
        )));
    }
    let sans = subject_alt_names(cert).unwrap_or_default();
    if !covers(&sans, host) {
        return Err(Error::bad_input(format!(
            "the facade certificate `{c}` is for {}, not for {}, the host of facade.url",
            input::shown(&sans.join(", ")),
            input::shown(host)
        ))
        .hint("re-run `tenantci dispatch init` with --facade-url set to the URL executors dial: it issues a facade certificate for that host from the facade CA"));
    }
    Ok(Valid {
        not_after: info.not_after,
        days_left: (info.not_after - now).whole_days(),
    })
}

/// The facade's files as read, checked.
pub struct Loaded {
    /// What the check found: the end and the days left.
    pub valid: Valid,
    /// The serving certificate (PEM).
    pub cert_pem: String,
    /// Its private key (PEM).
    pub key_pem: String,
    /// The facade CA's certificate (PEM), which executors are given to trust.
    pub ca_pem: String,
}

/// Reads the facade's certificate, key (only when private to this account) and CA, and checks
/// them for `host`.
pub fn load(
    facade: &crate::facade::settings::Facade,
    host: &str,
    now: OffsetDateTime,
) -> Result<Loaded> {
    let cert_pem = input::read_text("the facade certificate", &facade.cert_file, MAX_PEM)?;
    let key_pem = input::read_private("the facade key", &facade.key_file, MAX_PEM)?;
    let ca_pem = input::read_text("the facade CA certificate", &facade.ca_cert_file, MAX_PEM)?;
    let files = Files {
        cert: (&facade.cert_file, &cert_pem),
        key: (&facade.key_file, &key_pem),
        ca: (&facade.ca_cert_file, &ca_pem),
    };
    let valid = check(&files, host, now)?;
    Ok(Loaded {
        valid,
        cert_pem,
        key_pem,
        ca_pem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tenantci_core::pki::CertificateAuthority;

    struct Issued {
        cert: String,
        key: String,
        ca: String,
        not_before: OffsetDateTime,
    }

    fn issued(host: &str) -> Issued {
        let ca = CertificateAuthority::generate("t", Duration::from_secs(86400 * 400)).unwrap();
        let c = tenantci_core::pki::issue::server_cert(
            &ca,
            host,
            &[host.to_string()],
            Duration::from_secs(86400 * 100),
        )
        .unwrap();
        Issued {
            not_before: CertInfo::from_pem(&c.cert_pem).unwrap().not_before,
            cert: c.cert_pem,
            key: c.key_pem,
            ca: ca.cert_pem().to_string(),
        }
    }

    fn run(i: &Issued, key: &str, ca: &str, host: &str, now: OffsetDateTime) -> Result<Valid> {
        let files = Files {
            cert: (Path::new("facade.crt"), &i.cert),
            key: (Path::new("facade.key"), key),
            ca: (Path::new("facade-ca.crt"), ca),
        };
        check(&files, host, now)
    }

    #[test]
    fn a_fitting_certificate_reports_its_days() {
        let i = issued("127.0.0.1");
        let v = run(
            &i,
            &i.key,
            &i.ca,
            "127.0.0.1",
            i.not_before + time::Duration::days(10),
        )
        .unwrap();
        assert!((89..=90).contains(&v.days_left), "{v:?}");
    }

    #[test]
    fn expired_early_foreign_key_and_wrong_host_are_refused_naming_the_file() {
        let i = issued("127.0.0.1");
        let other = issued("127.0.0.1");
        let nb = i.not_before;
        for (key, ca, host, now, says) in [
            (
                &i.key,
                &i.ca,
                "127.0.0.1",
                nb + time::Duration::days(101),
                "expired at",
            ),
            (
                &i.key,
                &i.ca,
                "127.0.0.1",
                nb - time::Duration::days(1),
                "not valid before",
            ),
            (
                &other.key,
                &i.ca,
                "127.0.0.1",
                nb,
                "`facade.key` is not the key",
            ),
            (
                &i.key,
                &other.ca,
                "127.0.0.1",
                nb,
                "not signed by the facade CA `facade-ca.crt`",
            ),
            (
                &i.key,
                &i.ca,
                "dispatch.example",
                nb,
                "not for dispatch.example",
            ),
        ] {
            let e = run(&i, key, ca, host, now).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(e.message().contains(says), "{}", e.message());
            assert!(e.message().contains("facade.crt"), "{}", e.message());
            assert!(e.hint_text().unwrap().contains("dispatch init"));
        }
    }

    #[test]
    fn sans_cover_addresses_and_names() {
        assert!(covers(&["::1".into()], "::1"));
        assert!(covers(&["0:0:0:0:0:0:0:1".into()], "::1"));
        assert!(!covers(&["localhost".into()], "127.0.0.1"));
        assert!(!covers(&["127.0.0.1".into()], "localhost"));
    }
}
