"""The PostgreSQL schema of :mod:`tachograph.store.postgres`, and installing it.

What the database itself enforces, whoever connects (short of a superuser):

- **Append-only.** Triggers (``ENABLE ALWAYS``, so no replication-role setting skips them)
  refuse UPDATE, DELETE and TRUNCATE of events and of the audit, and any change of a payload
  but its erasure (body and salt both set to NULL). Erasure and retention run only through
  ``SECURITY DEFINER`` functions that also write ``store_audit``.
- **The chain.** A trigger on every event insert moves the run's head by compare-and-set:
  ``seq`` must be the run's count and ``prev_hash`` its head hash, else the insert fails; the
  primary key ``(tenant, run_id, seq)`` is the backstop. Each payload has its event, in its
  run and of the same type (``payloads_have_events``, once per INSERT statement).
- **Roles.** Tables and functions belong to ``tachograph_owner`` (NOLOGIN). The writer role
  has INSERT and SELECT only (the run summary moves through the trigger); the reader SELECT;
  a login without the privacy role records reads alone in the store audit.
- **Tenants.** ``FORCE ROW LEVEL SECURITY`` on every table, keyed by the transaction-local
  setting ``tachograph.tenant``, which the client sets, and held to the tenants the session's
  login may act for (``may_act_for``: the tenants ``tenant_logins`` binds it to, or every
  tenant for a member of ``tachograph_all_tenants``). Setting another tenant shows no row,
  and writing there, erasing, deleting or recording in the audit there is refused.
- **Purposes.** ``tachograph.purpose`` is declared by the client, not bound to the login:
  the database applies the declared purpose's ``read_policy`` (reading a payload of a type it
  does not grant is an error), and the store records refused reads in the audit.
- **A schema that distributes.** Every unique key and index includes ``run_id``, no foreign
  key at all, envelopes and payloads keep their exact bytes (text and bytea, never jsonb),
  no sequence anywhere; the run-keyed tables are hash-partitioned by ``run_id``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "ALL_TENANTS",
    "LOGINS",
    "OWNER",
    "PRIVACY",
    "READER",
    "ROLES",
    "RUN_TABLES",
    "SCHEMA",
    "SCHEMA_VERSION",
    "STORE_TABLES",
    "TENANT_TABLES",
    "WRITER",
    "audited_triggers",
    "function_sql",
    "install",
    "login_sql",
    "logins_table_sql",
    "read_policy_security",
    "revoke_sql",
    "schema_sql",
    "statement_triggers",
    "tenant_policies",
]

SCHEMA = "tachograph"
SCHEMA_VERSION = 7
OWNER = "tachograph_owner"
WRITER = "tachograph_writer"
READER = "tachograph_reader"
PRIVACY = "tachograph_privacy"
ALL_TENANTS = "tachograph_all_tenants"
ROLES = (OWNER, WRITER, READER, PRIVACY, ALL_TENANTS)
"""Cluster-wide NOLOGIN roles; login roles are granted membership (see ``grant_login``)."""

RUN_TABLES = ("events", "payloads", "runs", "subjects", "deleted_runs")
"""The tables keyed (and partitioned, and distributed) by ``run_id``."""

TENANT_TABLES = ("seals", "checkpoints")
"""The seal log: per tenant, keyed and partitioned by ``tenant`` (in Citus distributed by
``tenant``, or kept as reference tables; see docs/scale.md)."""

STORE_TABLES = ("store_audit",)
"""One per store, not partitioned (in Citus a reference table)."""

LOGINS = "tenant_logins"
"""Which tenants each login may act for: the owner's alone (no other role is granted it),
small and not partitioned (in Citus a reference table)."""

_TABLES = """
CREATE TABLE tachograph.meta (key text PRIMARY KEY, value text NOT NULL);

CREATE TABLE tachograph.events (
    tenant text NOT NULL,
    run_id text NOT NULL,
    seq bigint NOT NULL,
    event_id text NOT NULL,
    ts text NOT NULL,
    type text NOT NULL,
    actor text NOT NULL,
    trace_id text,
    span_id text,
    idempotency_key text,
    model text,
    seed bigint,
    payload_digest text NOT NULL,
    prev_hash text,
    hash text NOT NULL,
    status text,  -- run.finished's status, for the run summary; not part of the envelope
    PRIMARY KEY (tenant, run_id, seq),
    -- Event ids are unique within a run. event_id leads: the append's cross-run lookup
    -- (event_id = ANY(...)) is then one index probe per id and partition, whatever the size.
    CONSTRAINT events_event_id UNIQUE (event_id, run_id, tenant)
) PARTITION BY HASH (run_id);

CREATE TABLE tachograph.payloads (
    tenant text NOT NULL,
    run_id text NOT NULL,
    seq bigint NOT NULL,
    type text NOT NULL,  -- the event's type (payloads_have_events holds it): the policy reads it
    salt text,
    body bytea,          -- the payload's JSON bytes exactly as appended
    PRIMARY KEY (tenant, run_id, seq)
    -- Each payload's event, of the same type, is checked once per statement by the trigger
    -- payloads_have_events: a foreign key probed the partitioned events row by row.
) PARTITION BY HASH (run_id);

