//! Where an assignment runs: one executor per task attempt, on a backend.

pub mod lifecycle;
pub mod pod;
pub mod reconciler;
pub mod recovery;
pub mod registry;
pub mod report;
pub mod vm;
pub mod worker;
