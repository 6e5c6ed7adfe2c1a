//! Claiming: the scheduler takes tasks from Gitea with the one registration and queues each on
//! its backend's subject (`routing` picks the backend from `runs-on`, `sizing::class` the
//! resource class); the `workflow_job` webhook wakes it (`nudge` paces how often,
//! `deliveries` refuses a delivery seen before); `registration` is the scheduler's Gitea
//! credential; `fetch` is one FetchTask as the forge (Gitea or Forgejo) allows it; `waiting`
//! reads Forgejo's waiting-jobs API (a nudge, and the demand metric); `settings` holds the
//! sections they read (`[gitea]`, `[webhook]`, `[waiting_jobs]`).

pub mod deliveries;
pub mod fetch;
pub mod nudge;
pub mod registration;
pub mod routing;
pub mod scheduler;
pub mod settings;
pub mod waiting;
pub mod webhook;
