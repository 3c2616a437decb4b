"""Throw-away TLS certificates for tests, made with `cryptography` (never committed keys).

A CA, a server certificate for 127.0.0.1 / localhost and client certificates, as PEM files.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.clocks import rounded_now


@dataclass(frozen=True)
class Issued:
    cert_file: str
    key_file: str


class ThrowawayCA:
    """A certificate authority writing its files under `folder`."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder, self.name = folder, name
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = _name(name)
        self.certificate = (
            _builder(subject, subject, self.key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False,
                                         False), critical=True)
            .sign(self.key, hashes.SHA256()))
        self.cert_file = str(folder / f"{name}-ca.pem")
        Path(self.cert_file).write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def server(self) -> Issued:
        names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        return self._issue("shore", x509.SubjectAlternativeName(names),
                           ExtendedKeyUsageOID.SERVER_AUTH)

    def client(self, common_name: str) -> Issued:
        return self._issue(common_name, x509.SubjectAlternativeName([x509.DNSName("ship")]),
                           ExtendedKeyUsageOID.CLIENT_AUTH)

    def _issue(self, common_name: str, names: x509.SubjectAlternativeName,
               usage: x509.ObjectIdentifier) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = (
            _builder(_name(common_name), self.certificate.subject, key.public_key())
            .add_extension(names, critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256()))
        stem = self.folder / f"{self.name}-{common_name}"
        Path(f"{stem}.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        Path(f"{stem}.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        return Issued(f"{stem}.pem", f"{stem}.key")


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: x509.Name, issuer: x509.Name,
             public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = rounded_now()
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=2)))
