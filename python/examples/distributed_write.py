"""Many writers, one table, no Ray: N worker processes stage fragments with pylance's
``write_fragments``; a coordinator commits each worker's fragments through ``lance_actions.commit``.

Every commit is staged on the same read version, so each one after the first is judged against
those that landed before it and rebased (appends never re-execute). Works on a local path or an
object store: ``python distributed_write.py s3://bucket/t --storage-option aws_endpoint=...``.

    python python/examples/distributed_write.py /tmp/t.lance --workers 4 --rows 1000
"""

import argparse
import multiprocessing as mp
import pickle

import lance
import pyarrow as pa
from lance import LanceOperation
from lance.fragment import write_fragments

import lance_actions as la


def stage(args):
    """A worker: write its rows as fragments (nothing committed) and hand back their metadata."""
    uri, worker, rows, options = args
    ids = range(worker * rows, (worker + 1) * rows)
    table = pa.table({"id": pa.array(ids, pa.int64()), "worker": pa.array([worker] * rows, pa.int64())})
    fragments = write_fragments(table, uri, max_rows_per_file=rows, storage_options=options or None)
    return pickle.dumps(fragments)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("uri")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--rows", type=int, default=1000, help="rows per worker")
    p.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    a = p.parse_args(argv)
    options = dict(kv.split("=", 1) for kv in a.storage_option)
    schema = pa.schema([("id", pa.int64()), ("worker", pa.int64())])
    lance.write_dataset(schema.empty_table(), a.uri, mode="create", storage_options=options or None)
    read_version = lance.dataset(a.uri, storage_options=options or None).version
    with mp.get_context("spawn").Pool(a.workers) as pool:
        staged = pool.map(stage, [(a.uri, w, a.rows, options) for w in range(a.workers)])
    for worker, blob in enumerate(staged):
        txn = lance.Transaction(read_version=read_version, operation=LanceOperation.Append(pickle.loads(blob)))
        report = la.commit(a.uri, txn, storage_options=options or None)
        peers = len(report.attempts[-1]["peers"])
        print(f"worker {worker}: landed v{report.version}, judged against {peers} peer(s), {len(report.attempts)} attempt(s)")
    rows = lance.dataset(a.uri, storage_options=options or None).count_rows()
    print(f"{rows} rows")
    return rows


if __name__ == "__main__":
    main()
