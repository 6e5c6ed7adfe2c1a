//! 401/403 Status bodies and Go quoting.

use super::super::quote::{go_quote, go_quote_list};
use super::*;

#[test]
fn forbidden_and_unauthorized_bodies_match_kube_apiserver() {
    let u = UserInfo::authenticated("u", ["g"]);
    let cases: Vec<(Attributes, Value)> = vec![
        (
            res("create", "", "pods").namespace("ns").into(),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods is forbidden: User \"u\" cannot create resource \"pods\" in API group \"\" in the namespace \"ns\"","reason":"Forbidden","details":{"kind":"pods"},"code":403}),
        ),
        (
            res("get", "", "pods").namespace("ns").name("p").into(),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"p\" is forbidden: User \"u\" cannot get resource \"pods\" in API group \"\" in the namespace \"ns\"","reason":"Forbidden","details":{"name":"p","kind":"pods"},"code":403}),
        ),
        (
            res("create", "", "pods")
                .namespace("ns")
                .name("p")
                .subresource("exec")
                .into(),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"p\" is forbidden: User \"u\" cannot create resource \"pods/exec\" in API group \"\" in the namespace \"ns\"","reason":"Forbidden","details":{"name":"p","kind":"pods"},"code":403}),
        ),
        (
            res("create", "rbac.authorization.k8s.io", "clusterrolebindings").into(),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"clusterrolebindings.rbac.authorization.k8s.io is forbidden: User \"u\" cannot create resource \"clusterrolebindings\" in API group \"rbac.authorization.k8s.io\" at the cluster scope","reason":"Forbidden","details":{"group":"rbac.authorization.k8s.io","kind":"clusterrolebindings"},"code":403}),
        ),
        (
            res("get", "", "namespaces").namespace("x").name("x").into(),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"namespaces \"x\" is forbidden: User \"u\" cannot get resource \"namespaces\" in API group \"\" in the namespace \"x\"","reason":"Forbidden","details":{"name":"x","kind":"namespaces"},"code":403}),
        ),
        (
            Attributes::non_resource("get", "/foo"),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"forbidden: User \"u\" cannot get path \"/foo\"","reason":"Forbidden","details":{},"code":403}),
        ),
    ];
    for (attrs, want) in cases {
        assert_eq!(forbidden_status(&u, &attrs), want);
    }
    assert_eq!(
        forbidden_status_with_reason(&u, &Attributes::non_resource("get", "/<x>"), "RBAC: oops")["message"],
        "forbidden: User \"u\" cannot get path \"/&lt;x&gt;\": RBAC: oops"
    );
    assert_eq!(
        unauthorized_status(),
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401})
    );
}

#[test]
fn go_quoting_matches_percent_q() {
    assert_eq!(go_quote("a\"b\\c\n"), r#""a\"b\\c\n""#);
    assert_eq!(go_quote("é"), "\"é\"");
    assert_eq!(go_quote_list(&["a".into(), "b c".into()]), r#"["a" "b c"]"#);
    assert_eq!(go_quote_list(&[]), "[]");
}
