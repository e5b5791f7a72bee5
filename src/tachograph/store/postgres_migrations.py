"""Upgrades of the PostgreSQL schema of :mod:`tachograph.store.postgres_schema` in place.

``meta.schema_version`` says which version a database holds. :func:`upgrade` runs the
migrations from there to :data:`~tachograph.store.postgres_schema.SCHEMA_VERSION` in one
transaction, as the owner role, under the lock that installing takes: a database is at one
version or the next, never between. ``PostgresStore.install_schema`` upgrades a schema it
finds, and so does a store opened by a superuser with ``create=True``; a store of an older
version keeps working for the roles that may not upgrade it (what a version adds is speed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from . import postgres_schema as schema

__all__ = ["MIGRATIONS", "upgrade"]

SCHEMA = schema.SCHEMA
_log = logging.getLogger("tachograph")


def _partitions(cur: Any, table: str) -> list[str]:
    cur.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = %s::regclass ORDER BY c.relname",
        (f"{SCHEMA}.{table}",),
    )
    return [str(r[0]) for r in cur.fetchall()]


def _constraints(cur: Any, table: str, kind: str) -> list[str]:
    cur.execute(
        # conparentid 0: a foreign key to a partitioned table also has a row per partition
        "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = %s "
        "AND conparentid = 0 ORDER BY conname",
        (f"{SCHEMA}.{table}", kind),
    )
    return [str(r[0]) for r in cur.fetchall()]


_CHANGED_IN_2 = ("events_chain", "payloads_have_events", "delete_run_rows")


def _migration_2(cur: Any) -> list[str]:
    """Version 1 to 2, for appends without per-row checks. The payloads' foreign key to
    events becomes the statement trigger ``payloads_have_events``; the events' unique key
    ``(tenant, run_id, seq, type)``, which only that key used, goes; the unique key
    ``(tenant, run_id, event_id)`` and the index ``(event_id, run_id)`` become one unique key
    ``(event_id, run_id, tenant)``; retention locks the run's summary row before it deletes."""
    out = [f'ALTER TABLE {SCHEMA}.payloads DROP CONSTRAINT "{name}"'
           for name in _constraints(cur, "payloads", "f")]  # fmt: skip
    out += [f'ALTER TABLE {SCHEMA}.events DROP CONSTRAINT "{name}"'
            for name in _constraints(cur, "events", "u")]  # fmt: skip
    out += [
        f"DROP INDEX IF EXISTS {SCHEMA}.events_event_id",
        f"ALTER TABLE {SCHEMA}.events ADD CONSTRAINT events_event_id "
        "UNIQUE (event_id, run_id, tenant)",
    ]
    out += schema.function_sql(*_CHANGED_IN_2)
    out += schema.statement_triggers("payloads", _partitions(cur, "payloads"))
    return out


def _migration_3(cur: Any) -> list[str]:
    """Version 2 to 3: one actor's runs newest first by index (``tacho runs --actor NAME``
    read every run summary: 9 ms for an actor with one run among 100,000, growing with the
    store). A run's actor and start never change: one entry a run, written once."""
    return [
        f"CREATE INDEX IF NOT EXISTS runs_actor_started ON {SCHEMA}.runs "
        "(actor, started_at DESC, run_id)"
    ]


def _migration_4(cur: Any) -> list[str]:
    """Version 3 to 4: the store audit's records of one action in seq order by index
    (``audit_of``, which verification asks for a tenant whose sealed runs retention deleted,
    read the whole audit, which every audited read lengthens)."""
    return [f"CREATE INDEX IF NOT EXISTS store_audit_action ON {SCHEMA}.store_audit (action, seq)"]


def _migration_5(cur: Any) -> list[str]:
    """Version 4 to 5: the runs of one status newest first by index (``tacho runs --status
    error``, or ``unfinished``, read every run summary). An append leaves the status as it
    is until a run.finished changes it, so the entry moves once a run."""
    return [
        f"CREATE INDEX IF NOT EXISTS runs_status_started ON {SCHEMA}.runs "
        "(status, started_at DESC, run_id)"
    ]


def _migration_6(cur: Any) -> list[str]:
    """Version 5 to 6: a data subject's erasure removes the subject's links (the link names
    the person) through ``unlink_subject``, which only the privacy role may call; the
    append-only trigger of ``subjects`` lets such a deletion through, and, as for an erasure,
    it commits only beside a record of the store audit (``erasure_audited``)."""
    out = schema.function_sql("refuse_but_retention", "unlink_subject")
    out += schema.audited_triggers("subjects", _partitions(cur, "subjects"))
    signature = f"{SCHEMA}.unlink_subject(text, text, bigint[])"
    out += [
        f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC",
        f"GRANT EXECUTE ON FUNCTION {signature} TO {schema.PRIVACY}",
    ]
    return out


