//! The SQLite schema's migrations, in order (`schema.rs` applies them,
//! keyed by `PRAGMA user_version`).

/// The status a thread's latest run of status `$run` gives it, in SQL:
/// the rule of `ThreadStatus::of`.
macro_rules! thread_status_of {
    ($run:literal) => {
        concat!(
            "CASE ",
            $run,
            " WHEN 'queued' THEN 'busy' WHEN 'running' THEN 'busy' ",
            "WHEN 'awaiting_hitl' THEN 'interrupted' WHEN 'failed' THEN 'error' ELSE 'idle' END"
        )
    };
}

/// `SET` of thread `$thread`'s latest run and status, from its runs as
/// they are (`idle` without any).
macro_rules! thread_latest {
    ($thread:literal) => {
        concat!(
            "latest_run = (SELECT max(id) FROM runs WHERE thread = ",
            $thread,
            "), ",
            "status = coalesce((SELECT ",
            thread_status_of!("r.status"),
            " FROM runs r ",
            "WHERE r.thread = ",
            $thread,
            " ORDER BY r.id DESC LIMIT 1), 'idle')"
        )
    };
}

/// The `thread_tags` rows of the thread record `$row` (`new`, `old`): its
/// scalar metadata values.
macro_rules! thread_tags_of {
    ($row:literal) => {
        concat!(
            "SELECT key, json_quote(value), ",
            $row,
            ".created_at_ms, ",
            $row,
            ".id ",
            "FROM json_each(",
            $row,
            ".metadata) WHERE json_type(",
            $row,
            ".metadata) = 'object' ",
            "AND type NOT IN ('object', 'array')"
        )
    };
}

/// Migrations in order: `MIGRATIONS[i]` takes the schema from version `i`
/// to `i + 1`. Never edit one that has shipped; append a new one.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: runs, checkpoints as deltas + snapshots, pending writes, events.
    //
    // A step is one row holding everything the step wrote (frontier,
    // updates, events), keyed by an integer (`run number << 32 | step`) so
    // it is appended to a rowid B-tree; the `runs` row is written only when
    // the run's status, owner or lease changes. A step therefore commits
    // little more than one page, close to the smallest possible
    // transaction. A run's current step, last event and update time are
    // the newest of its `runs` row and its newest `steps` row.
    "
    CREATE TABLE runs (
        id             TEXT PRIMARY KEY,     -- ULID: sorts by creation time
        num            INTEGER NOT NULL,     -- small number keying its rows
        graph          TEXT NOT NULL,
        graph_version  INTEGER NOT NULL,
        thread         TEXT,
        status         TEXT NOT NULL,
        step           INTEGER NOT NULL,     -- as of the last runs-row write
        epoch          INTEGER NOT NULL,
        owner          TEXT,                 -- host|pid|start while running
        lease_until_ms INTEGER,
        created_at_ms  INTEGER NOT NULL,
        updated_at_ms  INTEGER NOT NULL,     -- as of the last runs-row write
        failure        TEXT,                 -- JSON RunFailure
        last_seq       INTEGER NOT NULL      -- as of the last runs-row write
    ) WITHOUT ROWID;
    CREATE UNIQUE INDEX runs_by_num ON runs (num);
    CREATE INDEX runs_by_status ON runs (status, id);
    CREATE INDEX runs_by_graph ON runs (graph, id);
    CREATE INDEX runs_by_thread ON runs (thread, id) WHERE thread IS NOT NULL;

    -- One row per committed step (step 0 is the input): the next frontier,
    -- the step's updates (framed: see `frame.rs`) in task order, and the
    -- step's events (seq first_seq .., one JSON line each, newline-joined).
    CREATE TABLE steps (
        id          INTEGER PRIMARY KEY,     -- run num << 32 | step
        at_ms       INTEGER NOT NULL,
        tasks       INTEGER NOT NULL,
        frontier    BLOB NOT NULL,
        updates     BLOB NOT NULL,
        first_seq   INTEGER NOT NULL,
        event_count INTEGER NOT NULL,
        events      TEXT NOT NULL
    );
    -- Full states, every few steps.
    CREATE TABLE snapshots (
        id      INTEGER PRIMARY KEY,         -- run num << 32 | step
        payload BLOB NOT NULL
    );
    -- Outputs of finished tasks of the step in flight.
    CREATE TABLE pending_writes (
        num     INTEGER NOT NULL,
        step    INTEGER NOT NULL,
        task    INTEGER NOT NULL,
        node    TEXT NOT NULL,
        payload BLOB NOT NULL,
        PRIMARY KEY (num, step, task)
    ) WITHOUT ROWID;
    -- Questions runs asked people, and the decisions recorded.
    CREATE TABLE interrupts (
        num              INTEGER NOT NULL,
        id               TEXT NOT NULL,      -- RUN.STEP.TASK.ORDINAL
        step             INTEGER NOT NULL,
        task             INTEGER NOT NULL,
        ordinal          INTEGER NOT NULL,
        node             TEXT NOT NULL,
        kind             TEXT NOT NULL,
        payload          TEXT NOT NULL,      -- JSON
        decisions        TEXT NOT NULL,      -- JSON array of accepted kinds
        schema           TEXT,               -- JSON Schema of the answer
        rejection_routed INTEGER NOT NULL,
        decision         TEXT,               -- JSON, once decided
        raised_at_ms     INTEGER NOT NULL,
        PRIMARY KEY (num, id)
    ) WITHOUT ROWID;
    -- Events of transitions that ran no step (a status change alone).
    CREATE TABLE events (
        num       INTEGER NOT NULL,
        first_seq INTEGER NOT NULL,
        count     INTEGER NOT NULL,
        lines     TEXT NOT NULL,
        PRIMARY KEY (num, first_seq)
    ) WITHOUT ROWID;
