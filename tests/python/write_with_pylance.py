"""Write a dataset with pylance 14.0.2 (create, append, delete, index, branch) for the CLI interop test.

Usage: write_with_pylance.py <uri>
"""
import sys

import lance
import pyarrow as pa

uri = sys.argv[1]
table = pa.table({"id": pa.array(range(16), pa.int64()), "v": pa.array(range(16), pa.int64())})
ds = lance.write_dataset(table, uri, max_rows_per_file=8)
ds = lance.write_dataset(pa.table({"id": pa.array([100], pa.int64()), "v": pa.array([1], pa.int64())}), uri, mode="append")
ds.delete("id = 3")
ds.create_scalar_index("id", "BTREE")
ds = lance.dataset(uri)
ds.create_branch("feature", ds.version)
print(ds.version)
