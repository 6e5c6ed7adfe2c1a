//! The integration test binary: one binary, one module per capability, all running the real
//! `tenantci` binary (and, where the capability needs them, the simulator, kubectl and a real
//! nats-server). Shared helpers live in `util`.

mod queue;
mod util;
mod util_nats;
