//! `credential mint` and `internal tenantcredential`: the credential contract of docs/cli.md,
//! through the real binary.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use x509_parser::prelude::*;

use crate::util::{assert_exit, mode, run, run_args, scratch, snapshot, stderr, stdout, tenantci};

const SERVER: &str = "https://127.0.0.1:6443";

/// A state dir with cluster `ci`, made by `pki init-cluster`.
fn state_with_cluster(root: &Path) -> PathBuf {
    let state = root.join("state");
    let o = run_args([
        "pki",
        "init-cluster",
        "--state-dir",
        state.to_str().unwrap(),
        "--cluster",
        "ci",
    ]);
    assert_exit(&o, 0);
    state
}

fn mint_args(state: &Path, out: &Path) -> Vec<String> {
    [
        "credential",
        "mint",
        "--state-dir",
        state.to_str().unwrap(),
        "--cluster",
        "ci",
        "--server",
        SERVER,
        "--common-name",
        "gitlab-runner",
        "--organization",
        "gitlab-runner",
        "--out-dir",
        out.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn pem_der(path: &Path) -> Vec<u8> {
    let text = std::fs::read(path).unwrap();
    let (_, pem) = x509_parser::pem::parse_x509_pem(&text).unwrap();
    pem.contents
}

#[test]
fn credential_mint_writes_four_private_files_and_a_working_kubeconfig() {
    let dir = scratch();
    let state = state_with_cluster(dir.path());
    let out = dir.path().join("creds");
    let o = run_args(mint_args(&state, &out));
    assert_exit(&o, 0);
    assert_eq!(mode(&out), 0o700);
    for f in ["ca.crt", "tls.crt", "tls.key", "kubeconfig"] {
        assert_eq!(mode(&out.join(f)), 0o600, "{f}");
    }
    // ca.crt is the serving CA, byte for byte.
    assert_eq!(
        std::fs::read(out.join("ca.crt")).unwrap(),
        std::fs::read(state.join("clusters/ci/pki/serving-ca.crt")).unwrap()
    );
    // The kubeconfig names the three files by absolute path and the server.
    let kc: kube::config::Kubeconfig =
        serde_yaml::from_str(&std::fs::read_to_string(out.join("kubeconfig")).unwrap()).unwrap();
    let cluster = kc.clusters[0].cluster.as_ref().unwrap();
    assert_eq!(cluster.server.as_deref(), Some(SERVER));
    assert_eq!(
        cluster.certificate_authority.as_deref(),
        Some(out.join("ca.crt").to_str().unwrap())
    );
    let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
    assert_eq!(
        user.client_certificate.as_deref(),
        Some(out.join("tls.crt").to_str().unwrap())
    );
    assert_eq!(
        user.client_key.as_deref(),
        Some(out.join("tls.key").to_str().unwrap())
    );
    assert_eq!(
        kc.current_context.as_deref(),
        Some(kc.contexts[0].name.as_str())
    );
    assert!(stdout(&o).contains(SERVER));
}

#[test]
fn credential_certificate_fields_are_as_the_contract_says() {
    let dir = scratch();
    let state = state_with_cluster(dir.path());
    let out = dir.path().join("creds");
    let mut args = mint_args(&state, &out);
    args.extend([
        "--organization".into(),
        "team-a,team-b".into(),
        "--valid-for".into(),
        "1h30m".into(),
    ]);
    assert_exit(&run_args(args), 0);

    let der = pem_der(&out.join("tls.crt"));
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    let cn: Vec<_> = cert
        .subject()
        .iter_common_name()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(cn, ["gitlab-runner"]);
    let orgs: Vec<_> = cert
        .subject()
        .iter_organization()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        orgs,
        ["gitlab-runner", "team-a", "team-b"],
        "one O per organization, in order"
    );
    // Serial: 128 random bits.
    assert_eq!(cert.raw_serial().len(), 16);
    // Not a CA, clientAuth only, digitalSignature for ECDSA.
    let bc = cert.basic_constraints().unwrap().unwrap();
    assert!(!bc.value.ca);
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth && !eku.server_auth);
    let ku = cert.key_usage().unwrap().unwrap().value;
    assert!(ku.digital_signature() && !ku.key_encipherment() && !ku.key_cert_sign());
    // SKI present; AKI equals the ClientCA's SKI.
    let ca_der = pem_der(&state.join("clusters/ci/pki/client-ca.crt"));
    let (_, ca) = X509Certificate::from_der(&ca_der).unwrap();
    let ski = |c: &X509Certificate| {
        c.extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(k) => Some(k.0.to_vec()),
                _ => None,
            })
    };
    let aki = cert
        .extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(a) => {
                a.key_identifier.as_ref().map(|k| k.0.to_vec())
            }
            _ => None,
        });
    assert!(ski(&cert).is_some());
    assert_eq!(aki, ski(&ca));
    assert_eq!(cert.issuer(), ca.subject());
    // Lifetime 1h30m after a back-dated notBefore (clock skew).
    let nb = cert.validity().not_before.timestamp();
    let na = cert.validity().not_after.timestamp();
    let now = ::time::OffsetDateTime::now_utc().unix_timestamp();
    assert!(nb < now - 60, "notBefore is set back for clock skew");
    assert!((na - now - 5400).abs() < 120, "lifetime is --valid-for");
    // The public key is P-256.
    assert_eq!(
        cert.public_key().algorithm.algorithm,
        x509_parser::oid_registry::OID_KEY_TYPE_EC_PUBLIC_KEY
    );
}

