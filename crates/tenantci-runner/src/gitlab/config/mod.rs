//! gitlab-runner's config.toml: one `[[runners]]` entry for the Kubernetes executor.
//!
//! - [`keys`]: the one list of keys gitlab-runner knows, with their TOML types, and a checker.
//! - [`entry`]: the desired entry as data ([`RunnerEntry`]) and its validation.
//! - [`merge`]: pure `plan(existing text, entry) -> Plan{text, action}`, and what an existing
//!   entry holds (its token, its own pause pods).
//! - [`write`](mod@write): the only I/O (read; atomic 0600 write only when changed).
//!
//! Callers (`tenantci runner gitlab-config`, `bootstrap runner`) use [`configure`], or
//! [`merge::plan`] + [`write::write_plan`] when they want to show the plan first.

pub mod entry;
pub mod keys;
pub mod merge;
pub mod write;

use std::path::Path;

pub use entry::{KubernetesSettings, PodSecurityContext, RunnerEntry, RunnerToken, Secret};
pub use merge::{Action, MergeOptions, Plan};

/// What [`configure`] did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The merge: the new text and what it changed.
    pub plan: Plan,
    /// Whether the file was written (false for unchanged plans and dry runs).
    pub written: bool,
}

/// Reads `path`, merges `entry`, and writes the result if it changed (unless `dry_run`).
/// On any error the file is untouched.
pub fn configure(
    path: &Path,
    entry: &RunnerEntry,
    options: MergeOptions,
    dry_run: bool,
) -> tenantci_core::Result<Outcome> {
    let existing = write::read_existing(path)?;
    let plan = merge::plan(path, existing.as_deref(), entry, options)?;
    let written = if dry_run {
        false
    } else {
        write::write_plan(path, &plan)?
    };
    Ok(Outcome { plan, written })
}

/// `text` with every occurrence of the entry's literal token replaced by `[redacted]`.
pub fn redact(text: &str, token: &RunnerToken) -> String {
    match token.secret() {
        Some(secret) if !secret.is_empty() => text.replace(secret, entry::REDACTED),
        _ => text.to_string(),
    }
}
