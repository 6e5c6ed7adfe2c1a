//! Subjects with several O attributes, which Kubernetes reads as several groups.
//!
//! rcgen keeps one value per attribute type in a `DistinguishedName` (a second
//! `OrganizationName` replaces the first), so it cannot write `O=a, O=b, CN=u`. We let rcgen
//! build and sign the certificate with everything else (serial, validity, extensions, AKI),
//! then replace the subject Name inside the TBSCertificate and sign the new TBS with the same
//! CA key and algorithm. Written by hand because no maintained crate we already use can do it,
//! and switching certificate builders for one field would duplicate all of `issue`.

use rcgen::SigningKey;
use x509_parser::prelude::*;
use yasna::models::ObjectIdentifier;

const OID_COMMON_NAME: &[u64] = &[2, 5, 4, 3];
const OID_ORGANIZATION: &[u64] = &[2, 5, 4, 10];

/// DER of the Name `O=orgs[0], O=orgs[1], ..., CN=cn`, each attribute its own RDN, UTF8String.
pub fn client_subject_der(common_name: &str, organizations: &[String]) -> Vec<u8> {
    let attrs: Vec<(&[u64], &str)> = organizations
        .iter()
        .map(|o| (OID_ORGANIZATION, o.as_str()))
        .chain(std::iter::once((OID_COMMON_NAME, common_name)))
        .collect();
    yasna::construct_der(|w| {
        w.write_sequence(|w| {
            for (oid, value) in &attrs {
                w.next().write_set(|w| {
                    w.next().write_sequence(|w| {
                        w.next().write_oid(&ObjectIdentifier::from_slice(oid));
                        w.next().write_utf8_string(value);
                    })
                })
            }
        })
    })
}

/// Length of a DER TLV header (tag + length octets) at the start of `der`.
fn header_len(der: &[u8]) -> usize {
    match der.get(1) {
        Some(&l) if l < 0x80 => 2,
        Some(&l) => 2 + usize::from(l & 0x7f),
        None => der.len(),
    }
}

/// Returns `cert_der` with its subject replaced by `subject_der`, re-signed by `issuer_key`.
pub fn replace_subject(
    cert_der: &[u8],
    subject_der: &[u8],
    issuer_key: &impl SigningKey,
) -> Result<Vec<u8>, String> {
    let (_, cert) = X509Certificate::from_der(cert_der).map_err(|e| e.to_string())?;
    let tbs_raw: &[u8] = cert.tbs_certificate.as_ref();
    let subject_raw = cert.tbs_certificate.subject.as_raw();
    let offset = |inner: &[u8]| inner.as_ptr() as usize - tbs_raw.as_ptr() as usize;
    let subject_start = offset(subject_raw);
    let subject_end = subject_start + subject_raw.len();
    let body_start = header_len(tbs_raw);
    if subject_start < body_start || subject_end > tbs_raw.len() {
        return Err("the subject is not inside the TBSCertificate".into());
    }
    let tbs = yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_der(&tbs_raw[body_start..subject_start]);
            w.next().write_der(subject_der);
            w.next().write_der(&tbs_raw[subject_end..]);
        })
    });
    let signature = issuer_key.sign(&tbs).map_err(|e| e.to_string())?;
    // signatureAlgorithm follows the TBS in the outer SEQUENCE; keep it byte for byte.
    let outer_body = &cert_der[header_len(cert_der)..];
    let after_tbs = &outer_body[tbs_raw.len()..];
    let sig_alg_len = header_len(after_tbs) + der_len(after_tbs);
    let sig_alg = &after_tbs[..sig_alg_len];
    Ok(yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_der(&tbs);
            w.next().write_der(sig_alg);
            w.next().write_bitvec_bytes(&signature, signature.len() * 8);
        })
    }))
}

/// The content length encoded in the DER header at the start of `der`.
fn der_len(der: &[u8]) -> usize {
    match der.get(1) {
        Some(&l) if l < 0x80 => usize::from(l),
        Some(&l) => der[2..2 + usize::from(l & 0x7f)]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b)),
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_keeps_every_organization_in_order() {
        let der = client_subject_der("u", &["a".into(), "b".into(), "c".into()]);
        let (_, name) = X509Name::from_der(&der).unwrap();
        let orgs: Vec<_> = name
            .iter_organization()
            .map(|o| o.as_str().unwrap())
            .collect();
        assert_eq!(orgs, ["a", "b", "c"]);
        assert_eq!(
            name.iter_common_name().next().unwrap().as_str().unwrap(),
            "u"
        );
    }
}