/// A rustls server built from the ClientCA accepts the certificate: a certificate a real TLS
/// server would refuse fails here.
fn verify_with_rustls(client_ca: &Path, leaf: &Path) -> Result<(), rustls::Error> {
    tenantci_core::tls::ensure_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(pem_der(client_ca))).unwrap();
    let verifier = WebPkiClientVerifier::builder(Arc::new(roots))
        .build()
        .unwrap();
    let leaf = CertificateDer::from(pem_der(leaf));
    verifier
        .verify_client_cert(&leaf, &[], UnixTime::now())
        .map(|_| ())
}

#[test]
fn credential_is_accepted_by_a_rustls_client_verifier_for_its_client_ca_only() {
    let dir = scratch();
    let state = state_with_cluster(dir.path());
    for key_type in ["ecdsa-p256", "rsa-2048"] {
        let out = dir.path().join(key_type);
        let mut args = mint_args(&state, &out);
        args.extend(["--key-type".into(), key_type.into()]);
        assert_exit(&run_args(args), 0);
        verify_with_rustls(
            &state.join("clusters/ci/pki/client-ca.crt"),
            &out.join("tls.crt"),
        )
        .unwrap_or_else(|e| panic!("{key_type}: {e}"));
        // Another cluster's ClientCA does not accept it.
        let other = dir.path().join(format!("other-{key_type}"));
        assert_exit(
            &run_args([
                "pki",
                "init-cluster",
                "--state-dir",
                other.to_str().unwrap(),
                "--cluster",
                "ci",
            ]),
            0,
        );
        assert!(
            verify_with_rustls(
                &other.join("clusters/ci/pki/client-ca.crt"),
                &out.join("tls.crt")
            )
            .is_err()
        );
    }
    // RSA keys also carry keyEncipherment.
    let der = pem_der(&dir.path().join("rsa-2048/tls.crt"));
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    assert!(cert.key_usage().unwrap().unwrap().value.key_encipherment());
}

