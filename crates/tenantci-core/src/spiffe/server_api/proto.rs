//! The messages of the SPIRE Server API's `SVID/MintX509SVID` (spire-api-sdk:
//! `spire/api/server/svid/v1/svid.proto`, `spire/api/types/x509svid.proto` and `spiffeid.proto`).
//! Written as prost derives with the protos' field numbers rather than generated: four small
//! messages do not justify a build script and a protoc. The simulator's double uses these same
//! types, so the test below pins the field numbers against bytes written by hand.

/// The gRPC path of the one method tenantci calls.
pub const MINT_X509_SVID: &str = "/spire.api.server.svid.v1.SVID/MintX509SVID";

/// `spire.api.server.svid.v1.MintX509SVIDRequest`.
#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct MintX509SvidRequest {
    /// DER PKCS#10 request; its one URI SAN is the SPIFFE ID to mint.
    #[prost(bytes = "vec", tag = "1")]
    pub csr: Vec<u8>,
    /// Seconds; 0 lets the server choose its default.
    #[prost(int32, tag = "2")]
    pub ttl: i32,
}

/// `spire.api.server.svid.v1.MintX509SVIDResponse`.
#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct MintX509SvidResponse {
    /// The minted SVID; the caller refuses an answer without one.
    #[prost(message, optional, tag = "1")]
    pub svid: Option<X509Svid>,
}

/// `spire.api.types.X509SVID`.
#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct X509Svid {
    /// DER certificates, leaf first.
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub cert_chain: Vec<Vec<u8>>,
    /// The SPIFFE ID the certificate was minted for.
    #[prost(message, optional, tag = "2")]
    pub id: Option<SpiffeIdMessage>,
    /// Seconds since the Unix epoch.
    #[prost(int64, tag = "3")]
    pub expires_at: i64,
    /// The registration entry's hint, telling a workload with several SVIDs which to use;
    /// empty when unset.
    #[prost(string, tag = "4")]
    pub hint: String,
}

/// `spire.api.types.SPIFFEID`: the trust domain name and the path (with its leading `/`).
#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct SpiffeIdMessage {
    /// The trust domain's name, without `spiffe://`.
    #[prost(string, tag = "1")]
    pub trust_domain: String,
    /// The ID's path, with its leading `/`.
    #[prost(string, tag = "2")]
    pub path: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// The field numbers against bytes written by hand from the protos.
    #[test]
    fn the_messages_encode_with_the_protos_field_numbers() {
        let request = MintX509SvidRequest {
            csr: vec![1, 2],
            ttl: 3,
        };
        assert_eq!(
            request.encode_to_vec(),
            [
                0x0a, 2, 1, 2, // 1: csr
                0x10, 3, // 2: ttl (varint)
            ]
        );

        let id = SpiffeIdMessage {
            trust_domain: "t".into(),
            path: "/p".into(),
        };
        let id_bytes = [
            0x0a, 1, b't', // 1: trust_domain
            0x12, 2, b'/', b'p', // 2: path
        ];
        assert_eq!(id.encode_to_vec(), id_bytes);

        let svid = X509Svid {
            cert_chain: vec![vec![7], vec![8]],
            id: Some(id),
            expires_at: 5,
            hint: "h".into(),
        };
        let mut svid_bytes = vec![
            0x0a, 1, 7, // 1: cert_chain[0]
            0x0a, 1, 8, // 1: cert_chain[1]
            0x12, 7, // 2: id
        ];
        svid_bytes.extend_from_slice(&id_bytes);
        svid_bytes.extend_from_slice(&[
            0x18, 5, // 3: expires_at (varint)
            0x22, 1, b'h', // 4: hint
        ]);
        assert_eq!(svid.encode_to_vec(), svid_bytes);

        let response = MintX509SvidResponse { svid: Some(svid) };
        let mut expected = vec![0x0a, svid_bytes.len() as u8]; // 1: svid
        expected.extend_from_slice(&svid_bytes);
        assert_eq!(response.encode_to_vec(), expected);
        assert_eq!(
            MintX509SvidResponse::decode(expected.as_slice()).unwrap(),
            response
        );
    }
}