",
    // 2: what a run was created with besides its input (a blueprint), kept
    // out of `runs` so listing reads no large rows.
    "
    CREATE TABLE attachments (
        num  INTEGER PRIMARY KEY,            -- runs.num
        body TEXT NOT NULL                   -- JSON
    );
",
    // 3: events of status-only transitions move to a rowid table. As a
    // WITHOUT ROWID table keyed by (run, seq), a pause (whose lines carry
    // the interrupt payloads) was inserted into the middle of a B-tree of
    // large rows: page splits, and rows past the small local limit of index
    // pages spilled to mostly empty overflow pages. Rows now append (rowids
    // grow with time) and a small index finds a run's rows.
    "
    CREATE TABLE status_events (
        id        INTEGER PRIMARY KEY,
        num       INTEGER NOT NULL,
        first_seq INTEGER NOT NULL,
        count     INTEGER NOT NULL,
        lines     TEXT NOT NULL
    );
    INSERT INTO status_events (num, first_seq, count, lines)
        SELECT num, first_seq, count, lines FROM events ORDER BY num, first_seq;
    DROP TABLE events;
    ALTER TABLE status_events RENAME TO events;
    CREATE UNIQUE INDEX events_by_run ON events (num, first_seq);
    -- Runs rows are updated by id; the next run number comes from the
    -- newest steps row. One index fewer to write when a run is created.
    DROP INDEX IF EXISTS runs_by_num;
",
    // 4: how often a running run was taken over from an owner that was
    // gone since its last leg ended (workers give up on it past a limit).
    "
    ALTER TABLE runs ADD COLUMN lease_losses INTEGER NOT NULL DEFAULT 0;
",
    // 5: the file says whose it is (files of version 1-4 are recognised by
    // their tables).
    "
    PRAGMA application_id = 1413955924;
",
    // 6: node outputs cached across runs and restarts (a graph's node
    // caching policy), by scope (graph@version:node) and key.
    "
    CREATE TABLE IF NOT EXISTS node_cache (
        scope      TEXT NOT NULL,
        key        TEXT NOT NULL,
        expires_ms INTEGER NOT NULL,
        value      BLOB NOT NULL,
        PRIMARY KEY (scope, key)
    ) WITHOUT ROWID;
",
    // 7: the trace a run belongs to (W3C traceparent), so that every leg
    // joins it.
    "
    ALTER TABLE runs ADD COLUMN trace TEXT;
",
    // 8: steps rows in commit order. Keyed `run number << 32 | step`, the
    // rows of runs committing together lay in as many places of the B-tree
    // as there were runs: a group commit of 128 runs' steps dirtied (and
    // split) about 128 pages, and concurrent runs gained nothing from
    // sharing a transaction. Appended in commit order, they share pages,
    // and a small index (run, step) finds a run's rows.
    "
    CREATE TABLE steps_in_order (
        id          INTEGER PRIMARY KEY,     -- commit order
        num         INTEGER NOT NULL,        -- runs.num
        step        INTEGER NOT NULL,
        at_ms       INTEGER NOT NULL,
        tasks       INTEGER NOT NULL,
        frontier    BLOB NOT NULL,
        updates     BLOB NOT NULL,
        first_seq   INTEGER NOT NULL,
        event_count INTEGER NOT NULL,
        events      TEXT NOT NULL
    );
    INSERT INTO steps_in_order (num, step, at_ms, tasks, frontier, updates, first_seq,
                                event_count, events)
        SELECT id >> 32, id & 4294967295, at_ms, tasks, frontier, updates, first_seq,
               event_count, events
        FROM steps ORDER BY at_ms, id;
    DROP TABLE steps;
    ALTER TABLE steps_in_order RENAME TO steps;
    CREATE UNIQUE INDEX steps_by_run ON steps (num, step);
