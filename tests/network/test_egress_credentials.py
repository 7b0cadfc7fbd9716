"""Credentials added at the egress proxy: curl, Python, git and Node inside a sandbox reach an HTTPS
upstream (a test namespace, a trustme CA) with the header added; the value never enters the sandbox.

The upstream answers /auth with the SHA-256 of the Authorization header it got (never the value), so
the test can search for the value everywhere afterwards: the sandbox's environment, /proc/*/environ,
its files, every tool output, the audit log.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import get_backend
from netns import Upstream
from network_kit import publish_index
from pydantic import ValidationError

from backends import Sandbox, SandboxSpec
from backends.network import Credential, read_audit
from backends.network.policy import PolicyError
from backends.network.proxy import egress_proxy
from control_plane.config.settings import Settings

SECRET = "hm14-" + secrets.token_hex(16)
DIGEST = hashlib.sha256(f"Bearer {SECRET}".encode()).hexdigest()
CREDENTIAL = Credential(host="pypi.hm14.test", header="Authorization", value="Bearer ${HM14_TOKEN}")
NODE_CLIENT = """
const http = require('http'), tls = require('tls');
const proxy = new URL(process.env.HTTPS_PROXY);
const req = http.request(
  {host: proxy.hostname, port: proxy.port, method: 'CONNECT', path: 'pypi.hm14.test:443'});
req.on('connect', (res, sock) => {
  const t = tls.connect({socket: sock, servername: 'pypi.hm14.test'}, () =>
    t.write('GET /auth HTTP/1.1\\r\\nHost: pypi.hm14.test\\r\\nConnection: close\\r\\n\\r\\n'));
  let body = '';
  t.on('data', chunk => body += chunk);
  t.on('end', () => console.log(body.split('\\r\\n\\r\\n')[1].trim()));
  t.on('error', e => console.log('error ' + e.message));
});
req.end();
"""
PINNING_CLIENT = """
import os, socket, ssl, sys, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
sock = socket.create_connection((proxy.hostname, proxy.port), timeout=20)
sock.sendall(b"CONNECT pypi.hm14.test:443 HTTP/1.1\\r\\n\\r\\n")
sock.recv(4096)
pinned = ssl.create_default_context(cafile="/tmp/upstream-ca.pem")  # only the upstream's own CA
try:
    pinned.wrap_socket(sock, server_hostname="pypi.hm14.test")
    print("connected")
except ssl.SSLCertVerificationError as exc:
    print("refused:", exc.verify_message)
"""


@pytest.fixture(params=["local", "docker"], scope="module")
def injected(request: pytest.FixtureRequest, upstream: Upstream) -> Iterator[tuple[Sandbox, list[str]]]:
    """A sandbox whose requests to pypi.hm14.test carry the credential, and the tool outputs seen. Docker
    runs the node image variant (curl, git, python3 and Node); local the host's own."""
    backend = get_backend(request.param)
    image = "hermetic-sandbox:node"
    if request.param == "docker":
        backend.ensure_image(image)  # type: ignore[attr-defined]
    proxy = egress_proxy()
    saved = proxy.upstream_context
    proxy.upstream_context = ssl.create_default_context(cafile=str(upstream.ca_pem))  # "the host's store"
    os.environ["HM14_TOKEN"] = SECRET
    publish_index(upstream)
    spec = SandboxSpec(
        network="allowlist",
        allow=["pypi.hm14.test", "git.hm14.test"],
        credentials=[CREDENTIAL],
        memory="512m",
        image=image,
    )
    try:
        with backend.create(spec) as sb:
            sb.upload(upstream.ca_pem, "/tmp")
            sb.run("mv /tmp/ca.pem /tmp/upstream-ca.pem")
            yield sb, []
    finally:
        proxy.upstream_context = saved
        del os.environ["HM14_TOKEN"]


