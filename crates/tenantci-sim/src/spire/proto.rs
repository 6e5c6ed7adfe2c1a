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
    /// The SVID's SPIFFE ID.
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
    /// An operator's hint to tell SVIDs apart (empty: the stand-in sets none).
    #[prost(string, tag = "5")]
    pub hint: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// The field numbers against bytes written by hand from workload.proto.
    #[test]
    fn the_messages_encode_with_the_proto_s_field_numbers() {
        let svid = X509Svid {
            spiffe_id: "a".into(),
            x509_svid: vec![1],
            x509_svid_key: vec![2],
            bundle: vec![3],
            hint: "h".into(),
        };
        let svid_bytes = [
            0x0a, 1, b'a', // 1: spiffe_id
            0x12, 1, 1, // 2: x509_svid
            0x1a, 1, 2, // 3: x509_svid_key
            0x22, 1, 3, // 4: bundle
            0x2a, 1, b'h', // 5: hint
        ];
        assert_eq!(svid.encode_to_vec(), svid_bytes);
        let response = X509SvidResponse {
            svids: vec![svid],
            crl: vec![vec![9]],
            federated_bundles: [("spiffe://b".to_string(), vec![7])].into(),
        };
        let mut expected = vec![0x0a, svid_bytes.len() as u8];
        expected.extend_from_slice(&svid_bytes);
        expected.extend_from_slice(&[0x12, 1, 9]); // 2: crl
        // 3: federated_bundles, a map entry {1: key, 2: value}.
        expected.extend_from_slice(&[0x1a, 15, 0x0a, 10]);
        expected.extend_from_slice(b"spiffe://b");
        expected.extend_from_slice(&[0x12, 1, 7]);
        assert_eq!(response.encode_to_vec(), expected);
    }
}
