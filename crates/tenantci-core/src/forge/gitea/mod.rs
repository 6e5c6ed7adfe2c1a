//! The Gitea Actions runner protocol (`runner.v1.RunnerService`, `ping.v1.PingService`) over the
//! Connect protocol: hand-derived prost messages (`proto`, with their protojson mapping in
//! `json`), the Connect codec shared by both sides (`connect`), a client towards Gitea
//! (`client`), and the RunnerService server towards executors (`facade`), whose behaviour is
//! behind the [`facade::RunnerServiceHandler`] trait.
//!
//! Does not decide anything: which task an executor receives and where its updates go is the
//! dispatcher's business (it implements `RunnerServiceHandler` and drives `RunnerClient`).
//! Wire details and the FetchTask recovery rules are in `docs/gitea-protocol.md`.

pub mod client;
pub mod connect;
pub mod facade;
pub mod json;
pub mod proto;

pub use client::{ClientConfig, ClientError, Credentials, RunnerClient, TasksVersion};
pub use connect::{Code, Codec, ConnectError};
pub use facade::{FacadeHandle, RunnerServiceHandler};
