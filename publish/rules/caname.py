"""A PEM bundle of CA certificates, split and indexed as OpenSSL's hashed certificate directories name them.

OpenSSL looks a CA up in a directory (``capath``) by a file name made of a hash of the CA's subject,
``HHHHHHHH.N``, and reads only the files it needs; a CA file (``cafile``) is parsed whole on every start, about
50 ms of CPU for a distribution's bundle of some 150 certificates.  :func:`subject_hash` is OpenSSL's
``X509_NAME_hash_ex`` (the first four bytes of SHA-1 over the canonical encoding of the subject, read as a
little-endian number): each string value turned into UTF-8, lower-cased in ASCII, with white space trimmed
and collapsed to one space.  Each function reads its input once, front to back.  Anything this module is not
sure OpenSSL reads the same way is :class:`Unsure`: the caller then loads the bundle whole, as before.
"""

from __future__ import annotations

import binascii

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Callable


class Unsure(ValueError):
    """The bundle holds something OpenSSL might read otherwise than this module: load it whole instead."""


_SEQUENCE, _SET = 0x30, 0x31
_UTF8 = 0x0C
# String types OpenSSL canonicalises (ASN1_MASK_CANON), with how each one's bytes decode to characters.
_DECODE: dict[int, Callable[[bytes], str]] = {
    0x0C: lambda b: b.decode("utf-8"),  # UTF8String
    0x13: lambda b: b.decode("latin-1"),  # PrintableString
    0x14: lambda b: b.decode("latin-1"),  # T61String: one byte a character, as OpenSSL reads it
    0x16: lambda b: b.decode("latin-1"),  # IA5String
    0x1A: lambda b: b.decode("latin-1"),  # VisibleString
    0x1C: lambda b: _wide(b, 4),  # UniversalString
    0x1E: lambda b: _wide(b, 2),  # BMPString
}
_KEPT = frozenset({0x12})  # NumericString: copied into the canonical form as it is
_TO_SPACE = {ord(c): " " for c in "\t\n\v\f\r"}  # OpenSSL's ossl_isspace, the space itself aside
_LOWER = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")
_BASE64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
_BEGIN, _END = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"


def _wide(data: bytes, width: int) -> str:
    """UCS-2 or UCS-4, big-endian, as OpenSSL reads BMPString and UniversalString: one code point per unit."""
    if len(data) % width:
        raise Unsure("a wide string of a partial character")
    chars = []
    for i in range(0, len(data), width):
        c = int.from_bytes(data[i : i + width], "big")
        if 0xD800 <= c <= 0xDFFF or c > 0x10FFFF:
            raise Unsure("a wide string with a surrogate or an out-of-range code point")
        chars.append(chr(c))
    return "".join(chars)


