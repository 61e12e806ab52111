"""Application-layer authentication for the fleet: keystore, signed registration with a
session key, per-message tags and replay refusal. docs/security.md has the threat model."""
