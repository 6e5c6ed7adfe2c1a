//! Certificate signing requests (PKCS#10) for renewing a client certificate: the key is made
//! where the certificate is used ([`new_request`]) and only the request leaves; the signer
//! reads a request back ([`read`]), its signature checked, its subject read as kube-apiserver
//! reads a certificate's, and signs its public key ([`super::issue::client_cert_for_key`]).
//!
//! The request is built here rather than by rcgen, which keeps one value per attribute type
//! and so cannot write the several O (Kubernetes groups) a runner's subject may carry.

use rcgen::{KeyPair, PublicKeyData, SigningKey};
use x509_parser::prelude::*;
use yasna::models::ObjectIdentifier;

use super::issue::KeyType;
use super::kube_subject::KubeSubject;
use crate::secret::Secret;
use crate::{Error, Result};

/// ecdsa-with-SHA256, the signature of requests from a P-256 key.
const ECDSA_WITH_SHA256: &[u64] = &[1, 2, 840, 10045, 4, 3, 2];
/// sha256WithRSAEncryption, from an RSA key.
const SHA256_WITH_RSA: &[u64] = &[1, 2, 840, 113549, 1, 1, 11];

/// A request and the new key it was made with (the key stays on this host).
pub struct NewRequest {
    /// The PKCS#10 request, PEM.
    pub csr_pem: String,
    /// The new private key, PEM (PKCS#8): write it only to a 0600 file.
    pub key_pem: Secret,
}

/// A new key of `key_type` and a request for `common_name` with one O per organization, in
/// order (the subject `issue` writes), signed by that key.
pub fn new_request(
    common_name: &str,
    organizations: &[String],
    key_type: KeyType,
) -> Result<NewRequest> {
    let key = key_type.generate()?;
    let subject = super::subject::client_subject_der(common_name, organizations);
    let csr_der = request_der(&subject, &key)?;
    Ok(NewRequest {
        csr_pem: ::pem::encode(&::pem::Pem::new("CERTIFICATE REQUEST", csr_der)),
        key_pem: Secret::new(key.serialize_pem()),
    })
}

/// The DER request for `subject_der` with `key`'s public half, signed by `key`.
pub fn request_der(subject_der: &[u8], key: &KeyPair) -> Result<Vec<u8>> {
    let alg = if key.algorithm() == &rcgen::PKCS_RSA_SHA256 {
        SHA256_WITH_RSA
    } else {
        ECDSA_WITH_SHA256
    };
    let spki = key.subject_public_key_info();
    let info = yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_u8(0);
            w.next().write_der(subject_der);
            w.next().write_der(&spki);
            // attributes [0] IMPLICIT SET OF Attribute: none.
            w.next().write_der(&[0xa0, 0x00]);
        })
    });
    let signature = key
        .sign(&info)
        .map_err(|e| Error::external("cannot sign the certificate request").caused_by(e))?;
    Ok(yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_der(&info);
            w.next().write_sequence(|w| {
                w.next().write_oid(&ObjectIdentifier::from_slice(alg));
                if alg == SHA256_WITH_RSA {
                    w.next().write_null();
                }
            });
            w.next().write_bitvec_bytes(&signature, signature.len() * 8);
        })
    }))
}

/// A request read back, its signature verified: proof that its sender holds the key.
pub struct Request {
    /// The subject, attribute by attribute, as kube-apiserver would read it in a certificate.
    pub subject: KubeSubject,
    /// The public key to certify.
    pub public_key: rcgen::PublicKey,
}

/// Reads a PEM request; the error says what is wrong with it (not PEM, not a request, a
/// signature that does not verify, an algorithm rcgen cannot certify).
pub fn read(csr_pem: &str) -> std::result::Result<Request, String> {
    let block = ::pem::parse(csr_pem.as_bytes()).map_err(|e| format!("not PEM: {e}"))?;
    if block.tag() != "CERTIFICATE REQUEST" {
        return Err(format!(
            "a `{}` block, not a CERTIFICATE REQUEST",
            block.tag()
        ));
    }
    let der = rustls::pki_types::CertificateSigningRequestDer::from(block.contents());
    // rcgen checks the signature with the key inside (proof of possession).
    let parsed = rcgen::CertificateSigningRequestParams::from_der(&der)
        .map_err(|e| format!("not a valid signed request: {e}"))?;
    let (_, csr) = X509CertificationRequest::from_der(block.contents())
        .map_err(|e| format!("not a request: {e}"))?;
    Ok(Request {
        subject: KubeSubject::read(&csr.certification_request_info.subject),
        public_key: parsed.public_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reads_back_with_every_group_and_its_key() {
        let orgs = vec!["gitlab-runner".to_string(), "builders".to_string()];
        let r = new_request("gitlab-runner", &orgs, KeyType::EcdsaP256).unwrap();
        let back = read(&r.csr_pem).unwrap();
        let id = back.subject.identity().unwrap();
        assert_eq!(id.user, "gitlab-runner");
        assert_eq!(id.groups, orgs);
        let key = KeyPair::from_pem(r.key_pem.expose()).unwrap();
        assert_eq!(
            back.public_key.subject_public_key_info(),
            key.subject_public_key_info()
        );
    }

    #[test]
    fn a_request_whose_signature_does_not_match_is_refused() {
        let key = KeyType::EcdsaP256.generate().unwrap();
        let other = KeyType::EcdsaP256.generate().unwrap();
        let subject = super::super::subject::client_subject_der("u", &["g".into()]);
        let mut der = request_der(&subject, &key).unwrap();
        // Swap in another key's public half: the signature no longer verifies.
        let (spki, spki2) = (
            key.subject_public_key_info(),
            other.subject_public_key_info(),
        );
        let at = der.windows(spki.len()).position(|w| w == spki).unwrap();
        der[at..at + spki.len()].copy_from_slice(&spki2);
        let pem = ::pem::encode(&::pem::Pem::new("CERTIFICATE REQUEST", der));
        assert!(
            read(&pem)
                .err()
                .is_some_and(|e| e.contains("not a valid signed request"))
        );
        assert!(read("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").is_err());
    }
}
