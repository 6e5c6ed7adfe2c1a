#!/usr/bin/env python3
"""Client certificates an attacker would make, signed by a cluster's own ClientCA.

Written with pyca/cryptography, not tenantci's own minting code: a test that made its attack
certificates with the product's code would share the product's blind spots. cryptography
writes each Name attribute in the ASN.1 string type asked for (BMPString, T61String,
UniversalString), which `openssl req` cannot (it applies one string type to every attribute).

usage: attack_certs.py CA_CERT CA_KEY OUT_DIR
Writes OUT_DIR/<case>/tls.crt and tls.key for every case below.
"""

import datetime
import os
import sys
import warnings

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

O, CN = NameOID.ORGANIZATION_NAME, NameOID.COMMON_NAME
UTF8 = _ASN1Type.UTF8String

# case -> the subject's RDNs in order: one attribute (oid, value, string type), or a list of
# them for a multi-valued RDN
CASES = {
    # kube-apiserver decodes BMPString and T61String: these are in system:masters there.
    "masters-bmp": [(O, "gitlab-runner", UTF8), (O, "system:masters", _ASN1Type.BMPString),
                    (CN, "gitlab-runner", UTF8)],
    "masters-t61": [(O, "gitlab-runner", UTF8), (O, "system:masters", _ASN1Type.T61String),
                    (CN, "gitlab-runner", UTF8)],
    # kube-apiserver's user is the last CN.
    "two-cn-admin-last": [(O, "gitlab-runner", UTF8), (CN, "gitlab-runner", UTF8),
                          (CN, "tenant-admin", UTF8)],
    "two-cn-runner-last": [(O, "gitlab-runner", UTF8), (CN, "tenant-admin", UTF8),
                           (CN, "gitlab-runner", UTF8)],
    "empty-cn": [(O, "gitlab-runner", UTF8), (CN, "", UTF8)],
    # A string type Go does not decode: kube-apiserver refuses the certificate whole.
    "o-universal": [(O, "gitlab-runner", _ASN1Type.UniversalString), (CN, "gitlab-runner", UTF8)],
    # Groups beyond the allowed one: Kubernetes' own, and one the tenant's RBAC may bind.
    "o-system-nodes": [(O, "gitlab-runner", UTF8), (O, "system:nodes", UTF8),
                       (CN, "gitlab-runner", UTF8)],
    "o-extra-group": [(O, "gitlab-runner", UTF8), (O, "developers", UTF8),
                      (CN, "gitlab-runner", UTF8)],
    # Two CNs inside one multi-valued RDN: kube-apiserver reads every attribute of every RDN.
    "two-cn-one-rdn": [(O, "gitlab-runner", UTF8),
                       [(CN, "gitlab-runner", UTF8), (CN, "tenant-admin", UTF8)]],
    "no-cn": [(O, "gitlab-runner", UTF8)],
    # Kubernetes 1.34+ reads this attribute as the user's UID; tenantci never writes one.
    "kube-uid": [(O, "gitlab-runner", UTF8), (CN, "gitlab-runner", UTF8),
                 (x509.ObjectIdentifier("1.3.6.1.4.1.57683.2"), "1000", UTF8)],
}


def load(ca_cert_path, ca_key_path):
    with open(ca_cert_path, "rb") as f:
        ca_cert = x509.load_pem_x509_certificate(f.read())
    with open(ca_key_path, "rb") as f:
        ca_key = serialization.load_pem_private_key(f.read(), password=None)
    return ca_cert, ca_key


def issue(ca_cert, ca_key, attrs):
    key = ec.generate_private_key(ec.SECP256R1())
    # _validate=False lets an empty CN through, which cryptography otherwise refuses (X.520's
    # lower bound); kube-apiserver reads it as no user.
    def attribute(oid, value, t):
        return x509.NameAttribute(oid, value, _type=t, _validate=False)

    subject = x509.Name([
        x509.RelativeDistinguishedName([attribute(*a) for a in (rdn if isinstance(rdn, list) else [rdn])])
        for rdn in attrs
    ])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def main():
    warnings.simplefilter("ignore")
    ca_cert, ca_key = load(sys.argv[1], sys.argv[2])
    out = sys.argv[3]
    for name, attrs in CASES.items():
        cert, key = issue(ca_cert, ca_key, attrs)
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        for file, data in [
            ("tls.crt", cert.public_bytes(serialization.Encoding.PEM)),
            ("tls.key", key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption())),
        ]:
            path = os.path.join(d, file)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