",
    // 9: event lines may be stored without the head every line of their
    // run repeats (`{"v":1,"run_id":"…",` kept as `~1,`, or `~1;` without
    // a time equal to the line before's; see `EventRecord::join_compact`).
    // No table changes: the version keeps older builds, which would hand
    // such lines out as they are, from opening the file. Lines written
    // before stay as they were and read the same.
    "SELECT 1;",
    // 10: engine event lines may be stored by fields (`~1|TIME|NODE|…`:
    // without their sequence number, a time shared with the line before,
    // or a node instance named after the node, step and task; see
    // `EventRecord::join_compact`). No table changes, as in 9: older builds
    // would hand such lines out as they are. Lines written before read the
    // same.
    "SELECT 1;",
    // 11: a step's frontier may be a reference to an earlier step of its
    // run that stored the same frontier (a zero byte and that step,
    // little-endian; see `frontier.rs`). No table changes: the version
    // keeps older builds, which would take a reference for a damaged
    // blob, from opening the file. Frontiers written before read the same.
    "SELECT 1;",
    // 12: a step's updates longer than a quarter page are cut into parts
    // appended to `step_parts`, and its row keeps the rest (see
    // `parts.rs`): rows of half a page to a page left most of a page empty
    // each. A row with parts has a negative `tasks`. Rows written before
    // read the same.
    "
    CREATE TABLE step_parts (
        id   INTEGER PRIMARY KEY,            -- steps.id << 20 | part number
        part BLOB NOT NULL
    );
",
    // 13: thread records (`Store::create_thread`): a thread created before
    // any run on it, with its metadata, listed newest first.
    "
    CREATE TABLE threads (
        id            TEXT PRIMARY KEY,
        created_at_ms INTEGER NOT NULL,
        updated_at_ms INTEGER NOT NULL,
        metadata      TEXT NOT NULL          -- JSON object
    ) WITHOUT ROWID;
    CREATE INDEX threads_by_creation ON threads (created_at_ms, id);
",
    // 14: long-term memory (`ItemStore`): items clustered by namespace
    // (stored as `part/part/`, so a prefix is one range of the primary
    // key, and a namespace's items share pages however their puts
    // interleaved with others') and key; values as SQLite's binary JSON
    // (JSONB: filters read fields without parsing text). `id` names an item
    // for its vector (`item_vectors`: unit vectors of little-endian f32s)
    // and for processes' copies of them. `item_epoch` is raised by every
    // transaction that writes items: processes keep their copies in step.
    "
    CREATE TABLE items (
        namespace     TEXT NOT NULL,
        key           TEXT NOT NULL,
        id            INTEGER NOT NULL,
        value         BLOB NOT NULL,
        created_at_ms INTEGER NOT NULL,
        updated_at_ms INTEGER NOT NULL,
        ttl_ms        INTEGER,
        expires_at_ms INTEGER,
        PRIMARY KEY (namespace, key)
    ) WITHOUT ROWID;
    CREATE UNIQUE INDEX items_by_id ON items (id);
    CREATE INDEX items_expiring ON items (expires_at_ms) WHERE expires_at_ms IS NOT NULL;
    CREATE TABLE item_vectors (
        id     INTEGER PRIMARY KEY,
        vector BLOB NOT NULL
    );
    CREATE TABLE item_epoch (
        id    INTEGER PRIMARY KEY CHECK (id = 1),
        epoch INTEGER NOT NULL
    );
    INSERT INTO item_epoch (id, epoch) VALUES (1, 0);
