-- Migration 9 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- event lines written compact (`EventRecord::join_compact`: without
-- the head every line of a run repeats, and without a time equal to the
-- line before's). The tables do not change; the version does, so that
-- an older build, which would read such lines as broken JSON, refuses
-- the schema instead. Lines written before are read as they are.
SELECT 1;
