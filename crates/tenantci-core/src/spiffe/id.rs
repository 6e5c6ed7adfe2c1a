//! SPIFFE IDs from the operator's flags: the trust domain, an exact ID (`--spiffe-facade-id`),
//! and the ID templates (`--spiffe-id-template`, `--spiffe-parent-template`) rendered per task.
//! Pure: parsing and rendering only. The ID grammar itself is the `spiffe` crate's
//! (`SpiffeId::new`), so an ID this module accepts is one the SVID parser accepts too.

use ::spiffe::{SpiffeId, TrustDomain};

use crate::{Error, Result};

/// The placeholders a template may use, each filled per task (or per node for the parent).
pub const PLACEHOLDERS: &[&str] = &["trust_domain", "repository", "job", "cluster", "node_uid"];

/// The issue's default task ID: one identity per repository and job.
pub const DEFAULT_ID_TEMPLATE: &str = "spiffe://{trust_domain}/gitea/{repository}/{job}";

/// The SPIRE controller manager's agent ID under k8s_psat node attestation: the entry's parent
/// names the node's agent (the Pod itself is pinned by the `k8s:pod-uid` selector).
pub const DEFAULT_PARENT_TEMPLATE: &str =
    "spiffe://{trust_domain}/spire/agent/k8s_psat/{cluster}/{node_uid}";

/// A trust domain name (`example.org`, or `spiffe://example.org`), as SPIFFE allows it.
pub fn trust_domain(flag: &str, value: &str) -> Result<TrustDomain> {
    TrustDomain::new(value).map_err(|e| {
        Error::bad_input(format!("{flag} `{value}` is not a SPIFFE trust domain"))
            .caused_by(e)
            .hint(format!(
                "pass {flag} as a trust domain name such as `example.org` (lower-case letters, digits, `.`, `-`, `_`)"
            ))
    })
}

/// An exact SPIFFE ID (`spiffe://example.org/ns/x/sa/y`).
pub fn spiffe_id(flag: &str, value: &str) -> Result<SpiffeId> {
    SpiffeId::new(value).map_err(|e| {
        Error::bad_input(format!("{flag} `{value}` is not a SPIFFE ID"))
            .caused_by(e)
            .hint(format!(
                "pass {flag} as `spiffe://<trust domain>/<path>`, path segments of letters, digits, `.`, `-`, `_`"
            ))
    })
}

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Placeholder(&'static str),
}

/// A parsed ID template: literal text and `{placeholder}`s from [`PLACEHOLDERS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdTemplate {
    source: String,
    pieces: Vec<Piece>,
}

/// The values a template is rendered with. A placeholder whose value is `None` is an error
/// at render time (the parent template needs `node_uid`, known only once the Pod is scheduled).
#[derive(Debug, Clone, Copy, Default)]
pub struct Values<'a> {
    /// `{trust_domain}`: the trust domain's name, without `spiffe://`.
    pub trust_domain: Option<&'a str>,
    /// `{repository}`: the task context's `repository` (`owner/name`).
    pub repository: Option<&'a str>,
    /// `{job}`: the task context's `job`, the job's id in its workflow.
    pub job: Option<&'a str>,
    /// `{cluster}`: the cluster's name as SPIRE's k8s_psat node attestor knows it.
    pub cluster: Option<&'a str>,
    /// `{node_uid}`: the UID of the Node the task's Pod runs on (parent template only).
    pub node_uid: Option<&'a str>,
}

impl<'a> Values<'a> {
    fn get(&self, name: &str) -> Option<&'a str> {
        match name {
            "trust_domain" => self.trust_domain,
            "repository" => self.repository,
            "job" => self.job,
            "cluster" => self.cluster,
            "node_uid" => self.node_uid,
            _ => None,
        }
    }
}

