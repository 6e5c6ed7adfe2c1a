//! Which forge speaks the runner protocol at the other end: Gitea or Forgejo. Both serve
//! `runner.v1.RunnerService` over Connect with the same core messages; Forgejo adds
//! multi-task FetchTask (`task_capacity` / `additional_tasks`) and the `x-runner-request-key`
//! header that lets a retried FetchTask recover the tasks a lost answer had assigned.
//!
//! Every difference the dispatcher acts on is decided here, from the forge alone, so no other
//! code branches on the forge by hand: it asks [`Forge::fetch_plan`] what one FetchTask may
//! ask for, [`Forge::lists_waiting_jobs`] whether to poll the waiting-jobs API, and
//! [`Forge::detect`] reads the forge from a `GET /api/v1/version` answer.
//! Sources: docs/forgejo-protocol.md.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A forge that serves the Actions runner protocol; spelled `gitea` or `forgejo` in config,
/// flags and JSON. Gitea by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Forge {
    /// Gitea: one task per FetchTask, no request key.
    #[default]
    Gitea,
    /// Forgejo: several tasks per FetchTask, a request key, and the waiting-jobs API.
    Forgejo,
}

/// What one FetchTask sends, as the forge understands it (pure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchPlan {
    /// `FetchTaskRequest.task_capacity`: None for Gitea, which picks one task per call.
    pub task_capacity: Option<i64>,
    /// Whether to send `x-runner-request-key` (and keep it across retries of the same fetch).
    pub request_key: bool,
}

/// A version answer that names neither forge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the version answer {0:?} is neither Gitea's (`1.24.3`) nor Forgejo's (`11.0.1+gitea-1.22.0`)"
)]
pub struct UnknownForge(pub String);

impl Forge {
    /// Every forge, for parsing names and listing them.
    pub const ALL: [Forge; 2] = [Forge::Gitea, Forge::Forgejo];

    /// The lowercase name of config files, flags and JSON (`gitea`, `forgejo`); also `Display`.
    pub fn as_str(self) -> &'static str {
        match self {
            Forge::Gitea => "gitea",
            Forge::Forgejo => "forgejo",
        }
    }

    /// The forge's name in messages ("Gitea", "Forgejo").
    pub fn display_name(self) -> &'static str {
        match self {
            Forge::Gitea => "Gitea",
            Forge::Forgejo => "Forgejo",
        }
    }

    /// A FetchTask with `free` slots: Forgejo may hand out up to `free` tasks in one answer
    /// and recovers a lost answer by its request key; Gitea hands out one and knows no key.
    pub fn fetch_plan(self, free: u64) -> FetchPlan {
        match self {
            Forge::Gitea => FetchPlan {
                task_capacity: None,
                request_key: false,
            },
            Forge::Forgejo => FetchPlan {
                task_capacity: Some(free.clamp(1, i64::MAX as u64) as i64),
                request_key: true,
            },
        }
    }

    /// Whether the forge lists waiting jobs at `waiting::Scope::path` (Forgejo). Gitea's
    /// queued-jobs API has another path and shape (docs/gitea-protocol.md), not read.
    pub fn lists_waiting_jobs(self) -> bool {
        match self {
            Forge::Gitea => false,
            Forge::Forgejo => true,
        }
    }

    /// The forge that gave `version` (the `version` of `GET /api/v1/version`): Forgejo reports
    /// its own version with the Gitea version it is compatible with after `+gitea-`
    /// (`11.0.1+gitea-1.22.0`); Gitea reports a plain (semver-like) version (`1.24.3`,
    /// `1.25.0+dev-12-gabc`, `1.24.0-rc1`).
    pub fn detect(version: &str) -> Result<Forge, UnknownForge> {
        let v = version.trim();
        let unknown = || UnknownForge(version.to_string());
        let numeric_head = |s: &str| {
            let head = s.split(['-', '+']).next().unwrap_or("");
            let parts: Vec<&str> = head.split('.').collect();
            parts.len() >= 2
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        };
        if let Some((own, compat)) = v.split_once("+gitea-") {
            return if numeric_head(own) && numeric_head(compat) {
                Ok(Forge::Forgejo)
            } else {
                Err(unknown())
            };
        }
        if numeric_head(v.strip_prefix('v').unwrap_or(v)) {
            Ok(Forge::Gitea)
        } else {
            Err(unknown())
        }
    }
}

impl fmt::Display for Forge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Forge {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Forge::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| format!("`{s}` is not a forge (gitea or forgejo)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_name_their_forge() {
        for v in ["1.24.3", "1.25.0+dev-12-gabc1234", "1.24.0-rc1", "v1.21.11"] {
            assert_eq!(Forge::detect(v), Ok(Forge::Gitea), "{v}");
        }
        for v in [
            "11.0.1+gitea-1.22.0",
            "7.0.0+gitea-1.21.0",
            "14.0.4+gitea-1.22.0",
        ] {
            assert_eq!(Forge::detect(v), Ok(Forge::Forgejo), "{v}");
        }
        for v in ["", "development", "GitLab 17.0", "abc+gitea-1.22.0", "12"] {
            assert!(Forge::detect(v).is_err(), "{v}");
        }
    }

    #[test]
    fn only_forgejo_asks_for_several_tasks_and_keys_its_fetches() {
        assert_eq!(
            Forge::Gitea.fetch_plan(4),
            FetchPlan {
                task_capacity: None,
                request_key: false
            }
        );
        assert_eq!(Forge::Forgejo.fetch_plan(4).task_capacity, Some(4));
        assert_eq!(Forge::Forgejo.fetch_plan(0).task_capacity, Some(1));
        assert!(Forge::Forgejo.fetch_plan(1).request_key);
        assert_eq!("forgejo".parse::<Forge>(), Ok(Forge::Forgejo));
        assert!("gitlab".parse::<Forge>().is_err());
    }
}
