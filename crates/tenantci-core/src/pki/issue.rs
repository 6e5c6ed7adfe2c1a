//! Issuing leaf certificates from a [`CertificateAuthority`]: client certificates for runners
//! and admins (CN = user, O = groups, EKU clientAuth) and serving certificates for apiservers.
//! Mechanism only: what names may be requested is `policy`'s decision.

use std::time::Duration;

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use time::OffsetDateTime;

use super::ca::{CertificateAuthority, random_serial, to_time};
use crate::{Error, Result};

/// How far notBefore is set back, so a host whose clock runs a little behind the gateway's
/// still accepts a certificate minted a moment ago.
pub const CLOCK_SKEW_ALLOWANCE: Duration = Duration::from_secs(5 * 60);

/// The private key algorithm of a new certificate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyType {
    /// ECDSA on P-256 with SHA-256: small and fast.
    #[default]
    EcdsaP256,
    /// RSA 2048 with SHA-256, for clients that cannot do ECDSA.
    Rsa2048,
}

impl KeyType {
    pub(crate) fn generate(self) -> Result<KeyPair> {
        let failed = |e: &dyn std::fmt::Display| {
            Error::external(format!("cannot generate a {self:?} key")).caused_by(e.to_string())
        };
        match self {
            KeyType::EcdsaP256 => {
                KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| failed(&e))
            }
            KeyType::Rsa2048 => {
                // ring, the workspace's one provider, signs with RSA keys but cannot make them:
                // the key comes from RustCrypto's rsa (PKCS#8, zeroized when dropped), and
                // rcgen signs with it through ring.
                use rsa::pkcs8::EncodePrivateKey as _;
                let key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048)
                    .map_err(|e| failed(&e))?;
                let pkcs8 = key.to_pkcs8_der().map_err(|e| failed(&e))?;
                let der = rustls::pki_types::PrivatePkcs8KeyDer::from(pkcs8.as_bytes());
                KeyPair::from_pkcs8_der_and_sign_algo(&der, &rcgen::PKCS_RSA_SHA256)
                    .map_err(|e| failed(&e))
            }
        }
    }
}

/// A client certificate to issue.
#[derive(Debug, Clone)]
pub struct ClientCertSpec {
    /// The subject CN: the Kubernetes user name.
    pub common_name: String,
    /// One subject O each, in this order: the Kubernetes groups.
    pub organizations: Vec<String>,
    /// Lifetime from now (notBefore is set back by [`CLOCK_SKEW_ALLOWANCE`] besides).
    pub valid_for: Duration,
    /// The new key's algorithm.
    pub key_type: KeyType,
}

/// A freshly issued certificate and its key, both PEM.
pub struct IssuedCert {
    /// The certificate (the leaf alone, no chain).
    pub cert_pem: String,
    /// Secret: write it only to a 0600 file.
    pub key_pem: String,
    /// Start of the validity period (normally now less [`CLOCK_SKEW_ALLOWANCE`]).
    pub not_before: OffsetDateTime,
    /// End of the validity period.
    pub not_after: OffsetDateTime,
    /// The serial number, lower-case hex (16 random bytes).
    pub serial_hex: String,
}

impl std::fmt::Debug for IssuedCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedCert")
            .field("serial_hex", &self.serial_hex)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

fn leaf_params(
    dn: DistinguishedName,
    valid_for: Duration,
    key_type: KeyType,
) -> Result<(CertificateParams, String)> {
    let now = OffsetDateTime::now_utc();
    let serial = random_serial();
    let serial_hex = hex::encode(serial.to_bytes());
    let mut params = CertificateParams::default();
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.serial_number = Some(serial);
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - to_time(CLOCK_SKEW_ALLOWANCE)?;
    params.not_after = now + to_time(valid_for)?;
    params.key_usages = match key_type {
        KeyType::EcdsaP256 => vec![KeyUsagePurpose::DigitalSignature],
        KeyType::Rsa2048 => vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ],
    };
    Ok((params, serial_hex))
}

fn sign(
    ca: &CertificateAuthority,
    params: CertificateParams,
    serial_hex: String,
    key_type: KeyType,
) -> Result<IssuedCert> {
    let key = key_type.generate()?;
    let cert = params.signed_by(&key, ca.issuer()).map_err(|e| {
        Error::external(format!("cannot sign with the CA `{}`", ca.subject())).caused_by(e)
    })?;
    Ok(IssuedCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        not_before: params.not_before,
        not_after: params.not_after,
        serial_hex,
    })
}

/// Issues a client certificate: CN = `common_name`, one O per organization in order.
pub fn client_cert(ca: &CertificateAuthority, spec: &ClientCertSpec) -> Result<IssuedCert> {
    client_cert_with(ca, spec, |_| {})
}

