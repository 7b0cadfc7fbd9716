"""The web on the control plane's side of the seal: search providers (their keys never enter a sandbox)."""
