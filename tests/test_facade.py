"""The public facade: ``tachograph.__all__`` is sorted, complete and true (as httpx checks)."""

from __future__ import annotations
import __future__

import types

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
