"""A local certificate authority: the CA, server and client certificates a secured stack
needs, as PEM files Kafka-style configs name (`ssl.keystore.location`: key and chain in one
file; `ssl.truststore.location`: the CA).  Keys are EC P-256; certificates last a year."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALID = datetime.timedelta(days=365)


@dataclass(frozen=True)
class Issued:
    keystore: Path  # private key, then certificate and CA chain (PEM)
    certificate: Path
    key: Path


class LocalCA:
    def __init__(self, directory: Path, name: str = "streamshop local CA") -> None:
        self.directory = directory
        self.cert_path = directory / "ca.pem"
        key_path = directory / "ca.key"
        directory.mkdir(parents=True, exist_ok=True)
        if self.cert_path.exists() and key_path.exists():
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            assert isinstance(key, ec.EllipticCurvePrivateKey)
            self.key = key
            self.cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
            return
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        _write_private(key_path, _key_pem(self.key))
        self.cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, hosts: tuple[str, ...] = (), client: bool = False) -> Issued:
        """A certificate for CN=`name`: a server's (with `hosts` as subject alternative
        names) or a client's (for mTLS; the broker's principal is its DN)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(
                x509.Name(
                    [
                        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "streamshop"),
                        x509.NameAttribute(NameOID.COMMON_NAME, name),
                    ]
                )
            )
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]),
                critical=False,
            )
        )
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        ca_pem = self.cert.public_bytes(serialization.Encoding.PEM)
        base = self.directory / name
        issued = Issued(base.with_suffix(".keystore.pem"), base.with_suffix(".pem"), base.with_suffix(".key"))
        _write_private(issued.key, _key_pem(key))
        issued.certificate.write_bytes(cert_pem)
        _write_private(issued.keystore, _key_pem(key) + cert_pem + ca_pem)
        return issued


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write_private(path: Path, data: bytes) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_bytes(data)
