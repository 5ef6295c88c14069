-- Migration 22 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- thread searches that read indexes (`ThreadStore::search_threads`, as
-- SQLite's schema 18). A thread record keeps its latest run (the newest by
-- id) and the status that run gives it (`tollgate_thread_status`, the rule
-- of `ThreadStatus::of`), kept by triggers in the transaction that
-- inserts, changes or deletes a run, or inserts the record: every write
-- path is covered, and a step that changes no status fires nothing. The
-- metadata is also kept as jsonb with a GIN index, so a metadata filter is
-- a containment test (`@>`) the index answers; the store checks exact
-- equality on what it reads.
    ALTER TABLE threads ADD COLUMN latest_run text;
    ALTER TABLE threads ADD COLUMN status text NOT NULL DEFAULT 'idle';
    ALTER TABLE threads ADD COLUMN tags jsonb GENERATED ALWAYS AS (metadata::jsonb) STORED;
    CREATE INDEX threads_by_status ON threads (status, created_at_ms DESC, id DESC);
    CREATE INDEX threads_by_tags ON threads USING gin (tags jsonb_path_ops);

    CREATE FUNCTION tollgate_thread_status(run_status text) RETURNS text
    LANGUAGE sql IMMUTABLE AS $$
        SELECT CASE run_status WHEN 'queued' THEN 'busy' WHEN 'running' THEN 'busy'
            WHEN 'awaiting_hitl' THEN 'interrupted' WHEN 'failed' THEN 'error' ELSE 'idle' END
    $$;

    -- The thread's latest run and status, from its runs as they are now.
    CREATE FUNCTION tollgate_thread_refresh(thread_id text) RETURNS void LANGUAGE sql
    SET search_path FROM CURRENT AS $$
        UPDATE threads SET
            latest_run = (SELECT max(id) FROM runs WHERE thread = thread_id),
            status = coalesce((SELECT tollgate_thread_status(r.status) FROM runs r
                               WHERE r.thread = thread_id ORDER BY r.id DESC LIMIT 1), 'idle')
        WHERE id = thread_id
    $$;

    CREATE FUNCTION tollgate_threads_find_latest_run() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM runs WHERE thread = NEW.id) THEN
            PERFORM tollgate_thread_refresh(NEW.id);
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER threads_find_latest_run AFTER INSERT ON threads
    FOR EACH ROW EXECUTE FUNCTION tollgate_threads_find_latest_run();

    CREATE FUNCTION tollgate_threads_follow_new_run() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
    BEGIN
        UPDATE threads SET latest_run = NEW.id, status = tollgate_thread_status(NEW.status)
        WHERE id = NEW.thread AND (latest_run IS NULL OR latest_run < NEW.id);
        RETURN NULL;
    END $$;
    CREATE TRIGGER threads_follow_new_run AFTER INSERT ON runs
    FOR EACH ROW WHEN (NEW.thread IS NOT NULL)
    EXECUTE FUNCTION tollgate_threads_follow_new_run();

    CREATE FUNCTION tollgate_threads_follow_run_status() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
    BEGIN
        UPDATE threads SET status = tollgate_thread_status(NEW.status)
        WHERE id = NEW.thread AND latest_run = NEW.id;
        RETURN NULL;
    END $$;
    CREATE TRIGGER threads_follow_run_status AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.thread IS NOT NULL AND NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION tollgate_threads_follow_run_status();

    CREATE FUNCTION tollgate_threads_follow_deleted_run() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM threads WHERE id = OLD.thread AND latest_run = OLD.id) THEN
            PERFORM tollgate_thread_refresh(OLD.thread);
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER threads_follow_deleted_run AFTER DELETE ON runs
    FOR EACH ROW WHEN (OLD.thread IS NOT NULL)
    EXECUTE FUNCTION tollgate_threads_follow_deleted_run();

    UPDATE threads SET
        latest_run = (SELECT max(id) FROM runs WHERE thread = threads.id),
        status = coalesce((SELECT tollgate_thread_status(r.status) FROM runs r
                           WHERE r.thread = threads.id ORDER BY r.id DESC LIMIT 1), 'idle');
