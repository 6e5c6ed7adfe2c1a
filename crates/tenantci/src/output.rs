//! `-o text|json`: data goes to stdout, human status to stderr (cargo's console convention).
//! The JSON shapes printed by commands are contracts; each lives beside the code that builds it
//! as a `Serialize` type and is listed in docs/cli.md.

use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Human-readable text.
    #[default]
    Text,
    /// One JSON document on stdout.
    Json,
}

/// The `-o` flag, flattened into every command that reports something.
#[derive(Debug, Clone, clap::Args)]
pub struct OutputArgs {
    /// Output format: `text` for people, `json` for machines (stable fields, see docs/cli.md).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

impl OutputArgs {
    pub fn is_json(&self) -> bool {
        self.output == OutputFormat::Json
    }
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json<T: Serialize>(value: &T) -> tenantci_core::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| {
        tenantci_core::Error::external("cannot encode the JSON output").caused_by(e)
    })?;
    println!("{text}");
    Ok(())
}
