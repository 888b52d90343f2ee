"""The lab's TLS layer: the TLS stacks the engine has (`stacks`), certificate chains
(`chains`), the one runner that starts and supervises engine processes (`runner`), the one
check of what a handshake negotiated (`negotiation`), and key-log decryption of captured
handshakes (`keylog`)."""
