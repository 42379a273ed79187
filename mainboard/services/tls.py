"""The embedded broker's TLS material: a private CA and a loopback server certificate.

Why a CA of our own: workers verify the broker (``ssl_cert_reqs=required``) against a CA
file the fleet ships to each host (``ca.crt`` only: the CA key never leaves this
directory). The server certificate names ``127.0.0.1`` and ``localhost``, which is what a
worker dials, directly or through its ssh tunnel's far end. Everything is made with
``cryptography`` (no ``openssl`` binary needed), keys in 0600 files, and remade when it
is missing or due to expire within ``RENEW_BEFORE``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mainboard.daemon import write_private
from mainboard.names import lazy

if TYPE_CHECKING:  # imported when certificates are made: every CLI start imports this module
    from cryptography import x509

VALID_FOR = dt.timedelta(days=825)
RENEW_BEFORE = dt.timedelta(days=30)


@dataclass(frozen=True)
class TlsFiles:
    """Paths of the CA certificate (shipped to workers), server certificate and key."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def under(cls, directory: Path) -> TlsFiles:
        return cls(directory / "ca.crt", directory / "server.crt", directory / "server.key")


def _name(common: str) -> x509.Name:
    x509, oid = lazy("cryptography.x509"), lazy("cryptography.oid")
    return x509.Name([x509.NameAttribute(oid.NameOID.COMMON_NAME, common)])


def _pem_key(key: Any) -> str:
    serialization = lazy("cryptography.serialization")
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _fresh(files: TlsFiles, now: dt.datetime) -> bool:
    """True when every file exists and the server certificate is valid past the renew window."""
    x509 = lazy("cryptography.x509")
    if not all(p.exists() for p in (files.ca, files.cert, files.key)):
        return False
    try:
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    except ValueError:
        return False
    return cert.not_valid_after_utc - RENEW_BEFORE > now


def ensure_tls(directory: Path) -> TlsFiles:
    """The CA and server certificate under ``directory``, made (or remade) when needed."""
    x509, oid, ec = lazy("cryptography.x509"), lazy("cryptography.oid"), lazy("cryptography.ec")
    hashes, serialization = lazy("cryptography.hashes"), lazy("cryptography.serialization")
    files = TlsFiles.under(directory)
    now = dt.datetime.now(dt.UTC)
    if _fresh(files, now):
        return files
    ca_key = ec.generate_private_key(ec.SECP256R1())
    start, end = now - dt.timedelta(minutes=5), now + VALID_FOR
    ca = (x509.CertificateBuilder().subject_name(_name("mainboard broker CA"))
          .issuer_name(_name("mainboard broker CA")).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(start)
          .not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    cert = (x509.CertificateBuilder().subject_name(_name("localhost"))
            .issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private(files.key, _pem_key(key))
    write_private(files.cert, cert.public_bytes(serialization.Encoding.PEM).decode())
    write_private(files.ca, ca.public_bytes(serialization.Encoding.PEM).decode())
    return files  # the CA key is not kept: a new server certificate means a new CA
