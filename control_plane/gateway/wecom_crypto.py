"""WeCom's callback encryption (企业微信 "加解密方案"): every callback carries
`msg_signature`, the SHA-1 of the sorted, concatenated token, timestamp, nonce and ciphertext, and the
ciphertext is AES-256-CBC under base64(EncodingAESKey + "=") with the key's first 16 bytes as IV,
PKCS#7-padded to 32 bytes, over 16 random bytes + the message's length (4 bytes, network order) + the
message + the receiveid (the CorpID; empty for an intelligent robot). A callback failing any check is
refused with the reason. A robot's passive replies are sealed the same way, and the files it is sent
are the bare file under the same key and IV, PKCS#7-padded to 32 bytes."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

KEY_LENGTH = 43
"""Characters of an EncodingAESKey (32 bytes in base64 without its one '=')."""


class Refused(Exception):
    """A callback that is not WeCom's for this application (bad signature, key or receiveid)."""


def aes_key(encoding_aes_key: str) -> bytes:
    """The AES-256 key an EncodingAESKey stands for. Raises ValueError for one that is not 43 base64
    characters."""
    if len(encoding_aes_key) != KEY_LENGTH:
        raise ValueError(f"an EncodingAESKey is {KEY_LENGTH} characters, not {len(encoding_aes_key)}")
    try:
        return base64.b64decode(encoding_aes_key + "=", validate=True)
    except binascii.Error as exc:
        raise ValueError(f"an EncodingAESKey is base64: {exc}") from exc


def signature(token: str, timestamp: str, nonce: str, encrypted: str) -> str:
    return hashlib.sha1("".join(sorted([token, timestamp, nonce, encrypted])).encode()).hexdigest()


class CallbackCipher:
    """Checks and opens one application's callbacks."""

    def __init__(self, token: str, encoding_aes_key: str, receive_id: str) -> None:
        self._token = token
        self._key = aes_key(encoding_aes_key)
        self._receive_id = receive_id.encode()

    def open(self, msg_signature: str, timestamp: str, nonce: str, encrypted: str) -> bytes:
        """The plaintext of `encrypted` (a message's XML, or the URL check's echostr). Raises Refused."""
        expected = signature(self._token, timestamp, nonce, encrypted)
        if not hmac.compare_digest(expected, msg_signature.lower()):
            raise Refused("bad msg_signature")
        try:
            data = base64.b64decode(encrypted, validate=True)
        except binascii.Error as exc:
            raise Refused("the ciphertext is not base64") from exc
        if not data or len(data) % 16:
            raise Refused("the ciphertext is not whole AES blocks")
        try:
            plain = self._crypt(data, encrypt=False)
        except ValueError as exc:  # a wrong key gives garbage padding
            raise Refused("the ciphertext does not decrypt under this EncodingAESKey") from exc
        length = int.from_bytes(plain[16:20], "big")
        if len(plain) < 20 + length:
            raise Refused("the decrypted message is shorter than its stated length")
        message, receive_id = plain[20 : 20 + length], plain[20 + length :]
        if not hmac.compare_digest(receive_id, self._receive_id):
            whose = "this application's CorpID" if self._receive_id else "empty, as a robot's is"
            raise Refused(f"the receiveid is not {whose}")
        return message

    def seal(self, message: bytes, timestamp: str, nonce: str) -> tuple[str, str]:
        """`message` encrypted for a passive reply, and its msg_signature."""
        body = os.urandom(16) + len(message).to_bytes(4, "big") + message + self._receive_id
        encrypted = base64.b64encode(self._crypt(body, encrypt=True)).decode()
        return encrypted, signature(self._token, timestamp, nonce, encrypted)

    def open_file(self, data: bytes) -> bytes:
        """A file a robot was sent, decrypted. Raises Refused."""
        if not data or len(data) % 16:
            raise Refused("the file is not whole AES blocks")
        try:
            return self._crypt(data, encrypt=False)
        except ValueError as exc:
            raise Refused("the file does not decrypt under this EncodingAESKey") from exc

    def _crypt(self, data: bytes, *, encrypt: bool) -> bytes:
        """AES-256-CBC under the key (IV: its first 16 bytes), PKCS#7 to 32 bytes. Raises ValueError for
        bad padding."""
        cipher = Cipher(algorithms.AES(self._key), modes.CBC(self._key[:16]))
        if encrypt:
            padder = padding.PKCS7(256).padder()
            padded = padder.update(data) + padder.finalize()
            encryptor = cipher.encryptor()
            return encryptor.update(padded) + encryptor.finalize()
        decryptor = cipher.decryptor()
        unpadder = padding.PKCS7(256).unpadder()
        return unpadder.update(decryptor.update(data) + decryptor.finalize()) + unpadder.finalize()
