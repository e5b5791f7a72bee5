"""A redactor looks up the short strings it left as they were instead of running its
detectors on them again: a run repeats most of its strings (its keys, a model id, a tool's
name). The table must never change an answer: a string with personal data or a secret is
redacted every time it comes, a subclass's own answers stay its own, and the table stays
bounded."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tachograph.privacy import KeyRing, Redactor, pii_policy
from tachograph.privacy import redactor as redactor_module

from .planted import CARD, EMAIL, IBAN, IP, JWT, KEY, OPENAI, PHONE, STRIPE

SENSITIVE = [EMAIL, CARD, IBAN, PHONE, IP, JWT, OPENAI, STRIPE, "password=hunter22"]
PLAIN = ["role", "content", "claude-sonnet-4-5-20250929", "order A-1001", "12:30:45", "end_turn"]


def _fresh() -> Redactor:
    return pii_policy(KEY)


def _payload(texts: list[str]) -> dict[str, Any]:
    # each text as a value and as a key, and inside a list
    return {"values": {f"k{i}": t for i, t in enumerate(texts)}, "keys": dict.fromkeys(texts, 1),
            "list": list(texts)}  # fmt: skip


def test_a_repeated_string_is_redacted_as_the_first_time() -> None:
    texts = SENSITIVE + PLAIN
    warm = _fresh()
    first = warm("tool.completed", _payload(texts))
    for _ in range(3):
        assert warm("tool.completed", _payload(texts)) == first
    # and as a redactor that never saw them answers
    assert _fresh()("tool.completed", _payload(texts)) == first
    for text in SENSITIVE:
        assert text not in repr(first)


def test_only_strings_left_as_they_were_are_held() -> None:
    warm = _fresh()
    warm("tool.completed", _payload(SENSITIVE + PLAIN))
    held = set(warm._unchanged)
    assert set(PLAIN) <= held
    assert not held & set(SENSITIVE)


def test_a_held_string_skips_the_detectors(monkeypatch: Any) -> None:
    warm = _fresh()
    warm("tool.completed", _payload(PLAIN))
    asked: list[str] = []
    engine = warm._engine
    maybe = type(engine).maybe

    def counting(self: Any, text: str) -> bool:
        asked.append(text)
        return maybe(self, text)

    monkeypatch.setattr(type(engine), "maybe", counting)
    warm("tool.completed", _payload([*PLAIN, EMAIL]))
    # the plain strings were looked up; the e-mail and the key names new to this payload
    # ("k6") went through the detectors
    assert EMAIL in asked
    assert not set(asked) & set(PLAIN)


def test_the_table_is_bounded() -> None:
    warm = _fresh()
    long = "x" * (redactor_module._UNCHANGED_CHARS + 1)
    warm("tool.completed", {"long": long})
    assert long not in warm._unchanged
    limit = redactor_module._UNCHANGED_MAX
    for start in range(0, limit + 1_000, 500):
        warm("tool.completed", {f"w{i}": f"v{i}" for i in range(start, start + 500)})
        assert len(warm._unchanged) <= limit


class _Allowing(Redactor):
    """A redactor whose token() keeps one address as it is (an allow-list)."""

    def token(self, value: str) -> str:
        return EMAIL if value == EMAIL.lower() else super().token(value)


def test_a_subclass_s_answers_are_its_own() -> None:
    allowing = _Allowing(keyring=KEY, kinds=frozenset({"email"}))
    plain = Redactor(keyring=KEY, kinds=frozenset({"email"}))
    assert allowing("tool.completed", {"to": EMAIL}) == {"to": EMAIL}
    assert allowing("tool.completed", {"to": EMAIL}) == {"to": EMAIL}
    redacted = plain("tool.completed", {"to": EMAIL})
    assert redacted["to"] != EMAIL
    assert EMAIL in allowing._unchanged
    assert EMAIL not in plain._unchanged


def test_a_pinned_or_loaded_redactor_starts_its_own_table() -> None:
    import pickle

    ring = KeyRing(current="t2", keys={"t2": b"\x02" * 32, **KEY.keys})
    warm = pii_policy(ring)
    warm("tool.completed", {"k": "plain"})
    pinned = warm.pinned(next(iter(KEY.keys)))
    loaded = pickle.loads(pickle.dumps(warm))
    for other in (pinned, loaded):
        assert other._unchanged == {}
        assert other("tool.completed", {"to": EMAIL}) != {"to": EMAIL}


_pieces = st.sampled_from([*SENSITIVE, *PLAIN, " ", "-", "@", "1", "+44", "x"])
_strings = st.lists(_pieces, max_size=4).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(_strings, min_size=1, max_size=6), st.lists(_strings, max_size=6))
def test_warm_answers_equal_cold_ones(seen: list[str], asked: list[str]) -> None:
    warm = _fresh()
    warm("model.response", _payload(seen))
    warm("model.response", _payload(asked))
    assert warm("model.response", _payload(asked)) == _fresh()("model.response", _payload(asked))
