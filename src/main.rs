//! The `tenantci` binary: parse, set up logging, run, map the outcome to an exit code.

use clap::Parser;

fn main() {
    tenantci::tls::ensure_crypto_provider();
    let cli = tenantci::cli::Cli::parse();
    tenantci::logging::init(cli.global.log_format, cli.global.verbose);
    let code = match tenantci::cli::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("{}", err.render());
            err.exit_code()
        }
    };
    std::process::exit(code);
}
