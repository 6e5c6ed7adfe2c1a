//! Wire-level behaviour over real HTTPS: authentication outcomes and Status bodies exactly as
//! kube-apiserver writes them, discovery, health, and unsupported media types.

use serde_json::{Value, json};

use crate::util;
use tenantci_testkit::sim::in_process;

struct Http {
    client: reqwest::Client,
    base: String,
}

impl Http {
    fn new(base: &str, serving_ca: &str, identity: Option<(&str, &str)>) -> Http {
        tenantci_core::tls::ensure_crypto_provider();
        let mut b = reqwest::Client::builder()
            .use_rustls_tls()
            .add_root_certificate(reqwest::Certificate::from_pem(serving_ca.as_bytes()).unwrap());
        if let Some((cert, key)) = identity {
            b = b.identity(reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes()).unwrap());
        }
        Http {
            client: b.build().unwrap(),
            base: base.to_string(),
        }
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        ct: Option<&str>,
        body: &str,
    ) -> (u16, Value) {
        let mut r = self.client.request(method, format!("{}{path}", self.base));
        if let Some(ct) = ct {
            r = r.header("content-type", ct).body(body.to_string());
        }
        let resp = r.send().await.unwrap();
        let code = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path, None, "").await
    }
}

fn client_cert(
    ca: &tenantci_core::pki::CertificateAuthority,
    cn: &str,
    orgs: &[&str],
) -> tenantci_core::pki::IssuedCert {
    tenantci_core::pki::issue::client_cert(
        ca,
        &tenantci_core::pki::ClientCertSpec {
            common_name: cn.into(),
            organizations: orgs.iter().map(|s| s.to_string()).collect(),
            valid_for: std::time::Duration::from_secs(600),
            key_type: tenantci_core::pki::KeyType::EcdsaP256,
        },
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_wire_authn_and_status_bodies() {
    let scratch = util::scratch();
    let sim = in_process(scratch.path(), "ci").await;
    let state = scratch.path().join("state/clusters/ci/pki");
    let serving_ca = std::fs::read_to_string(state.join("serving-ca.crt")).unwrap();
    let client_ca = tenantci_core::pki::CertificateAuthority::load(
        &state.join("client-ca.crt"),
        &state.join("client-ca.key"),
    )
    .unwrap();
    let url = &sim.info.clusters[0].url;

    let foreign_ca = tenantci_core::pki::CertificateAuthority::generate(
        "x",
        std::time::Duration::from_secs(600),
    )
    .unwrap();
    let foreign = client_cert(&foreign_ca, "tenant-admin", &["system:masters"]);
    let h = Http::new(
        url,
        &serving_ca,
        Some((&foreign.cert_pem, &foreign.key_pem)),
    );
    assert_eq!(
        h.get("/version").await,
        (
            401,
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401})
        )
    );

    let anon = Http::new(url, &serving_ca, None);
    let (code, body) = anon.get("/api/v1/namespaces/default/pods").await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["reason"], "Forbidden");

    let admin_cert = client_cert(&client_ca, "tenant-admin", &["system:masters"]);
    let admin = Http::new(
        url,
        &serving_ca,
        Some((&admin_cert.cert_pem, &admin_cert.key_pem)),
    );
    assert_eq!(
        admin.get("/healthz").await,
        (200, Value::String("ok".into()))
    );
    assert_eq!(admin.get("/openapi/v2").await.0, 404);
    let (code, v1) = admin.get("/api/v1").await;
    assert_eq!(code, 200);
    let pods = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods")
        .unwrap();
    assert_eq!(pods["shortNames"], json!(["po"]));
    assert_eq!(pods["namespaced"], true);
    let (code, body) = admin.get("/api/v1/namespaces/default/widgets").await;
    assert_eq!(
        (code, body["message"].as_str().unwrap()),
        (404, "the server could not find the requested resource")
    );
    let (code, body) = admin.get("/api/v1/namespaces/default/pods/nope").await;
    assert_eq!(code, 404);
    assert_eq!(body["message"], "pods \"nope\" not found");
    assert_eq!(body["details"], json!({"name": "nope", "kind": "pods"}));
    let (code, body) = admin
        .get("/apis/apps/v1/namespaces/default/deployments/nope")
        .await;
    assert_eq!(
        (code, body["message"].as_str().unwrap()),
        (404, "deployments.apps \"nope\" not found")
    );

    let post = |ct: &'static str, body: &'static str| {
        let admin = &admin;
        async move {
            admin
                .send(
                    reqwest::Method::POST,
                    "/api/v1/namespaces/default/configmaps",
                    Some(ct),
                    body,
                )
                .await
        }
    };
    let (code, body) = post("text/plain", "x").await;
    assert_eq!(
        (code, body["reason"].as_str().unwrap()),
        (415, "UnsupportedMediaType")
    );
    let (code, body) = post("application/json", "{not json").await;
    assert_eq!(
        (code, body["reason"].as_str().unwrap()),
        (400, "BadRequest")
    );
    let (code, body) = post(
        "application/json",
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"g-"}}"#,
    )
    .await;
    assert_eq!(code, 201);
    let name = body["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("g-") && name.len() == 7, "{name}");
    assert!(body["metadata"]["resourceVersion"].as_str().is_some());

    let apply =
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"applied"},"data":{"a":"1"}}"#;
    let path = "/api/v1/namespaces/default/configmaps/applied?fieldManager=wire";
    let ct = Some("application/apply-patch+yaml");
    let (code, _) = admin.send(reqwest::Method::PATCH, path, ct, apply).await;
    assert_eq!(code, 201, "apply creates");
    let (code, _) = admin.send(reqwest::Method::PATCH, path, ct, apply).await;
    assert_eq!(code, 200, "apply updates");
    let no_manager = "/api/v1/namespaces/default/configmaps/applied";
    let (code, body) = admin
        .send(reqwest::Method::PATCH, no_manager, ct, apply)
        .await;
    assert_eq!(
        (code, body["reason"].as_str().unwrap()),
        (400, "BadRequest")
    );

    let sar = r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview",
        "spec":{"user":"nobody","resourceAttributes":{"verb":"get","resource":"pods","namespace":"default"}}}"#;
    let sar_path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let (code, body) = admin
        .send(
            reqwest::Method::POST,
            sar_path,
            Some("application/json"),
            sar,
        )
        .await;
    assert_eq!(
        (code, &body["status"]["allowed"]),
        (201, &json!(false)),
        "{body}"
    );

    let (code, ev) = admin
        .get("/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1")
        .await;
    assert_eq!(code, 200);
    let text = ev.to_string();
    assert!(
        text.contains("BOOKMARK") && text.contains("k8s.io/initial-events-end"),
        "{text}"
    );
    let (code, ev) = admin
        .get("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1&timeoutSeconds=1")
        .await;
    assert_eq!(code, 200);
    assert!(ev.to_string().contains("ADDED"), "{ev}");
    sim.shutdown().await;
}
