//! The `tenantci` binary: parse, set up logging, run, map the outcome to an exit code. The
//! commands live in `cli/` (the only clap user); the work in `tenantci-runner` (GitLab,
//! credentials, tenant RBAC), `tenantci-front` (the authenticated front) and
//! `tenantci-dispatch` (the Gitea and Forgejo dispatcher), over `tenantci-core`; `tenantci
//! sim` in `tenantci-sim` (feature `sim`, on by default).

use clap::Parser;

mod cli;
mod logging;
mod output;

fn main() {
    tenantci_core::tls::ensure_crypto_provider();
    let cli = cli::Cli::parse();
    logging::init(cli.global.log_format, cli.global.verbose);
    let code = match cli::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("{}", err.render());
            err.exit_code()
        }
    };
    std::process::exit(code);
}