def _audited(sandbox: Sandbox, found: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """The audit entries `found` accepts, once there is one (each is written when its tunnel ends)."""
    deadline = time.monotonic() + 20
    while not (entries := [e for e in read_audit(sandbox.id) if found(e)]):
        assert time.monotonic() < deadline, "no such entry in the audit log"
        time.sleep(0.02)
    return entries


def _sh(injected: tuple[Sandbox, list[str]], command: str) -> str:
    sandbox, outputs = injected
    output = str(sandbox.run(command, timeout=60)["output"])
    outputs.append(output)
    return output


def test_curl_and_python_reach_the_host_with_the_header_added(injected: tuple[Sandbox, list[str]]) -> None:
    assert _sh(injected, "curl -sS https://pypi.hm14.test/auth") == f"auth-sha256={DIGEST}\n"
    replaced = _sh(injected, "curl -sS -H 'Authorization: Bearer mine' https://pypi.hm14.test/auth")
    assert replaced == f"auth-sha256={DIGEST}\n", "the client's own header is replaced, not doubled"
    python = "import urllib.request as u; print(u.urlopen('https://pypi.hm14.test/auth').read().decode())"
    assert _sh(injected, f'python3 -c "{python}"').strip() == f"auth-sha256={DIGEST}"
    if (
        injected[0].backend == "local"
    ):  # the host's python3 has requests (python3-requests); the images do not
        fetched = "import requests; print(requests.get('https://pypi.hm14.test/auth').text)"
        assert _sh(injected, f'python3 -c "{fetched}"').strip() == f"auth-sha256={DIGEST}"
    entries = _audited(injected[0], lambda e: bool(e.get("credential")))
    assert all(e["credential"] == "Authorization for pypi.hm14.test" for e in entries)
    assert entries[-1]["tls"] == "intercepted" and entries[-1]["allowed"] is True


def test_git_clones_and_node_fetches_through_the_injecting_proxy(injected: tuple[Sandbox, list[str]]) -> None:
    cloned = _sh(
        injected,
        "git clone -q https://pypi.hm14.test/repo.git /tmp/cred-repo 2>&1; cat /tmp/cred-repo/README",
    )
    assert cloned.endswith("cloned through the egress proxy\n"), cloned
    injected[0].call("fs.write", {"path": "/tmp/client.js", "content": NODE_CLIENT})
    assert _sh(injected, "node /tmp/client.js").strip() == f"auth-sha256={DIGEST}"


def test_a_host_without_a_credential_stays_an_opaque_tunnel(injected: tuple[Sandbox, list[str]]) -> None:
    plain = _sh(injected, "curl -sS --cacert /tmp/upstream-ca.pem https://git.hm14.test/auth")
    assert plain == "auth-sha256=none\n"  # its real certificate, end to end: nothing added
    last = _audited(injected[0], lambda e: e.get("host") == "git.hm14.test")[-1]
    assert "credential" not in last and last["tls"] is True  # its server name checked, carried as is


def test_a_client_that_pins_the_real_certificate_fails_clearly(injected: tuple[Sandbox, list[str]]) -> None:
    injected[0].call("fs.write", {"path": "/tmp/pinning.py", "content": PINNING_CLIENT})
    assert _sh(injected, "python3 /tmp/pinning.py").startswith(
        "refused: unable to get local issuer certificate"
    )
    refused = _audited(injected[0], lambda e: e.get("denied") == "tls-refused")
    assert "does it pin the certificate" in refused[-1]["reason"]


def test_the_value_is_nowhere_in_the_sandbox_its_output_or_the_audit_log(
    injected: tuple[Sandbox, list[str]],
) -> None:
    sandbox, outputs = injected
    assert _sh(injected, "echo $HM14_TOKEN") == "hermetic-credential-injected-by-the-egress-proxy\n"
    assert SECRET not in _sh(injected, "env")
    half = len(SECRET) // 2  # the command holds the value in two halves, so only a real copy matches
    found = _sh(
        injected,
        f'a={SECRET[:half]}; b={SECRET[half:]}; grep -rlsF "$a$b" /proc/[0-9]*/environ /tmp /run/hermetic '
        "$HOME . 2>/dev/null; echo searched",
    )
    assert found == "searched\n"
    assert not [output for output in outputs if SECRET in output]
    audit = Path(sandbox.egress.audit).read_text()  # type: ignore[union-attr]
    assert SECRET not in audit and DIGEST not in audit


def test_a_credential_needs_an_allowed_host_a_variable_and_its_value() -> None:
    with pytest.raises(ValidationError, match="which sandbox.allow does not allow on port 443"):
        SandboxSpec(network="allowlist", allow=["git.hm14.test"], credentials=[CREDENTIAL])
    with pytest.raises(ValidationError, match="they need network: allowlist"):
        SandboxSpec(credentials=[CREDENTIAL])
    configured = {
        "network": "allowlist",
        "allow": ["git.hm14.test"],
        "credentials": [CREDENTIAL.model_dump()],
    }
    with pytest.raises(ValidationError, match="which sandbox.allow does not allow"):  # config.yaml's sandbox:
        Settings(sandbox=configured)
    with pytest.raises(ValidationError, match="names a variable"):
        Credential(host="pypi.hm14.test", header="Authorization", value="Bearer abc123")
    assert "HM14_UNSET" not in os.environ
    unset = Credential(host="pypi.hm14.test", header="X-Key", value="${HM14_UNSET}")
    with pytest.raises(PolicyError, match="needs HM14_UNSET: set it in the profile's .env"):
        unset.resolve()


BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
IGNORE_CA_VARIABLES = (
    "env -u SSL_CERT_FILE -u REQUESTS_CA_BUNDLE -u CURL_CA_BUNDLE -u PIP_CERT -u GIT_SSL_CAINFO"
)
DEFAULT_CONTEXT = (
    "import ssl, urllib.request as u; "
    "print(u.urlopen('https://pypi.hm14.test/auth', context=ssl.create_default_context()).read().decode())"
)


def test_the_system_trust_store_holds_the_sandbox_ca(injected: tuple[Sandbox, list[str]]) -> None:
    """Clients that ignore every CA variable read /etc/ssl/certs/ca-certificates.crt: it is the sandbox's
    untouched bundle plus the CA (read-only), and a sandbox without credentials keeps the untouched one."""
    curl = _sh(injected, f"{IGNORE_CA_VARIABLES} curl -sS https://pypi.hm14.test/auth")
    assert curl == f"auth-sha256={DIGEST}\n"
    python = _sh(injected, f'{IGNORE_CA_VARIABLES} python3 -c "{DEFAULT_CONTEXT}"')
    assert python.strip() == f"auth-sha256={DIGEST}"
    size = "$(stat -c %s /run/hermetic/ca.pem)"
    assert _sh(injected, f"tail -c {size} {BUNDLE} | cmp - /run/hermetic/ca.pem && echo ends-with-ca") == (
        "ends-with-ca\n"
    )
    assert _sh(injected, f"touch {BUNDLE} 2>/dev/null || echo read-only") == "read-only\n"
    without_ca = _sh(injected, f"head -c -{size} {BUNDLE} | sha256sum")
    with get_backend(injected[0].backend).create(SandboxSpec(image="hermetic-sandbox:node")) as plain:
        untouched = str(plain.run(f"sha256sum < {BUNDLE}")["output"])
    assert untouched == without_ca
