//! rustls process set-up. Our dependencies enable both the ring and aws-lc-rs providers, and
//! rustls then refuses to guess: every TLS user (kube, reqwest, our servers) must find a
//! process default. [`ensure_crypto_provider`] installs aws-lc-rs once; call it before
//! building any rustls config (it is cheap and idempotent).

use std::sync::Once;

pub fn ensure_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Err means another provider was installed first, which is just as good.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    });
}
