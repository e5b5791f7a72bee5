"""Detectors, rules, keys and the processor contract (pure, idempotent, input untouched)."""

from __future__ import annotations

import copy
import hashlib
import hmac
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tachograph.errors import PrivacyError
from tachograph.privacy import (
    SECRET_FIELDS,
    KeyRing,
    Redactor,
    Rule,
    default_processors,
    iban_ok,
    luhn_ok,
    pii_policy,
    redact_secrets,
)
from tachograph.privacy.redactor import _any_of
from tachograph.record.compiled import NATIVE
from tachograph.record.seal import trusts_untouched_unless

from .planted import CARD, EMAIL, IBAN, IP, JWT, KEY, OPENAI, PHONE, PRIVATE_KEY, STRIPE

POLICY = pii_policy(KEY)

FOUND = {
    EMAIL: ("email", EMAIL.lower()),
    CARD: ("card", "4111111111111111"),
    IBAN: ("iban", "DE89370400440532013000"),
    PHONE: ("phone", "+442079460958"),
    "(555) 123-4567": ("phone", "5551234567"),
    IP: ("ip", IP),
    "2001:db8::1": ("ip", "2001:db8::1"),
}

NOT_FOUND = [
    "2026-01-15T10:00:00.000000Z",
    "sha256:" + "1" * 64,
    "01HZX3K4M5N6P7Q8R9S0T1V2W3",
    "123e4567-e89b-12d3-a456-426614174000",
    "run_x:tool:0123456789abcdef",
    "12:30:45",
    "version 1.2.3",
    "4111 1111 1111 1112",  # fails Luhn
    "DE89 3704 0044 0532 0130 01",  # fails mod-97
    "999.1.1.1",
    "total 1718000000000 ms",
    "task-1234567890abcdefghijkl",
]


@pytest.mark.parametrize(("text", "expected"), FOUND.items())
def test_personal_data_becomes_the_keyed_token(text: str, expected: tuple[str, str]) -> None:
    out = POLICY("decision", {"note": f"value: {text}."})
    mac = hmac.new(KEY.keys["t1"], expected[1].encode(), hashlib.sha256)
    token = "pii1:t1:" + mac.hexdigest()[:16]
    assert out == {"note": f"value: {token}."}


@pytest.mark.parametrize("text", NOT_FOUND)
def test_ordinary_values_are_left_alone(text: str) -> None:
    payload = {"note": text}
    assert POLICY("decision", payload) is payload


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (STRIPE, "stripe"),
        (OPENAI, "openai"),
        ("AKIAIOSFODNN7EXAMPLE", "aws"),
        (JWT, "jwt"),
        (PRIVATE_KEY, "private_key"),
        ("ghp_" + "a1" * 18, "github"),
        ("xoxb-1234567890-abc", "slack"),
        ("sk-ant-api03-" + "x" * 24, "anthropic"),
        ("AIza" + "B" * 35, "google"),
        ("hf_" + "c" * 34, "huggingface"),
    ],
)
def test_secrets_become_markers_without_a_key(text: str, kind: str) -> None:
    assert redact_secrets("x", {"v": f"[{text}]"}) == {"v": f"[[redacted:secret:{kind}]]"}


def test_secret_fields_and_assignments() -> None:
    out = redact_secrets(
        "x",
        {
            "password": "hunter2",
            "Authorization": "Basic dXNlcjpwYXNz",
            "text": "login with password=hunter2 and Bearer abcdefghijkl0123",
            "secret": True,  # a flag, not a secret
        },
    )
    assert out == {
        "password": "[redacted:secret:field]",
        "Authorization": "[redacted:secret:field]",
        "text": "login with password=[redacted:secret:password] and "
        "Bearer [redacted:secret:bearer]",
        "secret": True,
    }


@pytest.mark.parametrize(
    "key",
    ["DB_PASSWORD", "db_password", "GITHUB_TOKEN", "x-session-token", "PRIVATE-TOKEN",
     "stripe_secret_key", "credentials", "pass", "service.api_key", "Refresh Token"],
)  # fmt: skip
def test_keys_named_like_a_secret_are_redacted(key: str) -> None:
    # only exact names were: {"DB_PASSWORD": ...} and {"token": ...} were stored as given
    payload = {"config": {key: "CANARYvalue1"}, "n": 1}
    out = redact_secrets("tool.requested", payload)
    assert out["config"][key] == "[redacted:secret:field]"
    assert "CANARY" not in orjson.dumps(out).decode()


@pytest.mark.parametrize(
    "key",
    ["max_tokens", "token_count", "tokens", "input_tokens", "author", "passenger", "token",
     "eos_token", "key_secret"],
)  # fmt: skip
def test_keys_that_only_look_alike_are_kept(key: str) -> None:
    payload = {"usage": {key: "plain value"}}
    assert redact_secrets("model.response", payload) == payload


def test_processor_is_pure_idempotent_and_keeps_unchanged_objects() -> None:
    payload = {"args": {"to": EMAIL, "cards": [4111111111111111, "x"]}, "same": {"a": [1, "b"]}}
    before = copy.deepcopy(payload)
    once = POLICY("tool.requested", payload)
    assert payload == before  # the input is untouched
    assert once["same"] is payload["same"]  # nothing changed there: the same object
    assert once["args"]["cards"][0] == KEY.token("4111111111111111")  # JSON numbers too
    assert POLICY("tool.requested", once) == once  # tokens are not tokenized again
    assert POLICY("tool.requested", payload) == once  # deterministic


def test_rules_by_json_path() -> None:
    policy = Redactor(
        keyring=KEY,
        rules=(
            Rule("$.args.name"),
            Rule("$..ssn", action="redact", kind="ssn"),
            Rule("$.args.notes[*].body", action="drop"),
            Rule("$.args['full address']", types=("tool.requested",)),
        ),
    )
    payload = {
        "args": {
            "name": "Ann Lee",
            "deep": [{"ssn": "078-05-1120"}],
            "notes": [{"body": "x", "id": 1}],
            "full address": "1 Main St",
        }
    }
    out = policy("tool.requested", payload)
    assert out["args"] == {
        "name": KEY.token("Ann Lee"),
        "deep": [{"ssn": "[redacted:ssn]"}],
        "notes": [{"id": 1}],
        "full address": KEY.token("1 Main St"),
    }
    assert policy("decision", payload)["args"]["full address"] == "1 Main St"  # types=
    with pytest.raises(PrivacyError, match="starts with"):
        Rule("args.name")
    with pytest.raises(PrivacyError, match="unknown rule action"):
        Rule("$.a", action="hash")


