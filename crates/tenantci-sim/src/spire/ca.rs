//! The stand-in's trust-domain CA: a self-signed ECDSA P-256 root whose one URI SAN is the
//! trust domain's ID (as SPIRE's CA carries it), signing X509-SVIDs: one URI SAN (the
//! entry's SPIFFE ID), not a CA, digitalSignature/keyEncipherment/keyAgreement, serverAuth
//! and clientAuth (an SVID is used on both sides of mTLS). Each issue makes a new key, as a
//! SPIRE agent rotates keys with the certificate.

use rcgen::string::Ia5String;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber,
};
use time::OffsetDateTime;

/// An issued X509-SVID in the Workload API's shapes (DER chain, PKCS#8 key, DER bundle).
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedSvid {
    /// The SPIFFE ID it was issued for.
    pub spiffe_id: String,
    /// The leaf (no intermediates: the stand-in signs with the root).
    pub cert_der: Vec<u8>,
    /// Its private key, PKCS#8 DER.
    pub key_pkcs8_der: Vec<u8>,
    /// Its serial number (unique within the CA).
    pub serial: u64,
}

impl std::fmt::Debug for IssuedSvid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedSvid")
            .field("spiffe_id", &self.spiffe_id)
            .field("serial", &self.serial)
            .finish_non_exhaustive()
    }
}

/// The trust domain's CA: its self-signed root signs every SVID the stand-in issues or mints.
pub struct TrustDomainCa {
    trust_domain: String,
    issuer: Issuer<'static, KeyPair>,
    cert_der: Vec<u8>,
    cert_pem: String,
    not_after: OffsetDateTime,
    next_serial: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for TrustDomainCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustDomainCa")
            .field("trust_domain", &self.trust_domain)
            .finish_non_exhaustive()
    }
}

fn uri(value: &str) -> Result<SanType, String> {
    Ia5String::try_from(value.to_string())
        .map(SanType::URI)
        .map_err(|e| format!("`{value}` is not an IA5 URI: {e}"))
}

impl TrustDomainCa {
    /// A new CA for `trust_domain` (a name such as `example.org`), valid for a day.
    pub fn new(trust_domain: &str) -> Result<Self, String> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| format!("CA key: {e}"))?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(
            DnType::CommonName,
            format!("{trust_domain} SPIRE stand-in CA"),
        );
        params.subject_alt_names = vec![uri(&format!("spiffe://{trust_domain}"))?];
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::minutes(5);
        params.not_after = now + time::Duration::days(1);
        let cert = params
            .self_signed(&key)
            .map_err(|e| format!("CA certificate: {e}"))?;
        Ok(TrustDomainCa {
            trust_domain: trust_domain.to_string(),
            cert_der: cert.der().to_vec(),
            cert_pem: cert.pem(),
            not_after: params.not_after,
            issuer: Issuer::new(params, key),
            next_serial: std::sync::atomic::AtomicU64::new(1),
        })
    }

    /// The trust domain's name (`example.org`).
    pub fn trust_domain(&self) -> &str {
        &self.trust_domain
    }

    /// The bundle: the root, DER.
    pub fn bundle_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The bundle: the root, PEM.
    pub fn bundle_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A fresh SVID for `spiffe_id`, valid for `ttl` (backdated a minute for clock skew).
    pub fn issue(&self, spiffe_id: &str, ttl: std::time::Duration) -> Result<IssuedSvid, String> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| format!("SVID key: {e}"))?;
        let (serial, params) = self.svid_params(spiffe_id, ttl)?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| format!("SVID for `{spiffe_id}`: {e}"))?;
        Ok(IssuedSvid {
            spiffe_id: spiffe_id.to_string(),
            cert_der: cert.der().to_vec(),
            key_pkcs8_der: key.serialize_der(),
            serial,
        })
    }

    /// An SVID for `spiffe_id` over the requester's key (a CSR checked by the caller),
    /// valid for `ttl` but not past the CA itself. Returns the serial, the DER leaf and its
    /// expiry (seconds since the Unix epoch).
    pub fn sign(
        &self,
        spiffe_id: &str,
        public_key: &impl rcgen::PublicKeyData,
        ttl: std::time::Duration,
    ) -> Result<(u64, Vec<u8>, i64), String> {
        let (serial, mut params) = self.svid_params(spiffe_id, ttl)?;
        params.not_after = params.not_after.min(self.not_after);
        let cert = params
            .signed_by(public_key, &self.issuer)
            .map_err(|e| format!("SVID for `{spiffe_id}`: {e}"))?;
        Ok((
            serial,
            cert.der().to_vec(),
            params.not_after.unix_timestamp(),
        ))
    }

    /// The lifetime left to the CA: the longest SVID it can sign.
    pub fn remaining(&self) -> std::time::Duration {
        (self.not_after - OffsetDateTime::now_utc())
            .try_into()
            .unwrap_or_default()
    }

    /// The leaf's extensions (see the module header), a fresh serial, `ttl` from a minute ago.
    fn svid_params(
        &self,
        spiffe_id: &str,
        ttl: std::time::Duration,
    ) -> Result<(u64, CertificateParams), String> {
        let serial = self
            .next_serial
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut params = CertificateParams::default();
        params.serial_number = Some(SerialNumber::from(serial.to_be_bytes().to_vec()));
        params.subject_alt_names = vec![uri(spiffe_id)?];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
            KeyUsagePurpose::KeyAgreement,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        let now = OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::minutes(1);
        params.not_after =
            now + time::Duration::try_from(ttl).map_err(|e| format!("SVID lifetime: {e}"))?;
        Ok((serial, params))
    }
}

impl IssuedSvid {
    /// The three spiffe-helper files' contents: `svid.pem`, `svid_key.pem`, `svid_bundle.pem`.
    pub fn helper_files(&self, ca: &TrustDomainCa) -> [(&'static str, String); 3] {
        let pem = |tag: &str, der: &[u8]| pem::encode(&pem::Pem::new(tag, der.to_vec()));
        [
            ("svid.pem", pem("CERTIFICATE", &self.cert_der)),
            ("svid_key.pem", pem("PRIVATE KEY", &self.key_pkcs8_der)),
            ("svid_bundle.pem", ca.bundle_pem().to_string()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issued_svid_parses_as_one_for_its_id() {
        let ca = TrustDomainCa::new("example.org").unwrap();
        let s = ca
            .issue(
                "spiffe://example.org/gitea/acme/widgets/7",
                std::time::Duration::from_secs(3600),
            )
            .unwrap();
        let parsed = spiffe::X509Svid::parse_from_der(&s.cert_der, &s.key_pkcs8_der).unwrap();
        assert_eq!(
            parsed.spiffe_id().to_string(),
            "spiffe://example.org/gitea/acme/widgets/7"
        );
        let bundle = spiffe::X509Bundle::parse_from_der(
            spiffe::TrustDomain::new("example.org").unwrap(),
            ca.bundle_der(),
        )
        .unwrap();
        assert_eq!(bundle.authorities().len(), 1);
        let again = ca
            .issue(&s.spiffe_id, std::time::Duration::from_secs(3600))
            .unwrap();
        assert_ne!(again.serial, s.serial);
        assert_ne!(again.key_pkcs8_der, s.key_pkcs8_der);
    }
}
