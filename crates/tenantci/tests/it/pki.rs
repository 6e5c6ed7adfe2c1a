//! `pki init-cluster`: the cluster PKI in the state-dir layout.

use crate::util::{assert_exit, mode, run_args, scratch, snapshot, stderr};
use tenantci_core::pki::inspect::CertInfo;

#[test]
fn pki_init_cluster_creates_private_cas_and_refuses_to_overwrite() {
    let dir = scratch();
    let state = dir.path().join("state");
    let s = state.to_str().unwrap();
    assert_exit(
        &run_args(["pki", "init-cluster", "--state-dir", s, "--cluster", "ci"]),
        0,
    );
    let pki = state.join("clusters/ci/pki");
    for d in [
        &state,
        &state.join("clusters"),
        &state.join("clusters/ci"),
        &pki,
    ] {
        assert_eq!(mode(d), 0o700, "{}", d.display());
    }
    for f in [
        "serving-ca.crt",
        "serving-ca.key",
        "client-ca.crt",
        "client-ca.key",
    ] {
        assert_eq!(mode(&pki.join(f)), 0o600, "{f}");
    }
    let ca =
        CertInfo::from_pem(&std::fs::read_to_string(pki.join("client-ca.crt")).unwrap()).unwrap();
    assert!(ca.is_ca);
    let years = (ca.not_after - ca.not_before).whole_days() / 365;
    assert_eq!(years, 10, "ten-year CAs by default");
    let key = std::fs::read_to_string(pki.join("client-ca.key")).unwrap();
    assert!(key.contains("PRIVATE KEY"));

    let before = snapshot(&state);
    let o = run_args(["pki", "init-cluster", "--state-dir", s, "--cluster", "ci"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("already has a PKI"), "{}", stderr(&o));
    assert_eq!(snapshot(&state), before);
}

#[test]
fn pki_init_cluster_refuses_bad_names_and_validity() {
    let dir = scratch();
    let s = dir.path().join("state");
    for args in [
        vec!["--cluster", "../evil"],
        vec!["--cluster", "CI"],
        vec!["--cluster", "ci", "--valid-for", "10y"],
        vec!["--cluster", "ci", "--valid-for", "0"],
    ] {
        let mut full = vec!["pki", "init-cluster", "--state-dir", s.to_str().unwrap()];
        full.extend(args.iter());
        assert_exit(&run_args(&full), 2);
        assert!(!s.exists(), "{args:?} wrote the state dir");
    }
}
