//! A certificate authority loaded from (or generated into) PEM files: the ClientCA that signs
//! runner credentials, and the serving CA that signs a tenant apiserver's certificate.
//!
//! Loading checks what signing relies on: the cert is a CA, has not expired, and the key is the
//! cert's key. Each failure names the file, so an operator knows which one to replace.

use std::path::Path;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData, SerialNumber,
};
use time::OffsetDateTime;

use crate::{Error, Result};

/// A CA certificate with its signing key.
pub struct CertificateAuthority {
    cert_pem: String,
    key_pem: String,
    issuer: Issuer<'static, KeyPair>,
    not_after: OffsetDateTime,
    subject: String,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("CertificateAuthority")
            .field("subject", &self.subject)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// Generates a self-signed ECDSA P-256 CA valid from now for `valid_for`.
    pub fn generate(common_name: &str, valid_for: Duration) -> Result<Self> {
        let now = OffsetDateTime::now_utc();
        Self::generate_valid(
            common_name,
            now - time::Duration::minutes(5),
            now + to_time(valid_for)?,
        )
    }

    /// Generates a self-signed ECDSA P-256 CA valid from `not_before` to `not_after`, either
    /// of which may lie in the past (tests use it for a CA that has already expired).
    pub fn generate_valid(
        common_name: &str,
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> Result<Self> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| Error::external("cannot generate a CA key").caused_by(e))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.serial_number = Some(random_serial());
        params.not_before = not_before;
        params.not_after = not_after;
        let cert = params.self_signed(&key).map_err(|e| {
            Error::external(format!("cannot self-sign the CA `{common_name}`")).caused_by(e)
        })?;
        let cert_pem = cert.pem();
        let key_pem = key.serialize_pem();
        Ok(CertificateAuthority {
            not_after: params.not_after,
            subject: format!("CN={common_name}"),
            issuer: Issuer::new(params, key),
            cert_pem,
            key_pem,
        })
    }

    /// Loads and checks a CA from its certificate and key files.
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Self> {
        use crate::input::{MAX_PEM, read_text};
        let cert_pem = read_text("the CA certificate", cert_path, MAX_PEM)?;
        let key_pem = read_text("the CA key", key_path, MAX_PEM)?;
        Self::from_pem(&cert_pem, &key_pem, cert_path, key_path)
    }

    /// Parses and checks a CA; the paths only name the inputs in errors.
    pub fn from_pem(
        cert_pem: &str,
        key_pem: &str,
        cert_path: &Path,
        key_path: &Path,
    ) -> Result<Self> {
        let info = super::inspect::CertInfo::from_pem(cert_pem).map_err(|e| {
            Error::bad_input(format!(
                "the CA certificate `{}` is not a PEM certificate",
                cert_path.display()
            ))
            .caused_by(e)
            .hint("pass the ClientCA's certificate (PEM, `-----BEGIN CERTIFICATE-----`)")
        })?;
        if !info.is_ca {
            return Err(Error::bad_input(format!(
                "the certificate `{}` ({}) is not a CA (basicConstraints CA:TRUE is missing)",
                cert_path.display(),
                info.subject
            ))
            .hint("pass the cluster's ClientCA certificate, not a leaf certificate"));
        }
        let now = OffsetDateTime::now_utc();
        if info.not_after <= now {
            return Err(Error::bad_input(format!(
                "the CA certificate `{}` expired at {}",
                cert_path.display(),
                super::inspect::rfc3339(info.not_after)
            ))
            .hint("the gateway must rotate this cluster's ClientCA before new credentials can be minted"));
        }
        let key = KeyPair::from_pem(key_pem).map_err(|e| {
            Error::bad_input(format!(
                "the CA key `{}` is not a PEM private key (PKCS#8, SEC1 or PKCS#1)",
                key_path.display()
            ))
            .caused_by(e)
            .hint("pass the unencrypted private key that belongs to the CA certificate")
        })?;
        if key.subject_public_key_info() != info.spki_der {
            return Err(Error::bad_input(format!(
                "the CA key `{}` does not match the CA certificate `{}`",
                key_path.display(),
                cert_path.display()
            ))
            .hint(
                "pass the key and certificate of the same CA (client-ca.key with client-ca.crt)",
            ));
        }
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key).map_err(|e| {
            Error::bad_input(format!("cannot use `{}` as an issuer", cert_path.display()))
                .caused_by(e)
        })?;
        Ok(CertificateAuthority {
            cert_pem: cert_pem.to_string(),
            key_pem: key_pem.to_string(),
            issuer,
            not_after: info.not_after,
            subject: info.subject,
        })
    }

    /// The CA certificate in PEM (public: what clients and servers trust).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA key in PEM. Secret: only for writing to a 0600 file.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// When the CA certificate expires (`policy::check_within_ca` keeps credentials within it).
    pub fn not_after(&self) -> OffsetDateTime {
        self.not_after
    }

    /// The CA's subject as text: `CN=<name>` for a generated CA, as [`super::inspect::CertInfo`]
    /// writes it for a loaded one.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    pub(crate) fn issuer(&self) -> &Issuer<'static, KeyPair> {
        &self.issuer
    }
}

pub(crate) fn to_time(d: Duration) -> Result<time::Duration> {
    time::Duration::try_from(d)
        .map_err(|_| Error::bad_input(format!("the validity {d:?} is too large")))
}

/// A random positive 128-bit serial (RFC 5280 allows up to 20 octets; the high bit is cleared so
/// the DER INTEGER stays positive without a padding byte).
pub fn random_serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01; // never a leading zero octet, so the serial is always 16 bytes
    SerialNumber::from_slice(&bytes)
}
