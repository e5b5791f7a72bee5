"""The public facade: ``tachograph.__all__`` is sorted, complete and true (as httpx checks)."""

from __future__ import annotations
import __future__

import types

import pytest

import tachograph


def test_all_is_sorted_without_duplicates() -> None:
    assert tachograph.__all__ == sorted(tachograph.__all__)
    assert len(set(tachograph.__all__)) == len(tachograph.__all__)


def test_every_name_in_all_exists_and_is_not_a_module() -> None:
    for name in tachograph.__all__:
        assert hasattr(tachograph, name), name
        assert not isinstance(getattr(tachograph, name), types.ModuleType), name


def test_every_public_name_is_exported() -> None:
    public = {
        name
        for name, value in vars(tachograph).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and not isinstance(value, __future__._Feature)  # `from __future__ import annotations`
    }
    assert sorted(public - set(tachograph.__all__)) == []


def test_version_is_exported() -> None:
    assert "__version__" in tachograph.__all__
    assert isinstance(tachograph.__version__, str)


def test_dir_lists_every_name_before_it_is_read() -> None:
    assert set(tachograph.__all__) <= set(dir(tachograph))


def test_an_unknown_name_is_an_attribute_error_that_names_it() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        tachograph.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def test_a_name_set_on_the_facade_is_kept() -> None:
    # The facade drops only the import system's binding of the subpackages tachograph.record
    # and tachograph.replay; anything else set on it (monkeypatch, a plugin) is kept.
    original = tachograph.replay
    try:
        tachograph.replay = len  # type: ignore[assignment]
        assert tachograph.replay is len
    finally:
        tachograph.replay = original
    assert tachograph.replay is original
