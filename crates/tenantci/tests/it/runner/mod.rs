//! Runner configuration: config.toml merge (golden files, properties), the GitLab API client
//! against the GitLab double, act_runner files, runner-configs/ examples, and the CLI.

mod api;
mod check;
mod cli;
mod examples;
mod golden;
mod props;
mod trust;
mod view;
