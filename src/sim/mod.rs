//! Simulated outside systems for tests and the quickstart; never used in production paths.

pub mod gitlab;
pub mod scheduler;
