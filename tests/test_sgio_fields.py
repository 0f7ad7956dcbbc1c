"""The SG_IO struct decoded in Rust (native/src/text/sgio.rs `sgio_fields`, `sgio_decode`,
through parsers/_sgio_struct.py `decode`) against the polars versions they replaced (kept here
and in tests/sgio_struct_reference.py as the oracles): the same value of every field read and
the same decoded command (or the same reason it does not decode), for any struct text, however
the texts are cut into batches."""
from __future__ import annotations

import polars as pl
from hypothesis import given, settings, strategies as st

from scsitrace.parsers import _sgio_struct
import sgio_struct_reference as reference

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


def _fields(c: pl.DataFrame) -> pl.DataFrame:
    from scsitrace._native import text
    return pl.DataFrame(text.sgio_fields(c.select("arg"))).select(pl.all().cast(pl.Utf8)) if c.height else \
        pl.DataFrame(schema=dict.fromkeys(FIELDS, pl.Utf8))


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
    got = pl.concat([_fields(c.head(cut)), _fields(c.slice(cut))]).select(FIELDS)
    assert got.to_dicts() == want.to_dicts()


def test_the_first_of_a_repeated_field_is_read():
    c = pl.DataFrame({"arg": ["{status=1, status=2, resid=, resid=3}"]})
    got = _fields(c).row(0, named=True)
    assert (got["status"], got["resid"], got["cmdp"]) == ("1", "", None)


# struct texts in the shapes strace prints, with the values that break them: numbers out of
# range or signed, hex, white space, buffers truncated or not \xNN, sense in both formats
NUMBER = st.one_of(st.integers(-2**32, 2**33).map(str), st.integers(-5, 2**33).map(hex),
                   st.sampled_from(["", " 7", "+3", "-0", "0x", "0x-1", "1_0", "5.0", "٣", "0X1f", "0x 2"]))
BUFFER = st.one_of(
    st.lists(st.integers(0, 255), max_size=20).map(lambda b: '"' + "".join(f"\\x{x:02x}" for x in b) + '"'),
    st.lists(st.sampled_from(["70", "72", "f0", "F1", "71", "00", "05", "24", "3a", "+5", "-a", "g1", "x", "."]),
             max_size=16).map(lambda b: '"\\x' + "\\x".join(b) + '"'),
    st.sampled_from(["NULL", "0x7ffd1234", '"\\x28\\x00"...', '"(\\x00"', '"\\x2"', '""', '"é\\x00"']))
DIRECTION = st.sampled_from(["SG_DXFER_NONE", "SG_DXFER_TO_DEV", "SG_DXFER_FROM_DEV", "SG_DXFER_TO_FROM_DEV",
                             "SG_DXFER_UNKNOWN", "-3", "sg_dxfer_none"])
V3 = ("dxfer_direction", "cmdp", "dxfer_len", "status", "host_status", "sb_len_wr", "sbp", "resid", "duration")
V4 = ("request", "din_xfer_len", "dout_xfer_len", "din_resid", "dout_resid", "device_status", "transport_status",
      "response_len", "response")


def _value(name: str):
    if name in ("cmdp", "sbp", "request", "response"):
        return BUFFER
    return DIRECTION if name == "dxfer_direction" else NUMBER


def _struct(head: str, names: tuple):
    kvs = st.lists(st.sampled_from(names + ("info", "flags")).flatmap(
        lambda n: _value(n).map(lambda v: f"{n}={v}")), max_size=12)
    return kvs.map(lambda kv: "{" + ", ".join([head, *kv]) + "}")


STRUCT = st.one_of(_struct("interface_id='S'", V3), _struct("guard='Q'", V4), st.sampled_from(["0x7ffd", "NULL"]))
CALL = st.fixed_dictionaries({
    "pid": st.one_of(st.none(), st.integers(1, 9)), "t_ns": st.one_of(st.none(), st.integers(0, 10**12)),
    "fd": st.sampled_from(["3", "3", "4", "4", "99999999999", "-1"]), "path": st.sampled_from([None, "/dev/sg0"]),
    "arg": STRUCT, "ret": st.sampled_from(["0", "-1", "?"]), "errno": st.sampled_from([None, "EIO"]),
    "dur": st.sampled_from([None, None, "0.000123", "1.5", "x.1"]),
    "end_t_ns": st.one_of(st.none(), st.integers(0, 10**12))})
CALLS = {"line_no": pl.Int64, "pid": pl.Int64, "t_ns": pl.Int64, "fd": pl.Utf8, "path": pl.Utf8, "arg": pl.Utf8,
         "ret": pl.Utf8, "errno": pl.Utf8, "dur": pl.Utf8, "end_t_ns": pl.Int64}
NO_OPENS = pl.DataFrame(schema={"line_no": pl.Int64, "pid": pl.Int64, "fd": pl.Int64, "opath": pl.Utf8})


@settings(max_examples=400, deadline=None)
@given(st.lists(CALL, min_size=1, max_size=10), st.integers(1, 9), st.booleans())
def test_decoding_equals_the_polars_one_in_any_batches(calls, cut, many):
    c = pl.DataFrame([{"line_no": i, **r} for i, r in enumerate(calls)], schema=CALLS)
    want = reference.decode(c, NO_OPENS, many)
    parts = [p for p in (c.head(cut), c.slice(cut)) if p.height]
    got = pl.concat([_sgio_struct.decode(p, NO_OPENS, many) for p in parts])
    assert got.columns == want.columns
    assert got.to_dicts() == want.to_dicts()


def test_a_fixed_sense_reads_key_asc_ascq():
    arg = ("{interface_id='S', dxfer_direction=SG_DXFER_FROM_DEV, cmd_len=6, cmdp=\"\\x00\\x00\\x00\\x00\\x00\\x00\", "
           "mx_sb_len=32, sbp=\"\\x70\\x00\\x05\\x00\\x00\\x00\\x00\\x0a\\x00\\x00\\x00\\x00\\x24\\x01\", "
           "dxfer_len=0, status=0x2, host_status=0, sb_len_wr=14, resid=0, duration=1}")
    c = pl.DataFrame([{"line_no": 1, "pid": None, "t_ns": 0, "fd": "3", "path": None, "arg": arg, "ret": "0",
                       "errno": None, "dur": None, "end_t_ns": None}], schema=CALLS)
    row = _sgio_struct.decode(c, NO_OPENS, False).row(0, named=True)
    assert (row["sense_key"], row["asc"], row["ascq"], row["status"], row["cdb"], row["driver_ns"]) == \
        ("Illegal Request", 0x24, 0x01, "CHECK CONDITION", bytes(6), 1_000_000)
