//! A task's cache grant: what names the task's repository to the cache, and proves it.
//!
//! `<task>.<attempt>.<repository, base64url>.<HMAC-SHA256(capability key, "cache:<task>:<attempt>:<repository>"), hex>`
//!
//! The worker mints it when it starts the executor (it opens the sealed assignment then, as it
//! does for the SPIFFE ID) and writes it into the runner's `cache.external_server` URL, so the
//! job's `ACTIONS_CACHE_URL` carries it. The cache recomputes the MAC and compares in constant
//! time: nothing is looked up, so every dispatcher replica and a restarted one accept it, and
//! a job can name no other repository than its own. Why not the job's runtime token: the
//! facade holds a task's context only until the executor's first report (the assignment leaves
//! the Secret then), so it would have nothing to compare the token against later.
//! The `cache:` prefix keeps the MAC's input apart from a capability's (`<task>:<attempt>`).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::facade::capability::CapabilityKey;
use crate::queue::assignment::{Assignment, SealingKey, context_str};

/// Gitea's repository names are `owner/name`, each at most 255 bytes.
const MAX_REPOSITORY: usize = 512;

/// What a verified grant says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub task: i64,
    pub attempt: u32,
    /// `owner/name`, lower-cased: Gitea's names are case-insensitive.
    pub repository: String,
}

/// What the capability key signs: `cache:` keeps a grant's MAC apart from a capability's.
fn signed(task: i64, attempt: u32, repository: &str) -> String {
    format!("cache:{task}:{attempt}:{repository}")
}

/// The grant of one task attempt for `repository` (as the task's context names it).
pub fn mint(key: &CapabilityKey, task: i64, attempt: u32, repository: &str) -> String {
    let repository = repository.to_lowercase();
    let encoded = URL_SAFE_NO_PAD.encode(repository.as_bytes());
    format!(
        "{task}.{attempt}.{encoded}.{}",
        key.mac_hex(&signed(task, attempt, &repository))
    )
}

/// The repository the task sealed in `a` belongs to (its context's `repository`).
pub fn repository_of(key: &SealingKey, a: &Assignment) -> Result<String, String> {
    let task = a.open_task(key)?;
    let repository = context_str(&task, "repository")
        .map(str::to_string)
        .ok_or_else(|| {
            format!(
                "task {} has no repository in its context, so no cache",
                task.id
            )
        })?;
    if repository.len() > MAX_REPOSITORY {
        return Err(format!(
            "task {}'s repository name is {} bytes long",
            task.id,
            repository.len()
        ));
    }
    Ok(repository)
}

/// The grant's task and repository when its MAC verifies; None for anything else.
pub fn verify(key: &CapabilityKey, presented: &str) -> Option<Grant> {
    if presented.len() > MAX_REPOSITORY * 2 + 128 {
        return None;
    }
    let mut parts = presented.split('.');
    let (task, attempt, encoded, presented_mac) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let task: i64 = task.parse().ok().filter(|t| *t > 0)?;
    let attempt: u32 = attempt.parse().ok().filter(|a| *a > 0)?;
    let repository = String::from_utf8(URL_SAFE_NO_PAD.decode(encoded).ok()?).ok()?;
    if !key.verify_hex(&signed(task, attempt, &repository), presented_mac) {
        return None;
    }
    Some(Grant {
        task,
        attempt,
        repository,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_names_its_repository_and_cannot_be_moved_to_another() {
        let key = CapabilityKey::generate();
        let grant = mint(&key, 7, 1, "Acme/Widgets");
        let g = verify(&key, &grant).unwrap();
        assert_eq!(
            g,
            Grant {
                task: 7,
                attempt: 1,
                repository: "acme/widgets".into()
            }
        );
        // Another repository with the same MAC, another task, another key: refused.
        let mac = grant.rsplit('.').next().unwrap();
        let other = URL_SAFE_NO_PAD.encode("acme/other");
        assert!(verify(&key, &format!("7.1.{other}.{mac}")).is_none());
        assert!(verify(&key, &grant.replacen("7.", "8.", 1)).is_none());
        assert!(verify(&CapabilityKey::generate(), &grant).is_none());
        assert!(verify(&key, "").is_none());
        assert!(verify(&key, &format!("{grant}.x")).is_none());
        // Never a capability: the inputs differ.
        assert_ne!(mac, key.token(7, 1));
    }
}
