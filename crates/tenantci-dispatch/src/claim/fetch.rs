//! One logical FetchTask as the forge allows it (`Forge::fetch_plan` decides; nothing here
//! names a forge): the free slots as `task_capacity` (Forgejo hands out up to that many in one
//! answer, Gitea one), and a request key kept until an answer arrives, so that after an
//! answer lost on its way back the next call, with the same key, gets the same tasks from
//! Forgejo instead of leaving them to its zombie sweep. Plus act_runner's tasks-version
//! bookkeeping.

use tenantci_core::forge::Forge;
use tenantci_core::forge::gitea::client::{ClientError, RunnerClient, TasksVersion};
use tenantci_core::forge::gitea::proto::Task;

/// The scheduler's FetchTask state: the forge, act_runner's tasks version, and the request
/// key of a call whose answer was lost.
pub struct Fetcher {
    forge: Forge,
    version: TasksVersion,
    /// The key of a FetchTask that got no answer yet; reused by the next call.
    key: Option<String>,
}

impl Fetcher {
    /// For `forge`, with no version seen and no call pending.
    pub fn new(forge: Forge) -> Self {
        Fetcher {
            forge,
            version: TasksVersion::default(),
            key: None,
        }
    }

    /// Makes the next call look for tasks even if the version cursor has not moved for us.
    pub fn forget_version(&mut self) {
        self.version = TasksVersion::default();
    }

    /// Whether the next call repeats one whose answer was lost (with its key).
    pub fn recovering(&self) -> bool {
        self.key.is_some()
    }

    /// One FetchTask with `free` slots; the tasks it assigned. On an error the key is kept:
    /// the call may have assigned tasks, and the repeat must ask for them by the same key.
    pub async fn fetch(
        &mut self,
        client: &RunnerClient,
        free: u64,
    ) -> Result<Vec<Task>, ClientError> {
        let plan = self.forge.fetch_plan(free);
        let key = plan
            .request_key
            .then(|| self.key.get_or_insert_with(new_key).clone());
        let resp = client
            .fetch_tasks(self.version.get(), plan.task_capacity, key.as_deref())
            .await?;
        self.key = None;
        self.version.observe(&resp);
        Ok(resp.into_tasks())
    }
}

/// A random UUID (v4 layout), as forgejo-runner sends.
fn new_key() -> String {
    tenantci_core::uuid::v4()
}