CREATE TABLE tachograph.runs (
    tenant text NOT NULL,
    run_id text NOT NULL,
    actor text NOT NULL,
    started_at text NOT NULL,
    last_at text NOT NULL,
    events bigint NOT NULL,
    head_hash text NOT NULL,
    status text,
    PRIMARY KEY (tenant, run_id)
) PARTITION BY HASH (run_id);
CREATE INDEX runs_run_id ON tachograph.runs (run_id);
CREATE INDEX runs_started ON tachograph.runs (started_at, run_id);
CREATE INDEX runs_actor_started ON tachograph.runs (actor, started_at DESC, run_id);
CREATE INDEX runs_status_started ON tachograph.runs (status, started_at DESC, run_id);

-- The store audit: one hash chain per store (seq 0, 1, 2, ...), a small table that is not
-- per run: in Citus a reference table. ``xact`` ties a record to the transaction that wrote
-- it, so that an erasure or deletion commits only beside its record (erasure_audited).
CREATE TABLE tachograph.store_audit (
    seq bigint PRIMARY KEY,
    tenant text NOT NULL,
    ts text NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    detail bytea NOT NULL,  -- the record's detail as JSON bytes, exactly as hashed
    prev_hash text,
    hash text NOT NULL,
    db_user text NOT NULL DEFAULT session_user,  -- who the database says wrote it
    xact xid8 NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX store_audit_xact ON tachograph.store_audit (xact);
CREATE INDEX store_audit_action ON tachograph.store_audit (action, seq);

-- Events linked to data subjects (per run: keyed and partitioned by run_id).
CREATE TABLE tachograph.subjects (
    tenant text NOT NULL,
    run_id text NOT NULL,
    seq bigint NOT NULL,
    subject text NOT NULL,
    PRIMARY KEY (tenant, run_id, seq, subject)
) PARTITION BY HASH (run_id);
CREATE INDEX subjects_subject ON tachograph.subjects (tenant, subject, run_id, seq);

-- Runs deleted by retention: their ids stay taken (events_chain refuses them).
CREATE TABLE tachograph.deleted_runs (
    tenant text NOT NULL,
    run_id text NOT NULL,
    deleted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant, run_id)
) PARTITION BY HASH (run_id);

-- The seal log (SPEC section 9): per tenant, not per run, so keyed and partitioned by tenant.
CREATE TABLE tachograph.seals (
    tenant text NOT NULL,
    idx bigint NOT NULL,
    run_id text NOT NULL,
    seq bigint NOT NULL,
    leaf bytea NOT NULL,
    PRIMARY KEY (tenant, idx)
) PARTITION BY HASH (tenant);
CREATE INDEX seals_run ON tachograph.seals (tenant, run_id, idx);

CREATE TABLE tachograph.checkpoints (
    tenant text NOT NULL,
    size bigint NOT NULL,
    note text NOT NULL,
    frontier text NOT NULL,
    PRIMARY KEY (tenant, size)
) PARTITION BY HASH (tenant);

