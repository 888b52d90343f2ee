"""pqlab: measure what post-quantum cryptography costs a TLS deployment."""

__version__ = "0.1.0"
