//! Simulated outside systems for the quickstart and the tests; never used in production paths.

pub mod gitea;
pub mod gitlab;
pub mod scheduler;
