//! Reading certificates back: subject, organizations, validity, CA flag, public key.
//! Used to check a CA before signing with it, to decide whether an existing credential can be
//! kept, and by check-host. The subject is read as kube-apiserver reads it ([`KubeSubject`]);
//! whoever decides on a subject asks [`CertInfo::identity`], which refuses an ambiguous one.

use ::time::OffsetDateTime;
use x509_parser::prelude::*;

use super::kube_subject::{Ambiguity, KubeIdentity, KubeSubject};

/// What tenantci needs to know about one certificate.
#[derive(Debug, Clone)]
pub struct CertInfo {
    /// RFC 4514-ish subject, e.g. `O=gitlab-runner, CN=gitlab-runner`.
    pub subject: String,
    /// kube-apiserver's user: the last non-empty CN (for display; decide with `identity`).
    pub common_name: Option<String>,
    /// Every Subject O, in order: the Kubernetes groups (for display; decide with `identity`).
    pub organizations: Vec<String>,
    /// The subject attribute by attribute, as kube-apiserver reads it.
    pub kube_subject: KubeSubject,
    /// Start of the validity period.
    pub not_before: OffsetDateTime,
    /// End of the validity period.
    pub not_after: OffsetDateTime,
    /// Whether basicConstraints says CA:TRUE (false without the extension).
    pub is_ca: bool,
    /// Hex serial number.
    pub serial_hex: String,
    /// SubjectPublicKeyInfo, DER: compared with a private key's public half.
    pub spki_der: Vec<u8>,
    /// The issuer's key identifier (the AuthorityKeyIdentifier's keyIdentifier), hex; `None`
    /// when the certificate has none.
    pub authority_key_id: Option<String>,
    /// This certificate's SubjectKeyIdentifier, hex; `None` when it has none.
    pub subject_key_id: Option<String>,
}

impl CertInfo {
    /// Parses the first certificate of a PEM document.
    pub fn from_pem(pem: &str) -> Result<Self, String> {
        let (_, pem) =
            x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| e.to_string())?;
        if pem.label != "CERTIFICATE" {
            return Err(format!(
                "found a `{}` block instead of a CERTIFICATE",
                pem.label
            ));
        }
        Self::from_der(&pem.contents)
    }

    /// Parses one DER certificate; the error is the parser's message.
    pub fn from_der(der: &[u8]) -> Result<Self, String> {
        let (_, cert) = X509Certificate::from_der(der).map_err(|e| e.to_string())?;
        let kube_subject = KubeSubject::read(cert.subject());
        let is_ca = cert
            .basic_constraints()
            .ok()
            .flatten()
            .is_some_and(|bc| bc.value.ca);
        let mut authority_key_id = None;
        let mut subject_key_id = None;
        for ext in cert.extensions() {
            match ext.parsed_extension() {
                ParsedExtension::AuthorityKeyIdentifier(aki) => {
                    authority_key_id = aki.key_identifier.as_ref().map(|k| hex::encode(k.0));
                }
                ParsedExtension::SubjectKeyIdentifier(ski) => {
                    subject_key_id = Some(hex::encode(ski.0));
                }
                _ => {}
            }
        }
        Ok(CertInfo {
            subject: kube_subject.text.clone(),
            common_name: kube_subject.user().map(str::to_string),
            organizations: kube_subject.organizations.clone(),
            kube_subject,
            not_before: cert.validity().not_before.to_datetime(),
            not_after: cert.validity().not_after.to_datetime(),
            is_ca,
            serial_hex: cert.raw_serial_as_string().replace(':', ""),
            spki_der: cert.public_key().raw.to_vec(),
            authority_key_id,
            subject_key_id,
        })
    }

    /// The user and groups kube-apiserver will see, or why the subject is refused: every place
    /// that decides on a subject (the front, `front bundle`, the credential decision, `credential
    /// mint`'s read-back, `dispatch renew`, `runner check`) asks this, never `common_name` and
    /// `organizations` alone.
    pub fn identity(&self) -> Result<KubeIdentity, Ambiguity> {
        self.kube_subject.identity()
    }

    /// Fraction of the lifetime still ahead at `now` (0 when expired).
    pub fn remaining_fraction(&self, now: OffsetDateTime) -> f64 {
        let total = (self.not_after - self.not_before).as_seconds_f64();
        let left = (self.not_after - now).as_seconds_f64();
        if total <= 0.0 || left <= 0.0 {
            0.0
        } else {
            left / total
        }
    }
}

/// The DNS names and IP addresses (as text) of a PEM certificate's subjectAltName.
pub fn subject_alt_names(pem: &str) -> Result<Vec<String>, String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| e.to_string())?;
    let (_, cert) = X509Certificate::from_der(&pem.contents).map_err(|e| e.to_string())?;
    let Some(san) = cert.subject_alternative_name().map_err(|e| e.to_string())? else {
        return Ok(Vec::new());
    };
    Ok(san
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::DNSName(d) => Some(d.to_string()),
            GeneralName::IPAddress(b) => match b.len() {
                4 => Some(std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*b).ok()?).to_string()),
                16 => Some(std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*b).ok()?).to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect())
}

/// RFC 3339 in UTC, seconds precision: how every timestamp is printed.
pub fn rfc3339(t: OffsetDateTime) -> String {
    let t = t.to_offset(::time::UtcOffset::UTC);
    t.replace_nanosecond(0)
        .unwrap_or(t)
        .format(&::time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.to_string())
}

/// The largest CA file read (a bundle of a few certificates).
pub const CA_FILE_LIMIT: u64 = 256 << 10;

/// A CA file's PEM (a forge's CA: `dispatch run` and `dispatch init` both read it, so init
/// never writes a config run refuses): bounded by [`CA_FILE_LIMIT`], and refused (with `hint`)
/// unless it holds a certificate.
pub fn read_ca_file(what: &str, path: &std::path::Path, hint: &str) -> crate::Result<String> {
    let pem = crate::input::read_text(what, path, CA_FILE_LIMIT)?;
    if !pem.contains("-----BEGIN CERTIFICATE-----") || CertInfo::from_pem(&pem).is_err() {
        return Err(crate::Error::bad_input(format!(
            "{what} `{}` holds no PEM certificate",
            path.display()
        ))
        .hint(hint));
    }
    Ok(pem)
}
