//! Object-name validation with kube-apiserver's messages (apimachinery `validation`), and the
//! RFC 1123 names it is made of, by the simulator's own code: the product checks names too
//! (core's `dns`), and a double that judged with the product's checker would agree with the
//! product's mistakes instead of with kube-apiserver.

/// How an object's name is validated on create (each resource's `ResourceDef::name_rule`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain (most resources).
    Subdomain,
    /// RFC 1123 label (namespaces, services, clusters).
    Label,
    /// Any path segment (RBAC objects, whose names carry `:`).
    PathSegment,
}

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// The label pattern `[a-z0-9]([-a-z0-9]*[a-z0-9])?` without a length limit: kube-apiserver
/// reports a name that is too long and one that does not match as two errors.
pub fn matches_label_pattern(s: &str) -> bool {
    let b = s.as_bytes();
    let inner = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-';
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => *first != b'-' && *last != b'-' && b.iter().all(inner),
        _ => false,
    }
}

/// `IsDNS1123Subdomain`'s pattern: one or more labels joined by single dots, with no length
/// limit on each label (only the whole name is limited, to 253).
fn matches_subdomain_pattern(s: &str) -> bool {
    s.split('.').all(matches_label_pattern)
}

/// `IsDNS1123Label`: at most 63 characters of the label pattern.
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && matches_label_pattern(s)
}

/// `IsDNS1123Subdomain`: at most 253 characters of the subdomain pattern.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && matches_subdomain_pattern(s)
}

/// Problems with `name` under `rule`, as kube-apiserver words them (empty = valid).
pub fn name_errors(name: &str, rule: NameRule) -> Vec<String> {
    let mut errs = Vec::new();
    match rule {
        NameRule::Label => {
            if name.len() > 63 {
                errs.push("must be no more than 63 characters".to_string());
            }
            if !matches_label_pattern(name) {
                errs.push(LABEL_MSG.to_string());
            }
        }
        NameRule::Subdomain => {
            if name.len() > 253 {
                errs.push("must be no more than 253 characters".to_string());
            }
            if !matches_subdomain_pattern(name) {
                errs.push(SUBDOMAIN_MSG.to_string());
            }
        }
        NameRule::PathSegment => {
            if name == "." || name == ".." {
                errs.push(format!("may not be '{name}'"));
            }
            for bad in ['/', '%'] {
                if name.contains(bad) {
                    errs.push(format!("may not contain '{bad}'"));
                }
            }
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(name_errors("a.b-c", NameRule::Subdomain).is_empty());
        assert!(!name_errors("Bad_Name", NameRule::Subdomain).is_empty());
        assert!(!name_errors("a.b", NameRule::Label).is_empty());
        assert!(name_errors("system:basic-user", NameRule::PathSegment).is_empty());
        assert!(!name_errors("a/b", NameRule::PathSegment).is_empty());
    }

    #[test]
    fn labels_at_their_edges() {
        let max = "a".repeat(63);
        for ok in ["a", "0", "a-b", "a--b", "1a", "x1", max.as_str()] {
            assert!(is_dns1123_label(ok), "{ok:?}");
        }
        let long = "a".repeat(64);
        for bad in [
            "",
            "-a",
            "a-",
            "-",
            "A",
            "aB",
            "a_b",
            "a.b",
            "a b",
            "\u{e4}",
            "a\n",
            long.as_str(),
        ] {
            assert!(!is_dns1123_label(bad), "{bad:?}");
        }
        assert!(
            matches_label_pattern(&long),
            "the pattern has no length limit"
        );
        assert_eq!(
            name_errors(&long, NameRule::Label).len(),
            1,
            "only too long"
        );
        assert_eq!(
            name_errors("-A", NameRule::Label).len(),
            1,
            "only malformed"
        );
    }

    #[test]
    fn subdomains_at_their_edges() {
        // Three labels of 63, one of 61 and three dots: 253; one more character: 254.
        let at_max = format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61)
        );
        assert_eq!(at_max.len(), 253);
        assert!(is_dns1123_subdomain(&at_max));
        assert!(!is_dns1123_subdomain(&format!("{at_max}d")));
        // A label longer than 63 is fine inside a subdomain: only the whole name is limited.
        let long_label = format!("{}.b", "a".repeat(64));
        assert!(is_dns1123_subdomain(&long_label));
        for ok in ["a", "a.b", "a-b.c-d", "0.0", "example.com"] {
            assert!(is_dns1123_subdomain(ok), "{ok:?}");
        }
        for bad in [
            "", ".", ".a", "a.", "a..b", "A.b", "a.-b", "a-.b", "a_b.c", "a/b", " a",
        ] {
            assert!(!is_dns1123_subdomain(bad), "{bad:?}");
        }
        assert_eq!(name_errors(&".".repeat(254), NameRule::Subdomain).len(), 2);
    }
}
