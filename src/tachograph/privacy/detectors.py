"""What counts as personal data or a secret in free text: patterns plus checks.

Each :class:`Detector` is a regular expression that finds candidates and, for the kinds where
a pattern alone would fire on ordinary numbers, a check that confirms them: payment cards
must pass Luhn and start like a card, IBANs must have their country's length and pass
mod-97, IP addresses must parse, phone numbers must have 8 to 15 digits. The check returns
the *normalized* value (the e-mail lower-cased, the card's digits), so that the same value
written two ways gives one token.

``PII_KINDS`` are tokenized (keyed, stable: see :mod:`tachograph.privacy.keys`);
``SECRET_KINDS`` become the fixed marker ``[redacted:secret:<kind>]``.
"""

from __future__ import annotations

import ipaddress
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "DETECTORS",
    "PII_KINDS",
    "SECRET_FIELDS",
    "SECRET_KINDS",
    "WHITESPACE",
    "Detector",
    "card_digits",
    "iban_ok",
    "luhn_ok",
]


def luhn_ok(digits: str) -> bool:
    """The Luhn check of a string of digits."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


# Lengths by country (the SWIFT IBAN registry): a check digit pair alone passes 1 in 97
# random strings, the country's length as well makes a false positive rare.
_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28,
    "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
    "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
    "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20,
    "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18,
    "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24,
    "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "TL": 23, "TN": 24, "TR": 26, "UA": 29,
    "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip


def iban_ok(text: str) -> bool:
    """An IBAN (spaces removed, upper case) of its country's length that passes mod-97."""
    if _IBAN_LENGTHS.get(text[:2]) != len(text) or not text[2:4].isdigit():
        return False
    moved = text[4:] + text[:4]
    number = "".join(str(int(ch, 36)) for ch in moved)
    return int(number) % 97 == 1


def _email(text: str) -> str | None:
    # one address written in composed or decomposed form is one token
    return (text if text.isascii() else unicodedata.normalize("NFC", text)).lower()


def _phone(text: str) -> str | None:
    digits = "".join(ch for ch in text if ch.isdigit())
    if not 8 <= len(digits) <= 15:
        return None
    return ("+" if text.startswith("+") else "") + digits


_CARD_START = frozenset("23456")


def card_digits(text: str) -> str | None:
    """The digits of a payment card number (Luhn-checked, card-like start), or None."""
    digits = text.replace(" ", "").replace("-", "")
    if not 13 <= len(digits) <= 19 or digits[0] not in _CARD_START or not luhn_ok(digits):
        return None
    return digits


def _iban(text: str) -> str | None:
    compact = text.replace(" ", "").upper()
    return compact if iban_ok(compact) else None


_HEX = frozenset("0123456789abcdefABCDEF")


def _ip(text: str) -> str | None:
    if not any(ch in _HEX for ch in text):
        return None
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    return address.compressed


@dataclass(frozen=True)
class Detector:
    """A kind of sensitive value found in text.

    ``pattern`` finds candidates (a Python regular expression without named groups of its
    own; a secret may mark the part to replace with one group ``(?P<v>...)``, so that
    ``password=hunter2`` keeps ``password=``). ``check`` confirms a candidate and returns its
    normalized form, or None. ``hints``: substrings without one of which the pattern cannot
    match (``hints_lower``: the same, for case-insensitive patterns); a text holding none of
    them is never searched. Detectors without hints need a decimal digit (an IPv6 address,
    two colons with up to four hex digits between them).
    """

    kind: str
    pattern: str
    check: Callable[[str], str | None] | None = None
    secret: bool = False
    hints: tuple[str, ...] = ()
    hints_lower: tuple[str, ...] = ()


WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
"""Every character ``\\s`` matches in a ``str`` pattern (those for which ``str.isspace()`` is
true), for the hints of a pattern that allows whitespace after a word."""

# Boundaries: a candidate must not be the middle of a longer word or number, so that hex
# digests, ULIDs and ids do not yield cards, phones or keys.
_W = r"(?<![A-Za-z0-9_-])"
_E = r"(?![A-Za-z0-9_-])"

