"""A Dask client: on a running cluster's scheduler, or on a cluster of local processes."""

import contextlib
import os

from distributed import Client, LocalCluster


@contextlib.contextmanager
def connect(scheduler=None, local=None):
    """A client of the scheduler at `scheduler` (tcp://host:8786), or of `local` worker
    processes on this machine (default: one a core), one task at a time each, on localhost."""
    if scheduler:
        with Client(scheduler) as client:
            yield client
        return
    workers = local or os.cpu_count() or 1
    with LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster, Client(cluster) as client:
        yield client