#[test]
fn credential_env_interface_is_the_runbooks() {
    let dir = scratch();
    let state = state_with_cluster(dir.path());
    let out = dir.path().join("tenant-ci");
    let o = run(tenantci()
        .args(["internal", "tenantcredential"])
        .env("SOCIALWEB_TENANTCREDENTIAL_STATE_DIR", &state)
        .env("SOCIALWEB_TENANTCREDENTIAL_CLUSTER", "ci")
        .env("SOCIALWEB_TENANTCREDENTIAL_SERVER", SERVER)
        .env("SOCIALWEB_TENANTCREDENTIAL_COMMON_NAME", "gitlab-runner")
        .env(
            "SOCIALWEB_TENANTCREDENTIAL_ORGANIZATIONS",
            "gitlab-runner,ci-extra",
        )
        .env("SOCIALWEB_TENANTCREDENTIAL_OUT_DIR", &out)
        .env("SOCIALWEB_TENANTCREDENTIAL_VALID_FOR", "720h"));
    assert_exit(&o, 0);
    let der = pem_der(&out.join("tls.crt"));
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    let orgs: Vec<_> = cert
        .subject()
        .iter_organization()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(orgs, ["gitlab-runner", "ci-extra"]);
    let life =
        cert.validity().not_after.timestamp() - ::time::OffsetDateTime::now_utc().unix_timestamp();
    assert!((life - 720 * 3600).abs() < 120);

    // `credential mint` reads the same variables when the flags are absent.
    let out2 = dir.path().join("via-mint");
    let o = run(tenantci()
        .args(["credential", "mint", "-o", "json"])
        .env("SOCIALWEB_TENANTCREDENTIAL_STATE_DIR", &state)
        .env("SOCIALWEB_TENANTCREDENTIAL_CLUSTER", "ci")
        .env("SOCIALWEB_TENANTCREDENTIAL_SERVER", SERVER)
        .env("SOCIALWEB_TENANTCREDENTIAL_COMMON_NAME", "gitlab-runner")
        .env("SOCIALWEB_TENANTCREDENTIAL_ORGANIZATIONS", "gitlab-runner")
        .env("SOCIALWEB_TENANTCREDENTIAL_OUT_DIR", &out2));
    assert_exit(&o, 0);
    let hand_back: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(hand_back["server"], SERVER);
    assert_eq!(hand_back["groups"], serde_json::json!(["gitlab-runner"]));
    assert_eq!(
        hand_back["files"]["tls.crt"],
        out2.join("tls.crt").to_str().unwrap()
    );
}

#[test]
fn credential_env_interface_names_a_missing_variable() {
    let dir = scratch();
    let state = state_with_cluster(dir.path());
    let o = run(tenantci()
        .args(["internal", "tenantcredential"])
        .env("SOCIALWEB_TENANTCREDENTIAL_STATE_DIR", &state)
        .env("SOCIALWEB_TENANTCREDENTIAL_CLUSTER", "ci")
        .env("SOCIALWEB_TENANTCREDENTIAL_COMMON_NAME", "gitlab-runner")
        .env("SOCIALWEB_TENANTCREDENTIAL_ORGANIZATIONS", "gitlab-runner")
        .env("SOCIALWEB_TENANTCREDENTIAL_OUT_DIR", dir.path().join("x")));
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("SOCIALWEB_TENANTCREDENTIAL_SERVER is not set"),
        "{}",
        stderr(&o)
    );
    assert!(!dir.path().join("x").exists());
}

#[test]
fn credential_refusal_to_overwrite_leaves_old_files_byte_identical() {
    let dir = scratch();
    let state = state_with_cluster(dir.path());
    let out = dir.path().join("creds");
    assert_exit(&run_args(mint_args(&state, &out)), 0);
    let before = snapshot(&out);
    let o = run_args(mint_args(&state, &out));
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("move the old files aside"),
        "{}",
        stderr(&o)
    );
    assert_eq!(snapshot(&out), before);

    // One stray file is enough to refuse, and nothing else appears beside it.
    let partial = dir.path().join("partial");
    std::fs::create_dir(&partial).unwrap();
    std::fs::write(partial.join("tls.key"), b"precious").unwrap();
    let before = snapshot(&partial);
    assert_exit(&run_args(mint_args(&state, &partial)), 2);
    assert_eq!(snapshot(&partial), before);
}

