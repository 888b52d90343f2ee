"""Options more than one experiment takes, and their validation: the hosts a TLS experiment
runs across (`hosts`), the TLS stack and mutual TLS (`tls`), the link emulator (`shaper`)."""
