//! RFC 1123 names as Kubernetes (apimachinery `validation`) checks them: namespaces, cluster
//! names and most object names are labels; Secret and Pod names may be subdomains. One
//! definition, so tenantci refuses exactly what the apiserver would refuse, before it writes.

/// A DNS label: 1-63 of `[a-z0-9-]`, starting and ending with a letter or digit.
pub fn is_label(s: &str) -> bool {
    s.len() <= 63 && matches_label_pattern(s)
}

/// The label pattern `[a-z0-9]([-a-z0-9]*[a-z0-9])?` without the length limit: kube-apiserver
/// reports a too-long name and a malformed one as two separate errors.
pub fn matches_label_pattern(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A DNS subdomain: at most 253 characters of dot-separated labels.
pub fn is_subdomain(s: &str) -> bool {
    s.len() <= 253 && !s.is_empty() && s.split('.').all(is_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        for ok in ["a", "ci", "a-b", "0", "x1", &"a".repeat(63)] {
            assert!(is_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", "ä", &"a".repeat(64)] {
            assert!(!is_label(bad), "{bad}");
        }
    }

    #[test]
    fn subdomains() {
        assert!(is_subdomain("a.b-c.d"));
        assert!(!is_subdomain("a..b"));
        assert!(!is_subdomain(".a"));
        assert!(!is_subdomain(&"a.".repeat(127)));
    }
}
