"""Arrow input from the frames people have: pandas (through pyarrow) and polars (through the
Arrow PyCapsule stream interface), as well as pyarrow tables, readers and row dicts."""

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import lance_actions as la
from conftest import read, rows


@pytest.fixture
def keyed(tmp_path):
    return la.KeyedTable.create(str(tmp_path / "k.lance"), rows(range(5)), key="id")


def test_a_pandas_frame_is_upserted(keyed):
    frame = pd.DataFrame({"id": pd.Series([3, 7], dtype="int64"), "v": pd.Series([30, 70], dtype="int64")})
    out = keyed.upsert(frame)
    assert (out.inserted, out.updated) == (1, 1)
    assert read(keyed.uri) == {0: 0, 1: 0, 2: 0, 3: 30, 4: 0, 7: 70}


def test_a_polars_frame_is_inserted_strictly(keyed):
    frame = pl.DataFrame({"id": pl.Series([8, 9], dtype=pl.Int64), "v": pl.Series([80, 90], dtype=pl.Int64)})
    assert hasattr(frame, "__arrow_c_stream__")
    keyed.insert(frame)
    with pytest.raises(la.KeyConflict) as err:
        keyed.insert(pl.DataFrame({"id": pl.Series([9], dtype=pl.Int64), "v": pl.Series([0], dtype=pl.Int64)}))
    assert err.value.cause == "already_present"
    assert read(keyed.uri) == {0: 0, 1: 0, 2: 0, 3: 0, 4: 0, 8: 80, 9: 90}


def test_a_record_batch_reader_and_row_dicts_are_taken(keyed):
    reader = pa.RecordBatchReader.from_batches(rows([]).schema, rows([10, 11], 1).to_batches())
    keyed.upsert(reader)
    keyed.upsert([{"id": 12, "v": 2}])
    assert {k: v for k, v in read(keyed.uri).items() if k >= 10} == {10: 1, 11: 1, 12: 2}


def test_something_that_is_not_arrow_is_a_value_error_and_writes_nothing(keyed):
    with pytest.raises(ValueError, match="expected Arrow data"):
        keyed.upsert(42)
    assert keyed.version == 1 and len(read(keyed.uri)) == 5
