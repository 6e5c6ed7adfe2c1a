//! A certificate's Name as kube-apiserver reads it, by the simulator's own code: the product
//! reads subjects too (core's `pki::inspect`), and a double that judged with the product's
//! reader would hide the product's bugs (issue 51: Organization values in a BMPString were
//! dropped, and the first CN was taken).
//!
//! Go's crypto/x509 (`parseName`) decodes every attribute value of every RDN, multi-valued
//! RDNs included, with `parseASN1String`; a value of another string type, or one that is not
//! valid for its type, fails the whole certificate parse, and Go's TLS server then refuses the
//! certificate. `pkix.Name.FillFromRDNSequence` then walks the attributes in order: a CN
//! (2.5.4.3) overwrites the previous one, so the last CN wins, and every O (2.5.4.10) is
//! appended. x509-parser only splits the DER into attributes here; decoding is ours.

use x509_parser::asn1_rs::{Any, Class, Tag};
use x509_parser::oid_registry::{OID_X509_COMMON_NAME, OID_X509_ORGANIZATION_NAME};
use x509_parser::x509::X509Name;

/// The two fields of a Name that kube-apiserver's x509 authenticator uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subject {
    /// The last CN, or empty when there is none.
    pub common_name: String,
    /// Every O, in order.
    pub organizations: Vec<String>,
}

/// Why Go would refuse to parse a Name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    /// A value whose type `parseASN1String` does not read (e.g. UniversalString).
    UnsupportedType(Tag),
    /// A value not valid for its string type (e.g. a UTF8String that is not UTF-8).
    InvalidValue(Tag),
}

/// Reads a Name as `parseName` + `FillFromRDNSequence` do.
pub fn read(name: &X509Name) -> Result<Subject, Unreadable> {
    let mut subject = Subject::default();
    for attribute in name.iter_attributes() {
        let value = decode(attribute.attr_value())?;
        let kind = attribute.attr_type();
        if *kind == OID_X509_COMMON_NAME {
            subject.common_name = value;
        } else if *kind == OID_X509_ORGANIZATION_NAME {
            subject.organizations.push(value);
        }
    }
    Ok(subject)
}

/// One attribute value, as Go's `parseASN1String` decodes it. Only universal, primitive
/// encodings of the six string types are read: Go compares the whole identifier octet.
pub fn decode(value: &Any) -> Result<String, Unreadable> {
    let tag = value.header.tag();
    if value.header.class() != Class::Universal || value.header.is_constructed() {
        return Err(Unreadable::UnsupportedType(tag));
    }
    let bytes = value.data;
    let invalid = Unreadable::InvalidValue(tag);
    match tag {
        Tag::Utf8String => String::from_utf8(bytes.to_vec()).map_err(|_| invalid),
        Tag::PrintableString => ascii_if(bytes, is_printable).ok_or(invalid),
        Tag::Ia5String => ascii_if(bytes, |b| b.is_ascii()).ok_or(invalid),
        Tag::NumericString => ascii_if(bytes, |b| b.is_ascii_digit() || b == b' ').ok_or(invalid),
        // T.61 is read as Latin-1: each byte is the code point of the same number.
        Tag::TeletexString => Ok(bytes.iter().map(|&b| char::from(b)).collect()),
        Tag::BmpString => bmp(bytes).ok_or(invalid),
        other => Err(Unreadable::UnsupportedType(other)),
    }
}

/// The bytes as a string when every one passes `allowed` (all of them ASCII).
fn ascii_if(bytes: &[u8], allowed: impl Fn(u8) -> bool) -> Option<String> {
    bytes
        .iter()
        .all(|&b| allowed(b))
        .then(|| bytes.iter().map(|&b| char::from(b)).collect())
}

/// Go's PrintableString set: letters, digits, space and `'()+,-./:=?`, and also `*` and `&`,
/// which Go accepts because real certificates carry them.
fn is_printable(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b" '()+,-./:=?*&".contains(&b)
}

