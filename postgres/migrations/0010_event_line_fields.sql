-- Migration 10 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- engine event lines may be stored by fields (`~1|TIME|NODE|…`:
-- without their sequence number, a time shared with the line before,
-- or a node instance named after the node, step and task). No table
-- changes, as in 9; lines written before are read as they are.
SELECT 1;
