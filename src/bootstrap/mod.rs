//! bootstrap
pub mod credential;
pub mod runner;
