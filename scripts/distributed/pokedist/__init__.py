"""Decoding a perf.data directory's trace on a Dask cluster: one `poketrace export --segment`
task per independent unit, the Parquet dataset as the result."""