def _tlv(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """The DER element at ``pos`` (before ``end``): (tag, start of its contents, end of its contents)."""
    if end - pos < 2:
        raise Unsure("a truncated DER element")
    tag, first = data[pos], data[pos + 1]
    if tag & 0x1F == 0x1F:
        raise Unsure("a DER tag in the long form")
    pos += 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 4 or end - pos < count:
            raise Unsure("a DER length that is indefinite, too long or truncated")
        length = int.from_bytes(data[pos : pos + count], "big")
        if length < 0x80 or data[pos] == 0:
            raise Unsure("a DER length not in its shortest form")
        pos += count
    if length > end - pos:
        raise Unsure("a DER element longer than what holds it")
    return tag, pos, pos + length


def _der(tag: int, contents: bytes) -> bytes:
    n = len(contents)
    if n < 0x80:
        return bytes((tag, n)) + contents
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((tag, 0x80 | len(size))) + size + contents


def subject(der: bytes) -> bytes:
    """The subject Name of the certificate ``der``, as its encoded bytes (tag and length included)."""
    tag, start, end = _tlv(der, 0, len(der))
    if tag != _SEQUENCE or end != len(der):
        raise Unsure("a certificate that is not one DER SEQUENCE")
    tag, pos, tbs_end = _tlv(der, start, end)  # tbsCertificate
    if tag != _SEQUENCE:
        raise Unsure("a certificate without its tbsCertificate")
    fields: list[tuple[int, int, int]] = []
    while pos < tbs_end and len(fields) < 6:
        tag, body, after = _tlv(der, pos, tbs_end)
        if not fields and tag == 0xA0:  # [0] version: optional, before the serial number
            pos = after
            continue
        fields.append((tag, pos, after))
        pos = after
    # serialNumber, signature, issuer, validity, subject
    if len(fields) < 5 or fields[0][0] != 0x02 or fields[2][0] != _SEQUENCE or fields[4][0] != _SEQUENCE:
        raise Unsure("a tbsCertificate without its serial number, issuer or subject")
    _, name_start, name_end = fields[4]
    return der[name_start:name_end]


def _canonical_value(tag: int, contents: bytes) -> bytes:
    decode = _DECODE.get(tag)
    if decode is None:
        if tag in _KEPT:
            return _der(tag, contents)
        raise Unsure(f"a name attribute of ASN.1 type {tag:#x}")
    try:
        text = decode(contents)
    except UnicodeDecodeError:
        raise Unsure("a name attribute that is not valid UTF-8") from None
    # Trimmed, each run of OpenSSL's six white-space characters (not Unicode's) made one space, A-Z lowered.
    words = text.translate(_TO_SPACE).split(" ")
    return _der(_UTF8, " ".join(w for w in words if w).encode("utf-8").translate(_LOWER))


def canonical(name: bytes) -> bytes:
    """OpenSSL's canonical encoding of the encoded Name ``name``: each RDN's SET, its members canonicalised
    and sorted as DER sorts a SET OF, one after the other without the outer SEQUENCE."""
    tag, pos, end = _tlv(name, 0, len(name))
    if tag != _SEQUENCE or end != len(name):
        raise Unsure("a name that is not one DER SEQUENCE")
    out = []
    while pos < end:
        tag, rdn_pos, rdn_end = _tlv(name, pos, end)
        if tag != _SET or rdn_pos == rdn_end:
            raise Unsure("a name whose RDN is not a SET with members")
        members = []
        while rdn_pos < rdn_end:
            tag, ava_pos, ava_end = _tlv(name, rdn_pos, rdn_end)
            if tag != _SEQUENCE:
                raise Unsure("a name attribute that is not a SEQUENCE")
            tag, _, oid_end = _tlv(name, ava_pos, ava_end)
            if tag != 0x06:
                raise Unsure("a name attribute without its type")
            vtag, vstart, vend = _tlv(name, oid_end, ava_end)
            if vend != ava_end:
                raise Unsure("a name attribute with more than a type and a value")
            value = _canonical_value(vtag, name[vstart:vend])
            members.append(_der(_SEQUENCE, name[ava_pos:oid_end] + value))
            rdn_pos = ava_end
        out.append(_der(_SET, b"".join(sorted(members))))
        pos = rdn_end
    return b"".join(out)


def subject_hash(der: bytes, sha1: Callable[[bytes], bytes]) -> str:
    """The eight hex digits OpenSSL names the certificate ``der``'s file by in a hashed directory
    (``openssl x509 -subject_hash``); ``sha1`` returns the SHA-1 digest of its argument."""
    digest = sha1(canonical(subject(der)))
    return f"{int.from_bytes(digest[:4], 'little'):08x}"


def pem_certificates(text: str) -> list[bytes]:
    """Each certificate of the PEM bundle ``text``, as DER.  Lines outside the blocks are ignored, as
    OpenSSL ignores them; a block of another kind (a CRL, a TRUSTED CERTIFICATE with its trust settings) or
    one that is not plain base64 is :class:`Unsure`."""
    found: list[bytes] = []
    block: list[bytes] | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if block is None:
            if line == _BEGIN:
                block = []
            elif "-----" in line:  # another kind of block, or a marker OpenSSL might read otherwise
                raise Unsure(f"a PEM line other than a certificate's: {line[:60]!r}")
            continue
        if line == _END:
            der = binascii.a2b_base64(b"".join(block))
            if not der:
                raise Unsure("an empty certificate block")
            found.append(der)
            block = None
            continue
        data = line.encode("ascii", "replace")
        if len(data) > 76 or data.translate(None, _BASE64):
            raise Unsure("a certificate block that is not plain base64 in lines of 76 characters at most")
        block.append(data)
    if block is not None:
        raise Unsure("a certificate block without its END line")
    return found
