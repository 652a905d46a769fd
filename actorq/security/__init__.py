"""Transport security (TLS/mTLS), Redis ACL users and policy blob signing.

Everything here is optional and off by default: with no ACTORQ_TLS_* / ACTORQ_POLICY_KEY_*
settings, actorq runs plaintext on loopback as before. OPERATIONS.md says how to turn each
part on.
"""
