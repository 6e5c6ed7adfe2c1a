//! The pod backend: one executor Pod (and its Secret) per task on the tenant cluster.

pub mod executor;
pub mod objects;
pub mod resources;
