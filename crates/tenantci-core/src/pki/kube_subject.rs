//! A certificate's subject read as kube-apiserver reads it, and the refusal of a subject that it
//! could read differently from anyone else (docs/architecture.md, "One reading of a subject").
//!
//! kube-apiserver parses certificates with Go's `crypto/x509`: every attribute value of the
//! subject is decoded by its ASN.1 string type (UTF8String, PrintableString, IA5String,
//! NumericString, T61String as Latin-1, BMPString as UCS-2), and any other type or an invalid
//! value fails the whole certificate. `pkix.Name` then keeps every O in order and overwrites the
//! CN at each one, so the LAST CN is the user; its x509 authenticator takes the CN as the user
//! name (none when empty) and every O as a group. A reader that drops what it cannot decode, or
//! keeps the first CN, admits a certificate as one identity that the apiserver treats as
//! another. So tenantci reads subjects once, here, this way, and where it decides on a subject
//! it also refuses one that is ambiguous ([`KubeSubject::identity`]).

use std::fmt;

use x509_parser::der_parser::asn1_rs::{Any, Class, Tag};
use x509_parser::prelude::*;

/// The subject as kube-apiserver sees it, attribute by attribute.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeSubject {
    /// Every CN, in order; kube-apiserver's user is the last one.
    pub common_names: Vec<String>,
    /// Every O, in order: the Kubernetes groups.
    pub organizations: Vec<String>,
    /// Attributes whose value Go cannot decode (it refuses such a certificate outright).
    pub undecodable: Vec<Flagged>,
    /// Attributes a reader may take differently from kube-apiserver: a T61String or BMPString
    /// value beyond ASCII (Go releases before 1.20 read T61 bytes raw, not as Latin-1), or
    /// the Kubernetes user UID attribute (read from 1.34 on; tenantci never writes one).
    pub unsteady: Vec<Flagged>,
    /// RFC 4514-ish text in the certificate's order, e.g. `O=gitlab-runner, CN=gitlab-runner`;
    /// an undecodable value is shown as `#` and its DER in hex, as RFC 4514 spells it.
    pub text: String,
}

/// One attribute the reading flags: a value Go's `crypto/x509` would not decode, or one that
/// kube-apiserver releases read differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flagged {
    /// `CN`, `O`, or the attribute's OID.
    pub attribute: String,
    /// The ASN.1 string type found, e.g. `VideotexString`, or why its bytes are invalid.
    pub why: String,
}

/// The user and groups of an unambiguous subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeIdentity {
    /// The Kubernetes user name: the subject's one CN, never empty.
    pub user: String,
    /// The Kubernetes groups: every O in order, none empty.
    pub groups: Vec<String>,
}

/// Why a subject is refused where tenantci decides on one: the apiserver could read it
/// differently from a person, a config file or another tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ambiguity {
    /// No CN: kube-apiserver would see no user.
    NoCommonName,
    /// More than one CN (holds them, in order): kube-apiserver takes the last, a person may
    /// read the first.
    SeveralCommonNames(Vec<String>),
    /// A CN or O with an empty value.
    EmptyValue {
        /// `CN` or `O`.
        attribute: &'static str,
    },
    /// A value Go's `crypto/x509` cannot decode, so kube-apiserver refuses the certificate.
    Undecodable(Flagged),
    /// Readable, but not the same way by every kube-apiserver release.
    Unsteady(Flagged),
}

impl fmt::Display for Ambiguity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ambiguity::NoCommonName => f.write_str("the subject has no CN (no Kubernetes user)"),
            Ambiguity::SeveralCommonNames(cns) => write!(
                f,
                "the subject has {} CNs ({}); kube-apiserver takes the last one as the user",
                cns.len(),
                cns.join(", ")
            ),
            Ambiguity::EmptyValue { attribute } => {
                write!(f, "the subject has an empty {attribute}")
            }
            Ambiguity::Undecodable(u) => write!(
                f,
                "the subject's {} is a {}, which kube-apiserver does not read as this tool would",
                u.attribute, u.why
            ),
            Ambiguity::Unsteady(u) => write!(
                f,
                "the subject's {} is {}, which kube-apiserver releases read differently",
                u.attribute, u.why
            ),
        }
    }
}

impl Ambiguity {
    /// The audit line's and the metric's reason: a short, bounded set.
    pub fn reason(&self) -> &'static str {
        match self {
            Ambiguity::NoCommonName => "subject_no_cn",
            Ambiguity::SeveralCommonNames(_) => "subject_several_cn",
            Ambiguity::EmptyValue { .. } => "subject_empty_value",
            Ambiguity::Undecodable(_) => "subject_undecodable",
            Ambiguity::Unsteady(_) => "subject_unsteady",
        }
    }
}

