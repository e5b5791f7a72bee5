"""A store opened with ``?tenant=T``: what is recorded into it is of tenant T without naming
it, reads through it default to T, and naming another tenant is a clear error.

The PostgreSQL tests connect as a login role that is neither superuser nor BYPASSRLS (row-level
security holds it to the tenant it sets), except the one that shows a superuser's connection,
which row-level security does not hold, is confined by the store all the same.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tachograph
from tachograph.capture.agent import release_store
from tachograph.demo import agent as demo_agent
from tachograph.errors import RunNotFound, StoreError
from tachograph.lifecycle.purpose import scoped
from tachograph.record.jsonl import verify_jsonl
from tachograph.store import MemoryStore, SQLiteStore, open_store
from tachograph.testing import build_run

from .conftest import TENANT_ROLE, PgCluster

TASK = "Order A-4471 arrived damaged. Please refund it."


@pytest.fixture
def open_url(pg_cluster: PgCluster, pg_database: str) -> Iterator[Any]:
    opened: list[Any] = []

    def opener(role: str, query: str = "") -> Any:
        store = open_store(pg_cluster.url(pg_database, role) + query, create=False)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        release_store(store)


def _record_all_ways(store: Any) -> list[str]:
    """A run of each recording style, none naming a tenant."""
    with tachograph.record(store, actor="ctx", input=1) as run:
        run.output = 2
    agent = tachograph.agent(name="decorated")(lambda text: text.upper())
    decorated = tachograph.record_run(agent, "hi", store=store)
    billing = tachograph.record_run(demo_agent.billing_agent, TASK, store=store)
    return [run.run_id, decorated.run_id, billing.run_id]


def _read_back(store: Any, run_ids: list[str], tenant: str) -> None:
    """Every read through the same store, none naming a tenant."""
    for run_id in run_ids:
        assert store.run_info(run_id).tenant == tenant
        assert {e.tenant for e in store.read(run_id)} == {tenant}
        assert store.verify(run_id).ok
        copy = io.BytesIO()
        assert tachograph.export_run(store, run_id, copy) == store.run_info(run_id).events
        path_ok = verify_jsonl(io.BytesIO(copy.getvalue()))[0]
        assert path_ok.ok
        assert path_ok.tenant == tenant
    listed = store.runs()
    assert set(run_ids) <= {i.run_id for i in listed}
    assert {i.tenant for i in listed} == {tenant}
    assert tachograph.replay(store, run_ids[2], demo_agent.billing_agent).reproduced
    fork = tachograph.fork(store, run_ids[2], 3, demo_agent.billing_agent)
    assert fork.new_run_id is not None
    assert store.run_info(fork.new_run_id).tenant == tenant
    assert store.verify(fork.new_run_id).ok
    # a crashed run (no run.finished), resumed through the same store
    crashed = tachograph.record(store, actor="crashy", input="abc").start()
    crashed.session.deactivate()
    crashed.flush()
    resumed = tachograph.resume(store, crashed.run_id, lambda text: text.upper())
    assert resumed.final_status == "ok", resumed.render()
    info = store.run_info(crashed.run_id)
    assert (info.tenant, info.status) == (tenant, "ok")
    assert store.verify(crashed.run_id).ok


def test_a_run_recorded_through_a_tenant_url_is_of_that_tenant(open_url: Any) -> None:
    store = open_url(TENANT_ROLE, "?tenant=acme")
    run_ids = _record_all_ways(store)
    _read_back(store, run_ids, "acme")
    # and through a new connection with the same URL
    _read_back(open_url(TENANT_ROLE, "?tenant=acme"), run_ids, "acme")
    assert open_url(TENANT_ROLE, "?tenant=globex").runs() == []


def test_another_tenant_than_the_stores_is_a_clear_error(open_url: Any) -> None:
    store = open_url(TENANT_ROLE, "?tenant=acme")
    with tachograph.record(store, actor="ctx", input=1) as run:
        run.output = 2
    before = store.count_events()
    confined = "confined to tenant 'acme'"
    with (
        pytest.raises(StoreError, match=confined) as caught,
        tachograph.record(store, actor="ctx", input=1, tenant="globex"),
    ):
        pass  # pragma: no cover - refused before the block
    assert (caught.value.expected, caught.value.actual) == ("acme", "globex")
    with pytest.raises(StoreError, match=confined):
        tachograph.record_run(demo_agent.billing_agent, TASK, store=store, tenant="globex")
    with pytest.raises(StoreError, match=confined):
        store.append(build_run("other", 2, tenant="globex"))  # not a row-level security error
    with pytest.raises(StoreError, match=confined):
        store.run_info(run.run_id, tenant="globex")
    with pytest.raises(StoreError, match=confined):
        list(store.read(run.run_id, tenant="globex"))
    with pytest.raises(StoreError, match=confined):
        store.runs(tenant="globex")
    assert store.count_events() == before
    # naming the store's own tenant is the same as naming none
    with tachograph.record(store, actor="ctx", input=1, tenant="acme") as named:
        named.output = 3
    assert store.run_info(named.run_id, tenant="acme").tenant == "acme"


def test_a_superusers_tenant_url_is_confined_too(open_url: Any) -> None:
    # row-level security does not hold a superuser: the store must not write or read
    # another tenant through a URL that names one
    other = open_url("postgres")
    with tachograph.record(other, actor="ctx", input=1, tenant="globex") as elsewhere:
        elsewhere.output = 0
    store = open_url("postgres", "?tenant=acme")
    run_ids = _record_all_ways(store)
    _read_back(store, run_ids, "acme")
    assert other.run_info(elsewhere.run_id).tenant == "globex"
    assert elsewhere.run_id not in {i.run_id for i in store.runs()}
    assert {t for t, _ in store.run_keys()} == {"acme"}
    assert store.count_events() == sum(i.events for i in store.runs())
    with pytest.raises(StoreError, match="confined to tenant 'acme'"):
        store.run_info(elsewhere.run_id, tenant="globex")
    with pytest.raises(StoreError, match="confined to tenant 'acme'"):
        store.append(build_run("other", 2, tenant="globex"))


def _unknown_ids_name_nothing_of_another_tenant(store: Any) -> None:
    """``store`` is confined to tenant acme, which holds ``refund-0043``; tenant globex holds
    ``refund-0042``. An id it does not hold, whether globex holds it or not, is not found
    with close matches from acme alone, and no other tenant is named: the error of a store
    confined to one tenant is no window on the others."""
    for asked in ("refund-004", "refund-0042", "refund-0044"):
        for lookup in (
            store.run_info,
            lambda run_id: list(store.read(run_id)),
            lambda run_id: list(store.read_rows(run_id)),
            store.verify,
        ):
            with pytest.raises(RunNotFound) as info:
                lookup(asked)
            err = info.value
            assert err.suggestions == ["refund-0043"], (asked, err)
            assert not err.tenants
            assert "globex" not in str(err)
            assert "in tenant 'acme' of" in str(err)


def _acme_and_globex(store: Any) -> None:
    store.append(build_run("refund-0042", 2, tenant="globex"))
    store.append(build_run("refund-0043", 2, tenant="acme"))


def test_a_sqlite_store_confined_to_a_tenant_suggests_none_of_anothers(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as plain:
        _acme_and_globex(plain)
        # unconfined, the same lookup in tenant acme says where the run is
        with pytest.raises(RunNotFound) as there:
            plain.run_info("refund-0042", tenant="acme")
        assert list(there.value.tenants) == ["globex"]
    with SQLiteStore(path, tenant="acme") as store:
        _unknown_ids_name_nothing_of_another_tenant(store)
    # a store seen through a purpose confined to the tenant, over one confined to none
    with SQLiteStore(path) as plain:
        _unknown_ids_name_nothing_of_another_tenant(scoped(plain, tenant="acme"))
    memory = MemoryStore()
    _acme_and_globex(memory)
    _unknown_ids_name_nothing_of_another_tenant(scoped(memory, tenant="acme"))


def test_a_postgres_store_confined_to_a_tenant_suggests_none_of_anothers(open_url: Any) -> None:
    _acme_and_globex(open_url("postgres"))
    # a superuser's connection (which row-level security does not hold) and a tenant's
    _unknown_ids_name_nothing_of_another_tenant(open_url("postgres", "?tenant=acme"))
    _unknown_ids_name_nothing_of_another_tenant(open_url(TENANT_ROLE, "?tenant=acme"))
    _unknown_ids_name_nothing_of_another_tenant(scoped(open_url("postgres"), tenant="acme"))


def test_a_sqlite_url_takes_a_tenant_scope_too(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as plain:
        plain.append(build_run("globex-run", 3, tenant="globex", status="ok"))
    url = f"sqlite:///{path}?tenant=acme"
    store = open_store(url)
    try:
        assert store.url == url
        run_ids = _record_all_ways(store)
        _read_back(store, run_ids, "acme")
        assert {t for t, _ in store.run_keys()} == {"acme"}
        with pytest.raises(StoreError, match="confined to tenant 'acme'"):
            tachograph.record_run(demo_agent.billing_agent, TASK, store=store, tenant="globex")
        with pytest.raises(StoreError, match="confined to tenant 'acme'"):
            store.run_info("globex-run", tenant="globex")
        with pytest.raises(StoreError, match="confined to tenant 'acme'"):
            store.append(build_run("other", 2, tenant="globex"))
    finally:
        release_store(store)
    with SQLiteStore(path) as plain:
        assert plain.run_info("globex-run").tenant == "globex"
        assert {plain.run_info(r).tenant for r in run_ids} == {"acme"}


def test_an_otel_import_into_a_tenant_url_is_of_that_tenant(tmp_path: Path) -> None:
    from tachograph.otel.importer import import_otlp

    golden = Path(__file__).parents[1] / "golden" / "otel" / "genai_current.json"
    with open_store(f"sqlite:///{tmp_path / 'runs.db'}?tenant=acme") as store:
        (run,) = import_otlp(store, golden).runs
        assert store.run_info(run.run_id).tenant == "acme"
        assert store.verify(run.run_id).ok
        assert import_otlp(store, golden).runs[0].skipped  # found again in the same tenant
        with pytest.raises(StoreError, match="confined to tenant 'acme'"):
            import_otlp(store, golden, tenant="globex")
