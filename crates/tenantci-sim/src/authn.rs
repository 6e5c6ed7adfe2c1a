//! Client-certificate authentication after the handshake, at each request (facts §1;
//! kube-apiserver's x509 authenticator verifies the connection's certificate per request, so
//! one that expires on an open connection is refused from then on): the chain must verify
//! against the ClientCA with EKU clientAuth; the subject is read as Go reads it (`subject`: the
//! last CN is the user, every O a group, in order), and `system:authenticated` is added. No
//! certificate is anonymous; a certificate that does not verify, that Go could not parse (a
//! Name value of a string type Go does not read, or invalid for its type), or that has an empty
//! CN is rejected (401 on every request).

mod subject;

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

use super::api::Identity;
use super::authz::UserInfo;
use tenantci_core::{Error, Result};
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

/// Verifies client certificates against one ClientCA and maps them to users, as kube-apiserver's
/// x509 authenticator.
pub struct Authenticator {
    verifier: Arc<dyn ClientCertVerifier>,
}

impl Authenticator {
    /// Trusts the CA certificates in `ca_pem`.
    pub fn new(ca_pem: &str) -> Result<Self> {
        tenantci_core::tls::ensure_crypto_provider();
        let mut roots = RootCertStore::empty();
        for cert in super::tls::parse_certs(ca_pem)? {
            roots
                .add(cert)
                .map_err(|e| Error::bad_input(format!("cannot trust the ClientCA: {e}")))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|e| Error::external(format!("cannot build the client verifier: {e}")))?;
        Ok(Authenticator { verifier })
    }

    /// Who `chain` (leaf first) is: none is anonymous; one that does not verify, that Go could not
    /// read or has an empty CN is rejected; else the user its subject names.
    pub fn authenticate(&self, chain: Option<&[CertificateDer<'static>]>) -> Identity {
        let Some((leaf, intermediates)) = chain.and_then(|c| c.split_first()) else {
            return Identity::Anonymous;
        };
        if self
            .verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .is_err()
        {
            return Identity::Rejected;
        }
        match read_subject(leaf, intermediates) {
            Some(subject) => user(subject),
            None => Identity::Rejected,
        }
    }
}

/// The leaf's subject, or `None` when Go would not parse one of the certificates the client
/// sent (crypto/tls parses every one, and its issuer Name as well as its subject).
fn read_subject(
    leaf: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
) -> Option<subject::Subject> {
    let mut leaf_subject = None;
    for der in std::iter::once(leaf).chain(intermediates) {
        let (_, cert) = X509Certificate::from_der(der).ok()?;
        subject::read(cert.issuer()).ok()?;
        let read = subject::read(cert.subject()).ok()?;
        leaf_subject.get_or_insert(read);
    }
    leaf_subject
}

/// k8s's `CommonNameUserConversion` (the CN is the user, the Os the groups; an empty CN is no
/// x509 user, which the simulator answers with 401), then `AuthenticatedGroupAdder`: it adds
/// `system:authenticated` unless the groups already hold it or `system:unauthenticated`, or
/// the user is `system:anonymous`.
fn user(subject: subject::Subject) -> Identity {
    if subject.common_name.is_empty() {
        return Identity::Rejected;
    }
    let mut groups = subject.organizations;
    let marked = groups
        .iter()
        .any(|g| g == "system:authenticated" || g == "system:unauthenticated");
    if !marked && subject.common_name != "system:anonymous" {
        groups.push("system:authenticated".into());
    }
    Identity::User(UserInfo {
        name: subject.common_name,
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tenantci_core::pki::{CertificateAuthority, ClientCertSpec, KeyType, issue};

    fn der(pem: &str) -> Vec<CertificateDer<'static>> {
        super::super::tls::parse_certs(pem).unwrap()
    }

    #[test]
    fn maps_cn_and_o_and_rejects_other_cas() {
        let ca = CertificateAuthority::generate("c", Duration::from_secs(3600)).unwrap();
        let other = CertificateAuthority::generate("c", Duration::from_secs(3600)).unwrap();
        let spec = ClientCertSpec {
            common_name: "gitlab-runner".into(),
            organizations: vec!["gitlab-runner".into()],
            valid_for: Duration::from_secs(600),
            key_type: KeyType::EcdsaP256,
        };
        let a = Authenticator::new(ca.cert_pem()).unwrap();
        let good = issue::client_cert(&ca, &spec).unwrap();
        match a.authenticate(Some(&der(&good.cert_pem))) {
            Identity::User(u) => {
                assert_eq!(u.name, "gitlab-runner");
                assert_eq!(u.groups, vec!["gitlab-runner", "system:authenticated"]);
            }
            other => panic!("{other:?}"),
        }
        let bad = issue::client_cert(&other, &spec).unwrap();
        assert!(matches!(
            a.authenticate(Some(&der(&bad.cert_pem))),
            Identity::Rejected
        ));
        assert!(matches!(a.authenticate(None), Identity::Anonymous));
    }

    /// A ClientCA and a leaf it signs whose subject is built here with rcgen (not with the
    /// product's PKI code): CN `mallory`, and one O of the given value.
    fn signed_leaf(o: rcgen::DnValue) -> (String, Vec<CertificateDer<'static>>) {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair,
        };
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "client-ca");
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
        leaf.distinguished_name.push(DnType::CommonName, "mallory");
        leaf.distinguished_name.push(DnType::OrganizationName, o);
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let der = leaf.signed_by(&key, &issuer).unwrap().der().clone();
        (ca_pem, vec![der])
    }

    /// Issue 51: `O=system:masters` as a BMPString is a group to kube-apiserver, so it must be
    /// one to the simulator; a value Go cannot parse rejects the certificate.
    #[test]
    fn a_bmpstring_system_masters_is_masters_and_an_unreadable_subject_is_rejected() {
        use rcgen::DnValue;
        use rcgen::string::{BmpString, UniversalString};
        let masters = BmpString::try_from("system:masters").unwrap();
        let (ca_pem, chain) = signed_leaf(DnValue::BmpString(masters));
        match Authenticator::new(&ca_pem)
            .unwrap()
            .authenticate(Some(&chain))
        {
            Identity::User(u) => {
                assert_eq!(u.name, "mallory");
                assert_eq!(u.groups, vec!["system:masters", "system:authenticated"]);
            }
            other => panic!("{other:?}"),
        }
        let universal = UniversalString::try_from("system:masters").unwrap();
        let (ca_pem, chain) = signed_leaf(DnValue::UniversalString(universal));
        assert!(matches!(
            Authenticator::new(&ca_pem)
                .unwrap()
                .authenticate(Some(&chain)),
            Identity::Rejected
        ));
    }

    /// `AuthenticatedGroupAdder`: `system:authenticated` once, and not beside
    /// `system:unauthenticated`; an empty CN is no user.
    #[test]
    fn the_authenticated_group_is_added_as_kube_apiserver_adds_it() {
        let groups = |orgs: &[&str]| match user(subject::Subject {
            common_name: "u".into(),
            organizations: orgs.iter().map(|o| o.to_string()).collect(),
        }) {
            Identity::User(u) => u.groups,
            other => panic!("{other:?}"),
        };
        assert_eq!(groups(&[]), vec!["system:authenticated"]);
        assert_eq!(
            groups(&["system:authenticated", "a"]),
            vec!["system:authenticated", "a"]
        );
        assert_eq!(
            groups(&["system:unauthenticated"]),
            vec!["system:unauthenticated"]
        );
        assert!(matches!(
            user(subject::Subject::default()),
            Identity::Rejected
        ));
    }
}