# Version 7's bindings: every login that may use the schema (a member of the writer, reader or
# privacy role, not of tachograph_all_tenants, not a superuser) to every tenant the store
# holds, which is what it could reach before.
_EXISTING_LOGINS = f"""
SELECT r.rolname::text, t.tenant FROM pg_roles r, (
    SELECT tenant FROM {SCHEMA}.runs UNION SELECT tenant FROM {SCHEMA}.deleted_runs
    UNION SELECT tenant FROM {SCHEMA}.seals UNION SELECT tenant FROM {SCHEMA}.checkpoints
    UNION SELECT tenant FROM {SCHEMA}.store_audit) t
WHERE r.rolcanlogin AND NOT r.rolsuper AND t.tenant NOT IN ('', '*')
  AND (pg_has_role(r.oid, '{schema.WRITER}', 'MEMBER')
       OR pg_has_role(r.oid, '{schema.READER}', 'MEMBER')
       OR pg_has_role(r.oid, '{schema.PRIVACY}', 'MEMBER'))
  AND NOT pg_has_role(r.oid, '{schema.ALL_TENANTS}', 'MEMBER')
ORDER BY 1, 2
"""


def _migration_7(cur: Any) -> list[str]:
    """Version 6 to 7: the database binds logins to tenants. ``tenant_logins`` says which
    tenants each login may act for and ``may_act_for`` reads it (or membership of
    ``tachograph_all_tenants``); the tenant policies of every table and partition, and every
    SECURITY DEFINER function that acts in the transaction's tenant (``one_tenant``), require
    it, so that a login setting another tenant sees and changes nothing there. A login
    without ``tachograph_privacy`` records reads only in the audit; ``read_policy`` shows a
    login its own tenants' rules; ``run_deleted`` is the definer functions' alone.

    Every existing login of the writer, reader or privacy roles is bound to every tenant the
    store holds (what it could reach before; logged): narrow them with
    ``PostgresStore.revoke_login``."""
    out = schema.logins_table_sql()
    out += schema.function_sql(
        "may_act_for",
        "login_tenants",
        "tenant_visible",
        "one_tenant",
        "audit_append",
        "erasure_audited",
    )
    for table in (*schema.RUN_TABLES, *schema.TENANT_TABLES, *schema.STORE_TABLES):
        for name in (table, *_partitions(cur, table)):
            out += schema.tenant_policies(name, replace=True)
    out += schema.read_policy_security()
    out.append(f"REVOKE ALL ON FUNCTION {SCHEMA}.run_deleted(text, text) FROM PUBLIC")
    cur.execute(_EXISTING_LOGINS)
    bound: dict[str, list[str]] = {}
    for role, tenant in cur.fetchall():
        bound.setdefault(str(role), []).append(str(tenant))
    if bound:
        _log.warning(
            "tachograph schema version 7 binds logins to tenants; each existing login is "
            "bound to every tenant the store holds, as it could reach them before: %s. "
            "Narrow each with PostgresStore.revoke_login(ADMIN_URL, LOGIN, tenants=[...])",
            "; ".join(f"{role} -> {', '.join(tenants)}" for role, tenants in bound.items()),
        )
    out.append(
        f"INSERT INTO {SCHEMA}.{schema.LOGINS} (role, tenant) {_EXISTING_LOGINS} "
        "ON CONFLICT DO NOTHING"
    )
    return out


MIGRATIONS: dict[int, Callable[[Any], list[str]]] = {
    2: _migration_2,
    3: _migration_3,
    4: _migration_4,
    5: _migration_5,
    6: _migration_6,
    7: _migration_7,
}
"""``version -> statements`` that bring a schema of ``version - 1`` to ``version`` (given a
cursor of the owner on the database, to read what is there)."""


def upgrade(conn: Any) -> int:
    """Bring an installed schema to the current version through ``conn`` (a superuser or a
    member of the owner role), in one transaction; returns the version it was at (0 when
    there is no schema: then nothing is done). A newer schema is left as it is."""
    with conn.transaction():
        cur = conn.cursor()
        cur.execute("SELECT pg_advisory_xact_lock(hashtext('tachograph.install'))")
        cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (SCHEMA,))
        if cur.fetchone() is None:
            return 0
        cur.execute(f"SELECT value FROM {SCHEMA}.meta WHERE key = 'schema_version'")
        row = cur.fetchone()
        found = int(row[0]) if row else 1
        if found >= schema.SCHEMA_VERSION:
            return found
        cur.execute(f"SET LOCAL ROLE {schema.OWNER}")
        for version in range(found + 1, schema.SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version](cur):
                cur.execute(statement)
        cur.execute(
            f"UPDATE {SCHEMA}.meta SET value = %s WHERE key = 'schema_version'",
            (str(schema.SCHEMA_VERSION),),
        )
        cur.execute("RESET ROLE")
    return found
