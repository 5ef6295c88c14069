-- Migration 21 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- outbox gates (`outbox.rs`).
--
-- Schema version 21: outbox entries gated on a run
-- (`Store::gate_outbox`), out of the index of ready entries until a
-- trigger opens their gate in the transaction that settles the run,
-- deletes it, or ends the pending entry it waits for. The trigger
-- functions keep the schema they were made in (`SET search_path FROM
-- CURRENT`): a session with another search path that changes a run
-- opens its gates all the same. They fire only when a run settles (or an
-- entry or run is deleted), and notify nothing.
    ALTER TABLE outbox ADD COLUMN gate_run text;
    ALTER TABLE outbox ADD COLUMN gate_ended boolean NOT NULL DEFAULT false;
    ALTER TABLE outbox ADD COLUMN gate_seq bigint NOT NULL DEFAULT -1;
    CREATE INDEX outbox_ready ON outbox (kind, due_ms, id) WHERE gate_run IS NULL;
    CREATE INDEX outbox_gated ON outbox (gate_run) WHERE gate_run IS NOT NULL;
    CREATE FUNCTION tollgate_outbox_open_on_status() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
    BEGIN
        UPDATE outbox SET gate_run = NULL
        WHERE gate_run = NEW.id AND NEW.last_seq > gate_seq
          AND (NOT gate_ended OR NEW.status <> 'awaiting_hitl');
        RETURN NULL;
    END $$;
    CREATE TRIGGER outbox_gates_open_on_status AFTER UPDATE ON runs
    FOR EACH ROW WHEN (NEW.status NOT IN ('running', 'queued'))
    EXECUTE FUNCTION tollgate_outbox_open_on_status();
    CREATE FUNCTION tollgate_outbox_open_on_end() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
    BEGIN
        UPDATE outbox SET gate_run = NULL WHERE gate_run = OLD.id;
        RETURN NULL;
    END $$;
    CREATE TRIGGER outbox_gates_open_on_run_deleted AFTER DELETE ON runs
    FOR EACH ROW EXECUTE FUNCTION tollgate_outbox_open_on_end();
    CREATE TRIGGER outbox_gates_open_on_entry_deleted AFTER DELETE ON outbox
    FOR EACH ROW EXECUTE FUNCTION tollgate_outbox_open_on_end();
    CREATE FUNCTION tollgate_outbox_open_on_entry_end() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
    BEGIN
        UPDATE outbox SET gate_run = NULL WHERE gate_run = NEW.id;
        RETURN NULL;
    END $$;
    CREATE TRIGGER outbox_gates_open_on_entry_ended AFTER INSERT OR UPDATE OF due_ms ON outbox
    FOR EACH ROW WHEN (NEW.due_ms = 9223372036854775807)
    EXECUTE FUNCTION tollgate_outbox_open_on_entry_end();
