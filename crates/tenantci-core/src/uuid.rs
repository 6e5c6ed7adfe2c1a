//! Random RFC 4122 version-4 UUIDs: kube-apiserver's `metadata.uid` in the simulator, the
//! Gitea double's runner uuids (and its delivery ids and signed-URL signatures), and the
//! dispatcher's FetchTask request keys (`claim::fetch`), in the form forgejo-runner sends.
//! Sixteen random bytes with the version and variant bits set; not worth a crate of its own.

/// A random version-4 UUID in its hyphenated lowercase form.
pub fn v4() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn fresh_and_version_4() {
        let (a, b) = (super::v4(), super::v4());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
        assert_eq!(a.matches('-').count(), 4);
    }
}
