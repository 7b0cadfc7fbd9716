"""The TLS context of the control plane's own HTTP clients, made once per process.

An httpx client made with verify=True reads the certificate bundle again (20 ms of CPU, as long as a
small page's whole fetch). Clients made per call (a web fetch or search, a webhook delivery, an A2A
call, a Teams upload) take this one instead; a context is safe to share between clients and threads."""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def client_tls() -> ssl.SSLContext:
    """What verify=True gives an httpx client: certifi's bundle, or SSL_CERT_FILE / SSL_CERT_DIR."""
    return httpx.create_ssl_context()
