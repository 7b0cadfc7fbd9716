"""The server name a TLS ClientHello asks for (RFC 8446 4.1.2, RFC 6066 3), read without a TLS library."""

from __future__ import annotations

from typing import Protocol

HANDSHAKE = 0x16
CLIENT_HELLO = 0x01
SERVER_NAME = 0x0000
MAX_HELLO = 1 << 16


class NotClientHello(ValueError):
    """The first bytes are not a well-formed TLS ClientHello."""


class Reader(Protocol):
    async def readexactly(self, size: int) -> bytes: ...


async def read_client_hello(reader: Reader) -> tuple[bytes, str | None]:
    """The raw records that carry the ClientHello (to forward as they are) and its server name."""
    raw = bytearray()
    handshake = bytearray()
    while len(handshake) < 4 or len(handshake) < 4 + int.from_bytes(handshake[1:4], "big"):
        header = await reader.readexactly(5)
        if header[0] != HANDSHAKE or header[1] != 3:
            raise NotClientHello("not a TLS handshake")
        body = await reader.readexactly(int.from_bytes(header[3:5], "big"))
        raw += header + body
        handshake += body
        if handshake[0] != CLIENT_HELLO or len(raw) > MAX_HELLO:
            raise NotClientHello("not a ClientHello")
    return bytes(raw), server_name(bytes(handshake[4 : 4 + int.from_bytes(handshake[1:4], "big")]))


def server_name(hello: bytes) -> str | None:
    """The host_name in a ClientHello body, or None when it carries no server_name extension."""
    try:
        at = 2 + 32  # legacy_version, random
        at += 1 + hello[at]  # session id
        at += 2 + int.from_bytes(hello[at : at + 2], "big")  # cipher suites
        at += 1 + hello[at]  # compression methods
        if at == len(hello):
            return None
        end = at + 2 + int.from_bytes(hello[at : at + 2], "big")
        at += 2
        while at + 4 <= end:
            kind = int.from_bytes(hello[at : at + 2], "big")
            size = int.from_bytes(hello[at + 2 : at + 4], "big")
            data = hello[at + 4 : at + 4 + size]
            if kind == SERVER_NAME:
                # server_name_list: u16 length, then (u8 type, u16 length, name); type 0 is host_name
                if data[2] != 0:
                    raise NotClientHello("server_name of an unknown type")
                length = int.from_bytes(data[3:5], "big")
                return data[5 : 5 + length].decode("ascii")
            at += 4 + size
    except (IndexError, UnicodeDecodeError):
        raise NotClientHello("truncated ClientHello") from None
    return None
