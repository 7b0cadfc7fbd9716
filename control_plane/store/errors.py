class StoreError(Exception):
    """The sessions database cannot do what was asked; the message says why and what to do."""
