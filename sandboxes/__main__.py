"""`python3 -m sandboxes`: serve the runtime protocol on stdin/stdout."""

from .server import main

main()
