//! Property tests: escalation coverage is sound and request parsing total.

use proptest::prelude::*;

use super::*;
use crate::authz::escalation::uncovered;
use crate::authz::rbac::list;

fn pick(options: &'static [&'static str]) -> impl Strategy<Value = Vec<String>> {
    proptest::sample::subsequence(options, 1..=options.len().min(3))
        .prop_map(|v| v.into_iter().map(str::to_string).collect())
}

fn any_rule() -> impl Strategy<Value = PolicyRule> {
    let resource_rule = (
        pick(&["get", "list", "create", "*"]),
        pick(&["", "apps", "*"]),
        pick(&["pods", "pods/exec", "*/exec", "secrets", "*"]),
        proptest::option::of(pick(&["a", "b"])),
    )
        .prop_map(|(verbs, groups, resources, names)| PolicyRule {
            verbs,
            api_groups: Some(groups),
            resources: Some(resources),
            resource_names: names,
            ..PolicyRule::default()
        });
    let url_rule = (
        pick(&["get", "post", "*"]),
        pick(&["/a", "/a/*", "/a*", "/b", "*"]),
    )
        .prop_map(|(verbs, urls)| PolicyRule {
            verbs,
            non_resource_urls: Some(urls),
            ..PolicyRule::default()
        });
    prop_oneof![resource_rule, url_rule]
}

/// Picks one element of `v` or, when it holds `*`, any of `all`.
fn one_of(v: &[String], all: &'static [&'static str]) -> BoxedStrategy<String> {
    if v.iter().any(|x| x == "*") {
        proptest::sample::select(all)
            .prop_map(str::to_string)
            .boxed()
    } else {
        proptest::sample::select(v.to_vec()).boxed()
    }
}

/// A rule the holder of `rule` may grant without escalating.
fn narrow(rule: PolicyRule) -> BoxedStrategy<PolicyRule> {
    let verbs = one_of(&rule.verbs, &["get", "list", "create", "post", "*"]);
    if let Some(urls) = rule.non_resource_urls.clone() {
        let url = proptest::sample::select(urls).prop_flat_map(|u| match u.as_str() {
            "*" => proptest::sample::select(vec!["/a", "/a/*", "/a*", "/b", "*"])
                .prop_map(str::to_string)
                .boxed(),
            "/a*" => proptest::sample::select(vec!["/a", "/a/*", "/a*", "/ab"])
                .prop_map(str::to_string)
                .boxed(),
            "/a/*" => proptest::sample::select(vec!["/a/x", "/a/*", "/a/x*"])
                .prop_map(str::to_string)
                .boxed(),
            other => Just(other.to_string()).boxed(),
        });
        return (verbs, url)
            .prop_map(|(v, u)| PolicyRule {
                verbs: vec![v],
                non_resource_urls: Some(vec![u]),
                ..PolicyRule::default()
            })
            .boxed();
    }
    let groups = one_of(list(&rule.api_groups), &["", "apps", "*"]);
    let resources = proptest::sample::select(list(&rule.resources).to_vec()).prop_flat_map(|r| {
        match r.as_str() {
            "*" => proptest::sample::select(vec!["pods", "pods/exec", "*/exec", "secrets", "*"])
                .prop_map(str::to_string)
                .boxed(),
            "*/exec" => proptest::sample::select(vec!["pods/exec", "*/exec", "deployments/exec"])
                .prop_map(str::to_string)
                .boxed(),
            other => Just(other.to_string()).boxed(),
        }
    });
    let names: BoxedStrategy<Option<Vec<String>>> =
        match rule.resource_names.clone().filter(|n| !n.is_empty()) {
            None => proptest::option::of(pick(&["a", "b"])).boxed(),
            Some(n) => proptest::sample::subsequence(n.clone(), 1..=n.len())
                .prop_map(Some)
                .boxed(),
        };
    (verbs, groups, resources, names)
        .prop_map(|(v, g, r, n)| PolicyRule {
            verbs: vec![v],
            api_groups: Some(vec![g]),
            resources: Some(vec![r]),
            resource_names: n,
            ..PolicyRule::default()
        })
        .boxed()
}

fn request_grid() -> Vec<Attributes> {
    let mut out = Vec::new();
    for verb in ["get", "list", "create", "delete"] {
        for group in ["", "apps"] {
            for (resource, sub) in [
                ("pods", ""),
                ("pods", "exec"),
                ("secrets", ""),
                ("deployments", "exec"),
            ] {
                for name in ["", "a", "b"] {
                    out.push(
                        res(verb, group, resource)
                            .subresource(sub)
                            .namespace("ns")
                            .name(name)
                            .into(),
                    );
                }
            }
        }
        for path in ["/a", "/a/x", "/ab", "/b", "/c"] {
            out.push(Attributes::non_resource(
                &verb.replace("create", "post"),
                path,
            ));
        }
    }
    out
}

proptest! {
    /// Escalation soundness: when the owner's rules cover the servant's (nothing
    /// uncovered), every request a servant rule allows is allowed by some owner rule.
    #[test]
    fn prop_covered_rules_grant_no_more(
        owner in proptest::collection::vec(any_rule(), 0..4),
        servant in proptest::collection::vec(any_rule(), 1..3),
    ) {
        if uncovered(&owner, &servant).is_empty() {
            for attrs in request_grid() {
                if servant.iter().any(|r| rule_allows(&attrs, r)) {
                    prop_assert!(owner.iter().any(|r| rule_allows(&attrs, r)), "{attrs:?} escapes {owner:?}");
                }
            }
        }
    }

    /// A narrowing of a held rule (fewer verbs, wildcards replaced by what they match,
    /// names added) is always covered, and grants nothing the held rule does not.
    #[test]
    fn prop_narrowed_rules_are_covered((owner, servant) in any_rule().prop_flat_map(|o| (Just(o.clone()), narrow(o)))) {
        prop_assert!(uncovered(std::slice::from_ref(&owner), std::slice::from_ref(&servant)).is_empty(), "{servant:?} not covered by {owner:?}");
        for attrs in request_grid() {
            if rule_allows(&attrs, &servant) {
                prop_assert!(rule_allows(&attrs, &owner), "{attrs:?}");
            }
        }
    }

    /// A rule always covers itself.
    #[test]
    fn prop_rules_cover_themselves(rule in any_rule()) {
        prop_assert!(uncovered(std::slice::from_ref(&rule), std::slice::from_ref(&rule)).is_empty());
    }

    /// Request parsing is total and keeps the decoded path.
    #[test]
    fn prop_request_info_is_total(path in "(/[a-z0-9%.]{0,6}){0,7}/?", query in proptest::option::of("[a-z=&%.]{0,20}")) {
        for method in [Method::GET, Method::POST, Method::DELETE, Method::OPTIONS] {
            let info = request_info(&method, &path, query.as_deref());
            if info.is_resource_request {
                prop_assert!(!info.api_version.is_empty());
            }
        }
    }
}
