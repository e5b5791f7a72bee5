"""Privacy: redaction of personal data and secrets before anything is recorded.

Every recording runs :data:`redact_secrets` by default (API keys, bearer tokens, JWTs, private
keys and password fields become ``[redacted:secret:<kind>]``). Personal data (e-mail, phone,
payment cards, IBAN, IP addresses, and fields named by :class:`Rule`) is tokenized once a
policy switches it on, with a key that never enters the log::

    from tachograph.privacy import KeyRing, Rule, pii_policy

    policy = pii_policy(KeyRing.from_env(), rules=[Rule("$.args.customer_name")])
    with tachograph.record(store, actor="support", processors=[policy]) as run: ...

See docs/privacy.md.
"""

from __future__ import annotations

from . import detectors
from .detectors import PII_KINDS, SECRET_FIELDS, SECRET_KINDS, Detector, iban_ok, luhn_ok
from .keys import ENV_KEY, ENV_KEY_FILE, ENV_KEY_ID, TOKEN_PATTERN, KeyRing, key_id_of
from .redactor import (
    ENV_POLICY,
    Finding,
    Redactor,
    Rule,
    RuleAction,
    default_processors,
    pii_policy,
    pin_processors,
    redact_secrets,
)

__all__ = [
    "ENV_KEY",
    "ENV_KEY_FILE",
    "ENV_KEY_ID",
    "ENV_POLICY",
    "PII_KINDS",
    "SECRET_FIELDS",
    "SECRET_KINDS",
    "TOKEN_PATTERN",
    "Detector",
    "Finding",
    "KeyRing",
    "Redactor",
    "Rule",
    "RuleAction",
    "default_processors",
    "detectors",
    "iban_ok",
    "key_id_of",
    "luhn_ok",
    "pii_policy",
    "pin_processors",
    "redact_secrets",
]
