-- Migration 26 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- The groups that review a thread's runs (`ThreadRecord::reviewers`; NULL:
-- none): read with the status (`threads_by_status`), never alone.
    ALTER TABLE threads ADD COLUMN reviewers text[];