def test_tokens_need_a_key() -> None:
    with pytest.raises(PrivacyError, match="need a key"):
        Redactor(kinds=frozenset({"email"}))
    with pytest.raises(PrivacyError, match="TACHOGRAPH_PII_KEY"):
        pii_policy(environ={})


def test_key_sources(tmp_path: Path) -> None:
    hexkey = bytes(range(32)).hex()
    assert KeyRing.from_env({"TACHOGRAPH_PII_KEY": hexkey, "TACHOGRAPH_PII_KEY_ID": "t1"}) == KEY
    assert KeyRing.from_env({}) is None
    path = tmp_path / "keys"
    path.write_text(f"# current first\nt2 {'ab' * 16}\nt1 {hexkey}\n")
    path.chmod(0o600)
    ring = KeyRing.from_file(path)
    assert ring.current == "t2"
    assert ring.pinned("t1").token("x") == KEY.token("x")
    assert KeyRing.from_env({"TACHOGRAPH_PII_KEY_FILE": str(path)}) == ring
    assert KeyRing.from_callback(lambda: {"t1": bytes(range(32))}) == KEY
    assert KeyRing.from_lines(ring.lines().splitlines()) == ring
    generated = KeyRing.generate()
    assert len(generated.keys[generated.current]) == 32
    assert generated.current.startswith("k")
    with pytest.raises(PrivacyError, match="not usable"):
        KeyRing.of("short")
    with pytest.raises(PrivacyError, match="no key with id"):
        ring.pinned("t9")


def test_key_material_is_never_shown() -> None:
    hexkey = KEY.keys["t1"].hex()
    for text in (repr(KEY), str(KEY), repr(POLICY)):
        assert hexkey not in text
    with pytest.raises(PrivacyError) as bad:
        KeyRing.of("not-a-key-at-all-zz")
    assert "not-a-key" not in str(bad.value)


def test_default_processors() -> None:
    assert default_processors((), environ={}) == (redact_secrets,)
    assert default_processors((), redact_secrets=False, environ={}) == ()
    assert default_processors((POLICY,), environ={}) == (POLICY,)  # already redacts secrets
    env = {
        "TACHOGRAPH_PII": "on",
        "TACHOGRAPH_PII_KEY": bytes(range(32)).hex(),
        "TACHOGRAPH_PII_KEY_ID": "t1",
    }
    (policy,) = default_processors((), environ=env)
    assert isinstance(policy, Redactor)
    assert policy.kinds
    assert policy.key_id == "t1"


def test_validators() -> None:
    assert luhn_ok("4111111111111111")
    assert not luhn_ok("4111111111111112")
    assert iban_ok("GB82WEST12345698765432")
    assert not iban_ok("GB82WEST12345698765433")
    assert not iban_ok("ZZ82WEST12345698765432")


_letters = st.binary(min_size=0, max_size=6).map(lambda b: bytes(c % 4 + 97 for c in b))


@settings(max_examples=300)
@given(st.lists(_letters, min_size=1, max_size=12), st.lists(_letters, max_size=8))
def test_the_whole_payload_test_finds_a_word_exactly_when_one_occurs(
    words: list[bytes], pieces: list[bytes]
) -> None:
    # the hints are merged into a trie-shaped pattern: it must still say "some word occurs"
    # exactly when one does (words over four letters, so that prefixes and overlaps abound)
    blob = b"|".join(pieces)
    found = _any_of(words).search(blob) is not None
    assert found == any(w in blob for w in words)


def test_the_secrets_pattern_still_catches_every_hint() -> None:
    hints = ["sk-ant-", "api_key", "authorization", "private key", "ghp_", "refresh_token"]
    for hint in hints:
        payload = {"tool": "t", "args": {"note": f"x{hint.upper()}y"}}
        assert not redact_secrets._engine.clean(payload), hint
    assert redact_secrets._engine.clean({"tool": "bench_lookup", "args": {"i": 1}})


def test_a_key_that_is_not_a_string_reaches_the_profile_check(tmp_path: Path) -> None:
    """An int key in a tool's result is refused as outside the profile (it crashed the
    redactor with AttributeError before, after the write had fired, and the run still
    finished ``ok``)."""
    import tachograph as tg
    from tachograph.errors import ProfileError
    from tachograph.privacy.redactor import Finding, Redactor

    assert list(Redactor().scan({1: "x", "password": "y"})) == [
        Finding("field", "$.password", True)
    ]

    @tg.tool(effect="write", name="numbered")
    def numbered(x: int) -> dict[int, str]:
        return {x: "a"}

    @tg.agent(name="numbering")
    def agent(task: int) -> object:
        return numbered(task)

    db = tmp_path / "keys.db"
    with pytest.raises(ProfileError, match="is not a string"):
        tg.record_run(agent, 1, store=db)
    with tg.open_store(db) as store:
        (info,) = store.runs()
        types = [e.type for e in store.read(info.run_id)]
    assert info.status == "error"
    assert types[-2:] == ["tool.failed", "run.finished"]


@pytest.mark.parametrize(
    ("text", "kept", "kind"),
    [
        ("DB_PASSWORD=hunter2env", "DB_PASSWORD=", "password"),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENG", "AWS_SECRET_ACCESS_KEY=", "password"),
        ("GITHUB_TOKEN=tok123456", "GITHUB_TOKEN=", "password"),
        ("postgres://app:hunter2pg@10.0.0.5/db", "postgres://app:", "url_password"),
        ("Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic ", "basic_auth"),
        ("https://s3/x?X-Amz-Signature=sigquery456", "https://s3/x?X-Amz-Signature=", "password"),
        (
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\nxyz\n-----END PGP PRIVATE KEY BLOCK-----",
            "",
            "private_key",
        ),
    ],
)
def test_secrets_a_review_found_passing_are_redacted(text: str, kept: str, kind: str) -> None:
    from tachograph.privacy.redactor import Redactor

    out = Redactor()("tool.completed", {"t": text})["t"]
    assert out.startswith(kept)
    assert f"[redacted:secret:{kind}]" in out
    secret = text[len(kept) :].split("@")[0]
    assert secret not in out


