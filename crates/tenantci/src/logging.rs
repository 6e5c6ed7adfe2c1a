//! `tracing` set-up: human text by default, JSON Lines with `--log-format json`, always on
//! stderr so stdout stays for data (`-o json`). `RUST_LOG` wins over `-v` when set.

use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber. `verbosity` counts `-v` flags: 0 = warn, 1 = info,
/// 2 = debug, 3+ = trace (for tenantci's own spans; dependencies stay at warn unless RUST_LOG).
/// kube-client's per-request failure line is off either way unless RUST_LOG names it.
pub fn init(format: LogFormat, verbosity: u8) {
    let level = match verbosity {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env()
        // The front's audit lines are its record of who passed: never hidden by verbosity.
        .unwrap_or_else(|_| {
            EnvFilter::new(format!("warn,tenantci={level},tenantci::front::audit=info"))
        });
    // kube-client's HTTP trace layer logs every failed request as `ERROR failed with error
    // client error (Connect)`, naming neither the apiserver nor what happens next (issue 45);
    // the caller that made the request logs the failure with both. Off unless RUST_LOG names
    // kube_client itself.
    let asked = std::env::var("RUST_LOG").is_ok_and(|v| v.contains("kube_client"));
    let filter = if asked {
        filter
    } else {
        filter.add_directive(
            "kube_client::client::builder=off"
                .parse()
                .expect("a valid directive"),
        )
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // A second init (tests that call commands in-process) is harmless: keep the first.
    let _ = match format {
        LogFormat::Text => builder.with_target(false).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