# E-mail addresses beyond ASCII: the scripts written without spaces between words, whose
# letters cannot be told from the words around an address ("请联系ann@example.com谢谢")
_NO_SPACES = (
    "\u0e00-\u0eff\u1000-\u109f\u1100-\u11ff\u1780-\u17ff\u2e80-\u2fff\u3040-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\uff00-\uffef"
    "\U00020000-\U0003ffff"
)
# a non-ASCII letter or digit of another script, or a combining mark
_INTL = r"[^\x00-\x7f\W" + _NO_SPACES + r"]|[\u0300-\u036f]"
_INTL_LETTER = r"[^\x00-\x7f\W\d_" + _NO_SPACES + r"]"
# where an e-mail address may begin: not after a non-ASCII character it could hold
_NOT_AFTER_INTL = r"(?<![^\x00-\x7f\W" + _NO_SPACES + r"])"

DETECTORS: tuple[Detector, ...] = (
    # -- secrets (markers) ---------------------------------------------------------------------
    Detector(
        "private_key",
        # to its END line, or to the end of the text when it has none (an answer cut short
        # by its token limit, a truncated log line): the key is in what follows BEGIN
        r"-----BEGIN[A-Z ]{0,40} PRIVATE KEY(?: BLOCK)?-----(?s:.*?)"
        r"(?:-----END[A-Z ]{0,40} PRIVATE KEY(?: BLOCK)?-----|\Z)",
        secret=True,
        hints=("PRIVATE KEY",),
    ),
    Detector("anthropic", _W + r"sk-ant-[A-Za-z0-9_-]{16,}", secret=True, hints=("sk-ant-",)),
    Detector(
        "stripe",
        _W + r"(?:sk|rk|pk|whsec)[-_](?:live|test)[-_][A-Za-z0-9_-]{8,}",
        secret=True,
        hints=("_live", "-live", "_test", "-test"),
    ),
    Detector(
        "openai",
        _W + r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
        secret=True,
        hints=("sk-",),
    ),
    Detector("aws", _W + r"(?:AKIA|ASIA)[0-9A-Z]{16}" + _E, secret=True, hints=("AKIA", "ASIA")),
    Detector(
        "github",
        _W + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})",
        secret=True,
        hints=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    Detector("gitlab", _W + r"glpat-[A-Za-z0-9_-]{20,}", secret=True, hints=("glpat-",)),
    Detector("slack", _W + r"xox[abposr]-[A-Za-z0-9-]{10,}", secret=True, hints=("xox",)),
    Detector("google", _W + r"AIza[0-9A-Za-z_-]{35}", secret=True, hints=("AIza",)),
    Detector("huggingface", _W + r"hf_[A-Za-z0-9]{30,}", secret=True, hints=("hf_",)),
    Detector(
        "jwt",
        _W + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
        secret=True,
        hints=("eyJ",),
    ),
    Detector(
        "bearer",
        # in an Authorization header, whatever follows is the credential, however short, up
        # to a space, a quote or a separator of a query ("&", ",", ";"); the name and value
        # may be quoted, or quoted with escapes; a period that ends it ends a sentence
        r"(?i:authorization\\?[\"']?\s*[:=]\s*\\?[\"']?bearer\s+)"
        r"(?P<v>[^\s\"'\\&,;]*[^\s\"'\\&,;.])",
        secret=True,
        hints_lower=("authorization",),
    ),
    Detector(
        "bearer",
        # elsewhere 12 characters or more (a word that long is taken too: a token of lower-case
        # letters alone would be missed otherwise), or 6 to 11 that hold a digit ("Bearer
        # abc123"), so that "bearer tokens" stays prose; a period that ends it (before no
        # other character of a token) ends a sentence
        r"(?i:\bbearer)\s+(?P<v>[A-Za-z0-9._~+/-]{11,}[A-Za-z0-9_~+/-]=*"
        r"|(?=[A-Za-z._~+/-]{0,10}\d)[A-Za-z0-9._~+/-]{5,10}[A-Za-z0-9_~+/-]=*"
        r"(?![A-Za-z0-9_~+/-]|\.+[A-Za-z0-9_~+/-]))",
        secret=True,
        hints_lower=("bearer",),
    ),
    Detector(
        "password",
        # the name may end a longer one (DB_PASSWORD=, AWS_SECRET_ACCESS_KEY=, GITHUB_TOKEN=)
        r"(?i:(?<![A-Za-z0-9])(?:[A-Za-z0-9]+[_-])*(?:password|passwd|pwd|passphrase|passcode"
        r"|secret|client_secret|secret_key|secret[_-]?access[_-]?key|api[_-]?key|token"
        r"|access[_-]?token|auth[_-]?token|session[_-]?token|signature)"
        r"[\"']?\s*[:=]\s*[\"']?)"
        # a quoted value to its closing quote, spaces and all (a passphrase), on its line;
        # else (unquoted, or a quote that does not close) up to a space, quote or separator
        r"(?P<v>(?<=\")[^\"\r\n]{1,256}(?=\")|(?<=')[^'\r\n]{1,256}(?=')|[^\s\"'&,;]{3,})",
        secret=True,
        hints_lower=(
            "pass",
            "pwd",
            "secret",
            "api_key",
            "api-key",
            "apikey",
            "accesstoken",
            "authtoken",
            "sessiontoken",
            "token=",
            "token:",
            'token"',
            "token'",
            # the name may stand apart from its ":" or "=" by any whitespace: "token = x"
            *("token" + space for space in WHITESPACE),
            "signature",
        ),
    ),
    Detector(
        "password",
        # credentials under names too short or too common to be taken anywhere else, taken
        # only as the parameters of a URL's query: Google's key=, an Azure SAS sig=, an
        # Azure Functions key or an OAuth authorization code=; after "?" or "&", or at the
        # start of a text that is a query string itself (no whitespace: an SDK call's
        # recorded http.query). A "code" key of a JSON object (an error code) is not one,
        # nor a value shorter than any such credential ("code=200").
        r"(?i:(?:(?<=[?&])|\A(?=\S*\Z))(?:key|sig|code)=)(?P<v>[^\s\"'&,;#]{8,})",
        secret=True,
        hints_lower=("key=", "sig=", "code="),
    ),
    Detector(
        "url_password",
        # the credentials of a URL's user information, in one detector (one alternative of
        # the combined pattern: each costs a try at every position of every text searched)
        r"(?i:(?<![A-Za-z0-9+.-])[a-z][a-z0-9+.-]{0,30}://(?:[^\s/:@\"'\[]{0,128}:)??)"
        r"(?P<v>"
        # a token as the user name of a web URL (https://TOKEN@github.com/..., an Azure
        # DevOps PAT, a 40-hex GitHub token), with its password if it has one
        # (https://TOKEN:x-oauth-basic@...): 12 to 128 letters, digits, "_" or "-", a letter
        # and a digit among them. A name with no digit, or with a dot, is a user's
        # (ann.lee@); ssh and other URLs name users (ssh://git@host), not tokens.
        r"(?:(?<=(?i:https)://)|(?<=(?i:http)://))"
        r"(?=[A-Za-z_-]{0,127}[0-9])(?=[0-9_-]{0,127}[A-Za-z])[A-Za-z0-9_-]{12,128}"
        r"(?::[^\s\"']{0,256}?)?(?=@[^\s/@\"'?#]*(?:[/?#\s\"']|\Z))"
        # else the password after the user name (postgres://app:hunter2@db/...; none:
        # redis://:hunter2@cache), not a port and a path (https://host:8443/users/@ann), up
        # to the "@" before the host: a password may hold "@" (p@ss) or "/" (generated ones
        # do), the host holds neither and ends at "/", "?", "#", a space, a quote or the end
        r"|(?<=:)(?![0-9]{1,5}(?:[/?#]|\Z))[^\s\"']{1,256}?"
        r"(?=@[^\s/@\"'?#]*(?:[/?#\s\"']|\Z)))",
        secret=True,
        hints=("://",),
    ),
    Detector(
        "basic_auth",
        r"(?i:authorization[\"']?\s*[:=]\s*[\"']?basic\s+)(?P<v>[A-Za-z0-9+/]{4,}={0,2})",
        secret=True,
        hints_lower=("authorization",),
    ),
    # -- personal data (tokens) ------------------------------------------------------------------
    Detector(
        "email",
        # letters and digits of any script written with spaces between words (RFC 6531:
        # ann@exämple.com, jöhn@example.com), so that a non-ASCII letter neither ends a match
        # nor starts one mid-word, and combining marks (an address in decomposed form); not
        # the scripts written without spaces (Chinese, Japanese, Korean, Thai...), whose
        # words stand against an address as punctuation does. A top-level domain is letters,
        # or IDNA (xn--p1ai). Checked cheapest first: not after a character of an address
        # (ASCII), then that an "@" follows (a class of ranges, no Unicode categories), which
        # rejects at once a word that is no address, and only then the other scripts'.
        r"(?<![A-Za-z0-9_.+\u0300-\u036f-])(?=[A-Za-z0-9_.%+\x80-\U0010ffff-]{1,64}@)"
        + _NOT_AFTER_INTL
        + r"(?:[A-Za-z0-9_.%+-]|"
        + _INTL
        + r"){1,64}"
        r"@(?:(?:[A-Za-z0-9]|" + _INTL_LETTER + r")(?:[A-Za-z0-9-]|" + _INTL + r"){0,62}\.)+"
        r"(?:(?:[A-Za-z]|" + _INTL_LETTER + r"){2,24}|xn--[A-Za-z0-9-]{1,59})"
        r"(?![A-Za-z0-9-]|" + _INTL + r")",
        _email,
        hints=("@",),
    ),
    Detector(
        "card",
        r"(?<![A-Za-z0-9_.-])\d(?:[ -]?\d){12,18}(?![A-Za-z0-9_-]|\.\d)",
        card_digits,
    ),
    Detector(
        "iban",
        r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![A-Za-z0-9])",
        _iban,
    ),
    Detector(
        "phone",
        r"(?<![A-Za-z0-9_+.-])(?:\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,6}"
        r"|(?:\(\d{3}\) ?|\d{3}[-. ])\d{3}[-. ]\d{4})(?![A-Za-z0-9_-]|\.\d)",
        _phone,
    ),
    Detector(
        "ip",
        r"(?<![A-Za-z0-9.:_-])(?:(?:\d{1,3}\.){3}\d{1,3}"
        r"|(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4})(?![A-Za-z0-9_-]|[.:][A-Za-z0-9])",
        _ip,
    ),
)
"""Every built-in detector, in the order tried at a position (secrets before personal data,
the more specific before the more general)."""

SECRET_KINDS = frozenset(d.kind for d in DETECTORS if d.secret)
PII_KINDS = frozenset(d.kind for d in DETECTORS if not d.secret)

SECRET_FIELDS = frozenset(
    {
        "password", "passwd", "pwd", "passphrase", "secret", "client_secret",
        "secret_key", "api_key", "apikey", "api-key", "x-api-key", "access_token",
        "refresh_token", "id_token", "auth_token", "authorization",
        "proxy-authorization", "private_key", "aws_secret_access_key", "cookie", "set-cookie",
        "accesstoken", "access-token", "refreshtoken", "refresh-token", "idtoken",
        "authtoken", "auth-token", "x-auth-token", "api_token", "api-token", "sessiontoken",
        "session_token", "session-token", "x-amz-security-token", "secretaccesskey",
        "secret-access-key", "aws_secret", "passcode", "privatekey", "private-key",
        "clientsecret", "client-secret", "x-goog-api-key",
    }
)  # fmt: skip
"""Object keys (compared in lower case) whose value is a secret whatever it looks like:
``{"password": "hunter2"}`` is redacted although "hunter2" matches no pattern, and so is a
list or an object under such a key (``{"authorization": {"basic": ...}}``), whole."""
