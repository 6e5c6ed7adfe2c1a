//! tenantci: GitLab and Gitea CI on multi-tenant Kubernetes clusters whose nodes are rented on
//! demand. The binary (`main.rs`, `cli/`) only parses and dispatches; the work lives in these
//! modules, with dependencies pointing downward: cli -> orchestration -> domain -> I/O.

pub mod bootstrap;
pub mod cli;
pub mod credential;
pub mod dispatch;
pub mod duration;
pub mod error;
pub mod forge;
pub mod fsutil;
pub mod gateway;
pub mod kubeconfig;
pub mod logging;
pub mod output;
pub mod pki;
pub mod queue;
pub mod runner;
pub mod sim;
pub mod tenant;
pub mod tls;

pub use error::{Error, ErrorKind, Result};
