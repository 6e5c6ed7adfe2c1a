//! What `dispatch init` sets up and `dispatch renew` keeps up, below both: the dispatcher's
//! access on the tenant cluster and its reviews ([`access`]), and the facade's CA and serving
//! certificate ([`facade_pki`]). Neither orchestration reaches into the other; what they share
//! lives here.

pub mod access;
pub mod facade_pki;
