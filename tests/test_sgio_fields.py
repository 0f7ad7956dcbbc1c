"""The SG_IO struct split into its fields in Rust (native/src/text/sgio.rs `sgio_fields`,
through parsers/_sgio_struct.py `_fields`) against the polars split it replaced (kept here as
the oracle): the same value of every field read, for any struct text, however the texts are
cut into batches."""
from __future__ import annotations

import polars as pl
from hypothesis import given, settings, strategies as st

from scsitrace.parsers import _sgio_struct

FIELDS = ("dxfer_direction", "cmdp", "dxfer_len", "status", "host_status", "sb_len_wr", "sbp", "resid",
          "duration", "request", "din_xfer_len", "dout_xfer_len", "din_resid", "dout_resid", "device_status",
          "transport_status", "response_len", "response")


def oracle(c: pl.DataFrame) -> pl.DataFrame:
    """The polars split (parsers/_sgio_struct.py before the Rust pass)."""
    kv = c.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("_row"),
                  pl.col("arg").str.strip_prefix("{").str.strip_suffix("}").str.split(", ").alias("kv")) \
        .explode("kv").select("_row", pl.col("kv").str.splitn("=", 2).struct.rename_fields(["k", "v"]).alias("kv")) \
        .unnest("kv").filter(pl.col("k").is_in(FIELDS))
    wide = kv.pivot(on="k", index="_row", values="v", aggregate_function="first") if kv.height else \
        pl.DataFrame(schema={"_row": pl.Int64})
    c = c.with_row_index("_row").with_columns(pl.col("_row").cast(pl.Int64)).join(wide, on="_row", how="left")
    return c.with_columns([pl.lit(None, dtype=pl.Utf8).alias(f) for f in FIELDS if f not in c.columns])


names = st.sampled_from(FIELDS + ("interface_id", "flags", "info", "x", "", "status "))
values = st.sampled_from(["0", "5", "0x1f", "SG_DXFER_FROM_DEV", '"\\x28\\x00"...', "NULL", "", "a=b", "é", "{}"])
pair = st.one_of(st.tuples(names, values).map(lambda kv: f"{kv[0]}={kv[1]}"), names)
struct = st.builds(lambda open_, kvs, close: open_ + ", ".join(kvs) + close,
                   st.sampled_from(["{", "", "{{"]), st.lists(pair, max_size=8), st.sampled_from(["}", "", "}}"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), struct), max_size=12), st.integers(0, 12))
def test_fields_equal_the_polars_split_in_any_batches(args, cut):
    c = pl.DataFrame({"line_no": range(len(args)), "arg": args}, schema={"line_no": pl.Int64, "arg": pl.Utf8})
    want = oracle(c).select(FIELDS)
    got = pl.concat([_sgio_struct._fields(c.head(cut)), _sgio_struct._fields(c.slice(cut))]).select(FIELDS)
    assert got.to_dicts() == want.to_dicts()


def test_the_first_of_a_repeated_field_is_read():
    c = pl.DataFrame({"arg": ["{status=1, status=2, resid=, resid=3}"]})
    got = _sgio_struct._fields(c).row(0, named=True)
    assert (got["status"], got["resid"], got["cmdp"]) == ("1", "", None)
