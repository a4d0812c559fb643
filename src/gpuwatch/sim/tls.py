"""A throwaway certificate authority for the simulated API server: real TLS that clients verify.

kubectl sends a bearer token only over TLS, so the simulated Kubernetes API serves HTTPS with a server
certificate signed by a CA generated at start; the kubeconfig carries the CA, and kubectl and the
official Python client verify the server as they would a real one (no insecure-skip-tls-verify).
"""

import ipaddress
import os
import secrets
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALID = timedelta(days=30)


@dataclass(frozen=True, slots=True)
class ServerCertificate:
    """PEM bytes: the CA a client trusts, the server's certificate and its private key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def server_context(self) -> ssl.SSLContext:
        """A TLS server context holding the certificate (TLS 1.2 or later)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # load_cert_chain reads files only: a private directory that is gone once they are read.
        with tempfile.TemporaryDirectory(prefix="gpuwatch-tls-") as directory:
            cert, key = os.path.join(directory, "tls.crt"), os.path.join(directory, "tls.key")
            for path, data in ((cert, self.cert_pem), (key, self.key_pem)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            context.load_cert_chain(cert, key)
        return context

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts only this CA (for tests reading the server directly)."""
        return ssl.create_default_context(cadata=self.ca_pem.decode())


def self_signed(hosts: Sequence[str], *, now: datetime | None = None) -> ServerCertificate:
    """A new CA and a server certificate for `hosts` (IP addresses or DNS names) plus 127.0.0.1 and
    localhost. Elliptic-curve keys (P-256): fast to generate, accepted by Go and Python clients."""
    now = now or datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpuwatch simulated cluster CA")])
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(["127.0.0.1", "localhost", *hosts]):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    server_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
    cert = (
        _builder(server_name, ca_name, key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return ServerCertificate(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, now: datetime
) -> x509.CertificateBuilder:
    """A certificate valid from an hour ago for _VALID, with a random serial number."""
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(secrets.randbits(63) | 1)
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + _VALID)
    )


def _key_usage(*, signs_certificates: bool) -> x509.KeyUsage:
    """Digital signature (ECDHE key exchange), and certificate/CRL signing for the CA only."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )
