//! act_runner's files (the runner of Gitea and Forgejo): `config.yaml` and the `.runner`
//! registration JSON.
//!
//! [`ActRunnerConfig`] renders the subset of config.yaml tenantci sets (log, runner, container,
//! host); [`Registration`] is the `.runner` file act_runner writes after `register`, which
//! `tenantci runner gitea-config` writes from its flags and the dispatcher builds for each task's
//! executor (in the pod's Secret or the VM's environment). [`Label`] parses act_runner's
//! `name:schema:arg` labels. Rendering is pure and deterministic; [`write_config`] /
//! [`write_registration`] write only when the bytes or the mode differ (0600, dir 0700).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::secret_file::write_secret_file;
use tenantci_core::{Error, Result, Secret};

/// One act_runner label, `name:schema:arg` (`ubuntu-latest:docker://node:20-bookworm`,
/// `linux:host`, or just `name`). Only `name` is sent to Gitea.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// The label's name, the one workflows name in `runs-on`.
    pub name: String,
    /// `docker` or `host`; `None` for a bare name.
    pub schema: Option<String>,
    /// What follows the schema: for `docker`, the image as `//IMAGE` (required); `None` when
    /// absent.
    pub arg: Option<String>,
}

impl Label {
    /// Parses `name`, `name:host` or `name:docker:IMAGE`. An error (bad input) for an empty name,
    /// one with whitespace or `,`, another schema, or `docker` without an image.
    pub fn parse(raw: &str) -> Result<Self> {
        let mut parts = raw.splitn(3, ':');
        let name = parts.next().unwrap_or_default().to_string();
        let schema = parts.next().map(str::to_string);
        let arg = parts.next().map(str::to_string);
        let bad = name.is_empty()
            || name.chars().any(|c| c.is_whitespace() || c == ',')
            || schema
                .as_deref()
                .is_some_and(|s| !matches!(s, "docker" | "host"))
            || (schema.as_deref() == Some("docker") && arg.as_deref().is_none_or(str::is_empty));
        if bad {
            return Err(Error::bad_input(format!(
                "the act_runner label `{raw}` is not name[:docker:IMAGE | :host]"
            ))
            .hint("e.g. `pod:docker://node:20-bookworm`, `self-hosted:host`, or `pod`"));
        }
        Ok(Label { name, schema, arg })
    }

    /// The label as `name[:schema[:arg]]`, the form [`Label::parse`] reads back.
    pub fn render(&self) -> String {
        let mut out = self.name.clone();
        if let Some(schema) = &self.schema {
            out.push(':');
            out.push_str(schema);
        }
        if let Some(arg) = &self.arg {
            out.push(':');
            out.push_str(arg);
        }
        out
    }
}

/// The config.yaml fields tenantci sets; act_runner's defaults apply to the rest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActRunnerConfig {
    /// How much act_runner logs.
    pub log: LogSection,
    /// The registration file, concurrency, timeouts and labels.
    pub runner: RunnerSection,
    /// Settings for jobs run in Docker containers.
    pub container: ContainerSection,
    /// Settings for jobs run on the host.
    pub host: HostSection,
}

/// config.yaml's `log` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogSection {
    /// act_runner's log level: `trace`, `debug`, `info`, `warn`, `error` or `fatal`. Default
    /// `info`.
    pub level: String,
}

/// config.yaml's `runner` section: registration file, concurrency, timeouts and labels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnerSection {
    /// Path of the `.runner` file, relative to act_runner's working directory or absolute.
    pub file: String,
    /// How many tasks the runner runs at once (at least 1). Default 1.
    pub capacity: u32,
    /// How long one job may run (a Go duration, as are the other durations here). Default `3h`.
    pub timeout: String,
    /// How long act_runner waits for running jobs when it shuts down (Go duration). Default `0s`.
    pub shutdown_timeout: String,
    /// Whether act_runner skips verifying the TLS certificate of the Gitea instance. Default false.
    pub insecure: bool,
    /// Bound on one request for a task to Gitea (Go duration). Default `5s`.
    pub fetch_timeout: String,
    /// The wait between two requests for a task (Go duration). Default `2s`.
    pub fetch_interval: String,
    /// The runner's labels, each `name[:docker:IMAGE | :host]` (see [`Label`]); at least one.
    /// Default `pod:host`.
    pub labels: Vec<String>,
}