@pytest.mark.parametrize(
    "text",
    [
        "max_tokens: 100",
        "the basic information here",
        "https://user@host/x",
        "see a:b@c",
        "the signature of the contract is valid",
    ],
)
def test_what_only_looks_like_those_secrets_is_kept(text: str) -> None:
    from tachograph.privacy.redactor import Redactor

    assert Redactor()("tool.completed", {"t": text}) == {"t": text}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://maps/api?key=V0x7Qm3Rt9Zp0&q=paris", "https://maps/api?key=[R]&q=paris"),
        ("https://blob/c/f?sv=2022&sig=ab%2Bcd%3D1234", "https://blob/c/f?sv=2022&sig=[R]"),
        ("https://fn/api/x?code=V6x7Qm3Rt9Zp6", "https://fn/api/x?code=[R]"),
        (
            "GET https://app/cb?state=s&CODE=4/0Adeu5BW#top",
            "GET https://app/cb?state=s&CODE=[R]#top",
        ),
        # an SDK call's recorded http.query: the query's text without its "?"
        ("key=V0x7Qm3Rt9Zp0&api-version=2024", "key=[R]&api-version=2024"),
    ],
)
def test_credentials_under_short_names_in_a_query_are_redacted(text: str, expected: str) -> None:
    from tachograph.privacy.redactor import Redactor

    out = Redactor()("tool.completed", {"t": text})["t"]
    assert out == expected.replace("[R]", "[redacted:secret:password]")


@pytest.mark.parametrize(
    "payload",
    [
        # "code" and "key" as the keys of a JSON object: an error code, a lookup key
        {"error": {"code": "invalid_request_error", "key": "order_status_B-2002"}},
        {"code": 404, "status_code": "Not Found"},
        {"t": '{"code": "invalid_api_request", "key": "some_lookup_key"}'},
        # the names outside a query, and values too short to be a credential
        {"t": "the key=value pairs of the config file"},
        {"t": "exit code=137 after the signal"},
        {"t": "https://h/x?code=200&key=name"},
        {"t": "https://h/x?monkey=bananas12&zipcode=10115123"},
    ],
)
def test_short_names_outside_a_query_are_kept(payload: dict[str, object]) -> None:
    from tachograph.privacy.redactor import Redactor

    assert Redactor()("tool.completed", payload) == payload


def test_secret_fields_hide_lists_objects_and_more_spellings() -> None:
    from tachograph.privacy.redactor import Redactor

    payload = {
        "password": ["hunter2list"],
        "authorization": {"basic": "Basic dXNlcjpwYXNz"},
        "SessionToken": "FwoGZXIvYXdzEBY",
        "SecretAccessKey": "wJalrXUtnFEMIK7MDENG",
        "x-amz-security-token": "IQoJb3JpZ2luX2Vj",
        "logprobs": [{"token": "Hello", "logprob": -0.1}],  # a model's token: not a secret
    }
    out = Redactor()("tool.completed", payload)
    for key in ("password", "authorization", "SessionToken", "SecretAccessKey"):
        assert out[key] == "[redacted:secret:field]", key
    assert out["x-amz-security-token"] == "[redacted:secret:field]"
    assert out["logprobs"] == payload["logprobs"]


# -- process_payload's pre-check on the redactor's behalf (record/seal.py) --------------------

_native_only = pytest.mark.skipif(
    Redactor()._engine.blob_table is None,
    reason="the compiled helpers are not built: the redactor names no words",
)

_SECRETS = [
    OPENAI,
    JWT,
    PRIVATE_KEY,
    "ghp_" + "a1" * 18,
    "password=hunter2",
    "Bearer abcdefghijkl0123",
]
_texts = st.one_of(
    st.text(max_size=12),
    st.sampled_from([*_SECRETS, "api", "Cookie", "sk-", "refresh_token", "plain", "25"]),
)
_keys = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["password", "api_key", "note", "Authorization", "PrivateKey"]),
    st.integers(0, 3),  # outside the profile: orjson refuses it, the redactor walks
)
_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), _texts),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_keys, inner, max_size=4)),
    max_leaves=12,
)


def _spellings(name: str) -> list[str]:
    """``name`` as a key may be spelled: any case, and the KELVIN SIGN for a k (the one
    character outside ASCII whose ``str.lower()`` is an ASCII letter)."""
    out = [name, name.upper(), name.title(), name.swapcase()]
    if "k" in name:
        out.append(name.replace("k", "\u212a"))
    return out


@pytest.mark.parametrize("name", sorted(SECRET_FIELDS))
def test_every_secret_field_is_redacted_alone_in_a_payload(name: str) -> None:
    """A secret field with no other hint in its payload: the whole-payload test must not
    call such a payload clean (``privatekey`` and ``private-key`` were stored as given)."""
    from tachograph.record.seal import process_payload

    for key in _spellings(name):
        payload = {"tool": "t", "args": {key: "hunter2"}}
        for out in (
            Redactor()("tool.requested", payload),
            process_payload((Redactor(),), "tool.requested", payload),
        ):
            assert out["args"] == {key: "[redacted:secret:field]"}, key


@_native_only
def test_the_redactor_names_its_words_only_where_its_pre_check_is_all_it_asks() -> None:
    assert Redactor().untouched_unless is Redactor()._engine.blob_table is not None
    assert redact_secrets.untouched_unless is not None
    # e-mail addresses have a hint of their own ("@"): the pre-check still decides alone
    assert Redactor(kinds=frozenset({"email"}), keyring=KEY).untouched_unless is not None
    # a rule, a detector with no hint (cards, phones, IBANs, IPs: digits) or a subclass's
    # own __call__ would each be skipped wrongly: none of them names words
    assert Redactor(rules=(Rule("$.args.note"),), keyring=KEY).untouched_unless is None
    assert POLICY.untouched_unless is None

    class Counting(Redactor):
        def __call__(self, event_type: str, payload: dict[str, object]) -> dict[str, object]:
            return {**super().__call__(event_type, payload), "seen": True}

    assert Counting().untouched_unless is None
    assert Redactor(secrets=False).untouched_unless is None  # nothing to find: no words