const OID_CN: &str = "2.5.4.3";
const OID_O: &str = "2.5.4.10";
/// Kubernetes' user UID in a client certificate (the `AllowParsingUserUIDFromCertAuth` gate).
const OID_KUBE_UID: &str = "1.3.6.1.4.1.57683.2";

impl KubeSubject {
    /// Reads every attribute of `name`, in order; never fails (what Go would refuse is
    /// recorded in `undecodable`).
    pub fn read(name: &X509Name<'_>) -> Self {
        let mut subject = KubeSubject::default();
        let mut parts = Vec::new();
        for attr in name.iter_attributes() {
            let oid = attr.attr_type().to_id_string();
            let label = match oid.as_str() {
                OID_CN => "CN".to_string(),
                OID_O => "O".to_string(),
                OID_KUBE_UID => "UID".to_string(),
                _ => short_label(&oid),
            };
            match decode(attr.attr_value()) {
                Ok(value) => {
                    if let Some(why) = unsteady(&oid, attr.attr_value().tag(), &value) {
                        let attribute = label.clone();
                        subject.unsteady.push(Flagged { attribute, why });
                    }
                    parts.push(format!("{label}={value}"));
                    match oid.as_str() {
                        OID_CN => subject.common_names.push(value),
                        OID_O => subject.organizations.push(value),
                        _ => {}
                    }
                }
                Err(why) => {
                    parts.push(format!("{label}=#{}", hex::encode(attr.attr_value().data)));
                    subject.undecodable.push(Flagged {
                        attribute: label,
                        why,
                    });
                }
            }
        }
        subject.text = parts.join(", ");
        subject
    }

    /// kube-apiserver's user: the last CN, if it is not empty.
    pub fn user(&self) -> Option<&str> {
        self.common_names
            .last()
            .map(String::as_str)
            .filter(|cn| !cn.is_empty())
    }

    /// The user and groups, refusing a subject the apiserver could read differently: a value
    /// it would not decode, one its releases read differently (a T61/BMP value beyond ASCII, a
    /// Kubernetes UID), no CN or more than one, an empty CN or O.
    pub fn identity(&self) -> Result<KubeIdentity, Ambiguity> {
        if let Some(u) = self.undecodable.first() {
            return Err(Ambiguity::Undecodable(u.clone()));
        }
        if let Some(u) = self.unsteady.first() {
            return Err(Ambiguity::Unsteady(u.clone()));
        }
        let user = match self.common_names.as_slice() {
            [] => return Err(Ambiguity::NoCommonName),
            [one] => one,
            several => return Err(Ambiguity::SeveralCommonNames(several.to_vec())),
        };
        if user.is_empty() {
            return Err(Ambiguity::EmptyValue { attribute: "CN" });
        }
        if self.organizations.iter().any(String::is_empty) {
            return Err(Ambiguity::EmptyValue { attribute: "O" });
        }
        Ok(KubeIdentity {
            user: user.clone(),
            groups: self.organizations.clone(),
        })
    }
}

/// Why a readable attribute is still read differently across kube-apiserver releases.
fn unsteady(oid: &str, tag: Tag, value: &str) -> Option<String> {
    if oid == OID_KUBE_UID {
        return Some("a Kubernetes user UID, which tenantci never writes".into());
    }
    let legacy = match tag {
        Tag::T61String => "T61String",
        Tag::BmpString => "BMPString",
        _ => return None,
    };
    (!value.is_ascii()).then(|| format!("a {legacy} beyond ASCII"))
}

fn short_label(oid: &str) -> String {
    match oid {
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.11" => "OU",
        _ => return oid.to_string(),
    }
    .to_string()
}

/// One attribute value, decoded as Go's `parseASN1String` does (same types, same refusals).
fn decode(value: &Any<'_>) -> Result<String, String> {
    let data = value.data;
    if value.class() != Class::Universal || value.header.is_constructed() {
        return Err(format!(
            "non-universal or constructed value (tag {})",
            value.tag()
        ));
    }
    match value.tag() {
        Tag::Utf8String => std::str::from_utf8(data)
            .map(str::to_string)
            .map_err(|_| "UTF8String that is not valid UTF-8".to_string()),
        Tag::PrintableString => match data.iter().all(|b| is_printable(*b)) {
            true => Ok(String::from_utf8_lossy(data).into_owned()),
            false => Err("PrintableString with a character outside its set".to_string()),
        },
        Tag::Ia5String => match data.is_ascii() {
            true => Ok(String::from_utf8_lossy(data).into_owned()),
            false => Err("IA5String with a non-ASCII byte".to_string()),
        },
        Tag::NumericString => match data.iter().all(|b| b.is_ascii_digit() || *b == b' ') {
            true => Ok(String::from_utf8_lossy(data).into_owned()),
            false => Err("NumericString with a character other than a digit or space".into()),
        },
        // T.61 is read as Latin-1, byte for byte, as Go and BoringSSL do.
        Tag::T61String => Ok(data.iter().map(|b| char::from(*b)).collect()),
        Tag::BmpString => decode_bmp(data),
        other => Err(format!(
            "{} (a string type Go does not decode)",
            tag_name(other)
        )),
    }
}