/// config.yaml's `container` section, for jobs in Docker containers (`:docker` labels).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerSection {
    /// The Docker network the job containers join; empty lets act_runner create one per job.
    pub network: String,
    /// Whether job containers run privileged. Default false.
    pub privileged: bool,
    /// Extra `docker create` options for job containers (e.g. `--add-host=...`); empty for none.
    pub options: String,
    /// The parent of a job's working directory inside the container; empty for act_runner's default
    /// (`/workspace`).
    pub workdir_parent: String,
    /// The volumes (globs allowed) that jobs may mount; empty allows none.
    pub valid_volumes: Vec<String>,
    /// Whether images are pulled even when already present. Default false.
    pub force_pull: bool,
}

/// config.yaml's `host` section, for jobs on the host (`:host` labels).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSection {
    /// The parent of a job's working directory on the host; empty for act_runner's default
    /// (`$HOME/.cache/act`).
    pub workdir_parent: String,
}

impl Default for ActRunnerConfig {
    fn default() -> Self {
        ActRunnerConfig {
            log: LogSection {
                level: "info".into(),
            },
            runner: RunnerSection {
                file: ".runner".into(),
                capacity: 1,
                timeout: "3h".into(),
                shutdown_timeout: "0s".into(),
                insecure: false,
                fetch_timeout: "5s".into(),
                fetch_interval: "2s".into(),
                labels: vec!["pod:host".into()],
            },
            container: ContainerSection {
                network: String::new(),
                privileged: false,
                options: String::new(),
                workdir_parent: String::new(),
                valid_volumes: Vec::new(),
                force_pull: false,
            },
            host: HostSection {
                workdir_parent: String::new(),
            },
        }
    }
}

const LOG_LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "fatal"];

impl ActRunnerConfig {
    /// Checks what act_runner would refuse: the log level, a capacity of at least 1, the four Go
    /// durations, and at least one label that parses as a [`Label`]. An error (bad input) names the
    /// first bad field.
    pub fn validate(&self) -> Result<()> {
        if !LOG_LEVELS.contains(&self.log.level.as_str()) {
            return Err(Error::bad_input(format!(
                "the act_runner log level `{}` is not one of {}",
                self.log.level,
                LOG_LEVELS.join(", ")
            )));
        }
        if self.runner.capacity == 0 {
            return Err(Error::bad_input(
                "the act_runner capacity must be at least 1",
            ));
        }
        for (what, d) in [
            ("timeout", &self.runner.timeout),
            ("shutdown_timeout", &self.runner.shutdown_timeout),
            ("fetch_timeout", &self.runner.fetch_timeout),
            ("fetch_interval", &self.runner.fetch_interval),
        ] {
            tenantci_core::duration::parse(d).map_err(|_| {
                Error::bad_input(format!("runner.{what} `{d}` is not a Go duration"))
                    .hint("use e.g. 3h, 5s, 1m30s")
            })?;
        }
        if self.runner.labels.is_empty() {
            return Err(Error::bad_input("act_runner needs at least one label")
                .hint("pass --label pod (the name workflows use in runs-on)"));
        }
        for label in &self.runner.labels {
            Label::parse(label)?;
        }
        Ok(())
    }

    /// The config.yaml text: a header comment, then the fields.
    pub fn render(&self) -> Result<String> {
        self.validate()?;
        let yaml = serde_yaml::to_string(self)
            .map_err(|e| Error::external("cannot encode config.yaml").caused_by(e))?;
        Ok(format!(
            "# act_runner configuration, written by `tenantci runner gitea-config`.\n\
             # Keys not listed here take act_runner's defaults (`act_runner generate-config`).\n\
             {yaml}"
        ))
    }
}

/// The `.runner` registration file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    /// The warning text at the top of the file (`WARNING`); see [`REGISTRATION_WARNING`].
    #[serde(rename = "WARNING")]
    pub warning: String,
    /// The runner's id at Gitea.
    pub id: i64,
    /// The runner's UUID at Gitea (36 characters, `8-4-4-4-12` hex).
    pub uuid: String,
    /// The runner's name as Gitea shows it (not empty).
    pub name: String,
    /// The runner's token, in clear in the file (`Debug` does not print it).
    #[serde(serialize_with = "expose", deserialize_with = "secret")]
    pub token: Secret,
    /// The Gitea instance's root URL (`http://` or `https://`).
    pub address: String,
    /// The runner's label names as registered (each must parse as a [`Label`]).
    pub labels: Vec<String>,
    /// Whether the runner is ephemeral: Gitea gives it one job, then it is no longer usable.
    pub ephemeral: bool,
}

