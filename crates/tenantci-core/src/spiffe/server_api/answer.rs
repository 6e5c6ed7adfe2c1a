//! Both ends of a mint on the caller's side: the request (a CSR over a key made here, whose
//! only name is the SPIFFE ID, as SPIRE expects), and the server's answer checked before
//! anything is handed out: a chain that is an SVID for the ID asked, over our key, chaining
//! to the caller's own trust bundle. Errors are the reason only; the caller names the server.

use rcgen::string::Ia5String;
use rcgen::{CertificateParams, DistinguishedName, KeyPair, SanType};
use rustls::pki_types::{CertificateDer, UnixTime};

use super::MintedSvid;
use super::proto::MintX509SvidResponse;
use crate::Secret;
use crate::spiffe::{SpiffeId, Svid};

/// A DER CSR whose only name is `id` (one URI SAN, empty subject), signed by `key`: what a
/// mint sends (public for the benchmark that times it apart).
pub fn csr(id: &SpiffeId, key: &KeyPair) -> Result<Vec<u8>, String> {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.subject_alt_names = vec![SanType::URI(
        Ia5String::try_from(id.to_string()).map_err(|e| e.to_string())?,
    )];
    let request = params.serialize_request(key).map_err(|e| e.to_string())?;
    Ok(request.der().to_vec())
}

/// The answer to a mint for `id` with `key`, checked against `own` (the caller's SVID, whose
/// bundle the new SVID's holder gets too).
pub(super) fn minted(
    id: &SpiffeId,
    key: &KeyPair,
    own: &Svid,
    response: MintX509SvidResponse,
) -> Result<MintedSvid, String> {
    let svid = response.svid.ok_or("the response holds no SVID")?;
    if svid.cert_chain.is_empty() {
        return Err("the certificate chain is empty".into());
    }
    let chain: Vec<CertificateDer<'static>> = svid
        .cert_chain
        .into_iter()
        .map(CertificateDer::from)
        .collect();
    let parsed = Svid::from_der(chain.clone(), &key.serialize_der(), own.bundle())
        .map_err(|e| e.render())?;
    if parsed.id() != id {
        return Err(format!("it is for `{}`", parsed.id()));
    }
    chains_to_bundle(&parsed)
        .map_err(|e| format!("it does not chain to the caller's trust bundle ({e})"))?;
    Ok(MintedSvid {
        id: id.clone(),
        chain_pem: pem_certs(&chain),
        key_pem: Secret::new(key.serialize_pem()),
        bundle_pem: pem_certs(own.bundle()),
        expires_at: svid.expires_at,
    })
}

fn pem_certs(certs: &[CertificateDer<'_>]) -> String {
    pem::encode_many(
        &certs
            .iter()
            .map(|c| pem::Pem::new("CERTIFICATE", c.to_vec()))
            .collect::<Vec<_>>(),
    )
}

/// The leaf chains to the bundle as a peer will verify it (`spiffe::tls`'s check).
fn chains_to_bundle(svid: &Svid) -> Result<(), rustls::Error> {
    let chain = &svid.certified_key().cert;
    let provider =
        rustls::crypto::CryptoProvider::get_default().expect("Svid::from_der installed a provider");
    crate::spiffe::tls::chains_to(
        &chain[0],
        &chain[1..],
        svid.roots(),
        UnixTime::now(),
        provider,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spiffe::server_api::proto::X509Svid;
    use rcgen::{BasicConstraints, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyUsagePurpose};

    const TASK: &str = "spiffe://example.org/gitea/acme/widgets/7";

    fn p256() -> KeyPair {
        KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap()
    }

    /// A trust domain's CA, as SPIRE's: a self-signed root named `spiffe://<td>`.
    struct Ca {
        issuer: Issuer<'static, KeyPair>,
        der: CertificateDer<'static>,
    }

    fn ca() -> Ca {
        let key = p256();
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![uri("spiffe://example.org")];
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let der = params.self_signed(&key).unwrap().der().clone();
        Ca {
            issuer: Issuer::new(params, key),
            der,
        }
    }

    fn uri(id: &str) -> SanType {
        SanType::URI(Ia5String::try_from(id).unwrap())
    }

    impl Ca {
        /// An SVID leaf for `id` over `key`'s public key.
        fn leaf(&self, id: &str, key: &KeyPair) -> Vec<u8> {
            let mut params = CertificateParams::default();
            params.subject_alt_names = vec![uri(id)];
            params.is_ca = IsCa::ExplicitNoCa;
            params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            params.extended_key_usages = vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ];
            params.signed_by(key, &self.issuer).unwrap().der().to_vec()
        }

        /// The caller's own SVID under this CA.
        fn own(&self) -> Svid {
            let key = p256();
            let leaf = self.leaf("spiffe://example.org/tenantci/dispatcher", &key);
            Svid::from_der(
                vec![leaf.into()],
                &key.serialize_der(),
                std::slice::from_ref(&self.der),
            )
            .unwrap()
        }
    }

    fn answer(chain: Vec<Vec<u8>>) -> MintX509SvidResponse {
        MintX509SvidResponse {
            svid: Some(X509Svid {
                cert_chain: chain,
                expires_at: 42,
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_csr_names_only_the_id() {
        let id = SpiffeId::new(TASK).unwrap();
        let key = p256();
        let der = csr(&id, &key).unwrap();
        let parsed = rcgen::CertificateSigningRequestParams::from_der(&der.into()).unwrap();
        assert_eq!(parsed.params.subject_alt_names, vec![uri(TASK)]);
        assert_eq!(
            rcgen::PublicKeyData::der_bytes(&parsed.public_key),
            key.public_key_raw()
        );
    }

    #[test]
    fn a_good_answer_becomes_pem_texts() {
        let ca = ca();
        let own = ca.own();
        let id = SpiffeId::new(TASK).unwrap();
        let key = p256();
        let minted = minted(&id, &key, &own, answer(vec![ca.leaf(TASK, &key)])).unwrap();
        assert_eq!(minted.id, id);
        assert_eq!(minted.expires_at, 42);
        assert!(minted.chain_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(
            minted.bundle_pem,
            pem::encode(&pem::Pem::new("CERTIFICATE", ca.der.to_vec()))
        );
        assert!(
            minted
                .key_pem
                .expose()
                .starts_with("-----BEGIN PRIVATE KEY-----")
        );
    }

    #[test]
    fn an_unusable_answer_is_refused_with_its_reason() {
        let ca = ca();
        let own = ca.own();
        let id = SpiffeId::new(TASK).unwrap();
        let key = p256();
        let other_ca = self::ca();
        let cases = [
            ("no SVID", MintX509SvidResponse { svid: None }),
            ("empty", answer(vec![])),
            (
                "it is for `spiffe://example.org/other`",
                answer(vec![ca.leaf("spiffe://example.org/other", &key)]),
            ),
            ("private key", answer(vec![ca.leaf(TASK, &p256())])),
            ("trust bundle", answer(vec![other_ca.leaf(TASK, &key)])),
        ];
        for (why, response) in cases {
            let err = minted(&id, &key, &own, response).unwrap_err();
            assert!(err.contains(why), "{why}: {err}");
        }
    }
}