impl IdTemplate {
    /// Parses `template` (`flag` names it in errors): balanced braces, known placeholders,
    /// the `spiffe://{trust_domain}/` prefix (an entry outside the configured trust domain
    /// would never be issued), and a sample rendering that is a valid SPIFFE ID, so a
    /// template that can never render is refused at `dispatch init`, not per task.
    pub fn parse(flag: &str, template: &str) -> Result<Self> {
        let refuse = |why: String| {
            Error::bad_input(format!("{flag} `{template}` {why}")).hint(format!(
                "pass {flag} like `{DEFAULT_ID_TEMPLATE}`; placeholders: {}",
                PLACEHOLDERS
                    .iter()
                    .map(|p| format!("{{{p}}}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        };
        let mut pieces = Vec::new();
        let mut rest = template;
        while !rest.is_empty() {
            match rest.find(['{', '}']) {
                None => {
                    pieces.push(Piece::Text(rest.to_string()));
                    rest = "";
                }
                Some(i) if rest.as_bytes()[i] == b'}' => {
                    return Err(refuse("has a `}` without its `{`".into()));
                }
                Some(i) => {
                    if i > 0 {
                        pieces.push(Piece::Text(rest[..i].to_string()));
                    }
                    let after = &rest[i + 1..];
                    let Some(end) = after.find('}') else {
                        return Err(refuse("has a `{` without its `}`".into()));
                    };
                    let name = &after[..end];
                    let Some(known) = PLACEHOLDERS.iter().find(|p| **p == name) else {
                        return Err(refuse(format!("uses the unknown placeholder `{{{name}}}`")));
                    };
                    pieces.push(Piece::Placeholder(known));
                    rest = &after[end + 1..];
                }
            }
        }
        if !template.starts_with("spiffe://{trust_domain}/") {
            return Err(refuse(
                "does not start with `spiffe://{trust_domain}/` (IDs outside the trust domain are never issued)".into(),
            ));
        }
        let parsed = IdTemplate {
            source: template.to_string(),
            pieces,
        };
        let sample = Values {
            trust_domain: Some("example.org"),
            repository: Some("owner/repo"),
            job: Some("42"),
            cluster: Some("ci"),
            node_uid: Some("0b6f1f2e-5d1c-4f53-9a53-0c6f6a6b0c11"),
        };
        parsed
            .render(&sample)
            .map_err(|e| refuse(format!("does not render to a SPIFFE ID ({})", e.message())))?;
        Ok(parsed)
    }

    /// The template as given.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the template uses `name` (e.g. a parent template without `{node_uid}`).
    pub fn uses(&self, name: &str) -> bool {
        self.pieces
            .iter()
            .any(|p| matches!(p, Piece::Placeholder(n) if *n == name))
    }

    /// The SPIFFE ID for `values`. A value that makes the ID invalid (an empty or `..` path
    /// segment, a character outside SPIFFE's set) is refused with the template and the value
    /// named, never escaped: two tasks must not be able to render the same ID.
    pub fn render(&self, values: &Values<'_>) -> Result<SpiffeId> {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Placeholder(name) => {
                    let Some(v) = values.get(name) else {
                        return Err(Error::bad_input(format!(
                            "the SPIFFE ID template `{}` needs `{{{name}}}`, which is not known here",
                            self.source
                        )));
                    };
                    out.push_str(v);
                }
            }
        }
        SpiffeId::new(&out).map_err(|e| {
            Error::bad_input(format!(
                "the SPIFFE ID template `{}` renders `{}`, which is not a SPIFFE ID",
                self.source,
                crate::input::shown(&out)
            ))
            .caused_by(e)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> Values<'static> {
        Values {
            trust_domain: Some("example.org"),
            repository: Some("acme/widgets"),
            job: Some("17"),
            cluster: Some("ci"),
            node_uid: Some("uid-1"),
        }
    }

    #[test]
    fn the_default_templates_render_the_issue_s_ids() {
        let id = IdTemplate::parse("--spiffe-id-template", DEFAULT_ID_TEMPLATE).unwrap();
        assert_eq!(
            id.render(&values()).unwrap().to_string(),
            "spiffe://example.org/gitea/acme/widgets/17"
        );
        let parent =
            IdTemplate::parse("--spiffe-parent-template", DEFAULT_PARENT_TEMPLATE).unwrap();
        assert_eq!(
            parent.render(&values()).unwrap().to_string(),
            "spiffe://example.org/spire/agent/k8s_psat/ci/uid-1"
        );
        assert!(parent.uses("node_uid"));
        assert!(!id.uses("node_uid"));
    }

    #[test]
    fn malformed_templates_are_refused_with_the_reason() {
        for (t, why) in [
            (
                "spiffe://{trust_domain}/x/{repo}",
                "unknown placeholder `{repo}`",
            ),
            ("spiffe://{trust_domain}/x/{job", "without its `}`"),
            ("spiffe://{trust_domain}/x}/{job}", "`}` without its `{`"),
            ("spiffe://example.org/{job}", "does not start with"),
            ("https://{trust_domain}/{job}", "does not start with"),
            ("spiffe://{trust_domain}/a//{job}", "does not render"),
            ("spiffe://{trust_domain}/{job}/", "does not render"),
        ] {
            let err = IdTemplate::parse("--spiffe-id-template", t).unwrap_err();
            assert!(err.message().contains(why), "{t}: {}", err.message());
            assert!(err.message().contains("--spiffe-id-template"), "{t}");
        }
    }

    #[test]
    fn values_that_break_the_id_are_refused_not_escaped() {
        let t = IdTemplate::parse("--spiffe-id-template", DEFAULT_ID_TEMPLATE).unwrap();
        for job in ["build and test", "..", "", "a/../b", "x%2Fy", "Ü"] {
            let v = Values {
                job: Some(job),
                ..values()
            };
            assert!(t.render(&v).is_err(), "job {job:?} rendered");
        }
        let missing = Values {
            job: None,
            ..values()
        };
        let err = t.render(&missing).unwrap_err();
        assert!(err.message().contains("{job}"), "{}", err.message());
    }

    #[test]
    fn trust_domains_and_exact_ids_are_checked() {
        assert_eq!(
            trust_domain("--spiffe-trust-domain", "example.org")
                .unwrap()
                .to_string(),
            "example.org"
        );
        assert!(trust_domain("--spiffe-trust-domain", "exa mple.org").is_err());
        assert!(trust_domain("--spiffe-trust-domain", "example.org/path").is_err());
        assert!(trust_domain("--spiffe-trust-domain", "").is_err());
        let id = spiffe_id(
            "--spiffe-facade-id",
            "spiffe://example.org/ns/dynamic-runner/sa/tenantci-dispatcher",
        )
        .unwrap();
        assert_eq!(id.trust_domain_name(), "example.org");
        let err = spiffe_id("--spiffe-facade-id", "spiffe://example.org/a/../b").unwrap_err();
        assert!(err.message().contains("--spiffe-facade-id"));
    }
}
