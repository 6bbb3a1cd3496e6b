"""Foreign (pylance 14.0.2) writers on a keyed table, for the CLI's fencing-boundary test.

Usage: keyed_foreign_writers.py <uri> stale-append <id> <read_version>
       keyed_foreign_writers.py <uri> merge-insert <id>
Prints the version the write landed at.
"""
import sys

import lance
import pyarrow as pa

uri, phase, key = sys.argv[1], sys.argv[2], int(sys.argv[3])
schema = lance.dataset(uri).schema
rows = pa.table({"id": pa.array([key], pa.int64()), "name": pa.array([f"py{key}"], pa.string())}, schema=schema)
if phase == "stale-append":
    # An append staged on an old version and committed through Lance's own loop.
    fragment = lance.fragment.LanceFragment.create(uri, rows)
    ds = lance.LanceDataset.commit(uri, lance.LanceOperation.Append([fragment]), read_version=int(sys.argv[4]))
elif phase == "merge-insert":
    # Lance's keyed merge-insert on the primary key: it carries Lance's key filter.
    ds = lance.dataset(uri)
    ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(rows)
    ds = lance.dataset(uri)
else:
    sys.exit(f"unknown phase {phase}")
print(ds.version)
