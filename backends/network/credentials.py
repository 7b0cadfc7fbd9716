"""Credentials the egress proxy adds to a sandbox's requests (`sandbox.credentials`): the model, and the
per-sandbox CA whose certificates the proxy shows for those hosts only. The value never enters the
sandbox: the spec holds a `${VAR}` template, resolved here from the environment (the profile's .env is
read into it at start) when the proxy attaches."""

from __future__ import annotations

import datetime
import os
import re
import ssl
import tempfile
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import BaseModel, ConfigDict, field_validator

from .policy import PolicyError, normalise_host

_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")
PLACEHOLDER = "hermetic-credential-injected-by-the-egress-proxy"
"""What the sandbox sees in a credential's variable, if it asks for it."""


class Credential(BaseModel):
    """`{host: api.github.com, header: Authorization, value: "Bearer ${GITHUB_TOKEN}"}`: for requests
    to `host` (HTTPS, port 443), the proxy adds `header` (replacing the client's) with `value`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str
    header: str
    value: str
    """A template naming variables (`${NAME}`), never the secret itself: config.yaml holds this."""

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        return normalise_host(value)  # PolicyError (a ValueError) says what is wrong

    @field_validator("header")
    @classmethod
    def _header(cls, value: str) -> str:
        if not _HEADER.match(value):
            raise ValueError(f"not an HTTP header name: {value!r}")
        return value

    @field_validator("value")
    @classmethod
    def _value(cls, value: str) -> str:
        if not _TEMPLATE.search(value) or any(c in value for c in "\r\n"):
            raise ValueError("a credential's value names a variable (${NAME}), never the secret itself")
        return value

    @property
    def name(self) -> str:
        """What the audit log records: where and which header, never the value."""
        return f"{self.header} for {self.host}"

    @property
    def variables(self) -> list[str]:
        return _TEMPLATE.findall(self.value)

    def resolve(self) -> str:
        """The value with its variables filled in from the environment. Raises PolicyError."""
        missing = [name for name in self.variables if name not in os.environ]
        if missing:
            raise PolicyError(
                f"the credential {self.name} needs {', '.join(missing)}: set it in the profile's .env"
            )
        return _TEMPLATE.sub(lambda m: os.environ[m.group(1)], self.value)


@dataclass
class SandboxCA:
    """A throwaway CA for one sandbox, and a leaf certificate per intercepted host, made at attach."""

    hosts: list[str]
    pem: bytes = b""
    contexts: dict[str, ssl.SSLContext] = field(default_factory=dict)

    def __post_init__(self) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Hermetic sandbox egress CA")])
        now = datetime.datetime.now(datetime.UTC)
        ca = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )
            .sign(key, hashes.SHA256())
        )
        self.pem = ca.public_bytes(serialization.Encoding.PEM)
        for host in self.hosts:
            self.contexts[host] = self._server_context(host, ca, key, now)

    @staticmethod
    def _server_context(
        host: str, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, now: datetime.datetime
    ) -> ssl.SSLContext:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.set_alpn_protocols(["http/1.1"])
        with tempfile.TemporaryDirectory() as tmp:  # load_cert_chain reads files only
            chain, private = os.path.join(tmp, "chain.pem"), os.path.join(tmp, "key.pem")
            with open(chain, "wb") as fh:
                fh.write(cert.public_bytes(serialization.Encoding.PEM))
            with open(private, "wb") as fh:
                fh.write(
                    key.private_bytes(
                        serialization.Encoding.PEM,
                        serialization.PrivateFormat.PKCS8,
                        serialization.NoEncryption(),
                    )
                )
            context.load_cert_chain(chain, private)
        return context
