//! Request parsing and attribute conversion.

use super::*;

#[test]
fn request_info_parses_like_kube_apiserver() {
    struct Case {
        method: Method,
        path: &'static str,
        query: Option<&'static str>,
        resource_request: bool,
        verb: &'static str,
        group: &'static str,
        version: &'static str,
        namespace: &'static str,
        resource: &'static str,
        sub: &'static str,
        name: &'static str,
    }
    let case = |method: Method, path, query, verb, ns, resource, sub, name| Case {
        method,
        path,
        query,
        resource_request: true,
        verb,
        group: "",
        version: "v1",
        namespace: ns,
        resource,
        sub,
        name,
    };
    let non = |method: Method, path, verb| Case {
        method,
        path,
        query: None,
        resource_request: false,
        verb,
        group: "",
        version: "",
        namespace: "",
        resource: "",
        sub: "",
        name: "",
    };
    let cases = vec![
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods/p",
            None,
            "get",
            "ns",
            "pods",
            "",
            "p",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            None,
            "list",
            "ns",
            "pods",
            "",
            "",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("watch=true&resourceVersion=5"),
            "watch",
            "ns",
            "pods",
            "",
            "",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("watch=1"),
            "watch",
            "ns",
            "pods",
            "",
            "",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("watch=false"),
            "list",
            "ns",
            "pods",
            "",
            "",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("watch=0"),
            "list",
            "ns",
            "pods",
            "",
            "",
        ),
        case(
            Method::GET,
            "/api/v1/pods",
            None,
            "list",
            "",
            "pods",
            "",
            "",
        ),
        case(
            Method::HEAD,
            "/api/v1/namespaces/ns/pods/p",
            None,
            "get",
            "ns",
            "pods",
            "",
            "p",
        ),
        case(
            Method::POST,
            "/api/v1/namespaces/ns/pods",
            None,
            "create",
            "ns",
            "pods",
            "",
            "",
        ),
        case(
            Method::PUT,
            "/api/v1/namespaces/ns/pods/p",
            None,
            "update",
            "ns",
            "pods",
            "",
            "p",
        ),
        case(
            Method::PATCH,
            "/api/v1/namespaces/ns/pods/p",
            Some("fieldManager=m"),
            "patch",
            "ns",
            "pods",
            "",
            "p",
        ),
        case(
            Method::DELETE,
            "/api/v1/namespaces/ns/pods/p",
            None,
            "delete",
            "ns",
            "pods",
            "",
            "p",
        ),
        case(
            Method::DELETE,
            "/api/v1/namespaces/ns/pods",
            None,
            "deletecollection",
            "ns",
            "pods",
            "",
            "",
        ),
        case(
            Method::POST,
            "/api/v1/namespaces/ns/pods/p/exec",
            Some("command=sh"),
            "create",
            "ns",
            "pods",
            "exec",
            "p",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods/p/log",
            None,
            "get",
            "ns",
            "pods",
            "log",
            "p",
        ),
        case(
            Method::PUT,
            "/api/v1/namespaces/ns/pods/p/status",
            None,
            "update",
            "ns",
            "pods",
            "status",
            "p",
        ),
        // The namespace object itself: the request namespace is the namespace's name.
        case(
            Method::GET,
            "/api/v1/namespaces/x",
            None,
            "get",
            "x",
            "namespaces",
            "",
            "x",
        ),
        case(
            Method::DELETE,
            "/api/v1/namespaces/x",
            None,
            "delete",
            "x",
            "namespaces",
            "",
            "x",
        ),
        case(
            Method::PUT,
            "/api/v1/namespaces/x/status",
            None,
            "update",
            "x",
            "namespaces",
            "status",
            "x",
        ),
        case(
            Method::PUT,
            "/api/v1/namespaces/x/finalize",
            None,
            "update",
            "x",
            "namespaces",
            "finalize",
            "x",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces",
            None,
            "list",
            "",
            "namespaces",
            "",
            "",
        ),
        case(
            Method::POST,
            "/api/v1/namespaces",
            None,
            "create",
            "",
            "namespaces",
            "",
            "",
        ),
        case(
            Method::GET,
            "/api/v1/nodes/n1",
            None,
            "get",
            "",
            "nodes",
            "",
            "n1",
        ),
        // Deprecated watch prefix.
        case(
            Method::GET,
            "/api/v1/watch/namespaces/ns/pods",
            None,
            "watch",
            "ns",
            "pods",
            "",
            "",
        ),
        // A list narrowed to one name by field selector names the object.
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("fieldSelector=metadata.name%3Dp&watch=true"),
            "watch",
            "ns",
            "pods",
            "",
            "p",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("fieldSelector=metadata.name==p"),
            "list",
            "ns",
            "pods",
            "",
            "p",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("fieldSelector=metadata.name!=p"),
            "list",
            "ns",
            "pods",
            "",
            "",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("fieldSelector=spec.nodeName=n"),
            "list",
            "ns",
            "pods",
            "",
            "",
        ),
        // Path escapes are decoded before splitting, as Go's URL.Path.
        case(
            Method::GET,
            "/api/v1/namespaces/ns/configmaps/a%2Eb",
            None,
            "get",
            "ns",
            "configmaps",
            "",
            "a.b",
        ),
        non(Method::GET, "/api", "get"),
        non(Method::GET, "/api/v1", "get"),
        non(Method::GET, "/apis", "get"),
        non(Method::GET, "/apis/apps", "get"),
        non(Method::GET, "/apis/apps/v1", "get"),
        non(Method::GET, "/healthz", "get"),
        non(Method::GET, "/version", "get"),
        non(Method::POST, "/foo/bar/baz", "post"),
        non(Method::HEAD, "/", "head"),
        non(Method::OPTIONS, "/openapi/v2", "options"),
    ];
    let mut grouped = vec![
        (
            "/apis/apps/v1/namespaces/ns/deployments/d/scale",
            Method::PATCH,
            "patch",
            "apps",
            "ns",
            "deployments",
            "scale",
            "d",
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            Method::POST,
            "create",
            "rbac.authorization.k8s.io",
            "",
            "clusterrolebindings",
            "",
            "",
        ),
        (
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
            Method::PUT,
            "update",
            "coordination.k8s.io",
            "ns",
            "leases",
            "",
            "l",
        ),
        (
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            Method::POST,
            "create",
            "authorization.k8s.io",
            "",
            "selfsubjectaccessreviews",
            "",
            "",
        ),
    ];
    for (path, method, verb, group, ns, resource, sub, name) in grouped.drain(..) {
        let info = request_info(&method, path, None);
        assert!(info.is_resource_request, "{path}");
        assert_eq!(
            (
                info.verb.as_str(),
                info.api_group.as_str(),
                info.api_version.as_str()
            ),
            (verb, group, "v1"),
            "{path}"
        );
        assert_eq!(
            (
                info.namespace.as_str(),
                info.resource.as_str(),
                info.subresource.as_str(),
                info.name.as_str()
            ),
            (ns, resource, sub, name),
            "{path}"
        );
    }
    for c in cases {
        let info = request_info(&c.method, c.path, c.query);
        let what = format!("{} {}?{}", c.method, c.path, c.query.unwrap_or(""));
        assert_eq!(info.is_resource_request, c.resource_request, "{what}");
        assert_eq!(info.verb, c.verb, "{what}");
        assert_eq!(info.api_group, c.group, "{what}");
        assert_eq!(info.api_version, c.version, "{what}");
        assert_eq!(info.namespace, c.namespace, "{what}");
        assert_eq!(info.resource, c.resource, "{what}");
        assert_eq!(info.subresource, c.sub, "{what}");
        assert_eq!(info.name, c.name, "{what}");
        if !c.resource_request {
            assert_eq!(info.path, c.path, "{what}");
        }
    }
}

#[test]
fn request_info_converts_to_attributes() {
    let info = request_info(&Method::POST, "/api/v1/namespaces/ns/pods/p/exec", None);
    assert_eq!(
        Attributes::from(&info),
        Attributes::Resource(ResourceAttributes {
            verb: "create".into(),
            api_group: "".into(),
            api_version: "v1".into(),
            resource: "pods".into(),
            subresource: "exec".into(),
            namespace: "ns".into(),
            name: "p".into(),
        })
    );
    let info = request_info(&Method::GET, "/apis/apps/v1", None);
    assert_eq!(
        Attributes::from(info),
        Attributes::non_resource("get", "/apis/apps/v1")
    );
}