-- Which purposes may read payloads of which types; '*' matches any tenant or type.
CREATE TABLE tachograph.read_policy (
    tenant text NOT NULL DEFAULT '*',
    purpose text NOT NULL,
    type text NOT NULL DEFAULT '*',
    PRIMARY KEY (purpose, tenant, type)
);
INSERT INTO tachograph.read_policy VALUES ('*', 'default', '*');
"""

_LOGINS_TABLE = """
-- The tenants each login may act for (may_act_for), by role name: written by grant_login and
-- revoke_login as an administrator; no grant to any role but the owner, who owns it.
CREATE TABLE tachograph.tenant_logins (
    role text NOT NULL,
    tenant text NOT NULL CHECK (tenant NOT IN ('', '*')),
    PRIMARY KEY (role, tenant)
);
"""

_FUNCTIONS = """
-- Whether this session's login may act for tenant t ('*': for every tenant at once): a member
-- of tachograph_all_tenants (a superuser is a member of every role) for any, another login
-- for the tenants tenant_logins binds it to. The login is session_user, the role the session
-- logged in as: SET ROLE neither widens nor narrows it, and inside the SECURITY DEFINER
-- functions, where current_user is the owner, it is still the caller.
CREATE OR REPLACE FUNCTION tachograph.may_act_for(t text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
    SELECT coalesce(t, '') <> ''
       AND (pg_has_role(session_user, 'tachograph_all_tenants', 'MEMBER')
            OR (t <> '*' AND EXISTS (
                SELECT 1 FROM tachograph.tenant_logins l
                 WHERE l.role = session_user AND l.tenant = t)))
$$;

-- The tenants this session's login is bound to (its own bindings only), and whether it may act
-- for every tenant: what a store opened with no tenant confines itself to.
CREATE OR REPLACE FUNCTION tachograph.login_tenants(OUT every boolean, OUT tenants text[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
    SELECT pg_has_role(session_user, 'tachograph_all_tenants', 'MEMBER'),
           coalesce((SELECT array_agg(l.tenant ORDER BY l.tenant COLLATE "C")
                       FROM tachograph.tenant_logins l WHERE l.role = session_user), '{}')
$$;

-- A row of tenant t is visible: t is this transaction's tenant (or that is '*'), one the
-- login may act for. (The policies spell this out with may_act_for in a sub-select, which
-- the planner runs once per statement, not once per row.)
CREATE OR REPLACE FUNCTION tachograph.tenant_visible(t text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT (t = current_setting('tachograph.tenant', true)
            OR current_setting('tachograph.tenant', true) = '*')
       AND tachograph.may_act_for(current_setting('tachograph.tenant', true))
$$;

CREATE FUNCTION tachograph.current_purpose() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('tachograph.purpose', true), ''), 'default')
$$;

CREATE FUNCTION tachograph.purpose_allows(t text, ty text, p text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM tachograph.read_policy r
        WHERE r.purpose = p AND r.tenant IN (t, '*') AND r.type IN (ty, '*'))
$$;

-- Called by the SELECT policy of payloads only for a row of this tenant whose type the purpose
-- may not read: reading it is an error (a refusal, never a silent gap).
CREATE FUNCTION tachograph.deny_read(t text, ty text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RAISE EXCEPTION 'tachograph: purpose % may not read payloads of type % in tenant %',
        quote_literal(tachograph.current_purpose()), quote_literal(ty), quote_literal(t)
        USING ERRCODE = 'TG004';
END $$;

CREATE FUNCTION tachograph.run_deleted(t text, r text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
    SELECT EXISTS (SELECT 1 FROM tachograph.deleted_runs d WHERE d.tenant = t AND d.run_id = r)
$$;

-- Rows of a run deleted by retention (delete_run_rows lists it first) may go; so may a data
-- subject's links to erased events, removed by unlink_subject (the subject's erasure; the flag
-- is its own, and erasure_audited holds the deletion to a record of the store audit in its
-- transaction); nothing else.
CREATE OR REPLACE FUNCTION tachograph.refuse_but_retention() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
BEGIN
    IF TG_OP = 'DELETE' AND (tachograph.run_deleted(OLD.tenant, OLD.run_id)
            OR (TG_TABLE_NAME LIKE 'subjects%'
                AND current_setting('tachograph.unlinking', true) = 'on')) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'tachograph: % on %.% is refused: the log is append-only',
        TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = 'TG003';
END $$;

-- At commit (a deferred constraint trigger): an erasure or a deletion commits only with a
-- record of the store audit written in the same transaction.
CREATE OR REPLACE FUNCTION tachograph.erasure_audited() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
BEGIN
    -- a record of this row's tenant that records a change (not a read): a record of another
    -- tenant, or a read's, written in the same transaction does not stand for it
    IF NOT EXISTS (SELECT 1 FROM tachograph.store_audit a
                    WHERE a.xact = pg_current_xact_id() AND a.tenant = OLD.tenant
                      AND a.action NOT IN ('read', 'read.denied')) THEN
        RAISE EXCEPTION 'tachograph: % on %.% without a record in the store audit',
            TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = 'TG003';
    END IF;
    RETURN NULL;
END $$;

-- Each statement's leaves of a tenant are contiguous and start right after a stored leaf (or
-- at 0); with the primary key (tenant, idx) that keeps every tenant's log gapless.
CREATE FUNCTION tachograph.seals_contiguous() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
DECLARE bad record;
BEGIN
    SELECT n.tenant, n.lo INTO bad FROM (
        SELECT tenant, min(idx) AS lo, max(idx) AS hi, count(*) AS c
          FROM new_rows GROUP BY tenant) n
     WHERE n.hi - n.lo + 1 <> n.c OR (n.lo <> 0 AND NOT EXISTS (
        SELECT 1 FROM tachograph.seals s WHERE s.tenant = n.tenant AND s.idx = n.lo - 1))
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'tachograph: seal log of tenant % would have a gap at %',
            quote_literal(bad.tenant), bad.lo USING ERRCODE = 'TG001';
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION tachograph.refuse() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'tachograph: % on %.% is refused: the log is append-only',
        TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = 'TG003';
END $$;

-- Compare-and-set of each run's head, once per INSERT statement (a row trigger would update
-- the summary row once per event: a chain of row versions that grows with the batch). The
-- statement's events of a run must be contiguous (the primary key makes seqs unique), linked
-- by prev_hash, and start at the run's head; the head moves only if it is still there. Runs
-- are taken in key order, so that two batches over the same runs lock them in the same order.
CREATE OR REPLACE FUNCTION tachograph.events_chain() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
DECLARE r record; n bigint; bad record;
BEGIN
    SELECT b.run_id, b.seq INTO bad FROM new_rows a JOIN new_rows b
        ON b.tenant = a.tenant AND b.run_id = a.run_id AND b.seq = a.seq + 1
     WHERE b.prev_hash IS DISTINCT FROM a.hash LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'tachograph: run % seq % does not link to seq %',
            quote_literal(bad.run_id), bad.seq, bad.seq - 1
            USING ERRCODE = 'TG001', DETAIL = json_build_object(
                'run_id', bad.run_id, 'seq', bad.seq)::text;
    END IF;
    FOR r IN
        SELECT tenant, run_id, min(seq) AS first, max(seq) AS last, count(*) AS cnt,
               (array_agg(prev_hash ORDER BY seq))[1] AS first_prev,
               (array_agg(hash ORDER BY seq DESC))[1] AS last_hash,
               (array_agg(ts ORDER BY seq))[1] AS first_ts,
               (array_agg(ts ORDER BY seq DESC))[1] AS last_ts,
               (array_agg(actor ORDER BY seq))[1] AS actor,
               bool_or(type = 'run.finished') AS finished,
               (array_agg(status ORDER BY seq DESC) FILTER (WHERE type = 'run.finished'))[1]
                   AS status
          FROM new_rows GROUP BY tenant, run_id ORDER BY tenant, run_id
    LOOP
        n := 0;
        -- A run deleted by retention has no summary row: a new one must not start there (a
        -- later seq finds no head to move, below). One index probe per new run.
        IF r.first = 0 AND tachograph.run_deleted(r.tenant, r.run_id) THEN
            RAISE EXCEPTION
                'tachograph: run % was deleted by retention; its id cannot be used again',
                quote_literal(r.run_id) USING ERRCODE = 'TG006';
        END IF;
        IF r.last - r.first + 1 = r.cnt THEN
            IF r.first = 0 AND r.first_prev IS NULL THEN
                INSERT INTO tachograph.runs
                    (tenant, run_id, actor, started_at, last_at, events, head_hash, status)
                VALUES (r.tenant, r.run_id, r.actor, r.first_ts, r.last_ts, r.last + 1,
                        r.last_hash, r.status)
                ON CONFLICT DO NOTHING;
                GET DIAGNOSTICS n = ROW_COUNT;
            ELSIF r.first > 0 THEN
                UPDATE tachograph.runs
                   SET events = r.last + 1, head_hash = r.last_hash, last_at = r.last_ts,
                       status = CASE WHEN r.finished THEN r.status ELSE status END
                 WHERE tenant = r.tenant AND run_id = r.run_id
                   AND events = r.first AND head_hash = r.first_prev;
                GET DIAGNOSTICS n = ROW_COUNT;
            END IF;
        END IF;
        IF n <> 1 AND tachograph.run_deleted(r.tenant, r.run_id) THEN
            -- deleted before, or while this append waited for the run's summary row
            RAISE EXCEPTION
                'tachograph: run % was deleted by retention; its id cannot be used again',
                quote_literal(r.run_id) USING ERRCODE = 'TG006';
        END IF;
        IF n <> 1 THEN
            RAISE EXCEPTION 'tachograph: run % seq % does not follow the run''s head',
                quote_literal(r.run_id), r.first
                USING ERRCODE = 'TG001', DETAIL = json_build_object(
                    'run_id', r.run_id, 'seq', r.first)::text;
        END IF;
    END LOOP;
    RETURN NULL;
END $$;

-- Once per INSERT statement, what a foreign key to events did row by row: every new payload
-- has its event in its run, of the same type. The runs' summary rows are locked first (KEY
-- SHARE; an append already holds them through the head's compare-and-set): retention locks
-- them before it deletes, so no payload commits beside events a retention is deleting.
CREATE OR REPLACE FUNCTION tachograph.payloads_have_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
DECLARE k record; bad record;
BEGIN
    FOR k IN SELECT DISTINCT tenant, run_id FROM new_rows ORDER BY tenant, run_id LOOP
        -- one index probe per run (a join was planned as a scan of every summary row)
        PERFORM 1 FROM tachograph.runs r WHERE r.tenant = k.tenant AND r.run_id = k.run_id
           FOR KEY SHARE;
    END LOOP;
    SELECT n.run_id, n.seq, n.type INTO bad FROM new_rows n
     WHERE NOT EXISTS (
        SELECT 1 FROM tachograph.events e
         WHERE e.tenant = n.tenant AND e.run_id = n.run_id AND e.seq = n.seq
           AND e.type = n.type)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'tachograph: payload of run % seq % has no event of type % there',
            quote_literal(bad.run_id), bad.seq, quote_literal(bad.type)
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION tachograph.payloads_erase_only() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
BEGIN
    IF TG_OP = 'DELETE' AND tachograph.run_deleted(OLD.tenant, OLD.run_id) THEN
        RETURN OLD;
    END IF;
    IF TG_OP <> 'UPDATE' OR NEW.body IS NOT NULL OR NEW.salt IS NOT NULL
       OR (NEW.tenant, NEW.run_id, NEW.seq, NEW.type)
          IS DISTINCT FROM (OLD.tenant, OLD.run_id, OLD.seq, OLD.type) THEN
        RAISE EXCEPTION 'tachograph: a payload can only be erased, never changed or deleted'
            USING ERRCODE = 'TG003';
    END IF;
    RETURN NEW;
END $$;

CREATE FUNCTION tachograph.runs_forward_only() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
BEGIN
    IF TG_OP = 'DELETE' AND tachograph.run_deleted(OLD.tenant, OLD.run_id) THEN
        RETURN OLD;
    END IF;
    IF TG_OP <> 'UPDATE' OR NEW.events <= OLD.events
       OR (NEW.tenant, NEW.run_id, NEW.actor, NEW.started_at)
          IS DISTINCT FROM (OLD.tenant, OLD.run_id, OLD.actor, OLD.started_at) THEN
        RAISE EXCEPTION 'tachograph: a run summary only moves forward'
            USING ERRCODE = 'TG003';
    END IF;
    RETURN NEW;
END $$;

-- This transaction's one tenant, which the session's login must be allowed to act for: what
-- the SECURITY DEFINER functions (erasure, deletion, the audit, read authorization) act in.
CREATE OR REPLACE FUNCTION tachograph.one_tenant() RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE t text := current_setting('tachograph.tenant', true);
BEGIN
    IF t IS NULL OR t = '' OR t = '*' THEN
        RAISE EXCEPTION 'tachograph: this needs one tenant in tachograph.tenant'
            USING ERRCODE = 'TG005';
    END IF;
    IF NOT tachograph.may_act_for(t) THEN
        RAISE EXCEPTION 'tachograph: login % may not act for tenant %',
            quote_ident(session_user), quote_literal(t) USING ERRCODE = '42501';
    END IF;
    RETURN t;
END $$;

-- The store audit's head, under a transaction lock that serializes its writers (records are
-- hashed by the client, which needs the head to chain to).
CREATE FUNCTION tachograph.audit_head(OUT seq bigint, OUT hash text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('tachograph.store_audit'));
    SELECT a.seq, a.hash INTO seq, hash FROM tachograph.store_audit a ORDER BY a.seq DESC LIMIT 1;
    IF NOT FOUND THEN
        seq := -1;
        hash := NULL;
    END IF;
