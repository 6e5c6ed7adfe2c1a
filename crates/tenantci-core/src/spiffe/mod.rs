//! SPIFFE identity for executor mTLS (issue 15): IDs and ID templates (`id`), one X509-SVID
//! as rustls uses it and the source a process reads it from (`svid`), where a process gets its SVID (`source`: the Workload API,
//! `workload`, or a spiffe-helper directory, `files`), the rustls configs that present it and
//! verify the peer by SPIFFE ID (`tls`), and the SPIRE Server API client that mints a VM
//! task's SVID (`server_api`). No dispatcher policy here: which IDs a facade accepts per
//! request is the caller's decision, made with [`tls::peer_id`].

pub mod files;
pub mod id;
pub mod server_api;
pub mod source;
pub mod svid;
pub mod tls;
pub mod workload;

pub use ::spiffe::{SpiffeId, TrustDomain};
pub use source::SourceSpec;
pub use svid::{FixedSource, Svid, SvidSource};
