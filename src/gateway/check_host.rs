//! check-host