/// Every refusal of the contract: exit 2, one sentence on stderr, nothing written anywhere.
#[test]
fn credential_bad_inputs_exit_2_and_write_nothing() {
    let dir = scratch();
    let state = state_with_cluster(dir.path());
    // A leaf certificate (not a CA) and an expired CA, for the CA refusals.
    let leaf = dir.path().join("leaf");
    assert_exit(&run_args(mint_args(&state, &leaf)), 0);
    let other = dir.path().join("other");
    assert_exit(
        &run_args([
            "pki",
            "init-cluster",
            "--state-dir",
            other.to_str().unwrap(),
            "--cluster",
            "ci",
        ]),
        0,
    );
    let ca = |s: &Path| s.join("clusters/ci/pki");
    // A ClientCA that expired yesterday, beside the valid cluster's serving CA.
    let expired = dir.path().join("expired");
    let now = ::time::OffsetDateTime::now_utc();
    let old_ca = tenantci_core::pki::CertificateAuthority::generate_valid(
        "ci-client-ca",
        now - ::time::Duration::days(30),
        now - ::time::Duration::days(1),
    )
    .unwrap();
    std::fs::create_dir_all(ca(&expired)).unwrap();
    std::fs::write(ca(&expired).join("client-ca.crt"), old_ca.cert_pem()).unwrap();
    std::fs::write(ca(&expired).join("client-ca.key"), old_ca.key_pem()).unwrap();
    let not_a_dir = dir.path().join("a-file");
    std::fs::write(&not_a_dir, b"x").unwrap();

    let files = |cert: PathBuf, key: PathBuf, server: PathBuf| -> Vec<String> {
        vec![
            "--client-ca-cert".into(),
            cert.to_str().unwrap().into(),
            "--client-ca-key".into(),
            key.to_str().unwrap().into(),
            "--server-ca".into(),
            server.to_str().unwrap().into(),
        ]
    };
    let s = state.to_str().unwrap().to_string();
    let by_state = || {
        vec![
            "--state-dir".to_string(),
            s.clone(),
            "--cluster".into(),
            "ci".into(),
        ]
    };
    let ident = |cn: &str, org: &str, valid: Option<&str>, server: &str| -> Vec<String> {
        let mut v = vec![
            "--server".into(),
            server.into(),
            "--common-name".into(),
            cn.into(),
            "--organization".into(),
            org.into(),
        ];
        if let Some(d) = valid {
            v.push(format!("--valid-for={d}"));
        }
        v
    };
    let ok = |v: Option<&str>| ident("gitlab-runner", "gitlab-runner", v, SERVER);
    let cases: Vec<(&str, Vec<String>, &str)> = vec![
        (
            "empty CN",
            [by_state(), ident("", "g", None, SERVER)].concat(),
            "common name is empty",
        ),
        (
            "system: CN",
            [by_state(), ident("system:admin", "g", None, SERVER)].concat(),
            "system:",
        ),
        (
            "system:masters",
            [by_state(), ident("r", "system:masters", None, SERVER)].concat(),
            "cluster-admin",
        ),
        (
            "system: group",
            [by_state(), ident("r", "system:nodes", None, SERVER)].concat(),
            "system:",
        ),
        (
            "empty O",
            [by_state(), ident("r", "", None, SERVER)].concat(),
            "organization",
        ),
        (
            "trailing comma O",
            [by_state(), ident("r", "g,", None, SERVER)].concat(),
            "organization is empty",
        ),
        (
            "valid-for garbage",
            [by_state(), ok(Some("soon"))].concat(),
            "validity",
        ),
        (
            "valid-for no unit",
            [by_state(), ok(Some("720"))].concat(),
            "no unit",
        ),
        (
            "valid-for days",
            [by_state(), ok(Some("30d"))].concat(),
            "unknown unit",
        ),
        (
            "valid-for zero",
            [by_state(), ok(Some("0s"))].concat(),
            "zero",
        ),
        (
            "valid-for negative",
            [by_state(), ok(Some("-1h"))].concat(),
            "negative",
        ),
        (
            "valid-for outlasts CA",
            [by_state(), ok(Some("175200h"))].concat(),
            "ClientCA expires",
        ),
        (
            "server not https",
            [by_state(), ident("r", "g", None, "http://127.0.0.1:6443")].concat(),
            "https://",
        ),
        (
            "server garbage",
            [by_state(), ident("r", "g", None, "not a url")].concat(),
            "server",
        ),
        (
            "unknown cluster",
            [
                vec![
                    "--state-dir".into(),
                    s.clone(),
                    "--cluster".into(),
                    "nope".into(),
                ],
                ok(None),
            ]
            .concat(),
            "no cluster `nope`",
        ),
        (
            "state dir without cluster",
            [vec!["--state-dir".into(), s.clone()], ok(None)].concat(),
            "--cluster",
        ),
        (
            "key does not match cert",
            [
                files(
                    ca(&state).join("client-ca.crt"),
                    ca(&other).join("client-ca.key"),
                    ca(&state).join("serving-ca.crt"),
                ),
                ok(None),
            ]
            .concat(),
            "does not match",
        ),
        (
            "cert is not a CA",
            [
                files(
                    leaf.join("tls.crt"),
                    leaf.join("tls.key"),
                    ca(&state).join("serving-ca.crt"),
                ),
                ok(None),
            ]
            .concat(),
            "not a CA",
        ),
        (
            "expired CA",
            [
                files(
                    ca(&expired).join("client-ca.crt"),
                    ca(&expired).join("client-ca.key"),
                    ca(&state).join("serving-ca.crt"),
                ),
                ok(None),
            ]
            .concat(),
            "expired",
        ),
        (
            "unreadable CA key",
            [
                files(
                    ca(&state).join("client-ca.crt"),
                    dir.path().join("missing.key"),
                    ca(&state).join("serving-ca.crt"),
                ),
                ok(None),
            ]
            .concat(),
            "cannot read",
        ),
        (
            "serving CA not PEM",
            [
                files(
                    ca(&state).join("client-ca.crt"),
                    ca(&state).join("client-ca.key"),
                    not_a_dir.clone(),
                ),
                ok(None),
            ]
            .concat(),
            "not a PEM certificate",
        ),
        (
            "files incomplete",
            [
                vec![
                    "--client-ca-cert".into(),
                    ca(&state).join("client-ca.crt").to_str().unwrap().into(),
                ],
                ok(None),
            ]
            .concat(),
            "together",
        ),
        (
            "both CA sources",
            [
                by_state(),
                files(
                    ca(&state).join("client-ca.crt"),
                    ca(&state).join("client-ca.key"),
                    ca(&state).join("serving-ca.crt"),
                ),
                ok(None),
            ]
            .concat(),
            "both",
        ),
    ];
    assert_eq!(cases.len(), 23, "the count in the audit (docs/cli.md)");
    for (name, args, needle) in cases {
        let before_state = snapshot(dir.path());
        let out = dir.path().join(format!("out-{}", name.replace(' ', "-")));
        let mut full: Vec<String> = vec![
            "credential".into(),
            "mint".into(),
            "--out-dir".into(),
            out.to_str().unwrap().into(),
        ];
        full.extend(args);
        let o = run_args(&full);
        assert_exit(&o, 2);
        let err = stderr(&o);
        assert!(
            err.contains(needle),
            "{name}: stderr lacks {needle:?}:\n{err}"
        );
        assert!(err.starts_with("error: "), "{name}: {err}");
        assert!(!out.exists(), "{name}: wrote the output directory");
        assert_eq!(snapshot(dir.path()), before_state, "{name}: changed files");
    }

    // OUT_DIR that is a file.
    let before = snapshot(dir.path());
    let mut args = vec![
        "credential".to_string(),
        "mint".into(),
        "--out-dir".into(),
        not_a_dir.to_str().unwrap().into(),
    ];
    args.extend([by_state(), ok(None)].concat());
    let o = run_args(&args);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("not a directory"), "{}", stderr(&o));
    assert_eq!(snapshot(dir.path()), before);
}

/// A 100 kB common name is refused with a short prefix of it, not echoed whole.
#[test]
fn credential_mint_echoes_only_a_prefix_of_a_huge_common_name() {
    let dir = scratch();
    let state = state_with_cluster(dir.path());
    let out = dir.path().join("out");
    for cn in [
        format!("system:{}", "a".repeat(100_000)),
        "a".repeat(100_000),
    ] {
        let mut args = mint_args(&state, &out);
        let at = args.iter().position(|a| a == "gitlab-runner").unwrap();
        args[at] = cn;
        let o = run_args(&args);
        assert_exit(&o, 2);
        assert!(stderr(&o).len() < 1000, "{}", stderr(&o));
        assert!(
            stderr(&o).contains("(100"),
            "says how long it was: {}",
            stderr(&o)
        );
        assert!(!out.exists());
    }
}