/// PrintableString's set, with the `*` and `&` Go also accepts.
fn is_printable(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b" '()+,-./:=?*&".contains(&b)
}

/// UCS-2, big-endian: an even length, one trailing NUL dropped, no surrogates or
/// noncharacters.
fn decode_bmp(data: &[u8]) -> Result<String, String> {
    let invalid = || "BMPString that is not valid UCS-2".to_string();
    if !data.len().is_multiple_of(2) {
        return Err(invalid());
    }
    let data = data.strip_suffix(&[0, 0]).unwrap_or(data);
    data.chunks_exact(2)
        .map(|pair| {
            let unit = u16::from_be_bytes([pair[0], pair[1]]);
            let refused = matches!(unit, 0xd800..=0xdfff | 0xfdd0..=0xfdef | 0xfffe | 0xffff);
            match refused {
                true => Err(invalid()),
                false => char::from_u32(u32::from(unit)).ok_or_else(invalid),
            }
        })
        .collect()
}

fn tag_name(tag: Tag) -> String {
    match tag {
        Tag::VideotexString => "VideotexString".into(),
        Tag::UniversalString => "UniversalString".into(),
        Tag::GraphicString => "GraphicString".into(),
        Tag::VisibleString => "VisibleString".into(),
        Tag::GeneralString => "GeneralString".into(),
        Tag::OctetString => "OCTET STRING".into(),
        other => format!("value of tag {}", other.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use yasna::models::ObjectIdentifier;
    use yasna::{Tag as YTag, tags};

    const CN: &[u64] = &[2, 5, 4, 3];
    const O: &[u64] = &[2, 5, 4, 10];

    /// One attribute: its OID, the value's tag and raw bytes.
    type Attr<'a> = (&'a [u64], YTag, &'a [u8]);

    /// A Name of one attribute per RDN, each value written with its own tag and raw bytes.
    fn name(attrs: &[Attr<'_>]) -> Vec<u8> {
        yasna::construct_der(|w| {
            w.write_sequence(|w| {
                for (oid, tag, bytes) in attrs {
                    w.next().write_set(|w| {
                        w.next().write_sequence(|w| {
                            w.next().write_oid(&ObjectIdentifier::from_slice(oid));
                            w.next()
                                .write_tagged_implicit(*tag, |w| w.write_bytes(bytes));
                        })
                    })
                }
            })
        })
    }

    fn read(der: &[u8]) -> KubeSubject {
        let (_, name) = X509Name::from_der(der).unwrap();
        KubeSubject::read(&name)
    }

    fn bmp(s: &str) -> Vec<u8> {
        s.encode_utf16().flat_map(u16::to_be_bytes).collect()
    }

    #[test]
    fn a_bmpstring_or_t61string_organization_is_a_group() {
        let masters = bmp("system:masters");
        let s = read(&name(&[
            (O, tags::TAG_UTF8STRING, b"gitlab-runner"),
            (O, tags::TAG_BMPSTRING, &masters),
            (O, tags::TAG_TELETEXSTRING, b"caf\xe9"),
            (CN, tags::TAG_UTF8STRING, b"gitlab-runner"),
        ]));
        assert_eq!(s.organizations, ["gitlab-runner", "system:masters", "café"]);
        assert!(s.text.contains("O=system:masters"), "{}", s.text);
        // café is read as Go 1.20+ reads it, but older releases read T61 bytes raw.
        assert_eq!(s.identity().unwrap_err().reason(), "subject_unsteady");
        let ascii = read(&name(&[
            (O, tags::TAG_BMPSTRING, &masters),
            (O, tags::TAG_TELETEXSTRING, b"ci"),
            (CN, tags::TAG_UTF8STRING, b"gitlab-runner"),
        ]));
        let id = ascii.identity().unwrap();
        assert_eq!(id.user, "gitlab-runner");
        assert_eq!(id.groups, ["system:masters", "ci"]);
    }

    #[test]
    fn the_last_cn_is_the_user_and_two_are_refused_in_either_order() {
        for (first, last) in [
            ("gitlab-runner", "tenant-admin"),
            ("tenant-admin", "gitlab-runner"),
        ] {
            let s = read(&name(&[
                (O, tags::TAG_UTF8STRING, b"gitlab-runner"),
                (CN, tags::TAG_UTF8STRING, first.as_bytes()),
                (CN, tags::TAG_PRINTABLESTRING, last.as_bytes()),
            ]));
            assert_eq!(s.user(), Some(last));
            let e = s.identity().unwrap_err();
            assert_eq!(e.reason(), "subject_several_cn");
            assert!(e.to_string().contains("last one"), "{e}");
        }
    }

    #[test]
    fn undecodable_and_empty_values_are_refused() {
        let cases: [(&[Attr<'_>], &str); 7] = [
            (
                &[
                    (O, tags::TAG_VIDEOTEXSTRING, b"system:masters"),
                    (CN, tags::TAG_UTF8STRING, b"u"),
                ],
                "subject_undecodable",
            ),
            (
                &[
                    (O, tags::TAG_UNIVERSALSTRING, b"\0\0\0a"),
                    (CN, tags::TAG_UTF8STRING, b"u"),
                ],
                "subject_undecodable",
            ),
            (
                &[(CN, tags::TAG_UTF8STRING, b"\xff\xfe")],
                "subject_undecodable",
            ),
            (
                &[(CN, tags::TAG_BMPSTRING, b"\xd8\x00")],
                "subject_undecodable",
            ),
            (
                &[(CN, tags::TAG_PRINTABLESTRING, b"a_b")],
                "subject_undecodable",
            ),
            (
                &[
                    (O, tags::TAG_UTF8STRING, b"g"),
                    (CN, tags::TAG_UTF8STRING, b""),
                ],
                "subject_empty_value",
            ),
            (&[(O, tags::TAG_UTF8STRING, b"g")], "subject_no_cn"),
        ];
        for (attrs, reason) in cases {
            let e = read(&name(attrs)).identity().unwrap_err();
            assert_eq!(e.reason(), reason, "{attrs:?}");
        }
        let empty_o = read(&name(&[
            (O, tags::TAG_UTF8STRING, b""),
            (CN, tags::TAG_UTF8STRING, b"u"),
        ]));
        assert_eq!(
            empty_o.identity().unwrap_err().reason(),
            "subject_empty_value"
        );
    }

    #[test]
    fn a_kubernetes_uid_or_a_legacy_string_beyond_ascii_is_refused() {
        const UID: &[u64] = &[1, 3, 6, 1, 4, 1, 57683, 2];
        let uid = read(&name(&[
            (O, tags::TAG_UTF8STRING, b"g"),
            (CN, tags::TAG_UTF8STRING, b"u"),
            (UID, tags::TAG_UTF8STRING, b"1234"),
        ]));
        let e = uid.identity().unwrap_err();
        assert_eq!(e.reason(), "subject_unsteady");
        assert!(e.to_string().contains("UID"), "{e}");
        // U+0141 is two bytes each below 0x80: judged by the character, not the bytes.
        let bmp = read(&name(&[(CN, tags::TAG_BMPSTRING, b"\x01\x41")]));
        assert_eq!(bmp.identity().unwrap_err().reason(), "subject_unsteady");
    }

    #[test]
    fn go_string_rules_at_their_edges() {
        let ok = |tag, bytes: &[u8]| decode_one(tag, bytes).is_ok();
        assert!(ok(tags::TAG_PRINTABLESTRING, b"a*b&c'(),+-./:=? Z9"));
        assert!(!ok(tags::TAG_PRINTABLESTRING, b"a@b"));
        assert!(ok(tags::TAG_IA5STRING, b"a@b"));
        assert!(!ok(tags::TAG_IA5STRING, b"\x80"));
        assert!(ok(tags::TAG_NUMERICSTRING, b"12 3"));
        assert!(!ok(tags::TAG_NUMERICSTRING, b"1a"));
        assert_eq!(decode_one(tags::TAG_BMPSTRING, &bmp("ab\0")).unwrap(), "ab");
        assert!(!ok(tags::TAG_BMPSTRING, b"\x00a\x00"));
        assert!(!ok(tags::TAG_BMPSTRING, b"\xff\xfe"));
    }

    fn decode_one(tag: YTag, bytes: &[u8]) -> Result<String, String> {
        let s = read(&name(&[(CN, tag, bytes)]));
        match s.undecodable.first() {
            Some(u) => Err(u.why.clone()),
            None => Ok(s.common_names[0].clone()),
        }
    }
}
