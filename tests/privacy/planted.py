"""Known personal data and secrets, planted by the privacy tests and searched for afterwards."""

from __future__ import annotations

from tachograph.privacy import KeyRing

KEY = KeyRing.of(bytes(range(32)), key_id="t1")
KEY_HEX = bytes(range(32)).hex()

EMAIL = "Jane.Planted@example.org"
CARD = "4111 1111 1111 1111"
IBAN = "DE89 3704 0044 0532 0130 00"
PHONE = "+44 20 7946 0958"
IP = "203.0.113.42"
STRIPE = "sk-live-PLANTEDa1b2c3d4e5f6g7h8"
OPENAI = "sk-proj-PLANTEDzyxwvu9876543210abcd"
JWT = (
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwbGFudGVkLXVzZXIiLCJyb2xlIjoiYWRtaW4ifQ"
    ".PLANTEDsignaturePartThatIsLong"
)
PASSWORD = "hunter2-PLANTED"
PRIVATE_KEY = (
    "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIPLANTEDkeymaterial\n-----END EC PRIVATE KEY-----"
)

PLAINTEXTS = (
    EMAIL,
    EMAIL.lower(),
    CARD,
    CARD.replace(" ", ""),
    IBAN,
    IBAN.replace(" ", ""),
    PHONE,
    PHONE.replace(" ", ""),
    IP,
    STRIPE,
    OPENAI,
    JWT,
    PASSWORD,
    "MHcCAQEEI",
    "PLANTED",  # every planted secret carries it: a partial leak is a leak too
    "Jane.Planted",
)


def hits(haystack: str | bytes) -> list[str]:
    """The planted plaintexts found in ``haystack`` (case-insensitive)."""
    text = haystack.decode("utf-8", "replace") if isinstance(haystack, bytes) else haystack
    low = text.lower()
    return [p for p in PLAINTEXTS if p.lower() in low]