/// BMPString: big-endian UCS-2. An odd length is invalid; one trailing NUL terminator
/// (`00 00`) is dropped; surrogates (D800-DFFF, which UCS-2 does not have) and the
/// noncharacters FFFE, FFFF and FDD0-FDEF are refused.
fn bmp(bytes: &[u8]) -> Option<String> {
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    let bytes = bytes.strip_suffix(&[0, 0]).unwrap_or(bytes);
    bytes
        .chunks_exact(2)
        .map(|pair| {
            let unit = u16::from_be_bytes([pair[0], pair[1]]);
            let noncharacter = matches!(unit, 0xFFFE | 0xFFFF | 0xFDD0..=0xFDEF);
            // `from_u32` refuses exactly the surrogates among 16-bit values.
            char::from_u32(u32::from(unit)).filter(|_| !noncharacter)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_parser::prelude::FromDer;

    // Tags of the universal string types, and the last arc of the attribute types.
    const UTF8: u8 = 0x0c;
    const PRINTABLE: u8 = 0x13;
    const T61: u8 = 0x14;
    const VIDEOTEX: u8 = 0x15;
    const IA5: u8 = 0x16;
    const UNIVERSAL: u8 = 0x1c;
    const BMP: u8 = 0x1e;
    const NUMERIC: u8 = 0x12;
    const CN: u8 = 3;
    const O: u8 = 10;
    const OU: u8 = 11;

    /// One DER element (short or long length form).
    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match content.len() {
            n if n < 0x80 => out.push(n as u8),
            n if n <= 0xff => out.extend([0x81, n as u8]),
            n => out.extend([0x82, (n >> 8) as u8, n as u8]),
        }
        out.extend_from_slice(content);
        out
    }

    /// AttributeTypeAndValue { 2.5.4.<arc>, <tag> value }.
    fn attr(arc: u8, tag: u8, value: &[u8]) -> Vec<u8> {
        let mut content = tlv(0x06, &[0x55, 0x04, arc]);
        content.extend(tlv(tag, value));
        tlv(0x30, &content)
    }

    /// An RDNSequence: each inner list is one RDN (a SET of attributes).
    fn name(rdns: &[&[Vec<u8>]]) -> Vec<u8> {
        let sets: Vec<u8> = rdns
            .iter()
            .flat_map(|rdn| tlv(0x31, &rdn.concat()))
            .collect();
        tlv(0x30, &sets)
    }

    fn read_der(der: &[u8]) -> Result<Subject, Unreadable> {
        let (rest, parsed) = X509Name::from_der(der).expect("the test's DER is a Name");
        assert!(rest.is_empty());
        read(&parsed)
    }

    fn ucs2(s: &str) -> Vec<u8> {
        s.encode_utf16().flat_map(u16::to_be_bytes).collect()
    }

    fn subject(cn: &str, orgs: &[&str]) -> Subject {
        Subject {
            common_name: cn.into(),
            organizations: orgs.iter().map(|o| o.to_string()).collect(),
        }
    }

    #[test]
    fn a_bmpstring_organization_is_a_group() {
        let der = name(&[
            &[attr(O, BMP, &ucs2("system:masters"))],
            &[attr(CN, UTF8, b"mallory")],
        ]);
        assert_eq!(read_der(&der), Ok(subject("mallory", &["system:masters"])));
        let terminated = [ucs2("system:masters"), vec![0, 0]].concat();
        let der = name(&[&[attr(CN, BMP, &terminated)]]);
        assert_eq!(read_der(&der).unwrap().common_name, "system:masters");
    }

    #[test]
    fn a_t61string_is_read_as_latin_1() {
        let der = name(&[
            &[attr(CN, PRINTABLE, b"runner")],
            &[attr(O, T61, b"caf\xe9 \xa7")],
        ]);
        assert_eq!(read_der(&der), Ok(subject("runner", &["café §"])));
    }

    #[test]
    fn the_last_common_name_wins_and_every_organization_counts_in_order() {
        let first_a = name(&[&[attr(CN, UTF8, b"a")], &[attr(CN, UTF8, b"b")]]);
        assert_eq!(read_der(&first_a).unwrap().common_name, "b");
        let first_b = name(&[&[attr(CN, UTF8, b"b")], &[attr(CN, UTF8, b"a")]]);
        assert_eq!(read_der(&first_b).unwrap().common_name, "a");
        // A multi-valued RDN: both of its attributes, in their order, among the others.
        let multi = name(&[
            &[attr(O, UTF8, b"one")],
            &[
                attr(O, IA5, b"two"),
                attr(CN, UTF8, b"x"),
                attr(OU, UTF8, b"u"),
            ],
            &[attr(O, NUMERIC, b"3 4")],
        ]);
        assert_eq!(read_der(&multi), Ok(subject("x", &["one", "two", "3 4"])));
        assert_eq!(read_der(&name(&[])), Ok(Subject::default()));
    }

    #[test]
    fn a_string_type_go_does_not_read_refuses_the_name() {
        for tag in [VIDEOTEX, UNIVERSAL] {
            let der = name(&[&[attr(CN, UTF8, b"a")], &[attr(O, tag, b"x")]]);
            assert_eq!(
                read_der(&der),
                Err(Unreadable::UnsupportedType(Tag(tag.into())))
            );
        }
        // Any attribute counts, not only CN and O: Go parses the whole Name.
        let der = name(&[
            &[attr(OU, UNIVERSAL, &[0, 0, 0, 0x61])],
            &[attr(CN, UTF8, b"a")],
        ]);
        assert!(read_der(&der).is_err());
        // A context-specific or constructed encoding of a string type is another type to Go.
        for tag in [0x80 | UTF8, 0x20 | UTF8] {
            let der = name(&[&[attr(CN, tag, b"a")]]);
            assert!(
                matches!(read_der(&der), Err(Unreadable::UnsupportedType(_))),
                "{tag:#x}"
            );
        }
    }

    #[test]
    fn invalid_values_refuse_the_name() {
        let invalid = [
            (UTF8, b"\xff\xfe".to_vec()),
            (UTF8, b"\xc3".to_vec()),
            (BMP, vec![0xd8, 0x3d, 0xde, 0x00]), // a surrogate pair: not UCS-2
            (BMP, vec![0x00, 0x61, 0xdc, 0x00]),
            (BMP, vec![0xff, 0xfe]),
            (BMP, vec![0xfd, 0xd0]),
            (BMP, vec![0x00, 0x61, 0x00]), // odd length
            (PRINTABLE, b"a_b".to_vec()),
            (PRINTABLE, b"a@b".to_vec()),
            (IA5, b"\x80".to_vec()),
            (NUMERIC, b"12a".to_vec()),
        ];
        for (tag, value) in invalid {
            let der = name(&[&[attr(O, tag, &value)]]);
            assert_eq!(
                read_der(&der),
                Err(Unreadable::InvalidValue(Tag(tag.into()))),
                "{tag:#x} {value:x?}"
            );
        }
    }

    #[test]
    fn the_edges_go_accepts() {
        let valid = [
            (
                PRINTABLE,
                b"A-z 0'()+,./:=?*&".to_vec(),
                "A-z 0'()+,./:=?*&",
            ),
            (IA5, b"a@b_c\x7f".to_vec(), "a@b_c\u{7f}"),
            (
                BMP,
                vec![0xfd, 0xcf, 0xfd, 0xf0, 0xff, 0xfd],
                "\u{fdcf}\u{fdf0}\u{fffd}",
            ),
            (BMP, vec![0, 0], ""),
            (UTF8, "é".as_bytes().to_vec(), "é"),
            (NUMERIC, b"".to_vec(), ""),
        ];
        for (tag, value, expected) in valid {
            let der = name(&[&[attr(O, tag, &value)]]);
            assert_eq!(read_der(&der), Ok(subject("", &[expected])), "{tag:#x}");
        }
    }
}
