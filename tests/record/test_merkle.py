"""RFC 9162 trees: the transparency-dev vectors, and proofs for random trees against a naive
recomputation written from the RFC's recursive definitions."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tachograph.record.merkle import (
    EMPTY_ROOT,
    Frontier,
    ProofError,
    SealLeaf,
    Tree,
    consistency_from_frontier,
    verify_consistency,
    verify_inclusion,
)


def _b64(value: str) -> bytes:
    return base64.b64decode(value)


def _files(vectors_dir: Path, kind: str) -> list[tuple[str, dict[str, Any]]]:
    root = vectors_dir / "merkle" / kind
    return [
        (str(p.relative_to(root)), json.loads(p.read_text())) for p in sorted(root.rglob("*.json"))
    ]


def _inclusion_ok(case: dict[str, Any]) -> bool:
    try:
        verify_inclusion(
            case["leafIdx"],
            case["treeSize"],
            _b64(case["leafHash"]),
            [_b64(p) for p in case["proof"] or []],
            _b64(case["root"]),
        )
    except ProofError:
        return False
    return True


def _consistency_ok(case: dict[str, Any]) -> bool:
    try:
        verify_consistency(
            case["size1"],
            case["size2"],
            [_b64(p) for p in case["proof"] or []],
            _b64(case["root1"]),
            _b64(case["root2"]),
        )
    except ProofError:
        return False
    return True


def test_inclusion_vectors_accept_exactly_the_valid_files(vectors_dir: Path) -> None:
    cases = _files(vectors_dir, "inclusion")
    assert len(cases) > 50
    wrong = [name for name, case in cases if _inclusion_ok(case) == case["wantErr"]]
    assert wrong == []
    assert sum(not c["wantErr"] for _, c in cases) >= 5


def test_consistency_vectors_accept_exactly_the_valid_files(vectors_dir: Path) -> None:
    cases = _files(vectors_dir, "consistency")
    assert len(cases) > 50
    wrong = [name for name, case in cases if _consistency_ok(case) == case["wantErr"]]
    assert wrong == []


# -- a naive recomputation, straight from RFC 9162 section 2.1 --------------------------------


def _h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _mth(leaves: list[bytes]) -> bytes:
    n = len(leaves)
    if n == 0:
        return _h(b"")
    if n == 1:
        return _h(b"\x00" + leaves[0])
    k = 1
    while k * 2 < n:
        k *= 2
    return _h(b"\x01" + _mth(leaves[:k]) + _mth(leaves[k:]))


def _path(m: int, leaves: list[bytes]) -> list[bytes]:
    n = len(leaves)
    if n == 1:
        return []
    k = 1
    while k * 2 < n:
        k *= 2
    if m < k:
        return [*_path(m, leaves[:k]), _mth(leaves[k:])]
    return [*_path(m - k, leaves[k:]), _mth(leaves[:k])]


def _subproof(m: int, leaves: list[bytes], complete: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if complete else [_mth(leaves)]
    k = 1
    while k * 2 < n:
        k *= 2
    if m <= k:
        return [*_subproof(m, leaves[:k], complete), _mth(leaves[k:])]
    return [*_subproof(m - k, leaves[k:], False), _mth(leaves[:k])]


@given(
    st.lists(st.binary(max_size=8), min_size=1, max_size=70),
    st.data(),
)
def test_random_trees_agree_with_the_naive_recomputation(leaves: list[bytes], data: Any) -> None:
    tree = Tree()
    for leaf in leaves:
        tree.append(leaf)
    n = len(leaves)
    size = data.draw(st.integers(1, n))
    index = data.draw(st.integers(0, size - 1))
    size1 = data.draw(st.integers(1, size))
    assert tree.root(size) == _mth(leaves[:size])
    assert tree.root(0) == EMPTY_ROOT
    path = tree.inclusion_proof(index, size)
    assert path == _path(index, leaves[:size])
    verify_inclusion(index, size, _h(b"\x00" + leaves[index]), path, _mth(leaves[:size]))
    proof = tree.consistency_proof(size1, size)
    assert proof == _subproof(size1, leaves[:size], True)
    verify_consistency(size1, size, proof, _mth(leaves[:size1]), _mth(leaves[:size]))
    frontier = tree.frontier(size1).append_hashes(_h(b"\x00" + leaf) for leaf in leaves[size1:size])
    assert frontier == tree.frontier(size)
    assert frontier.root() == _mth(leaves[:size])
    assert Frontier.decode(frontier.encode()) == frontier
    if size1 < size:
        new = [_h(b"\x00" + leaf) for leaf in leaves[size1:size]]
        assert consistency_from_frontier(tree.frontier(size1), new) == proof
    # One flipped bit anywhere in a proof is caught.
    if path:
        bit = data.draw(st.integers(0, len(path) * 256 - 1))
        bad = [bytearray(p) for p in path]
        bad[bit // 256][bit % 256 // 8] ^= 1 << (bit % 8)
        with pytest.raises(ProofError):
            verify_inclusion(
                index,
                size,
                _h(b"\x00" + leaves[index]),
                [bytes(b) for b in bad],
                _mth(leaves[:size]),
            )
    if size1 < size and data.draw(st.booleans()):
        with pytest.raises(ProofError):
            verify_consistency(size1, size, proof, _mth(leaves[:size1]), _h(b"other"))


def test_a_seal_leaf_is_its_canonical_json() -> None:
    leaf = SealLeaf("default", "run-1", 7, "sha256:" + "ab" * 32, True)
    raw = leaf.to_bytes()
    assert raw == (
        b'{"final":true,"hash":"sha256:' + b"ab" * 32 + b'","run_id":"run-1","seq":7,'
        b'"tenant":"default"}'
    )
    assert SealLeaf.from_bytes(raw) == leaf
    for bad in (b'{"final":true}', raw.replace(b":7,", b":7.5,"), b" " + raw, b"[1]"):
        with pytest.raises(ProofError):
            SealLeaf.from_bytes(bad)


_LEAF_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@given(_LEAF_TEXT, _LEAF_TEXT, st.integers(0, 2**53 - 1), _LEAF_TEXT, st.booleans())
def test_a_seal_leaf_has_the_bytes_of_sorted_compact_json(
    tenant: str, run_id: str, seq: int, hash_: str, final: bool
) -> None:
    # the leaves already in seal logs were written as sorted compact JSON: the same bytes
    leaf = SealLeaf(tenant, run_id, seq, hash_, final)
    body = {"tenant": tenant, "run_id": run_id, "seq": seq, "hash": hash_, "final": final}
    expected = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert leaf.to_bytes() == expected.encode()
    assert SealLeaf.from_bytes(leaf.to_bytes()) == leaf


@pytest.mark.parametrize(
    "raw",
    [
        b'{"final":true,"hash":"h","run_id":"r","seq":9007199254740992,"tenant":"t"}',
        b'{"final":true,"hash":"\\ud800","run_id":"r","seq":1,"tenant":"t"}',
        b'{"final":true,"hash":"h","run_id":"r","seq":1,"seq":1,"tenant":"t"}',
        b'{"final":true,"hash":"\\u0068","run_id":"r","seq":1,"tenant":"t"}',
        b'{"final":true,"hash":"h","run_id":"r","seq":NaN,"tenant":"t"}',
        b'{"final":true,"hash":"h","run_id":"r","seq":1,"tenant":"t"}\n',
        b"\xff",
    ],
)
def test_a_seal_leaf_that_is_not_its_own_canonical_form_is_a_proof_error(raw: bytes) -> None:
    with pytest.raises(ProofError):
        SealLeaf.from_bytes(raw)