@_native_only
@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(_keys, _values, max_size=5),
    st.sampled_from(["tool.requested", "tool.completed", "model.response", "run.started"]),
)
def test_the_pre_check_in_process_payload_answers_as_the_redactor_would(
    payload: dict[Any, object], event_type: str
) -> None:
    from tachograph.record.seal import process_payload, stored_if_untouched

    redactor = Redactor()
    expected = redactor(event_type, copy.deepcopy(payload))
    stored = stored_if_untouched((redactor,), event_type, payload)
    got = process_payload((redactor,), event_type, payload)
    assert got == expected
    # the payload itself exactly when nothing in it was redacted (as the redactor hands back
    # what it leaves unchanged), a new object otherwise
    assert (got is payload) == (expected == payload)
    # the bytes the replay compares are given only for a payload handed back untouched, and
    # are its bytes as stored
    if stored is not None:
        assert got is payload
        assert stored == orjson.dumps(payload)


@trusts_untouched_unless
class _EmptyWords:
    """A trusted class whose words are an empty ``bytes``, not the 256 entries a processor
    must name: never taken for "no processor" (it is asked, as stored_if_untouched asks it)."""

    untouched_unless = b""

    def __call__(self, event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {**payload, "seen": True}


_PROCESSOR_TUPLES: tuple[Any, ...] = (
    (),
    [],  # a list, not a tuple: no processor either way
    (Redactor(),),
    [Redactor()],  # a list, not a tuple: asked
    (Redactor(kinds=frozenset({"email"}), keyring=KEY),),
    (Redactor(rules=(Rule("$.args.note"),), keyring=KEY),),  # no words: asked
    (Redactor(), Redactor()),  # not a lone processor: asked
    (lambda type_, payload: payload,),  # not a trusted class: asked
    (_EmptyWords(),),  # words of another shape: asked
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(_keys, _values, max_size=5),
    st.sampled_from(["tool.requested", "tool.completed", "model.request"]),
    st.sampled_from(range(len(_PROCESSOR_TUPLES))),
)
def test_the_test_found_once_per_run_answers_as_stored_if_untouched(
    payload: dict[Any, object], event_type: str, which: int
) -> None:
    """A session finds its processors' words once (untouched_words) and tests each request
    with them (stored_untouched): the same bytes, or the same refusal, as stored_if_untouched
    gives for any payload of a type other than run.started."""
    from tachograph.record.seal import (
        NO_PROCESSOR,
        stored_if_untouched,
        stored_untouched,
        untouched_words,
    )

    processors = _PROCESSOR_TUPLES[which]
    words = untouched_words(processors)
    once = stored_untouched(words, payload) if words is not None else None
    assert once == stored_if_untouched(processors, event_type, payload)
    if not processors:
        assert words is NO_PROCESSOR  # the bytes alone, never asked
    else:
        assert words is not NO_PROCESSOR


def test_a_secret_still_reaches_the_redactor_through_process_payload() -> None:
    from tachograph.record.seal import process_payload

    calls: list[str] = []

    watched = Redactor()
    out = process_payload((watched,), "tool.completed", {"tool": "t", "result": f"[{OPENAI}]"})
    assert out == {"tool": "t", "result": "[[redacted:secret:openai]]"}
    out = process_payload((watched,), "tool.requested", {"tool": "t", "args": {"Password": "x"}})
    assert out["args"] == {"Password": "[redacted:secret:field]"}

    # a payload outside the profile (an int key) goes to the redactor's own walk, which
    # still finds the secret beside it
    odd = {"tool": "t", "result": {1: "x"}, "note": f"[{OPENAI}]"}
    assert process_payload((watched,), "tool.completed", odd)["note"] == (
        "[[redacted:secret:openai]]"
    )

    # with more than one processor, each is called, as before
    def second(event_type: str, payload: dict[str, object]) -> dict[str, object]:
        calls.append(event_type)
        return payload

    clean = {"tool": "t", "result": {"n": 1}}
    assert process_payload((watched, second), "tool.completed", clean) is clean
    assert calls == ["tool.completed"]


@_native_only
def test_only_a_registered_class_s_words_opt_it_out_of_its_calls() -> None:
    """Only a processor whose type is exactly a registered class is skipped by its words: a
    subclass of ``Redactor``, a wrapper that forwards attributes to one, or a function that
    carries a table are called; so is the processor of a sequence that is not a tuple."""
    from tachograph.record.seal import process_payload

    seen: list[str] = []

    class Sub(Redactor):
        pass  # the same __call__, so the same words: still called, as a subclass

    sub = Sub()
    assert sub.untouched_unless is not None

    def spy(self: Redactor, event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
        seen.append(event_type)
        return payload

    Sub.__call__ = spy  # type: ignore[method-assign]
    try:
        process_payload((sub,), "tool.completed", {"tool": "t", "result": "ok"})
    finally:
        del Sub.__call__
    assert seen == ["tool.completed"]

    class Tagging:
        def __init__(self, inner: Redactor) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def __call__(self, event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
            return {**self.inner(event_type, payload), "tagged": True}

    payload = {"tool": "t", "result": "ok"}
    assert process_payload((Tagging(Redactor()),), "tool.completed", payload)["tagged"] is True

    def odd_table(event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {**payload, "called": True}

    odd_table.untouched_unless = ((b"x",),)  # type: ignore[attr-defined]
    assert process_payload((odd_table,), "tool.completed", payload)["called"] is True
    listed = [Tagging(Redactor())]
    assert process_payload(listed, "tool.completed", payload)["tagged"] is True
    assert process_payload(iter([odd_table]), "tool.completed", payload)["called"] is True


_PIECES = st.sampled_from(
    [
        *Redactor()._engine.hints,
        *sorted(SECRET_FIELDS),
        '"',
        "\\",
        "\n",
        " ",
        "=",
        ":",
        "{",
        "\u212a",  # KELVIN SIGN: str.lower() makes it "k"
        "\u0130",  # LATIN CAPITAL LETTER I WITH DOT ABOVE: "i" and a combining dot
        "abc123xyz",
        '": "',
        "TOKEN",
    ]
)
_hinted = st.lists(st.one_of(_PIECES, st.text(max_size=3)), max_size=6).map("".join)
# hints with letters that (?i) folds, and digits of other scripts
_folded_text = st.lists(
    st.one_of(
        _PIECES,
        st.sampled_from(["\u017f", "\u0131", "\u0130", "\u0663", "\uff15", "pa", "ap\u0131_"]),
    ),
    max_size=6,
).map("".join)


@settings(max_examples=600, deadline=None)
@given(_hinted, _hinted)
def test_a_payload_the_whole_payload_test_calls_clean_is_one_the_walk_leaves_alone(
    value: str, key: str
) -> None:
    """The pre-check must be sound against the redactor's own walk: whatever the walk would
    change, the test must send to it. (A string holding JSON text with a "token" key was
    called clean: the hint 'token"' is escaped in the serialized bytes.)"""
    redactor = Redactor()
    for payload in ({"x": value}, {key: "v"}, {"args": {key: value}}, {"l": [value, key]}):
        if redactor._engine.clean(payload):
            assert redactor._dict(payload, ()) is payload, payload


@pytest.mark.parametrize("hint", sorted(Redactor()._engine.hints))
def test_every_hint_makes_a_payload_unclean_wherever_it_stands(hint: str) -> None:
    engine = Redactor()._engine
    for text in (hint, f"x{hint}y", hint.upper(), f'{{"{hint}": 1}}', f"a\\{hint}"):
        assert not engine.clean({"v": text}), text
        assert not engine.clean({text: "v"}), text


def test_a_string_holding_json_with_a_token_key_is_redacted() -> None:
    from tachograph.record.seal import process_payload

    payload = {"tool": "t", "result": '{"token": "s3cr3tvalue42", "expires_in": 3600}'}
    for out in (
        Redactor()("tool.completed", payload),
        process_payload((Redactor(),), "tool.completed", payload),
    ):
        assert "s3cr3tvalue42" not in out["result"]
        assert "[redacted:secret:" in out["result"]


def test_no_hint_beside_a_value_gets_past_the_whole_payload_test() -> None:
    """Every hint with every common separator and a value after it, in a string and as a
    key: wherever the walk redacts, the whole-payload test must not call it clean."""
    redactor = Redactor()
    separators = ["", " ", "=", ": ", '": "', '":"', "' : '", '" = "', "\n"]
    missed = []
    for hint in redactor._engine.hints:
        for sep in separators:
            for text in (f"{hint}{sep}abc123xyz", f'{{"{hint}{sep}s3cr3tvalue42"}}'):
                for payload in ({"x": text}, {text: "v"}):
                    if redactor._engine.clean(payload) and redactor._dict(payload, ()) != payload:
                        missed.append(text)
    assert missed == []


def test_whitespace_is_every_character_the_patterns_take_for_it() -> None:
    import re
    import sys

    from tachograph.privacy.detectors import WHITESPACE

    spaces = "".join(c for c in map(chr, range(sys.maxunicode + 1)) if re.match(r"\s", c))
    assert spaces == WHITESPACE


@pytest.mark.parametrize("name", ["token", "access_token", "DB_TOKEN", "x-auth-token"])
def test_a_token_set_apart_from_its_value_by_whitespace_is_redacted(name: str) -> None:
    """``token = value``: the pattern takes whitespace before the ``=`` or ``:``, and the
    hints did not (only ``token=``, ``token:`` and the quoted forms), so it was kept."""
    from tachograph.privacy.detectors import WHITESPACE
    from tachograph.record.seal import process_payload

    for space in WHITESPACE:
        for sep in ("=", ":"):
            text = f"{name}{space}{sep}{space}s3cr3tvalue42"
            payload = {"tool": "t", "result": text}
            for out in (
                Redactor()("tool.completed", payload),
                process_payload((Redactor(),), "tool.completed", payload),
            ):
                assert "s3cr3tvalue42" not in out["result"], repr(text)


@settings(max_examples=500, deadline=None)
@given(st.one_of(_hinted, st.text(max_size=40), _folded_text))
def test_the_hint_search_finds_a_hint_exactly_where_a_substring_test_would(text: str) -> None:
    import re

    """``maybe`` searches the lower-cased text's UTF-8 bytes (lone surrogates passed through,
    the letters ``(?i)`` takes for ASCII ones folded onto them) for all the hints at once:
    the same answer as testing each hint in the text."""
    from tachograph.privacy.redactor import _CASE_FOLDS

    for engine in (Redactor()._engine, POLICY._engine):
        expected = any(h in text.translate(_CASE_FOLDS).lower() for h in engine.hints)
        if engine.digits and any(c.isdecimal() for c in text):
            expected = True
        # an IPv6 address needs no digit: two colons with at most four hex digits between
        if engine.colons and re.search(r":[0-9A-Fa-f]{0,4}:", text):
            expected = True
        assert engine.maybe(text) == expected
    assert Redactor()._engine.maybe("\ud800token\u2028= x")  # a lone surrogate beside one


_bytes_word = st.binary(min_size=1, max_size=6).map(lambda b: bytes(c % 8 + 0x5A for c in b))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(_bytes_word, st.binary(min_size=1, max_size=6)), min_size=1, max_size=8),
    st.binary(max_size=40),
)
def test_the_whole_payload_words_find_whatever_the_full_words_find(
    words: list[bytes], blob: bytes
) -> None:
    """Cut after a backslash or a byte outside ASCII, rid of words that hold another and of
    those with a control character (never raw in orjson's output), the words still occur
    wherever one of the full words does, in bytes without control characters."""
    from tachograph.privacy.redactor import _cut, _fewest

    blob = bytes(b for b in blob if b >= 0x20)
    fewer = _fewest(_cut(w) for w in words)
    if any(w in blob for w in words if not any(b < 0x20 for b in w)):
        assert any(w in blob for w in fewer)


def test_the_case_folds_are_every_letter_a_case_insensitive_pattern_takes_for_ascii() -> None:
    """``(?i)`` in a Python pattern takes four letters outside ASCII for ASCII ones; the
    hint tests fold exactly those (a letter missed here is a secret stored as given)."""
    import re
    import string
    import sys

    from tachograph.privacy.redactor import _CASE_FOLDS
    from tachograph.record.seal import _CASE_FOLDS as BYTE_FOLDS

    letters = {a: re.compile(f"(?i:{a})") for a in string.ascii_lowercase}
    found = {
        ord(c): a
        for c in map(chr, range(0x80, sys.maxunicode + 1))
        for a, pattern in letters.items()
        if pattern.fullmatch(c)
    }
    assert found == _CASE_FOLDS
    assert {chr(k).encode(): v.encode() for k, v in found.items()} == dict(BYTE_FOLDS)


def _unfolded(word: str) -> list[str]:
    """``word`` with each of its letters s, i, k in turn spelled with the letter outside
    ASCII that ``(?i)`` takes for it, and in upper case."""
    others = {"s": ["\u017f"], "i": ["\u0131", "\u0130"], "k": ["\u212a"]}
    out = []
    for i, ch in enumerate(word):
        for other in others.get(ch, []):
            out.append(word[:i] + other + word[i + 1 :])
            out.append(word[:i].upper() + other + word[i + 1 :].upper())
    return out


_CASELESS_SECRETS = [
    *(f"{name}=s3cr3tvalue42" for name in ("password", "passwd", "passphrase", "passcode")),
    *(f"{name}: s3cr3tvalue42" for name in ("secret", "client_secret", "secret_key")),
    *(f"{name}=s3cr3tvalue42" for name in ("api_key", "apikey", "api-key", "signature")),
    *(f"{name}=s3cr3tvalue42" for name in ("token", "access_token", "session_token")),
    "aws_secret_access_key = s3cr3tvalue42",
    "authorization: Basic dXNlcjpzM2NyM3R2YWx1ZTQy",
]


@pytest.mark.parametrize("text", _CASELESS_SECRETS)
def test_a_secret_name_spelled_with_a_letter_the_pattern_folds_is_redacted(text: str) -> None:
    """The password and Basic patterns are case-insensitive, and so take U+017F for "s",
    U+0131 and U+0130 for "i", U+212A for "k"; the hints were tested on ``str.lower()``, which
    does not fold the first three (nor U+0130 onto a lone "i"), so "pa\\u017fsword=..." was
    stored as given while the pattern itself redacts it."""
    from tachograph.record.seal import process_payload

    redactor = Redactor()
    engine = redactor._engine
    spellings = _unfolded(text.split("=")[0].split(":")[0])
    assert spellings, text
    missed = []
    for name in spellings:
        spelled = name + text[len(name) :]
        # the pattern alone, without any hint test, redacts it ...
        assert engine.pattern.sub(redactor._replace, spelled) != spelled, spelled
        payload = {"tool": "t", "result": spelled}
        # ... and so do the redactor and the recorder's whole-payload test before it
        for out in (
            redactor("tool.completed", payload),
            process_payload((redactor,), "tool.completed", payload),
            redactor("tool.completed", {spelled: "v"}),
        ):
            if "s3cr3tvalue42" in str(out) or "dXNlcjpzM2NyM3R2YWx1ZTQy" in str(out):
                missed.append(spelled)
    assert missed == []


_DIGIT_SCRIPTS = [0x0660, 0x06F0, 0x0966, 0x09E6, 0x0E50, 0xFF10, 0x1D7CE]


@pytest.mark.parametrize("zero", _DIGIT_SCRIPTS, ids=hex)
def test_personal_data_in_digits_of_another_script_is_tokenized(zero: int) -> None:
    """The detectors' ``\\d`` takes any decimal digit; the string test before them looked for
    0-9 only, so a phone number written in Arabic-Indic (or Devanagari, fullwidth, ...)
    digits, with no ASCII digit beside it, was stored as given. (The card's check and the
    IP's parser take ASCII digits only, and the IBAN's pattern after its check digits.)"""
    from tachograph.record.seal import process_payload

    def spelled(text: str) -> str:
        return "".join(chr(zero + int(c)) if c.isdigit() else c for c in text)

    for text in (spelled("+44 20 7946 0958"), spelled("(555) 123-4567")):
        # the pattern and its check alone find it ...
        assert POLICY._engine.pattern.sub(POLICY._replace, text) != text, text
        for out in (
            POLICY("tool.completed", {"result": f"call {text}"}),
            process_payload((POLICY,), "tool.completed", {"result": f"call {text}"}),
        ):
            # ... and so does the policy: a token in place of the number
            assert text not in out["result"], (text, out)
            assert "pii1:" in out["result"], (text, out)


_NAMES = st.sampled_from(
    ["password", "passcode", "secret", "api_key", "apikey", "token", "session_token",
     "signature", "authorization", "bearer", "sk-", "SK-", "xoxb-", "hf_"]
)  # fmt: skip
_FOLDED = st.sampled_from(["\u017f", "\u0131", "\u0130", "\u212a", "s", "i", "k", "S", "I", "K"])


@st.composite
def _folded_secret(draw: st.DrawFn) -> str:
    """A secret's name with letters spelled in any case or as a letter ``(?i)`` folds,
    then a separator and a value, among random text."""
    name = list(draw(_NAMES))
    for i in draw(st.lists(st.integers(0, len(name) - 1), max_size=3)):
        if name[i].lower() in "sik":
            name[i] = draw(_FOLDED)
    sep = draw(st.sampled_from(["=", ": ", " = ", '": "', " ", " basic "]))
    value = draw(st.sampled_from(["s3cr3tvalue42", "abcdefghijklmnopqrstu1234", "dXNlcjpwYXNz"]))
    return draw(st.text(max_size=3)) + "".join(name) + sep + value + draw(st.text(max_size=3))


@settings(max_examples=600, deadline=None)
@given(_folded_secret())
def test_whatever_the_patterns_alone_redact_the_redactor_redacts(text: str) -> None:
    """The reference is the combined pattern without any hint test: wherever it changes a
    string, the redactor (its whole-payload test, then its string test) changes it the same
    way, and so does the recorder's test before it."""
    from tachograph.record.seal import process_payload

    redactor = Redactor()
    expected = redactor._engine.pattern.sub(redactor._replace, text)
    cases = (({"x": text}, {"x": expected}), ({"a": [{"b": text}]}, {"a": [{"b": expected}]}))
    for payload, want in cases:
        assert redactor("tool.completed", payload) == want, text
        assert process_payload((redactor,), "tool.completed", payload) == want, text


@pytest.mark.skipif(
    NATIVE is None,
    reason="the compiled helpers are not built here",
)
def test_a_redactor_pickled_where_the_compiled_helpers_are_built_works_where_they_are_not(
    tmp_path: Path,
) -> None:
    """A redactor is pickled as its fields: what it compiled (its words filed for the
    compiled helpers) is rebuilt where it is loaded. It had been pickled whole, and one
    loaded in a process without the helpers failed an assertion on its first payload."""
    import pickle
    import subprocess
    import sys

    import orjson

    redactors = [
        Redactor(),
        pii_policy(KEY, rules=[Rule("$.args.note", "redact", types=("tool.requested",))]),
    ]
    payloads = [
        {"tool": "t", "args": {"i": 1}},
        {"tool": "t", "args": {"note": "x", "q": "password=hunter2xyz", "to": EMAIL}},
    ]
    for r in redactors:
        assert pickle.loads(pickle.dumps(r)) == r
    path = tmp_path / "redactors.pickle"
    path.write_bytes(pickle.dumps(redactors))
    code = (
        "import pickle, sys, orjson\n"
        "from tachograph.record.compiled import NATIVE\n"
        "assert NATIVE is None\n"
        f"rs = pickle.loads(open({str(path)!r}, 'rb').read())\n"
        f"ps = orjson.loads({orjson.dumps(payloads).decode()!r})\n"
        "sys.stdout.buffer.write(orjson.dumps([r('tool.requested', p) for r in rs for p in ps]))\n"
    )
    env = {**__import__("os").environ, "TACHOGRAPH_PURE_PYTHON": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()
    expected = [r("tool.requested", p) for r in redactors for p in payloads]
    loaded = orjson.loads(done.stdout)
    assert loaded == expected
    assert "hunter2xyz" not in done.stdout.decode()
    assert EMAIL not in str(loaded[-1])


def test_a_redactor_subclass_pickles_with_its_own_state() -> None:
    """Pickled as its state without what it compiled: a subclass with fields of its own, or
    with an ``__init__`` of another shape, loads as it was."""
    import dataclasses
    import pickle

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Tagged(Redactor):
        tag: int = 7

    class Wrapped(Redactor):
        def __init__(self, label: str) -> None:
            super().__init__()
            object.__setattr__(self, "label", label)

    globals()["Tagged"], globals()["Wrapped"] = Tagged, Wrapped  # importable by name
    Tagged.__qualname__, Wrapped.__qualname__ = "Tagged", "Wrapped"
    try:
        tagged = pickle.loads(pickle.dumps(Tagged(tag=3)))
        assert tagged.tag == 3
        assert tagged("t", {"password": "x"}) == {"password": "[redacted:secret:field]"}
        wrapped = pickle.loads(pickle.dumps(Wrapped("w")))
        assert wrapped.label == "w"  # type: ignore[attr-defined]
        redacted = wrapped("t", {"q": "password=abcdef"})
        assert redacted == {"q": "password=[redacted:secret:password]"}
    finally:
        del globals()["Tagged"], globals()["Wrapped"]


@pytest.mark.parametrize(
    "address", ["dead:beef::cafe", "::a", "abc::def", "fe:ed:fa:ce:ca:fe:be:ef", "::"]
)
def test_an_ipv6_address_without_a_digit_is_tokenized(address: str) -> None:
    """The IP detector has no hints, so a string was searched only when it held a digit;
    an IPv6 address can be written in the letters a to f alone."""
    expected = POLICY._engine.pattern.sub(POLICY._replace, f"from {address} now")
    for out in (
        POLICY("tool.completed", {"r": f"from {address} now"}),
        {"r": next(iter(POLICY("tool.completed", {f"from {address} now": 1})))},
    ):
        assert out["r"] == expected
    if address != "::":  # the unspecified address: no token, as with digits
        assert "pii1:" in expected


@pytest.mark.parametrize(
    "key",
    [
        "AP\u0130_KEY",
        "AUTHOR\u0130ZAT\u0130ON",
        "PR\u0130VATE_KEY",
        "pa\u017fsword",
        "ap\u0131_key",
    ],
)
def test_a_secret_field_named_with_a_letter_the_patterns_fold_is_redacted(key: str) -> None:
    """A Turkish upper-casing writes "API_KEY" as "AP\u0130_KEY"; ``str.lower()`` does not
    make it "api_key", but the patterns take it for one, and so does the field rule now."""
    from tachograph.record.seal import process_payload

    payload = {"headers": {key: "s3cr3tvalue42"}}
    for out in (
        Redactor()("tool.requested", payload),
        process_payload((Redactor(),), "tool.requested", payload),
    ):
        assert out == {"headers": {key: "[redacted:secret:field]"}}


def _stream(*pieces: str, choice: int = 0) -> dict[str, Any]:
    """A streamed chat answer as the SDK integrations record it: one event a delta."""
    events: list[dict[str, Any]] = [
        {"data": {"choices": [{"index": choice, "delta": {"content": piece}}], "id": "c1"}}
        for piece in pieces
    ]
    events.append({"data": "[DONE]"})
    return {"response": {"status": 200, "headers": {}, "events": events}}


def _text_of(payload: dict[str, Any]) -> str:
    return "".join(
        e["data"]["choices"][0]["delta"]["content"]
        for e in payload["response"]["events"]
        if isinstance(e["data"], dict)
    )


def test_a_secret_streamed_in_pieces_is_redacted_across_them() -> None:
    # each delta alone holds nothing a detector takes: "sk", "-proj", "-AbC..."
    pieces = ("Your key is ", " sk", "-proj", "-CANARYopenai", "A" * 20, " ok")
    payload = _stream(*pieces)
    out = redact_secrets("model.response", payload)
    assert "CANARY" not in orjson.dumps(out).decode()
    assert _text_of(out) == "Your key is  [redacted:secret:openai] ok"
    assert _text_of(payload) == "".join(pieces)  # the input is untouched
    assert len(out["response"]["events"]) == len(payload["response"]["events"])


def test_personal_data_streamed_in_pieces_becomes_its_token() -> None:
    payload = _stream("write to ", "canary", ".person", "@", "example", ".com", " today")
    out = POLICY("model.response", payload)
    assert _text_of(out) == f"write to {KEY.token('canary.person@example.com')} today"
    assert "canary" not in orjson.dumps(out).decode()


def _deltas_of(payload: dict[str, Any]) -> list[str]:
    return [
        e["data"]["choices"][0]["delta"]["content"]
        for e in payload["response"]["events"]
        if isinstance(e["data"], dict)
    ]


def test_a_secret_whose_first_piece_is_a_whole_match_leaves_no_tail() -> None:
    """The first delta alone matches (an OpenAI key is 20 characters on); redacted alone
    first, it hid the rest of the key, which the next delta kept in clear."""
    key = "sk-proj-ABCDEFGHIJKLMNOPQRSTUV" + "WXYZ0123CANARYTAIL"
    payload = _stream("my key " + key[:30], key[30:], " ok")
    out = redact_secrets("model.response", payload)
    assert "CANARY" not in orjson.dumps(out).decode()
    assert "WXYZ" not in orjson.dumps(out).decode()
    # the marker whole, in the delta the key began in; nothing of the key after it
    assert _deltas_of(out) == ["my key [redacted:secret:openai]", "", " ok"]


def test_an_address_split_after_a_whole_match_gets_the_token_of_the_whole() -> None:
    payload = _stream("mail canary.person@example.co", "m now")
    out = POLICY("model.response", payload)
    assert _deltas_of(out) == [f"mail {KEY.token('canary.person@example.com')}", " now"]


def test_a_marker_is_never_cut_across_deltas() -> None:
    payload = _stream('{"pass', 'word": "hunter22', '"}')
    out = redact_secrets("model.response", payload)
    assert _deltas_of(out) == ['{"password": "[redacted:secret:password]', "", '"}']


def test_a_stream_with_nothing_to_redact_is_the_same_object() -> None:
    payload = _stream("Hello", "! How", " can I help?")
    assert redact_secrets("model.response", payload) is payload
    assert POLICY("model.response", payload) is payload


def test_percent_encoded_personal_data_and_secrets_are_found() -> None:
    # httpx writes params={"email": ...} as email=...%40...; the detectors saw no "@"
    url = "GET http://h/customers?email=canary.person%40example.com&phone=%2B44+20+7946+0958"
    out = POLICY("external.read", {"key": url})
    assert out["key"] == (
        f"GET http://h/customers?email={KEY.token('canary.person@example.com')}"
        f"&phone={POLICY('x', {'p': '+44 20 7946 0958'})['p']}"
    )
    form = redact_secrets("tool.requested", {"body": "user=bob&password%3Dhunter2xyz"})
    assert form["body"] == "user=bob&password=[redacted:secret:password]"
    plain = {"url": "https://api.example.com/v1?page=2&q=50%25+off"}
    assert POLICY("tool.requested", plain) == plain  # nothing found: kept as written


def test_a_private_key_cut_before_its_end_line_is_redacted() -> None:
    # an answer stopped by its token limit, a truncated log line: no END line
    cut = "here it is:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0CANARYkeymaterial"
    out = redact_secrets("model.response", {"text": cut})
    assert out["text"] == "here it is:\n[redacted:secret:private_key]"
    whole = "a -----BEGIN PRIVATE KEY-----\nMIIabc\n-----END PRIVATE KEY----- b"
    assert redact_secrets("x", {"t": whole})["t"] == "a [redacted:secret:private_key] b"


def test_a_url_password_holding_an_at_sign_is_redacted_whole() -> None:
    out = redact_secrets("x", {"u": "https://bob:p@CANARYss@host/x and a@b.com"})
    assert out["u"] == "https://bob:[redacted:secret:url_password]@host/x and a@b.com"


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        # in an Authorization header whatever follows is the credential, however short
        ("Authorization: Bearer ab", "Authorization: Bearer [redacted:secret:bearer]"),
        (
            "curl -H 'authorization: bearer x1'",
            "curl -H 'authorization: bearer [redacted:secret:bearer]'",
        ),
        ('{"Authorization":"Bearer tok"}', '{"Authorization":"Bearer [redacted:secret:bearer]"}'),
        # the whole credential, up to a space, a quote or a query's separator
        (
            'curl -H "Authorization: Bearer app1:s3cr3tPW"',
            'curl -H "Authorization: Bearer [redacted:secret:bearer]"',
        ),
        ("Authorization: Bearer abc%21def", "Authorization: Bearer [redacted:secret:bearer]"),
        ("authorization=bearer x1&y=2", "authorization=bearer [redacted:secret:bearer]&y=2"),
        (
            'curl -d "{\\"Authorization\\": \\"Bearer tok\\"}"',
            'curl -d "{\\"Authorization\\": \\"Bearer [redacted:secret:bearer]\\"}"',
        ),
        # elsewhere 6 to 11 characters with a digit are a token too
        ("then Bearer abc123, done", "then Bearer [redacted:secret:bearer], done"),
        ("Bearer 12345678==", "Bearer [redacted:secret:bearer]"),
        ("Bearer abcdefghijkl0123", "Bearer [redacted:secret:bearer]"),
        # a period that ends the token ends the sentence, and stays after the marker
        ("Send Bearer abc123.", "Send Bearer [redacted:secret:bearer]."),
        ("Send Bearer abcdefghijkl0123...", "Send Bearer [redacted:secret:bearer]..."),
        ("Authorization: Bearer tok.", "Authorization: Bearer [redacted:secret:bearer]."),
        # a period inside it is the token's (a JWT's are)
        ("Bearer abc.123x and", "Bearer [redacted:secret:bearer] and"),
        ("Bearer ab.cdefghijkl.0123.", "Bearer [redacted:secret:bearer]."),
        ("Authorization: Bearer a.b", "Authorization: Bearer [redacted:secret:bearer]"),
        # prose stays prose
        ("bearer tokens expire", "bearer tokens expire"),
        ("a Bearer abc12 here", "a Bearer abc12 here"),
        ("Bearer shorty", "Bearer shorty"),
    ],
)
def test_short_bearer_tokens_are_found_where_they_cannot_be_prose(text: str, redacted: str) -> None:
    assert redact_secrets.redact_text(text) == redacted
    assert redact_secrets("note", {"t": text}) == {"t": redacted}
