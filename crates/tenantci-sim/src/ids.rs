//! Server-set identities and times, shared by the apiservers, the node controller and the
//! Gitea double: RFC 4122 v4 uids, generateName suffixes, second-precision timestamps.

/// `metadata.creationTimestamp` format: RFC 3339, seconds, UTC.
pub fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A random version-4 UUID, as kube-apiserver assigns `metadata.uid`.
pub fn uuid() -> String {
    tenantci_core::uuid::v4()
}

/// Five characters from kube's generateName alphabet (no vowels, no ambiguous digits).
pub fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}
