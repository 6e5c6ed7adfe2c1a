//! Object-name validation with kube-apiserver's messages (apimachinery `validation`).

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

use tenantci_core::dns::matches_label_pattern as is_label;

/// Problems with `name` under `rule`, as kube-apiserver words them (empty = valid).
pub fn name_errors(name: &str, rule: super::api::registry::NameRule) -> Vec<String> {
    use super::api::registry::NameRule;
    let mut errs = Vec::new();
    match rule {
        NameRule::Label => {
            if name.len() > 63 {
                errs.push("must be no more than 63 characters".to_string());
            }
            if !is_label(name) {
                errs.push(LABEL_MSG.to_string());
            }
        }
        NameRule::Subdomain => {
            if name.len() > 253 {
                errs.push("must be no more than 253 characters".to_string());
            }
            if !name.split('.').all(is_label) {
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
    use super::super::api::registry::NameRule;
    use super::*;

    #[test]
    fn names() {
        assert!(name_errors("a.b-c", NameRule::Subdomain).is_empty());
        assert!(!name_errors("Bad_Name", NameRule::Subdomain).is_empty());
        assert!(!name_errors("a.b", NameRule::Label).is_empty());
        assert!(name_errors("system:basic-user", NameRule::PathSegment).is_empty());
        assert!(!name_errors("a/b", NameRule::PathSegment).is_empty());
    }
}
