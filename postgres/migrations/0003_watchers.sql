-- Migration 3 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- runs someone streams. A server streaming a run's events registers
-- it here (with an expiry it keeps pushing forward); each transition of
-- a registered run announces itself on `tollgate_events` (payload: the
-- run), so streams wake at once rather than polling. Transitions of
-- runs nobody watches pay one index probe of this small table.
    CREATE TABLE watchers (
        run      text PRIMARY KEY,
        until_ms bigint NOT NULL
    );
    CREATE FUNCTION tollgate_announce() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM watchers WHERE run = NEW.run
                   AND until_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint) THEN
            PERFORM pg_notify('tollgate_events', NEW.run);
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER steps_announce AFTER INSERT ON steps
        FOR EACH ROW EXECUTE FUNCTION tollgate_announce();
    CREATE TRIGGER events_announce AFTER INSERT ON events
        FOR EACH ROW EXECUTE FUNCTION tollgate_announce();
    