/// [`client_cert`] valid from `not_before` to `not_after`, either of which may lie in the past
/// (tests use it for a credential that has already expired).
pub fn client_cert_between(
    ca: &CertificateAuthority,
    spec: &ClientCertSpec,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
) -> Result<IssuedCert> {
    client_cert_with(ca, spec, |params| {
        params.not_before = not_before;
        params.not_after = not_after;
    })
}

/// A client certificate for a key made elsewhere (the public half of a request read by
/// [`super::csr::read`]): as [`client_cert`], except that `key_pem` is empty, and the key's
/// usage follows the key's own algorithm rather than `spec.key_type`.
pub fn client_cert_for_key(
    ca: &CertificateAuthority,
    spec: &ClientCertSpec,
    public_key: &rcgen::PublicKey,
) -> Result<IssuedCert> {
    let key_type = if public_key.algorithm() == &rcgen::PKCS_RSA_SHA256 {
        KeyType::Rsa2048
    } else {
        KeyType::EcdsaP256
    };
    let (params, serial_hex) = client_params(spec, key_type)?;
    let cert = params.signed_by(public_key, ca.issuer()).map_err(|e| {
        Error::external(format!("cannot sign with the CA `{}`", ca.subject())).caused_by(e)
    })?;
    let issued = IssuedCert {
        cert_pem: cert.pem(),
        key_pem: String::new(),
        not_before: params.not_before,
        not_after: params.not_after,
        serial_hex,
    };
    with_subject(ca, spec, issued)
}

fn client_params(spec: &ClientCertSpec, key_type: KeyType) -> Result<(CertificateParams, String)> {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, spec.common_name.as_str());
    let (mut params, serial_hex) = leaf_params(dn, spec.valid_for, key_type)?;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    Ok((params, serial_hex))
}

fn client_cert_with(
    ca: &CertificateAuthority,
    spec: &ClientCertSpec,
    adjust: impl FnOnce(&mut CertificateParams),
) -> Result<IssuedCert> {
    let (mut params, serial_hex) = client_params(spec, spec.key_type)?;
    adjust(&mut params);
    let issued = sign(ca, params, serial_hex, spec.key_type)?;
    with_subject(ca, spec, issued)
}

/// rcgen writes one value per attribute type, so the real subject (every O, in order, as
/// Kubernetes reads groups) is put in by `subject::replace_subject` after signing.
fn with_subject(
    ca: &CertificateAuthority,
    spec: &ClientCertSpec,
    mut issued: IssuedCert,
) -> Result<IssuedCert> {
    let der = pem::parse(&issued.cert_pem)
        .map_err(|e| Error::external("cannot re-read the certificate just signed").caused_by(e))?;
    let subject = super::subject::client_subject_der(&spec.common_name, &spec.organizations);
    let der = super::subject::replace_subject(der.contents(), &subject, ca.issuer().key())
        .map_err(|e| Error::external("cannot set the certificate subject").caused_by(e))?;
    issued.cert_pem = pem::encode(&pem::Pem::new("CERTIFICATE", der));
    Ok(issued)
}

/// Issues a serving certificate for `sans` (IP addresses become IP SANs, the rest DNS SANs).
pub fn server_cert(
    ca: &CertificateAuthority,
    common_name: &str,
    sans: &[String],
    valid_for: Duration,
) -> Result<IssuedCert> {
    server_cert_with(ca, common_name, sans, valid_for, |_| {})
}

/// [`server_cert`] valid from `not_before` to `not_after`, either of which may lie in the past
/// or the future (tests use it for an expired or not yet valid facade certificate).
pub fn server_cert_between(
    ca: &CertificateAuthority,
    common_name: &str,
    sans: &[String],
    (not_before, not_after): (OffsetDateTime, OffsetDateTime),
) -> Result<IssuedCert> {
    server_cert_with(ca, common_name, sans, Duration::ZERO, |params| {
        params.not_before = not_before;
        params.not_after = not_after;
    })
}

fn server_cert_with(
    ca: &CertificateAuthority,
    common_name: &str,
    sans: &[String],
    valid_for: Duration,
    adjust: impl FnOnce(&mut CertificateParams),
) -> Result<IssuedCert> {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    let (mut params, serial_hex) = leaf_params(dn, valid_for, KeyType::EcdsaP256)?;
    params.subject_alt_names = CertificateParams::new(sans.to_vec())
        .map_err(|e| {
            Error::bad_input(format!("invalid subject alternative name in {sans:?}")).caused_by(e)
        })?
        .subject_alt_names;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    adjust(&mut params);
    sign(ca, params, serial_hex, KeyType::EcdsaP256)
}
