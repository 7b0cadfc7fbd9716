"""The TLS contexts of the control plane's own HTTP clients, each made once per process.

A client made with verify=True reads the certificate store again (20 ms of CPU, as long as a small
page's whole fetch). Clients made per call (a web fetch or search, a webhook delivery, an A2A call, a
Teams upload) and the model clients made per event loop (the interactive CLI runs a loop per turn, a
child agent and a curation run one each) take these instead; a context is safe to share between clients
and threads."""

from __future__ import annotations

import functools
import ssl

import httpx
import httpx2


@functools.cache
def client_tls() -> ssl.SSLContext:
    """What verify=True gives an httpx client: certifi's bundle, or SSL_CERT_FILE / SSL_CERT_DIR."""
    return httpx.create_ssl_context()


@functools.cache
def model_tls() -> ssl.SSLContext:
    """What verify=True gives the openai SDK's client (httpx2): the system's store, as its default."""
    return httpx2.create_ssl_context()
