"""``tacho audit`` on a store confined to a tenant (``?tenant=T``) lists T's records alone,
and ``--tenant`` naming another tenant is refused (exit 3), as ``runs`` and every other
listing of such a store: the store audit names other tenants' runs, erase reasons and
subject tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import tachograph as tg
from tachograph.cli.app import EXIT_OK, EXIT_STORE, EXIT_USAGE, cli
from tachograph.demo.agent import billing_agent
from tachograph.errors import StoreError
from tachograph.lifecycle.audit import AuditEntry, list_audit

TASK = "Order A-4471 arrived damaged. Please refund it."


def _two_tenants(tmp_path: Path) -> Path:
    db = tmp_path / "runs.db"
    with tg.open_store(db, create=True) as store:
        for tenant in ("default", "acme"):
            run = tg.record_run(
                billing_agent, TASK, store=store, run_id=f"run-{tenant}", tenant=tenant
            )
            store.erase(
                tenant,
                run.run_id,
                [1],
                audit=AuditEntry(
                    action="erase", actor="dpo", tenant=tenant, detail={"reason": f"why-{tenant}"}
                ),
            )
        store.append_audit(AuditEntry(action="custom.other", actor="ops", tenant="default"))
    return db


def _audit(url: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--store", url, "audit", *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_a_confined_store_lists_its_own_tenants_audit_alone(tmp_path: Path) -> None:
    db = _two_tenants(tmp_path)
    acme = f"sqlite:///{db}?tenant=acme"
    code, out = _audit(acme, "--json")
    assert code == EXIT_OK, out
    records = json.loads(out)["records"]
    assert records
    assert {r["tenant"] for r in records} == {"acme"}
    assert "why-default" not in out
    assert "run-default" not in out
    assert json.loads(out)["verify"]["ok"]  # the store's one chain still verifies whole
    code, out = _audit(acme)
    assert code == EXIT_OK, out
    assert "why-acme" in out
    assert "why-default" not in out
    assert _audit(acme, "--tenant", "acme", "--json")[0] == EXIT_OK
    # another tenant is refused, as `runs --tenant` refuses it, and nothing is listed
    for argv in (("--tenant", "default"), ("--tenant", "default", "--action", "erase")):
        code, out = _audit(acme, *argv)
        assert code == EXIT_STORE, out
        assert "confined to tenant 'acme'" in out
        assert "why-default" not in out
    # an action only another tenant's records hold is unknown here
    assert _audit(acme, "--action", "custom.other")[0] == EXIT_USAGE
    # the whole store, unconfined, still lists both
    code, out = _audit(str(db), "--json")
    assert {r["tenant"] for r in json.loads(out)["records"]} == {"default", "acme"}
    assert _audit(str(db), "--action", "custom.other")[0] == EXIT_OK


def test_list_audit_is_confined_too(tmp_path: Path) -> None:
    db = _two_tenants(tmp_path)
    with tg.open_store(f"sqlite:///{db}?tenant=acme") as store:
        assert {r.tenant for r in list_audit(store)} == {"acme"}
        with pytest.raises(StoreError) as refused:
            list_audit(store, tenant="default")
        assert refused.value.expected == "acme"


def test_a_confined_stores_retention_records_are_its_own(tmp_path: Path) -> None:
    db = _two_tenants(tmp_path)
    acme = f"sqlite:///{db}?tenant=acme"
    policy = tmp_path / "retention.toml"
    policy.write_text(
        '[retention]\n[[retention.overrides]]\ntypes = ["decision"]\nfloor = "30d"\n'
        'reason = "acme sandbox"\n'
    )
    applied = CliRunner().invoke(
        cli, ["--store", acme, "retention", "apply", "--policy", str(policy)]
    )
    assert applied.exit_code == EXIT_OK, applied.output
    code, out = _audit(acme, "--action", "retention.override", "--json")
    assert code == EXIT_OK, out
    (record,) = json.loads(out)["records"]
    assert record["tenant"] == "acme"
    assert record["detail"]["reason"] == "acme sandbox"