END $$;

-- Append one record: it must be the head's next and chain to it, for this transaction's tenant
-- (one the login may act for). A login without tachograph_privacy records reads alone.
CREATE OR REPLACE FUNCTION tachograph.audit_append(
    p_seq bigint, p_ts text, p_tenant text, p_actor text, p_action text, p_detail bytea,
    p_prev_hash text, p_hash text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
DECLARE h record; t text := tachograph.one_tenant();
BEGIN
    IF p_tenant IS DISTINCT FROM t THEN
        RAISE EXCEPTION 'tachograph: an audit record of tenant % in a transaction of tenant %',
            quote_literal(p_tenant), quote_literal(t) USING ERRCODE = 'TG005';
    END IF;
    IF p_action NOT IN ('read', 'read.denied')
       AND NOT pg_has_role(session_user, 'tachograph_privacy', 'MEMBER') THEN
        RAISE EXCEPTION 'tachograph: login % may record reads only, not %',
            quote_ident(session_user), quote_literal(p_action) USING ERRCODE = '42501';
    END IF;
    SELECT * INTO h FROM tachograph.audit_head();
    IF p_seq <> h.seq + 1 OR p_prev_hash IS DISTINCT FROM h.hash THEN
        RAISE EXCEPTION 'tachograph: audit record % does not follow the audit head %',
            p_seq, h.seq USING ERRCODE = 'TG001';
    END IF;
    INSERT INTO tachograph.store_audit (seq, tenant, ts, actor, action, detail, prev_hash, hash)
    VALUES (p_seq, p_tenant, p_ts, p_actor, p_action, p_detail, p_prev_hash, p_hash);
END $$;

-- Erase payload and salt of seqs of a run of this transaction's tenant; the seqs erased now.
-- The transaction must also append its audit record (erasure_audited checks at commit).
CREATE FUNCTION tachograph.erase_payloads(p_run_id text, p_seqs bigint[]) RETURNS bigint[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
DECLARE t text := tachograph.one_tenant(); done bigint[];
BEGIN
    WITH erased AS (
        UPDATE tachograph.payloads SET body = NULL, salt = NULL
         WHERE tenant = t AND run_id = p_run_id AND seq = ANY(p_seqs)
           AND (body IS NOT NULL OR salt IS NOT NULL)
        RETURNING seq)
    SELECT coalesce(array_agg(seq ORDER BY seq), '{}') INTO done FROM erased;
    RETURN done;
END $$;

-- Remove a data subject's links to seqs of a run of this transaction's tenant whose payloads
-- are erased (the subject's erasure, after erase_payloads): a link to an event that still
-- holds its payload stays, so that no link is dropped to hide a person's data from a later
-- erasure. The number removed. The transaction must also append its audit record.
CREATE OR REPLACE FUNCTION tachograph.unlink_subject(p_run_id text, p_subject text, p_seqs bigint[])
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
DECLARE t text := tachograph.one_tenant(); n bigint;
BEGIN
    PERFORM set_config('tachograph.unlinking', 'on', true);
    DELETE FROM tachograph.subjects s
     WHERE s.tenant = t AND s.run_id = p_run_id AND s.subject = p_subject
       AND s.seq = ANY(p_seqs)
       AND NOT EXISTS (
        SELECT 1 FROM tachograph.payloads p
         WHERE p.tenant = t AND p.run_id = p_run_id AND p.seq = s.seq
           AND (p.body IS NOT NULL OR p.salt IS NOT NULL));
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM set_config('tachograph.unlinking', '', true);
    RETURN n;
END $$;

-- Delete a whole run of this transaction's tenant (retention): the number of events, or NULL
-- if the run is not there. Its id stays taken; the audit record goes in the same transaction.
-- The summary row is locked first: a concurrent append (the head's compare-and-set) or payload
-- insert (payloads_have_events) waits for this transaction, then finds the run deleted.
CREATE OR REPLACE FUNCTION tachograph.delete_run_rows(p_run_id text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
DECLARE t text := tachograph.one_tenant(); n bigint;
BEGIN
    PERFORM 1 FROM tachograph.runs WHERE tenant = t AND run_id = p_run_id FOR UPDATE;
    SELECT count(*) INTO n FROM tachograph.events WHERE tenant = t AND run_id = p_run_id;
    IF n = 0 AND NOT EXISTS (
        SELECT 1 FROM tachograph.runs WHERE tenant = t AND run_id = p_run_id) THEN
        RETURN NULL;
    END IF;
    INSERT INTO tachograph.deleted_runs (tenant, run_id) VALUES (t, p_run_id)
        ON CONFLICT DO NOTHING;
    DELETE FROM tachograph.subjects WHERE tenant = t AND run_id = p_run_id;
    DELETE FROM tachograph.payloads WHERE tenant = t AND run_id = p_run_id;
    DELETE FROM tachograph.events WHERE tenant = t AND run_id = p_run_id;
    DELETE FROM tachograph.runs WHERE tenant = t AND run_id = p_run_id;
    RETURN n;
END $$;

-- Called by the store before it reads payloads: the types of the run (from from_seq on) that
-- the purpose may not read (the store then records the refusal in the audit and raises).
CREATE FUNCTION tachograph.authorize_read(p_run_id text, p_from_seq bigint) RETURNS text[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, tachograph AS $$
DECLARE t text := tachograph.one_tenant(); p text := tachograph.current_purpose(); d text[];
BEGIN
    IF EXISTS (SELECT 1 FROM tachograph.read_policy r
               WHERE r.purpose = p AND r.tenant IN (t, '*') AND r.type = '*') THEN
        RETURN '{}';
    END IF;
    SELECT array_agg(DISTINCT e.type ORDER BY e.type) INTO d FROM tachograph.events e
     WHERE e.tenant = t AND e.run_id = p_run_id AND e.seq >= p_from_seq
       AND NOT tachograph.purpose_allows(t, e.type, p);
    RETURN coalesce(d, '{}');
END $$;
"""

# The login may act for this transaction's tenant: an uncorrelated sub-select, which the
# planner makes an InitPlan, run once per statement (a call per row costs a SECURITY DEFINER
# function's setup each time).
_MAY_ACT = "(SELECT tachograph.may_act_for(current_setting('tachograph.tenant', true)))"
_TENANT_EQ = f"tenant = current_setting('tachograph.tenant', true) AND {_MAY_ACT}"
# tachograph.tenant_visible(tenant), spelt out so that may_act_for runs once per statement
_TENANT_VISIBLE = (
    "(tenant = current_setting('tachograph.tenant', true) "
    f"OR current_setting('tachograph.tenant', true) = '*') AND {_MAY_ACT}"
)
# Another tenant's rows are invisible; this tenant's rows of a type the purpose may not read
# raise (deny_read). The purpose's rules are read once per query (an uncorrelated sub-select
# becomes an InitPlan), so the check costs an array overlap per row, not a lookup. The owner
# (inside the SECURITY DEFINER functions: erasure reads what it erases) passes.
_PAYLOAD_READABLE = (
    f"{_TENANT_VISIBLE} AND (current_user = 'tachograph_owner' "
    "OR ARRAY['*:*', tenant || ':*', '*:' || type, tenant || ':' || type] "
    "&& ARRAY(SELECT r.tenant || ':' || r.type FROM tachograph.read_policy r "
    "WHERE r.purpose = tachograph.current_purpose()) "
    "OR tachograph.deny_read(tenant, type))"
)


def tenant_policies(table: str, *, replace: bool = False) -> list[str]:
    """The tenant policies of one table or partition (``replace``: dropping its old ones
    first, as an upgrade does)."""
    select = _PAYLOAD_READABLE if table.startswith("payloads") else _TENANT_VISIBLE
    names = ["tenant_read"]
    out = [f"CREATE POLICY tenant_read ON tachograph.{table} FOR SELECT USING ({select})"]
    if not table.startswith("store_audit"):  # written only through audit_append
        names.append("tenant_write")
        out.append(
            f"CREATE POLICY tenant_write ON tachograph.{table} FOR INSERT WITH CHECK ({_TENANT_EQ})"
        )
    if table.startswith(("payloads", "runs")):  # erasure; the head's compare-and-set
        names.append("tenant_update")
        out.append(
            f"CREATE POLICY tenant_update ON tachograph.{table} FOR UPDATE "
            f"USING ({_TENANT_EQ}) WITH CHECK ({_TENANT_EQ})"
        )
    if replace:
        out = [f"DROP POLICY IF EXISTS {name} ON tachograph.{table}" for name in names] + out
    return out


def _policies(table: str) -> list[str]:
    """Row-level security of one run table (applied to the table and to each partition)."""
    return [
        f"ALTER TABLE tachograph.{table} ENABLE ROW LEVEL SECURITY",
        f"ALTER TABLE tachograph.{table} FORCE ROW LEVEL SECURITY",
        *tenant_policies(table),
        # The owner is who the SECURITY DEFINER functions run as: erasure, deletion, the audit.
        f"CREATE POLICY owner_all ON tachograph.{table} TO {OWNER} USING (true) WITH CHECK (true)",
    ]


def read_policy_security() -> list[str]:
    """Row-level security of ``read_policy``: a login sees the rules of every tenant (``*``)
    and of the tenants it may act for, not the names of others."""
    return [
        "ALTER TABLE tachograph.read_policy ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE tachograph.read_policy FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_read ON tachograph.read_policy FOR SELECT "
        "USING (tenant = '*' OR tachograph.may_act_for(tenant))",
        f"CREATE POLICY owner_all ON tachograph.read_policy TO {OWNER} "
        "USING (true) WITH CHECK (true)",
    ]


_ROW_TRIGGERS = {
    "events": (("append_only", "BEFORE UPDATE OR DELETE", "refuse_but_retention"),),
    "payloads": (("erase_only", "BEFORE UPDATE OR DELETE", "payloads_erase_only"),),
    "runs": (("forward_only", "BEFORE UPDATE OR DELETE", "runs_forward_only"),),
    "subjects": (("append_only", "BEFORE UPDATE OR DELETE", "refuse_but_retention"),),
    "deleted_runs": (("append_only", "BEFORE UPDATE OR DELETE", "refuse"),),
    "store_audit": (("append_only", "BEFORE UPDATE OR DELETE", "refuse"),),
    "seals": (("append_only", "BEFORE UPDATE OR DELETE", "refuse"),),
    "checkpoints": (("append_only", "BEFORE UPDATE OR DELETE", "refuse"),),
}

_STATEMENT_TRIGGERS = {
    "events": "events_chain",
    "payloads": "payloads_have_events",
    "seals": "seals_contiguous",
}
"""Statement triggers with a transition table, on the table and each partition."""

_AUDITED = {"payloads": "UPDATE", "events": "DELETE", "subjects": "DELETE"}
"""Changes that commit only beside a store-audit record of the same transaction."""


def statement_triggers(table: str, partitions: Sequence[str]) -> list[str]:
    """The table's AFTER INSERT statement trigger (if any), on the table and each partition:
    a statement trigger fires for the table the statement names, and is not cloned."""
    statement = _STATEMENT_TRIGGERS.get(table)
    out: list[str] = []
    for target in [table, *partitions] if statement else []:
        out += [
            f"CREATE TRIGGER {statement} AFTER INSERT ON tachograph.{target} "
            "REFERENCING NEW TABLE AS new_rows "
            f"FOR EACH STATEMENT EXECUTE FUNCTION tachograph.{statement}()",
            f"ALTER TABLE tachograph.{target} ENABLE ALWAYS TRIGGER {statement}",
        ]
    return out


def audited_triggers(table: str, partitions: Sequence[str]) -> list[str]:
    """The deferred check that a change of ``table`` (``_AUDITED``) commits only beside a
    record of the store audit, on each partition (a constraint trigger is not cloned)."""
    out: list[str] = []
    for target in partitions or [table]:
        out += [
            f"CREATE CONSTRAINT TRIGGER erasure_audited AFTER {_AUDITED[table]} "
            f"ON tachograph.{target} DEFERRABLE INITIALLY DEFERRED "
            "FOR EACH ROW EXECUTE FUNCTION tachograph.erasure_audited()",
            f"ALTER TABLE tachograph.{target} ENABLE ALWAYS TRIGGER erasure_audited",
        ]
    return out


def _triggers(table: str, partitions: Sequence[str]) -> list[str]:
    """Append-only triggers, all ``ENABLE ALWAYS``. Row triggers of a partitioned table are
    cloned to its partitions; statement (TRUNCATE) triggers are not, so those go on each."""
    out = statement_triggers(table, partitions)
    if table in _AUDITED:
        out += audited_triggers(table, partitions)
    for name, when, function in _ROW_TRIGGERS[table]:
        out.append(
            f"CREATE TRIGGER {name} {when} ON tachograph.{table} "
            f"FOR EACH ROW EXECUTE FUNCTION tachograph.{function}()"
        )
    for target in (table, *partitions):
        out.append(
            f"CREATE TRIGGER no_truncate BEFORE TRUNCATE ON tachograph.{target} "
            "FOR EACH STATEMENT EXECUTE FUNCTION tachograph.refuse()"
        )
        for name in (*(t[0] for t in _ROW_TRIGGERS[table]), "no_truncate"):
            out.append(f"ALTER TABLE tachograph.{target} ENABLE ALWAYS TRIGGER {name}")
    return out


_APPEND = (
    "tachograph.events, tachograph.payloads, tachograph.subjects, tachograph.seals, "
    "tachograph.checkpoints"
)
_ALL = (
    _APPEND + ", tachograph.runs, tachograph.deleted_runs, tachograph.store_audit, "
    "tachograph.read_policy, tachograph.meta"
)
_AUDIT_APPEND = "tachograph.audit_append(bigint, text, text, text, text, bytea, text, text)"
_GRANTS = f"""
REVOKE ALL ON SCHEMA tachograph FROM PUBLIC;
GRANT USAGE ON SCHEMA tachograph TO {WRITER}, {READER}, {PRIVACY};
GRANT SELECT, INSERT ON {_APPEND} TO {WRITER};
GRANT SELECT ON {_ALL} TO {WRITER}, {READER}, {PRIVACY};
REVOKE ALL ON FUNCTION tachograph.erase_payloads(text, bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION tachograph.delete_run_rows(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION tachograph.unlink_subject(text, text, bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION tachograph.authorize_read(text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION tachograph.audit_head() FROM PUBLIC;
REVOKE ALL ON FUNCTION {_AUDIT_APPEND} FROM PUBLIC;
REVOKE ALL ON FUNCTION tachograph.run_deleted(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tachograph.erase_payloads(text, bigint[]) TO {PRIVACY};
GRANT EXECUTE ON FUNCTION tachograph.delete_run_rows(text) TO {PRIVACY};
GRANT EXECUTE ON FUNCTION tachograph.unlink_subject(text, text, bigint[]) TO {PRIVACY};
GRANT EXECUTE ON FUNCTION tachograph.authorize_read(text, bigint)
    TO {WRITER}, {READER}, {PRIVACY};
GRANT EXECUTE ON FUNCTION tachograph.audit_head() TO {WRITER}, {READER}, {PRIVACY};
GRANT EXECUTE ON FUNCTION {_AUDIT_APPEND} TO {WRITER}, {READER}, {PRIVACY};
"""


def _split(script: str) -> list[str]:
    """Statements of a script whose function bodies are dollar-quoted."""
    out: list[str] = []
    pending: list[str] = []
    inside = False
    for line in script.splitlines():
        pending.append(line)
        inside ^= line.count("$$") % 2 == 1
        if not inside and line.rstrip().endswith(";"):
            text = "\n".join(pending).strip().rstrip(";")
            if text and not all(p.strip().startswith("--") or not p.strip() for p in pending):
                out.append(text)
            pending = []
    if "\n".join(pending).strip():
        out.append("\n".join(pending).strip().rstrip(";"))
    return out


def function_sql(*names: str) -> list[str]:
    """The ``CREATE OR REPLACE FUNCTION`` statements of the schema's functions ``names``."""
    wanted = [f"CREATE OR REPLACE FUNCTION tachograph.{name}(" for name in names]
    out = [s for s in _split(_FUNCTIONS) if any(w in s for w in wanted)]
    if len(out) != len(names):
        raise ValueError(f"not all of {names} are replaceable functions of the schema")
    return out


def schema_sql(*, partitions: int = 8) -> list[str]:
    """Every statement that builds the schema, in order, run as the owner role."""
    if partitions < 0:
        raise ValueError("partitions must not be negative")
    statements = _split(_TABLES) + _split(_LOGINS_TABLE)
    tables = [*RUN_TABLES, *TENANT_TABLES, *STORE_TABLES]
    parts: dict[str, list[str]] = {t: [] for t in tables}
    for table in (*RUN_TABLES, *TENANT_TABLES):
        for remainder in range(max(partitions, 1)):
            name = f"{table}_p{remainder}"
            parts[table].append(name)
            statements.append(
                f"CREATE TABLE tachograph.{name} PARTITION OF tachograph.{table} "
                f"FOR VALUES WITH (MODULUS {max(partitions, 1)}, REMAINDER {remainder})"
            )
    statements += _split(_FUNCTIONS)
    for table in tables:
        statements += _triggers(table, parts[table])
        for name in (table, *parts[table]):
            statements += _policies(name)
    statements += read_policy_security()
    statements += _split(_GRANTS)
    statements.append(
        "INSERT INTO tachograph.meta VALUES "
        f"('schema_version', '{SCHEMA_VERSION}'), ('format_version', '1'), "
        f"('partitions', '{max(partitions, 1)}')"
    )
    return statements


def install(conn: Any, *, partitions: int = 8) -> bool:
    """Install the schema through ``conn`` (a psycopg connection of a superuser, or of a role
    that can create roles and is a member of the owner role). Returns False if it was there
    (an older version is then upgraded by :func:`.postgres_migrations.upgrade`).

    One transaction: the schema appears whole or not at all.
    """
    with conn.transaction():
        cur = conn.cursor()
        cur.execute("SELECT pg_advisory_xact_lock(hashtext('tachograph.install'))")
        cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (SCHEMA,))
        if cur.fetchone() is not None:
            return False
    _roles_outside_transaction(conn)
    with conn.transaction():
        cur = conn.cursor()
        cur.execute("SELECT pg_advisory_xact_lock(hashtext('tachograph.install'))")
        cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (SCHEMA,))
        if cur.fetchone() is not None:
            return False
        cur.execute(f"CREATE SCHEMA {SCHEMA} AUTHORIZATION {OWNER}")
        cur.execute(f"SET LOCAL ROLE {OWNER}")
        for statement in schema_sql(partitions=partitions):
            cur.execute(statement)
        cur.execute("RESET ROLE")
    return True


def _roles_outside_transaction(conn: Any) -> None:
    # Each role in its own transaction: a concurrent CREATE ROLE elsewhere must not abort ours.
    for role in ROLES:
        with conn.transaction():
            _create_roles_one(conn.cursor(), role)


def _create_roles_one(cur: Any, role: str) -> None:
    cur.execute(
        "DO $$ BEGIN CREATE ROLE " + role + " NOLOGIN; "
        "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
    )


def login_sql(
    name: str,
    roles: Sequence[str],
    *,
    password: str | None = None,
    tenants: Sequence[str] = (),
) -> list[str]:
    """Statements that create (or keep) login role ``name``, grant it ``roles`` and bind it
    to ``tenants`` (in this database; see ``may_act_for``)."""
    for tenant in tenants:
        if tenant in ("", "*"):
            raise ValueError(f"not a tenant: {tenant!r} (all_tenants=True reaches every tenant)")
    create = f"CREATE ROLE {_ident(name)} LOGIN"
    if password is not None:
        create += " PASSWORD " + _literal(password)
    out = [
        "DO $tachograph$ BEGIN " + create + "; "
        "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $tachograph$"
    ]
    out += [f"GRANT {role} TO {_ident(name)}" for role in roles]
    out += [
        f"INSERT INTO tachograph.{LOGINS} (role, tenant) VALUES "
        f"({_literal(name)}, {_literal(tenant)}) ON CONFLICT DO NOTHING"
        for tenant in dict.fromkeys(tenants)
    ]
    return out


def logins_table_sql() -> list[str]:
    """The statement that creates ``tenant_logins``."""
    return _split(_LOGINS_TABLE)


def revoke_sql(name: str, *, tenants: Sequence[str] | None = None) -> list[str]:
    """Statements that unbind login ``name`` from ``tenants`` (in this database), or, with
    ``None``, from every tenant and revoke its membership of the tachograph roles (which is
    cluster-wide). The role itself stays."""
    if tenants is not None:
        listed = ", ".join(_literal(t) for t in tenants) or "NULL"
        return [
            f"DELETE FROM tachograph.{LOGINS} WHERE role = {_literal(name)} "
            f"AND tenant IN ({listed})"
        ]
    return [
        f"DELETE FROM tachograph.{LOGINS} WHERE role = {_literal(name)}",
        *(f"REVOKE {role} FROM {_ident(name)}" for role in (WRITER, READER, PRIVACY, ALL_TENANTS)),
    ]


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
