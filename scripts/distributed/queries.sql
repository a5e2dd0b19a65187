-- DuckDB queries over a dataset of `poketrace export` (or poketrace_dask.py), its paths relative
-- to the dataset: run them in its directory (`cd OUT && duckdb < queries.sql`), or with DuckDB's
-- file_search_path set to it. Each query follows a `-- name:` line (pokedist/queries.py runs them
-- by name; the tests check their answers against `poketrace decode` and `check`).

-- name: branches_per_function
-- Taken branches by the function they leave, on each CPU (error rows are not branches).
SELECT cpu, regexp_replace(sym, '\+0x[0-9a-f]+$', '') AS function, count(*) AS branches
FROM read_parquet('branches/*/*.parquet', hive_partitioning = false)
WHERE error IS NULL
GROUP BY ALL
ORDER BY cpu, branches DESC, function;

-- name: errors_per_cpu
-- Decode errors: where the decoder lost the trace and resynchronized.
SELECT cpu, count(*) AS errors
FROM read_parquet('branches/*/*.parquet', hive_partitioning = false)
WHERE error IS NOT NULL
GROUP BY ALL
ORDER BY cpu;

-- name: branches_per_kind
SELECT kind, count(*) AS branches
FROM read_parquet('branches/*/*.parquet', hive_partitioning = false)
WHERE error IS NULL
GROUP BY ALL
ORDER BY kind;
