"""Certificate chains that Python 3.13's ssl.create_default_context() (VERIFY_X509_STRICT,
VERIFY_X509_PARTIAL_CHAIN) judges otherwise than earlier versions, built with cryptography: each a CA to
trust, the chain a server on 127.0.0.1 sends, and its key, as PEM text."""

from __future__ import annotations

import datetime
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_NOW = datetime.datetime.now(datetime.timezone.utc)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(
    name: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[str, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool,
    key_usage: bool = True,
    aki: bool = True,
) -> x509.Certificate:
    issuer_name, issuer_key = issuer if issuer is not None else (name, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_NOW - datetime.timedelta(days=1))
        .not_valid_after(_NOW + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if key_usage:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=not ca,
                data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=ca,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
    if aki:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(*certs: x509.Certificate) -> str:
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def chains() -> dict[str, dict[str, str]]:
    """name -> {"trust": PEM, "chain": PEM, "key": PEM}."""
    out: dict[str, dict[str, str]] = {}
    root_key, mid_key, leaf_key = _key(), _key(), _key()
    root = _cert("root", root_key, None, ca=True)
    mid = _cert("intermediate", mid_key, ("root", root_key), ca=True)
    leaf = _cert("leaf", leaf_key, ("intermediate", mid_key), ca=False)
    # a well-formed chain: every version accepts it
    out["good"] = {"trust": _pem(root), "chain": _pem(leaf, mid), "key": _key_pem(leaf_key)}
    # the intermediate alone trusted: an anchor only under VERIFY_X509_PARTIAL_CHAIN (3.13's default)
    out["partial"] = {"trust": _pem(mid), "chain": _pem(leaf, mid), "key": _key_pem(leaf_key)}
    # a CA without keyUsage and a leaf without an Authority Key Identifier: refused under VERIFY_X509_STRICT
    odd_ca_key, odd_leaf_key = _key(), _key()
    odd_ca = _cert("odd-ca", odd_ca_key, None, ca=True, key_usage=False)
    odd_leaf = _cert("odd-leaf", odd_leaf_key, ("odd-ca", odd_ca_key), ca=False, aki=False)
    out["strict"] = {"trust": _pem(odd_ca), "chain": _pem(odd_leaf), "key": _key_pem(odd_leaf_key)}
    return out