fn expose<S: serde::Serializer>(s: &Secret, ser: S) -> std::result::Result<S::Ok, S::Error> {
    ser.serialize_str(s.expose())
}

fn secret<'de, D: serde::Deserializer<'de>>(de: D) -> std::result::Result<Secret, D::Error> {
    String::deserialize(de).map(Secret::new)
}

/// act_runner's own warning text.
pub const REGISTRATION_WARNING: &str = "This file is automatically generated by act-runner. Do not edit it manually unless you know what you are doing. Removing this file will cause act runner to re-register as a new runner.";

impl Registration {
    /// Checks the address is an http(s) URL, the uuid a UUID, the name and token not empty and each
    /// label a [`Label`]; an error (bad input) names what is wrong.
    pub fn validate(&self) -> Result<()> {
        if !(self.address.starts_with("https://") || self.address.starts_with("http://")) {
            return Err(Error::bad_input(format!(
                "the Gitea address `{}` is not an http(s) URL",
                self.address
            )));
        }
        let uuid_ok = self.uuid.len() == 36
            && self.uuid.chars().enumerate().all(|(i, c)| {
                if [8, 13, 18, 23].contains(&i) {
                    c == '-'
                } else {
                    c.is_ascii_hexdigit()
                }
            });
        if !uuid_ok {
            return Err(Error::bad_input(format!(
                "the runner uuid `{}` is not a UUID",
                self.uuid
            )));
        }
        if self.token.expose().is_empty() || self.name.is_empty() {
            return Err(Error::bad_input(
                "the runner name and token must not be empty",
            ));
        }
        for label in &self.labels {
            Label::parse(label)?;
        }
        Ok(())
    }

    /// The `.runner` text: validated, pretty JSON, ending with a newline.
    pub fn render(&self) -> Result<String> {
        self.validate()?;
        let mut text = serde_json::to_string_pretty(self)
            .map_err(|e| Error::external("cannot encode .runner").caused_by(e))?;
        text.push('\n');
        Ok(text)
    }
}

/// Writes config.yaml if it differs; returns whether it wrote.
pub fn write_config(path: &Path, config: &ActRunnerConfig) -> Result<bool> {
    let text = config.render()?;
    write_secret_file(path, text.as_bytes(), true, "the act_runner config")
}

/// Writes `.runner` (0600: it holds the runner token) if it differs; returns whether it wrote.
pub fn write_registration(path: &Path, registration: &Registration) -> Result<bool> {
    let text = registration.render()?;
    write_secret_file(
        path,
        text.as_bytes(),
        true,
        "the act_runner registration file",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitea_labels_parse_and_render() {
        for raw in [
            "pod",
            "linux:host",
            "ubuntu-latest:docker://node:20-bookworm",
        ] {
            assert_eq!(Label::parse(raw).unwrap().render(), raw);
        }
        assert!(Label::parse("x:vm:y").is_err());
        assert!(Label::parse(":host").is_err());
        assert!(Label::parse("a b").is_err());
    }

    #[test]
    fn gitea_registration_round_trips_and_is_act_runner_shaped() {
        let r = Registration {
            warning: REGISTRATION_WARNING.into(),
            id: 3,
            uuid: "0b6c1c52-7d2e-4d7a-9a43-3b1f7b1d2c9e".into(),
            name: "pod-executor".into(),
            token: Secret::new("t0ken"),
            address: "https://gitea.example.com".into(),
            labels: vec!["pod".into()],
            ephemeral: true,
        };
        let text = r.render().unwrap();
        assert!(text.starts_with("{\n  \"WARNING\""));
        let back: Registration = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        assert!(!format!("{r:?}").contains("t0ken"));
    }

    #[test]
    fn gitea_config_renders_valid_yaml() {
        let text = ActRunnerConfig::default().render().unwrap();
        let back: ActRunnerConfig = serde_yaml::from_str(&text).unwrap();
        assert_eq!(back, ActRunnerConfig::default());
    }
}
