//! The scheduler credential: the one Gitea runner registration the dispatcher claims tasks
//! with, `{id, uuid, token, name}` in `scheduler.json` (0600, written once by
//! `tenantci dispatch init`, read by `dispatch run`). The registration token that created it
//! is never stored.

use std::path::Path;

use serde::{Deserialize, Serialize};

use tenantci_core::forge::gitea::Credentials;
use tenantci_core::forge::gitea::proto::Runner;
use tenantci_core::{Error, Result};

/// `scheduler.json`. `Debug` never prints the token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerCredential {
    /// The runner's id at Gitea (sandboxes name it as their owner).
    pub id: i64,
    /// The runner's UUID, sent as `x-runner-uuid`.
    pub uuid: String,
    /// The runner's token, sent as `x-runner-token`.
    pub token: String,
    /// The runner's name at Gitea.
    pub name: String,
}

impl std::fmt::Debug for SchedulerCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerCredential")
            .field("id", &self.id)
            .field("uuid", &self.uuid)
            .field("name", &self.name)
            .field("token", &"<redacted>")
            .finish()
    }
}

impl SchedulerCredential {
    /// From Gitea's Register answer.
    pub fn from_runner(r: &Runner) -> Self {
        SchedulerCredential {
            id: r.id,
            uuid: r.uuid.clone(),
            token: r.token.clone(),
            name: r.name.clone(),
        }
    }

    /// The `x-runner-uuid` / `x-runner-token` pair for RunnerService calls.
    pub fn credentials(&self) -> Credentials {
        Credentials {
            uuid: self.uuid.clone(),
            token: self.token.clone(),
        }
    }

    /// The file's bytes (pretty JSON and a newline).
    pub fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("the credential serializes");
        v.push(b'\n');
        v
    }

    /// Parses the file's `bytes` (read from `path`, which the errors name); an empty uuid or
    /// token is refused.
    pub fn from_json(bytes: &[u8], path: &Path) -> Result<Self> {
        let c: SchedulerCredential = serde_json::from_slice(bytes).map_err(|e| {
            Error::bad_input(format!("the scheduler credential `{}` is not valid", path.display())).caused_by(e)
            .hint("restore the file `tenantci dispatch init` wrote, or delete it and re-run init with a registration token to register anew")
        })?;
        if c.uuid.is_empty() || c.token.is_empty() {
            return Err(Error::bad_input(format!(
                "the scheduler credential `{}` has an empty uuid or token",
                path.display()
            ))
            .hint("delete it and re-run `tenantci dispatch init` with a registration token to register anew"));
        }
        Ok(c)
    }

    /// Reads `scheduler.json` (it holds the runner token: refused when others may read it).
    pub fn load(path: &Path) -> Result<Self> {
        let text = tenantci_core::input::read_private("the scheduler credential", path, 64 << 10)?;
        Self::from_json(text.as_bytes(), path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_debug_hides_the_token() {
        let c = SchedulerCredential {
            id: 3,
            uuid: "u-1".into(),
            token: "t0ps3cret".into(),
            name: "d".into(),
        };
        let p = Path::new("scheduler.json");
        assert_eq!(SchedulerCredential::from_json(&c.to_json(), p).unwrap(), c);
        assert!(!format!("{c:?}").contains("t0ps3cret"));
        let e = SchedulerCredential::from_json(br#"{"id":1,"uuid":"","token":"x","name":"n"}"#, p)
            .unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(SchedulerCredential::from_json(b"nope", p).is_err());
    }
}