",
    // 15: schedules (`Store::create_schedule`): what their runs start
    // from (the input's snapshot and frontier, encoded once), their
    // timing as a versioned JSON spec, and the next tick, which a firing
    // moves with a compare-and-set in the transaction that creates the run.
    "
    CREATE TABLE schedules (
        id               TEXT PRIMARY KEY,
        graph            TEXT NOT NULL,
        graph_version    INTEGER NOT NULL,
        spec             TEXT NOT NULL,      -- JSON: {v, timing, missed, grace_ms}
        input            TEXT NOT NULL,      -- JSON
        snapshot         BLOB NOT NULL,
        frontier         BLOB NOT NULL,
        attachment       TEXT,
        created_at_ms    INTEGER NOT NULL,
        next_at_ms       INTEGER,
        last_run         TEXT,
        last_fired_at_ms INTEGER,
        runs_started     INTEGER NOT NULL,
        ticks_skipped    INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX schedules_due ON schedules (next_at_ms) WHERE next_at_ms IS NOT NULL;
",
    // 16: the outbox (`Store::put_outbox`): work a server owes to later
    // (runs waiting for their thread or time, webhooks waiting for their
    // run), taken under a lease.
    "
    CREATE TABLE outbox (
        id             TEXT PRIMARY KEY,
        kind           TEXT NOT NULL,
        thread         TEXT,
        created_at_ms  INTEGER NOT NULL,
        due_ms         INTEGER NOT NULL,
        lease_until_ms INTEGER NOT NULL,
        attempts       INTEGER NOT NULL,
        body           TEXT NOT NULL          -- JSON, the kind's own record
    ) WITHOUT ROWID;
    CREATE INDEX outbox_due ON outbox (kind, due_ms, id);
    CREATE INDEX outbox_by_thread ON outbox (thread, kind) WHERE thread IS NOT NULL;
",
    // 17: outbox entries gated on a run (`Store::gate_outbox`): what waits
    // for a run to settle leaves the index of ready entries, so no number
    // of them hides one that can proceed; the store opens a gate in the
    // transaction that settles the run, deletes it, or ends the pending
    // entry it waits for (triggers: every write path is covered).
    "
    ALTER TABLE outbox ADD COLUMN gate_run TEXT;
    ALTER TABLE outbox ADD COLUMN gate_ended INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE outbox ADD COLUMN gate_seq INTEGER NOT NULL DEFAULT -1;
    CREATE INDEX outbox_ready ON outbox (kind, due_ms, id) WHERE gate_run IS NULL;
    CREATE INDEX outbox_gated ON outbox (gate_run) WHERE gate_run IS NOT NULL;
    CREATE TRIGGER outbox_gates_open_on_status AFTER UPDATE ON runs
    WHEN new.status NOT IN ('running', 'queued')
    BEGIN
        UPDATE outbox SET gate_run = NULL
        WHERE gate_run = new.id AND new.last_seq > gate_seq
          AND (gate_ended = 0 OR new.status <> 'awaiting_hitl');
    END;
    CREATE TRIGGER outbox_gates_open_on_run_deleted AFTER DELETE ON runs
    BEGIN
        UPDATE outbox SET gate_run = NULL WHERE gate_run = old.id;
    END;
    CREATE TRIGGER outbox_gates_open_on_entry_deleted AFTER DELETE ON outbox
    BEGIN
        UPDATE outbox SET gate_run = NULL WHERE gate_run = old.id;
    END;
    CREATE TRIGGER outbox_gates_open_on_entry_ended AFTER INSERT ON outbox
    WHEN new.due_ms = 9223372036854775807
    BEGIN
        UPDATE outbox SET gate_run = NULL WHERE gate_run = new.id;
    END;
",
    // 18: thread searches that read indexes (`ThreadStore::search_threads`).
    // A thread record keeps its latest run (the newest by id) and the
    // status that run gives it (`thread_status_of!`, the rule of
    // `ThreadStatus::of`), kept by triggers in the transaction that
    // inserts, changes or deletes a run, or inserts the record: every write
    // path is covered. Its scalar metadata values are indexed in
    // `thread_tags` (the value's JSON text as SQLite quotes it), newest
    // thread first; a record's tags are found again from its metadata (no
    // second index).
    concat!(
        "
    ALTER TABLE threads ADD COLUMN latest_run TEXT;
    ALTER TABLE threads ADD COLUMN status TEXT NOT NULL DEFAULT 'idle';
    CREATE INDEX threads_by_status ON threads (status, created_at_ms, id);
    CREATE TABLE thread_tags (
        key           TEXT NOT NULL,
        value         TEXT NOT NULL,
        created_at_ms INTEGER NOT NULL,
        thread        TEXT NOT NULL,
        PRIMARY KEY (key, value, created_at_ms, thread)
    ) WITHOUT ROWID;

    CREATE TRIGGER threads_find_latest_run AFTER INSERT ON threads
    BEGIN
        UPDATE threads SET ",
        thread_latest!("new.id"),
        "
        WHERE id = new.id AND EXISTS (SELECT 1 FROM runs WHERE thread = new.id);
        INSERT OR IGNORE INTO thread_tags (key, value, created_at_ms, thread) ",
        thread_tags_of!("new"),
        ";
    END;
    CREATE TRIGGER thread_tags_follow_metadata AFTER UPDATE OF metadata ON threads
    BEGIN
        DELETE FROM thread_tags WHERE (key, value, created_at_ms, thread) IN (",
        thread_tags_of!("old"),
        ");
        INSERT OR IGNORE INTO thread_tags (key, value, created_at_ms, thread) ",
        thread_tags_of!("new"),
        ";
    END;
    CREATE TRIGGER thread_tags_go_with_their_thread AFTER DELETE ON threads
    BEGIN
        DELETE FROM thread_tags WHERE (key, value, created_at_ms, thread) IN (",
        thread_tags_of!("old"),
        ");
    END;
    CREATE TRIGGER threads_follow_new_run AFTER INSERT ON runs
    WHEN new.thread IS NOT NULL
    BEGIN
        UPDATE threads SET latest_run = new.id, status = ",
        thread_status_of!("new.status"),
        "
        WHERE id = new.thread AND (latest_run IS NULL OR latest_run < new.id);
    END;
    CREATE TRIGGER threads_follow_run_status AFTER UPDATE OF status ON runs
    WHEN new.thread IS NOT NULL AND new.status IS NOT old.status
    BEGIN
        UPDATE threads SET status = ",
        thread_status_of!("new.status"),
        "
        WHERE id = new.thread AND latest_run = new.id;
    END;
    CREATE TRIGGER threads_follow_deleted_run AFTER DELETE ON runs
    WHEN old.thread IS NOT NULL
    BEGIN
        UPDATE threads SET ",
        thread_latest!("old.thread"),
        "
        WHERE id = old.thread AND latest_run = old.id;
    END;

    -- The threads there were: their latest runs, and their tags (the
    -- metadata trigger above writes them).
    UPDATE threads SET ",
        thread_latest!("threads.id"),
        ";
    UPDATE threads SET metadata = metadata;
"
    ),
    // 19: a task's progress record under task number `i64::MIN + i`
    // (it was `-1 - i`). A workflow's tasks write their records in order;
    // numbered downwards, each was inserted before the step's others,
    // and `pending_writes`' pages were split at their start; numbered
    // upwards, each is appended (bench `workflow_tasks`: 18.3 -> 16.3 us
    // a task, medians of 12 interleaved runs).
    "
    UPDATE pending_writes SET task = (-9223372036854775807 - 1) + (-1 - task) WHERE task < 0;
",
    // 20: request keys (`Idempotency-Key`): the first request with a key
    // claims it for the id of what it makes; the primary key decides
    // between requests at once.
    "
    CREATE TABLE request_keys (
        scope         TEXT    NOT NULL,
        key           TEXT    NOT NULL,
        fingerprint   TEXT    NOT NULL,
        made          TEXT    NOT NULL,
        claimed_at_ms INTEGER NOT NULL,
        expires_at_ms INTEGER NOT NULL,
        PRIMARY KEY (scope, key)
    ) WITHOUT ROWID;
    CREATE INDEX request_keys_expiry ON request_keys (expires_at_ms);
",
    // 21: a thread's time to live (`ThreadRecord::ttl_ms`): the sweeper
    // reads the threads that have one through a partial index.
    "
    ALTER TABLE threads ADD COLUMN ttl_ms INTEGER;
    CREATE INDEX threads_with_ttl ON threads (ttl_ms) WHERE ttl_ms IS NOT NULL;
",
    // 22: who a thread belongs to (`ThreadRecord::owner`, `tenant`): a
    // user's searches and listings read their own threads, newest first,
    // through these indexes (partial: threads nobody owns are not in them).
    "
    ALTER TABLE threads ADD COLUMN owner TEXT;
    ALTER TABLE threads ADD COLUMN tenant TEXT;
    CREATE INDEX threads_by_owner ON threads (owner, created_at_ms, id) WHERE owner IS NOT NULL;
    CREATE INDEX threads_by_tenant ON threads (tenant, created_at_ms, id) WHERE tenant IS NOT NULL;
",
    // 23: the groups that review a thread's runs (`ThreadRecord::reviewers`,
    // a JSON array; NULL: none): read with the status, never alone.
    "
    ALTER TABLE threads ADD COLUMN reviewers TEXT;
",
];
