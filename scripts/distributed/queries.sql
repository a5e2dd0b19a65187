-- DuckDB queries over a dataset of `poketrace export` or poketrace_dask.py, its paths relative to
-- the dataset: run them in its directory (`cd OUT && duckdb < queries.sql`), or by name with
-- `query.py OUT NAME` (DuckDB's file_search_path set to OUT). Each query follows its `-- name:`
-- line; the tests check every answer against `poketrace decode`, `pokes` and `check`.

-- name: branches_per_function
-- Taken branches by the function they leave, on each CPU.
SELECT cpu, sym AS function, count(*) AS branches
FROM read_parquet('branches/*/*.parquet', hive_partitioning = false)
WHERE kind NOT IN ('insn', 'error')
GROUP BY ALL
ORDER BY cpu, branches DESC, function;

-- name: branches_per_kind
-- Rows by kind: perf's branch flags, `insn` (with --itrace=i) and `error`.
SELECT kind, count(*) AS n
FROM read_parquet('branches/*/*.parquet', hive_partitioning = false)
GROUP BY ALL
ORDER BY kind;

-- name: errors_per_cpu
-- Decode errors: where the decoder lost the trace and looked for the next sync point.
SELECT cpu, count(*) AS errors
FROM read_parquet('branches/*/*.parquet', hive_partitioning = false)
WHERE error IS NOT NULL
GROUP BY ALL
ORDER BY cpu;

-- name: between_pokes
-- What ran at each poked site between one poke of it and the next: the branches and
-- instructions at the poked bytes, by what the poke wrote there and by where they went.
WITH poke AS (
    SELECT addr AS site, sym AS site_sym, kind AS poke_kind, hex(new) AS new_bytes, octet_length(new) AS len,
           time AS since, lead(time) OVER (PARTITION BY addr ORDER BY time, file_row_number) AS until
    FROM read_parquet('pokes.parquet', file_row_number = true)
    WHERE time IS NOT NULL
)
SELECT p.site, p.site_sym, p.since, p.until, p.poke_kind, p.new_bytes, b.cpu, b.kind, b.addr_sym, count(*) AS n
FROM poke p
JOIN read_parquet('branches/*/*.parquet', hive_partitioning = false) b
  ON b.ip >= p.site AND b.ip < p.site + p.len
 AND b.time >= p.since AND (p.until IS NULL OR b.time < p.until)
WHERE b.error IS NULL
GROUP BY ALL
ORDER BY p.site, p.since, b.cpu, b.kind, b.addr_sym;

-- name: uncertain_spans
-- Runs of consecutive uncertain instructions (code whose bytes were not known when it ran: a
-- poke in flight) in each buffer, in trace order (the units' order, then the rows' order in
-- each unit's file). Needs a dataset exported with --itrace=i.
WITH row AS (
    SELECT s.buffer, b.cpu, b.time, b.ip, b.sym, b.uncertain,
           row_number() OVER (PARTITION BY s.buffer ORDER BY s.start, b.file_row_number) AS i
    FROM read_parquet('branches/*/*.parquet', hive_partitioning = false, filename = true, file_row_number = true) b
    JOIN read_parquet('segments.parquet') s ON s.id = regexp_extract(b.filename, 'seg-([^/]*)\.parquet$', 1)
), island AS (
    SELECT *, i - row_number() OVER (PARTITION BY buffer, uncertain ORDER BY i) AS run
    FROM row
)
SELECT buffer, any_value(cpu) AS cpu, min(time) AS time_from, max(time) AS time_to,
       arg_min(ip, i) AS first_ip, arg_min(sym, i) AS first_sym, count(*) AS insns
FROM island
WHERE uncertain
GROUP BY buffer, run
ORDER BY buffer, time_from, first_ip;
