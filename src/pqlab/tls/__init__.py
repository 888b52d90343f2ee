"""The lab's TLS layer: the runner, chains, negotiation checks and key-log decryption."""
