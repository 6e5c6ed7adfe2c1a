use serde_json::json;

use super::*;

/// kubectl 1.32's `auth can-i create pods --namespace gitlab-runner` body, rebuilt byte by byte
/// from the captured layout (facts §3): magic, `0a 32` TypeMeta, `12 45` raw, empty
/// contentEncoding and contentType.
fn kubectl_can_i_fixture() -> Vec<u8> {
    let mut b = b"k8s\0".to_vec();
    b.extend([0x0a, 0x32]);
    b.extend([0x0a, 0x17]);
    b.extend(b"authorization.k8s.io/v1");
    b.extend([0x12, 0x17]);
    b.extend(b"SelfSubjectAccessReview");
    b.extend([0x12, 0x45]);
    // metadata: six empty strings, generation 0, empty creationTimestamp
    b.extend([
        0x0a, 0x10, 0x0a, 0x00, 0x12, 0x00, 0x1a, 0x00, 0x22, 0x00, 0x2a, 0x00, 0x32, 0x00, 0x38,
        0x00, 0x42, 0x00,
    ]);
    // spec { resourceAttributes { namespace, verb, group, version, resource, subresource, name } }
    b.extend([0x12, 0x27, 0x0a, 0x25]);
    b.extend([0x0a, 0x0d]);
    b.extend(b"gitlab-runner");
    b.extend([0x12, 0x06]);
    b.extend(b"create");
    b.extend([0x1a, 0x00, 0x22, 0x00, 0x2a, 0x04]);
    b.extend(b"pods");
    b.extend([0x32, 0x00, 0x3a, 0x00]);
    // status { allowed false, reason "", evaluationError "", denied false }
    b.extend([0x1a, 0x08, 0x08, 0x00, 0x12, 0x00, 0x1a, 0x00, 0x20, 0x00]);
    b.extend([0x1a, 0x00, 0x22, 0x00]);
    b
}

#[test]
fn proto_decodes_kubectl_can_i() {
    let body = kubectl_can_i_fixture();
    assert_eq!(&body[4..6], &[0x0a, 0x32]);
    assert_eq!(&body[56..58], &[0x12, 0x45]);
    assert_eq!(body.len(), 4 + 2 + 0x32 + 2 + 0x45 + 4);
    let decoded = decode_access_review(&body).unwrap();
    assert_eq!(
        decoded,
        json!({
            "kind": "SelfSubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {},
            "spec": {"resourceAttributes": {"namespace": "gitlab-runner", "verb": "create", "resource": "pods"}},
            "status": {"allowed": false}
        })
    );
}

#[test]
fn proto_encoder_reproduces_kubectls_bytes() {
    let fixture = kubectl_can_i_fixture();
    let encoded = encode_ssar_for_test(
        &json!({"namespace": "gitlab-runner", "verb": "create", "resource": "pods"}),
    );
    assert_eq!(encoded, fixture);
    assert_eq!(
        encode_access_review(&decode_access_review(&fixture).unwrap()).unwrap(),
        fixture
    );
}

#[test]
fn proto_round_trips_subject_access_reviews() {
    let review = json!({
        "kind": "SubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {},
        "spec": {
            "nonResourceAttributes": {"path": "/healthz", "verb": "get"},
            "user": "bob",
            "groups": ["a", "b"],
            "extra": {"scopes": ["x", "y"]},
            "uid": "42"
        },
        "status": {"allowed": true, "denied": true, "reason": "because", "evaluationError": "oops"}
    });
    let bytes = encode_access_review(&review).unwrap();
    assert_eq!(decode_access_review(&bytes).unwrap(), review);
    // The same field numbers under SelfSubjectAccessReview ignore the subject fields.
    let mut ssar = review.clone();
    ssar["kind"] = json!("SelfSubjectAccessReview");
    let bytes = encode_access_review(&ssar).unwrap();
    let decoded = decode_access_review(&bytes).unwrap();
    assert_eq!(
        decoded["spec"],
        json!({"nonResourceAttributes": {"path": "/healthz", "verb": "get"}})
    );
}

#[test]
fn proto_skips_unknown_fields_and_rejects_garbage() {
    // resourceAttributes with fieldSelector (8, a message) and an unknown varint field 15.
    let mut attrs = Vec::new();
    put_bytes(&mut attrs, 2, b"list");
    put_bytes(&mut attrs, 5, b"pods");
    put_bytes(&mut attrs, 8, &[0x0a, 0x01, b'x']);
    put_varint(&mut attrs, 15 << 3);
    put_varint(&mut attrs, 300);
    let mut spec = Vec::new();
    put_bytes(&mut spec, 1, &attrs);
    let mut raw = Vec::new();
    put_bytes(&mut raw, 2, &spec);
    let mut tm = Vec::new();
    put_bytes(&mut tm, 1, b"authorization.k8s.io/v1");
    put_bytes(&mut tm, 2, b"SelfSubjectAccessReview");
    let mut body = MAGIC.to_vec();
    put_bytes(&mut body, 1, &tm);
    put_bytes(&mut body, 2, &raw);
    let decoded = decode_access_review(&body).unwrap();
    assert_eq!(
        decoded["spec"],
        json!({"resourceAttributes": {"verb": "list", "resource": "pods"}})
    );
    assert!(decoded.get("status").is_none());

    let fixture = kubectl_can_i_fixture();
    assert!(
        decode_access_review(b"{\"kind\":\"x\"}")
            .unwrap_err()
            .contains("magic")
    );
    assert!(
        decode_access_review(&fixture[..fixture.len() - 10]).is_err(),
        "truncated"
    );
    let mut wrong_kind = fixture.clone();
    wrong_kind[4 + 2 + 2 + 23 + 2..4 + 2 + 2 + 23 + 2 + 4].copy_from_slice(b"Nope");
    assert!(
        decode_access_review(&wrong_kind)
            .unwrap_err()
            .contains("unsupported kind")
    );
    assert!(
        decode_access_review(b"k8s\0\x0b").is_err(),
        "wire type 3 is not supported"
    );
}
