//! `tenantci completions SHELL` and `tenantci man`: generated from the same clap definition
//! as the parser, so they cannot drift from the flags (clap_complete, clap_mangen).

use std::path::PathBuf;

use clap::CommandFactory;
use clap_complete::Shell;

use tenantci_core::{Error, Result};

/// Shell completions on stdout.
#[derive(Debug, clap::Args)]
#[command(after_help = "Install, e.g.:\n  \
    tenantci completions bash > /usr/share/bash-completion/completions/tenantci\n  \
    tenantci completions zsh > /usr/share/zsh/vendor-completions/_tenantci\n  \
    tenantci completions fish > /usr/share/fish/vendor_completions.d/tenantci.fish\n\
    scripts/install.sh does this.")]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Man pages (roff): `tenantci.1` on stdout, or one page per command in --out-dir.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write `tenantci.1` and a `tenantci-<command>.1` for every subcommand here instead.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

pub fn completions(args: CompletionsArgs) -> Result<i32> {
    let mut cmd = super::Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "tenantci", &mut std::io::stdout());
    Ok(0)
}

pub fn man(args: ManArgs) -> Result<i32> {
    let cmd = super::Cli::command();
    match args.out_dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .map_err(|e| Error::unwritable("the man page directory", &dir, e))?;
            clap_mangen::generate_to(cmd, &dir)
                .map_err(|e| Error::unwritable("the man pages", &dir, e))?;
        }
        None => clap_mangen::Man::new(cmd)
            .render(&mut std::io::stdout())
            .map_err(|e| Error::external("cannot write the man page").caused_by(e))?,
    }
    Ok(0)
}
