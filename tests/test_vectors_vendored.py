"""The vendored golden vectors are exactly the normative ones in ``../shared/vectors``."""

from __future__ import annotations

from pathlib import Path

import pytest

VECTORS_DIR = Path(__file__).resolve().parent / "vectors"
SHARED_VECTORS_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "vectors"

# Files the repository adds beside the vendored data: the licence of the JCS test data, which
# the shared folder states only in its README.
VENDORED_EXTRAS = {"jcs/LICENSE", "jcs/NOTICE"}


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_vendored_vectors_are_present_with_their_licences() -> None:
    files = _files(VECTORS_DIR)
    assert "README.md" in files
    assert "events/refund_run.jsonl" in files
    assert b"Apache License" in files["jcs/LICENSE"]
    assert b"Apache License" in files["merkle/LICENSE"]


@pytest.mark.skipif(
    not (SHARED_VECTORS_DIR / "README.md").is_file(), reason="no ../shared/vectors beside the clone"
)
def test_vendored_vectors_equal_the_shared_ones_byte_for_byte() -> None:
    shared = _files(SHARED_VECTORS_DIR)
    vendored = _files(VECTORS_DIR)
    assert sorted(set(vendored) - set(shared)) == sorted(VENDORED_EXTRAS)
    assert sorted(set(shared) - set(vendored)) == []
    differing = sorted(name for name, data in shared.items() if vendored[name] != data)
    assert differing == []
