"""What every part that handles outside text shares: the threat scan and secret redaction."""
