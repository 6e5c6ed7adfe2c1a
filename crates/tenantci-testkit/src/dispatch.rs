//! `tenantci dispatch init` as the benchmarks and the dispatcher's [`crate::world`] run it, against
//! the simulator's Gitea double and a [`NatsServer`]: one place for the flags every run shares.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::nats::NatsServer;
use crate::sim::Gitea;

/// Runs `bin dispatch init` for tenant cluster `ci` with `flags` (images, namespace, backends,
/// identity: whatever the caller's run differs in), the facade on any free port, the Gitea
/// double's registration token (written to `dir/registration-token`, 0600), state dir
/// `dir/state` and `nats`'s secrets; returns the config it wrote (`dir/dispatch/config.toml`).
/// Init's stderr goes to `dir/init.log`, which a failure's panic shows.
pub fn init<S: AsRef<OsStr>>(
    bin: &Path,
    dir: &Path,
    gitea: &Gitea,
    nats: &NatsServer,
    flags: &[S],
) -> PathBuf {
    let mut all: Vec<OsString> = vec!["--cluster".into(), "ci".into()];
    all.extend(["--state-dir".into(), dir.join("state").into_os_string()]);
    all.extend(flags.iter().map(|f| f.as_ref().to_os_string()));
    init_command(Command::new(bin), dir, gitea, nats, &all)
}

/// [`init`] with `tenantci` a command for the binary (its environment as the caller set it)
/// and `flags` saying which cluster and how (`--cluster`/`--state-dir` or `--kubeconfig`).
pub fn init_command(
    mut tenantci: Command,
    dir: &Path,
    gitea: &Gitea,
    nats: &NatsServer,
    flags: &[OsString],
) -> PathBuf {
    let token = dir.join("registration-token");
    tenantci_core::fsutil::write_new_atomic(&token, gitea.registration_token.as_bytes(), 0o600)
        .unwrap();
    let config = dir.join("dispatch").join("config.toml");
    let log = dir.join("init.log");
    let status = tenantci
        .args(["dispatch", "init"])
        .args(["--gitea-url", &gitea.url, "--nats", &nats.url])
        // Any free port, advertised to executors as bound.
        .args(["--facade-listen", "127.0.0.1:0"])
        .args(flags)
        .arg("--registration-token-file")
        .arg(&token)
        .arg("--nats-secrets-dir")
        .arg(nats.secrets_dir())
        .arg("--out")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .status()
        .unwrap();
    assert!(
        status.success(),
        "tenantci dispatch init failed:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    config
}
