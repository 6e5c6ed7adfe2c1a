//! bootstrap
pub mod credential;
