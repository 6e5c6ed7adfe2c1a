//! The messages of the SPIFFE Workload API's `FetchX509SVID` (workload.proto of the SPIFFE
//! project; the service has no proto package, so its path is `/SpiffeWorkloadAPI/<method>`).
//! Written as prost derives with the proto's field numbers rather than generated: three
//! messages do not justify a build script and a protoc, and the `spiffe` crate keeps its own
//! generated types private. The client side (core) is the `spiffe` crate's, so a wrong tag
//! here fails the integration tests.

/// `X509SVIDRequest`: no parameters.
#[derive(Clone, Copy, PartialEq, Eq, ::prost::Message)]
pub struct X509SvidRequest {}

/// `X509SVIDResponse`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct X509SvidResponse {
    /// The SVIDs the workload is entitled to (the stand-in: one).
    #[prost(message, repeated, tag = "1")]
    pub svids: Vec<X509Svid>,
    /// DER CRLs (none).
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub crl: Vec<Vec<u8>>,
    /// Foreign trust domains' DER bundles by trust domain ID (none).
    #[prost(map = "string, bytes", tag = "3")]
    pub federated_bundles: std::collections::HashMap<String, Vec<u8>>,
}

/// `X509SVID`.
#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct X509Svid {
    #[prost(string, tag = "1")]
    pub spiffe_id: String,
    /// DER chain, leaf first.
    #[prost(bytes = "vec", tag = "2")]
    pub x509_svid: Vec<u8>,
    /// DER PKCS#8 key, unencrypted.
    #[prost(bytes = "vec", tag = "3")]
    pub x509_svid_key: Vec<u8>,
    /// DER bundle of the trust domain.
    #[prost(bytes = "vec", tag = "4")]
    pub bundle: Vec<u8>,
    #[prost(string, tag = "5")]
    pub hint: String,
}
