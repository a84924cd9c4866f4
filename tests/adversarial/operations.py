"""Every allow-listed row-level operation, with adversarial parameters, for the exception-oracle fuzzer.

``CASES`` maps a case name to the input types it is tried on and a builder. A builder takes the input
column ``c`` (and a second column ``d`` of the type in ``second``, for operations with two column inputs)
and returns the expression. Parameters are chosen to hit the edges of their legal domain: bases 0/1/2/36/37,
formats a Date cannot fill, zero and negative durations, huge offsets, invalid regexes, lengths at and
past ``MAX_LITERAL``. The meta-test in ``test_exception_oracle.py`` fails when an allow-listed operation
(``dpframe.plan.rowlevel.allowed_operations()``) appears in no case.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

INTS = [pl.Int8(), pl.Int64(), pl.UInt8(), pl.UInt64()]
FLOATS = [pl.Float32(), pl.Float64()]
DECIMALS = [pl.Decimal(38, 10), pl.Decimal(10, 2)]
NUMS = [*INTS, *FLOATS, *DECIMALS]
STR = [pl.String()]
DATE = [pl.Date()]
DATETIMES = [pl.Datetime("ms"), pl.Datetime("us"), pl.Datetime("ns"), pl.Datetime("us", "Europe/Amsterdam"),
             pl.Datetime("ms", "UTC")]
TEMPORAL = [*DATE, *DATETIMES]
DURATIONS = [pl.Duration("ms"), pl.Duration("us"), pl.Duration("ns")]
TIME = [pl.Time()]
BOOL = [pl.Boolean()]
BINARY = [pl.Binary()]
NESTED = [pl.List(pl.Int64), pl.List(pl.String), pl.Array(pl.Float64, 2), pl.Struct({"a": pl.Int64, "b": pl.String})]
CATEGORIES = [pl.Enum(["a", "b", "é"]), pl.Categorical()]
EVERY = [*NUMS, *STR, *TEMPORAL, *DURATIONS, *TIME, *BOOL, *BINARY, *NESTED, *CATEGORIES, pl.Null()]

Builder = Callable[[pl.Expr, pl.Expr], pl.Expr]


def _binary(op: str, c: pl.Expr, d: pl.Expr) -> pl.Expr:
    """A binary operator the Python API does not build, as an analyst can still write it (deserialized JSON)."""
    tree = {"BinaryExpr": {"left": json.loads(c.meta.serialize(format="json")), "op": op,
                           "right": json.loads(d.meta.serialize(format="json"))}}
    return pl.Expr.deserialize(io.StringIO(json.dumps(tree)), format="json")


@dataclass(frozen=True)
class Case:
    """One operation with fixed parameters, tried on each type in ``types`` (and ``second`` for ``d``)."""

    types: tuple[pl.DataType, ...]
    build: Builder
    second: pl.DataType | None = None


CASES: dict[str, Case] = {}


def case(name: str, types: list[pl.DataType], build: Builder, second: pl.DataType | None = None) -> None:
    assert name not in CASES, name
    CASES[name] = Case(tuple(types), build, second)


def cases(prefix: str, types: list[pl.DataType], builders: dict[str, Builder],
          second: pl.DataType | None = None) -> None:
    for name, build in builders.items():
        case(f"{prefix}.{name}", types, build, second)


# ------------------------------------------------------------------------------------------------ numeric
cases("num", NUMS, {
    "abs": lambda c, d: c.abs(), "neg": lambda c, d: -c, "sign": lambda c, d: c.sign(),
    "round0": lambda c, d: c.round(0), "round3": lambda c, d: c.round(3), "round_even": lambda c, d: c.round(1, "half_to_even"),
    "round_sf1": lambda c, d: c.round_sig_figs(1), "round_sf15": lambda c, d: c.round_sig_figs(15),
    "floor": lambda c, d: c.floor(), "ceil": lambda c, d: c.ceil(),
    "clip": lambda c, d: c.clip(0, 10), "clip_neg": lambda c, d: c.clip(-5, -1), "clip_low": lambda c, d: c.clip(lower_bound=3),
    "fill_null": lambda c, d: c.fill_null(0), "hash": lambda c, d: c.hash(), "hash_seed": lambda c, d: c.hash(2**64 - 1),
    "replace": lambda c, d: c.replace({0: 1, 1: 0}), "replace_lists": lambda c, d: c.replace([0, 1], [7, 8]),
    "is_between": lambda c, d: c.is_between(0, 100), "is_between_open": lambda c, d: c.is_between(0, 1, closed="none"),
    "is_in": lambda c, d: c.is_in([0, 1, 2]), "is_null": lambda c, d: c.is_null(), "is_not_null": lambda c, d: c.is_not_null(),
    "to_physical": lambda c, d: c.to_physical(),
})
cases("float", [*FLOATS, *INTS], {
    "log": lambda c, d: c.log(), "log2": lambda c, d: c.log(2), "log_base0": lambda c, d: c.log(0),
    "log_base_neg": lambda c, d: c.log(-1), "log1p": lambda c, d: c.log1p(), "exp": lambda c, d: c.exp(),
    "cbrt": lambda c, d: c.cbrt(), "sqrt": lambda c, d: c.sqrt(), "pow2": lambda c, d: c.pow(2),
    "pow_half": lambda c, d: c.pow(0.5), "pow_neg_float": lambda c, d: c.pow(-1.5), "pow_big": lambda c, d: c.pow(1000),
    "pow_third": lambda c, d: c.pow(1 / 3), "atan2": lambda c, d: pl.arctan2(c, pl.lit(1.0)),
    "is_finite": lambda c, d: c.is_finite(), "is_infinite": lambda c, d: c.is_infinite(),
    "is_close": lambda c, d: c.is_close(1.0), "is_close_abs": lambda c, d: c.is_close(0.0, abs_tol=1e300),
    **{f"trig_{f}": (lambda f: lambda c, d: getattr(c, f)())(f)
       for f in ("cos", "cot", "sin", "tan", "arccos", "arcsin", "arctan", "cosh", "sinh", "tanh", "arccosh",
                 "arcsinh", "arctanh", "degrees", "radians")},
})
cases("float_only", FLOATS, {
    "fill_nan": lambda c, d: c.fill_nan(0), "is_nan": lambda c, d: c.is_nan(), "is_not_nan": lambda c, d: c.is_not_nan(),
})
cases("int_only", INTS, {
    "pow_neg": lambda c, d: c.pow(-1), "reinterpret_signed": lambda c, d: c.reinterpret(signed=True),
    "reinterpret_unsigned": lambda c, d: c.reinterpret(signed=False),
})
for second in (pl.Int64(), pl.Float64(), pl.UInt8(), pl.Decimal(38, 10)):
    tag = str(second).split("(")[0].lower()
    cases(f"num2_{tag}", NUMS, {
        **{f"op_{name}": (lambda op: lambda c, d: op(c, d))(op) for name, op in {
            "plus": lambda a, b: a + b, "minus": lambda a, b: a - b, "mul": lambda a, b: a * b,
            "truediv": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
            "eq": lambda a, b: a == b, "eq_missing": lambda a, b: a.eq_missing(b), "ne": lambda a, b: a != b,
            "ne_missing": lambda a, b: a.ne_missing(b), "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
            "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}.items()},
        "clip_cols": lambda c, d: c.clip(d, d), "fill_null_col": lambda c, d: c.fill_null(d),
        "coalesce": lambda c, d: pl.coalesce(c, d), "max_h": lambda c, d: pl.max_horizontal(c, d),
        "min_h": lambda c, d: pl.min_horizontal(c, d), "sum_h": lambda c, d: pl.sum_horizontal(c, d),
        "mean_h": lambda c, d: pl.mean_horizontal(c, d), "atan2_col": lambda c, d: pl.arctan2(c, d),
        **{f"json_{op}": (lambda op: lambda c, d: _binary(op, c, d))(op)
           for op in ("RustDivide", "TruncDivide", "LogicalAnd", "LogicalOr", "EqValidity", "NotEqValidity")},
        "log_col": lambda c, d: c.log(d), "pow_col": lambda c, d: c.pow(d), "is_between_cols": lambda c, d: c.is_between(d, d),
        "is_close_col": lambda c, d: c.is_close(d), "struct": lambda c, d: pl.struct(c, d),
        "when": lambda c, d: pl.when(c > 0).then(c).otherwise(d), "concat_str": lambda c, d: pl.concat_str(c, d),
    }, second)
cases("int_bits", INTS, {
    "and": lambda c, d: c & d, "or": lambda c, d: c | d, "xor": lambda c, d: c ^ d,
}, pl.Int64())

# ------------------------------------------------------------------------------------------------ boolean
cases("bool", BOOL, {
    "and": lambda c, d: c & d, "or": lambda c, d: c | d, "xor": lambda c, d: c ^ d, "not": lambda c, d: ~c,
    "all_h": lambda c, d: pl.all_horizontal(c, d), "any_h": lambda c, d: pl.any_horizontal(c, d),
    "when": lambda c, d: pl.when(c).then(pl.lit(1)).otherwise(pl.lit(None)),
}, pl.Boolean())


# ------------------------------------------------------------------------------------------------ strings
def _regex_cases(prefix: str, pattern: str) -> dict[str, Builder]:
    return {
        f"contains_{prefix}": lambda c, d: c.str.contains(pattern, strict=False),
        f"count_matches_{prefix}": lambda c, d: c.str.count_matches(pattern),
        f"extract_{prefix}": lambda c, d: c.str.extract(pattern, 1),
        f"extract_all_{prefix}": lambda c, d: c.str.extract_all(pattern),
        f"find_{prefix}": lambda c, d: c.str.find(pattern, strict=False),
        f"replace_{prefix}": lambda c, d: c.str.replace(pattern, "x"),
        f"replace_all_{prefix}": lambda c, d: c.str.replace_all(pattern, "$1"),
    }


cases("str", STR, {
    **_regex_cases("ok", r"(\d+)"), **_regex_cases("bad", "(["), **_regex_cases("empty", ""),
    **_regex_cases("unicode", r"(\p{L}+)"), **_regex_cases("group9", r"(a)\9"),
    "contains_literal": lambda c, d: c.str.contains("(", literal=True),
    "extract_groups": lambda c, d: c.str.extract_groups(r"(?<x>\d)(\w)"), "extract_group0": lambda c, d: c.str.extract(r"\d", 0),
    "extract_group_99": lambda c, d: c.str.extract(r"(\d)", 99),
    "to_integer_b0": lambda c, d: c.str.to_integer(base=0, strict=False), "to_integer_b1": lambda c, d: c.str.to_integer(base=1, strict=False),
    "to_integer_b2": lambda c, d: c.str.to_integer(base=2, strict=False), "to_integer_b10": lambda c, d: c.str.to_integer(strict=False),
    "to_integer_b36": lambda c, d: c.str.to_integer(base=36, strict=False), "to_integer_b37": lambda c, d: c.str.to_integer(base=37, strict=False),
    "to_integer_i8": lambda c, d: c.str.to_integer(dtype=pl.Int8, strict=False),
    "len_bytes": lambda c, d: c.str.len_bytes(), "len_chars": lambda c, d: c.str.len_chars(),
    "lower": lambda c, d: c.str.to_lowercase(), "upper": lambda c, d: c.str.to_uppercase(),
    "title": lambda c, d: c.str.to_titlecase(), "reverse": lambda c, d: c.str.reverse(),
    "pad_start": lambda c, d: c.str.pad_start(20, "é"), "pad_end": lambda c, d: c.str.pad_end(10_000),
    "pad_end_too_long": lambda c, d: c.str.pad_end(10_001), "pad_neg": lambda c, d: c.str.pad_start(-1),
    "zfill": lambda c, d: c.str.zfill(5), "zfill_big": lambda c, d: c.str.zfill(10_001),
    "slice": lambda c, d: c.str.slice(1, 2), "slice_neg": lambda c, d: c.str.slice(-3), "slice_huge": lambda c, d: c.str.slice(2**40, 2**40),
    "head": lambda c, d: c.str.head(3), "head_neg": lambda c, d: c.str.head(-3), "tail": lambda c, d: c.str.tail(-2),
    "hex_encode": lambda c, d: c.str.encode("hex"), "base64_encode": lambda c, d: c.str.encode("base64"),
    "hex_decode": lambda c, d: c.str.decode("hex", strict=False), "base64_decode": lambda c, d: c.str.decode("base64", strict=False),
    "starts_with": lambda c, d: c.str.starts_with("a"), "ends_with": lambda c, d: c.str.ends_with(""),
    "strip": lambda c, d: c.str.strip_chars(), "strip_set": lambda c, d: c.str.strip_chars("a\u0301"),
    "strip_start": lambda c, d: c.str.strip_chars_start("0"), "strip_end": lambda c, d: c.str.strip_chars_end(),
    "strip_prefix": lambda c, d: c.str.strip_prefix("a"), "strip_suffix": lambda c, d: c.str.strip_suffix("😀"),
    "split_exact": lambda c, d: c.str.split_exact(",", 3), "split_exact_big": lambda c, d: c.str.split_exact(",", 10_001),
    "splitn": lambda c, d: c.str.splitn("-", 2), "split": lambda c, d: c.str.split(""), "split_incl": lambda c, d: c.str.split("a", inclusive=True),
    "split_regex": lambda c, d: c.str.split(r"\s+", literal=False), "split_regex_bad": lambda c, d: c.str.split("(", literal=False),
    "strptime_date": lambda c, d: c.str.strptime(pl.Date, "%Y-%m-%d", strict=False),
    "strptime_dt_ns": lambda c, d: c.str.strptime(pl.Datetime("ns"), "%Y-%m-%d", strict=False),
    "to_datetime_tz": lambda c, d: c.str.to_datetime("%Y-%m-%d %H:%M:%S", time_zone="Europe/Amsterdam", strict=False,
                                                     ambiguous="earliest"),
    "to_datetime_offset": lambda c, d: c.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%z", strict=False),
    "to_time": lambda c, d: c.str.to_time("%H:%M:%S", strict=False), "strptime_bad_format": lambda c, d: c.str.to_date("%Q", strict=False),
    "strptime_not_exact": lambda c, d: c.str.to_date("%Y", strict=False, exact=False),
    "contains_any": lambda c, d: c.str.contains_any(["a", "é"]), "contains_any_ci": lambda c, d: c.str.contains_any(["A"], ascii_case_insensitive=True),
    "replace_many": lambda c, d: c.str.replace_many(["a", "b"], ["bb", ""]), "replace_many_map": lambda c, d: c.str.replace_many({"": "x"}),
    "extract_many": lambda c, d: c.str.extract_many(["a", "ab"]), "find_many": lambda c, d: c.str.find_many(["a", "😀"]),
    "escape_regex": lambda c, d: c.str.escape_regex(), "normalize_nfc": lambda c, d: c.str.normalize("NFC"),
    "normalize_nfkd": lambda c, d: c.str.normalize("NFKD"), "format": lambda c, d: pl.format("{}-{}", c, d),
    "concat": lambda c, d: pl.concat_str(c, pl.lit("|"), d, ignore_nulls=True), "concat_sep": lambda c, d: pl.concat_str([c, d], separator="é"),
    "contains_col": lambda c, d: c.str.contains(d, strict=False), "starts_with_col": lambda c, d: c.str.starts_with(d),
    "ends_with_col": lambda c, d: c.str.ends_with(d), "strip_col": lambda c, d: c.str.strip_chars(d),
    "strip_start_col": lambda c, d: c.str.strip_chars_start(d), "strip_end_col": lambda c, d: c.str.strip_chars_end(d),
    "strip_prefix_col": lambda c, d: c.str.strip_prefix(d), "strip_suffix_col": lambda c, d: c.str.strip_suffix(d),
    "compare": lambda c, d: c < d, "eq": lambda c, d: c == d, "plus": lambda c, d: c + d,
    "is_in_list": lambda c, d: c.is_in(["a", "é", ""]), "replace_map": lambda c, d: c.replace({"a": "b"}),
    "when_mixed": lambda c, d: pl.when(c == "a").then(c).otherwise(pl.lit(1)),
    "literal_too_long": lambda c, d: c + pl.lit("x" * 10_001),
    "prefix": lambda c, d: c.name.prefix("p_"), "suffix": lambda c, d: c.name.suffix("_s"),
    "to_lower_name": lambda c, d: c.name.to_lowercase(), "to_upper_name": lambda c, d: c.name.to_uppercase(),
    "keep_name": lambda c, d: c.str.len_chars().name.keep(),
}, pl.String())


# ------------------------------------------------------------------------------------------------ temporal
def _temporal_unary() -> dict[str, Builder]:
    fields = ("millennium", "century", "year", "is_leap_year", "iso_year", "quarter", "month", "days_in_month",
              "week", "weekday", "day", "ordinal_day", "date", "month_start", "month_end")
    out: dict[str, Builder] = {f: (lambda f: lambda c, d: getattr(c.dt, f)())(f) for f in fields}
    out.update({
        "to_string_date": lambda c, d: c.dt.to_string("%Y-%m-%d"), "to_string_time": lambda c, d: c.dt.to_string("%H:%M"),
        "to_string_bad": lambda c, d: c.dt.to_string("%Q"), "to_string_iso": lambda c, d: c.dt.to_string("iso"),
        "to_string_pct": lambda c, d: c.dt.to_string("%"), "to_string_z": lambda c, d: c.dt.to_string("%z %Z"),
        "truncate_1mo": lambda c, d: c.dt.truncate("1mo"), "truncate_1y": lambda c, d: c.dt.truncate("1y"),
        "truncate_0": lambda c, d: c.dt.truncate("0d"), "truncate_neg": lambda c, d: c.dt.truncate("-1d"),
        "truncate_1h": lambda c, d: c.dt.truncate("1h"), "truncate_3w": lambda c, d: c.dt.truncate("3w"),
        "truncate_huge": lambda c, d: c.dt.truncate("300000y"),
        "round_1y": lambda c, d: c.dt.round("1y"), "round_0ns": lambda c, d: c.dt.round("0ns"),
        "round_7d": lambda c, d: c.dt.round("7d"), "round_1q": lambda c, d: c.dt.round("1q"),
        "offset_1y": lambda c, d: c.dt.offset_by("1y"), "offset_neg": lambda c, d: c.dt.offset_by("-1mo"),
        "offset_100000y": lambda c, d: c.dt.offset_by("100000y"), "offset_200000y": lambda c, d: c.dt.offset_by("200000y"),
        "offset_mixed": lambda c, d: c.dt.offset_by("1y2mo-3d4h"), "offset_0": lambda c, d: c.dt.offset_by("0ns"),
        "cast_ms": lambda c, d: c.cast(pl.Datetime("ms"), strict=False), "cast_ns": lambda c, d: c.cast(pl.Datetime("ns"), strict=False),
        "cast_date": lambda c, d: c.cast(pl.Date, strict=False), "cast_str": lambda c, d: c.cast(pl.String, strict=False),
        "cast_int": lambda c, d: c.cast(pl.Int64, strict=False), "cast_i8": lambda c, d: c.cast(pl.Int8, strict=False),
        "cast_f": lambda c, d: c.cast(pl.Float64, strict=False), "cast_time": lambda c, d: c.cast(pl.Time, strict=False),
        "is_between": lambda c, d: c.is_between(dt.date(2000, 1, 1), dt.date(2001, 1, 1)),
        "compare_lit": lambda c, d: c > dt.datetime(2020, 1, 1), "is_in": lambda c, d: c.is_in([dt.date(2020, 1, 1)]),
        "minus_self": lambda c, d: c - c, "plus_duration": lambda c, d: c + pl.duration(days=1),
        "plus_huge_duration": lambda c, d: c + pl.duration(days=10**9), "minus_huge": lambda c, d: c - pl.duration(weeks=10**8),
        "replace_year": lambda c, d: c.dt.replace(year=2000), "replace_far": lambda c, d: c.dt.replace(year=300_000),
        "epoch_s": lambda c, d: c.dt.epoch("s"), "timestamp_ns": lambda c, d: c.dt.timestamp("ns"),
        "fill_null": lambda c, d: c.fill_null(dt.date(2020, 1, 1)), "hash": lambda c, d: c.hash(),
        "when_str": lambda c, d: pl.when(c.is_null()).then(pl.lit("none")).otherwise(c),
        "combine": lambda c, d: c.dt.combine(dt.time(23, 59, 59)), "combine_ns": lambda c, d: c.dt.combine(dt.time(1), "ns"),
    })
    return out


def _datetime_unary() -> dict[str, Builder]:
    fields = ("hour", "minute", "second", "millisecond", "microsecond", "nanosecond", "time")
    out: dict[str, Builder] = {f: (lambda f: lambda c, d: getattr(c.dt, f)())(f) for f in fields}
    out.update({
        "cast_time_unit_ns": lambda c, d: c.dt.cast_time_unit("ns"), "cast_time_unit_ms": lambda c, d: c.dt.cast_time_unit("ms"),
        "replace_tz": lambda c, d: c.dt.replace_time_zone("Europe/Amsterdam", ambiguous="earliest", non_existent="null"),
        "replace_tz_none": lambda c, d: c.dt.replace_time_zone(None), "replace_tz_null": lambda c, d: c.dt.replace_time_zone(
            "America/St_Johns", ambiguous="null", non_existent="null"),
        "convert_tz": lambda c, d: c.dt.replace_time_zone("UTC", non_existent="null").dt.convert_time_zone(
            "Australia/Lord_Howe"),
        "base_utc_offset": lambda c, d: c.dt.replace_time_zone("Europe/Amsterdam", ambiguous="earliest",
                                                               non_existent="null").dt.base_utc_offset(),
        "dst_offset": lambda c, d: c.dt.replace_time_zone("Europe/Amsterdam", ambiguous="latest",
                                                          non_existent="null").dt.dst_offset(),
        "with_time_unit": lambda c, d: c.cast(pl.Int64).cast(pl.Datetime("ns"), strict=False),
        "truncate_1s": lambda c, d: c.dt.truncate("1s"), "round_1ms": lambda c, d: c.dt.round("1ms"),
    })
    return out


cases("temporal", TEMPORAL, _temporal_unary())
cases("datetime", DATETIMES, _datetime_unary())
cases("duration", DURATIONS, {
    **{f"total_{u}": (lambda u: lambda c, d: getattr(c.dt, f"total_{u}")())(u)
       for u in ("days", "hours", "minutes", "seconds", "milliseconds", "microseconds", "nanoseconds")},
    "cast_str": lambda c, d: c.cast(pl.String, strict=False), "cast_ns": lambda c, d: c.cast(pl.Duration("ns"), strict=False),
    "neg": lambda c, d: -c, "abs": lambda c, d: c.abs(), "plus_dt": lambda c, d: pl.lit(dt.datetime(2020, 1, 1)) + c,
    "times": lambda c, d: c * 2, "div": lambda c, d: c // 3,
})
cases("time", TIME, {
    "hour": lambda c, d: c.dt.hour(), "to_string": lambda c, d: c.dt.to_string("%H:%M:%S%.f"),
    "to_string_date": lambda c, d: c.dt.to_string("%Y"), "cast_str": lambda c, d: c.cast(pl.String, strict=False),
    "nanosecond": lambda c, d: c.dt.nanosecond(), "combine_on_date": lambda c, d: pl.lit(dt.date(2020, 1, 1)).dt.combine(c),
})
cases("make", [pl.Int64(), pl.Int32(), pl.Float64()], {
    "datetime": lambda c, d: pl.datetime(c, 1, 1), "datetime_all": lambda c, d: pl.datetime(c, c, c, c, c, c, c),
    "date": lambda c, d: pl.date(c, 1, 1), "date_all": lambda c, d: pl.date(c, c, c),
    "duration_days": lambda c, d: pl.duration(days=c), "duration_ns": lambda c, d: pl.duration(nanoseconds=c, time_unit="ns"),
    "duration_weeks": lambda c, d: pl.duration(weeks=c, hours=c), "cast_dt": lambda c, d: c.cast(pl.Datetime("ms"), strict=False),
    "cast_date": lambda c, d: c.cast(pl.Date, strict=False), "cast_dur": lambda c, d: c.cast(pl.Duration("us"), strict=False),
    "cast_time": lambda c, d: c.cast(pl.Time, strict=False),
    "cast_dec": lambda c, d: c.cast(pl.Decimal(10, 2), strict=False), "cast_dec38": lambda c, d: c.cast(pl.Decimal(38, 30), strict=False),
})
case("temporal.combine_col", DATE, lambda c, d: c.dt.combine(d), pl.Time())
case("temporal.minus_col", DATETIMES, lambda c, d: c - d, pl.Datetime("ns"))
case("temporal.compare_col", DATETIMES, lambda c, d: c < d, pl.Date())

# ------------------------------------------------------------------------------------------------ casts
for target in (pl.Int8(), pl.UInt64(), pl.Int128(), pl.Float32(), pl.Float64(), pl.Decimal(10, 2), pl.String(),
               pl.Boolean(), pl.Date(), pl.Datetime("ns"), pl.Duration("ms"), pl.Time(), pl.Binary(),
               pl.Enum(["a", "b"]), pl.List(pl.Int8)):
    case(f"cast.to_{target}", EVERY, lambda c, d, target=target: c.cast(target, strict=False))
case("cast.strict", NUMS, lambda c, d: c.cast(pl.Int8))

# ------------------------------------------------------------------------------------------------ the rest
cases("any", EVERY, {
    "is_null": lambda c, d: c.is_null(), "fill_null_col": lambda c, d: c.fill_null(d), "coalesce": lambda c, d: pl.coalesce(c, d),
    "hash": lambda c, d: c.hash(7), "struct": lambda c, d: pl.struct(c, d), "eq": lambda c, d: c == d,
    "when": lambda c, d: pl.when(c.is_null()).then(d).otherwise(c), "concat_str": lambda c, d: pl.concat_str(c, d),
}, pl.String())
cases("binary", BINARY, {
    "size": lambda c, d: c.bin.size(), "eq": lambda c, d: c == d,
    "cast_str": lambda c, d: c.cast(pl.String, strict=False),
}, pl.Binary())
cases("struct", [pl.Struct({"a": pl.Int64, "b": pl.String})], {
    "field": lambda c, d: c.struct.field("a"), "field_index": lambda c, d: c.struct[1],
    "rename": lambda c, d: c.struct.rename_fields(["x", "y"]), "json": lambda c, d: c.struct.json_encode(),
    "prefix": lambda c, d: c.name.prefix_fields("p_"), "suffix": lambda c, d: c.name.suffix_fields("_s"),
    "select_fields": lambda c, d: c.struct.field("b", "a"),
    "with_field": lambda c, d: c.struct.field("a") + 1,
})
cases("list", [pl.List(pl.Int64), pl.List(pl.String)], {
    "is_in_col": lambda c, d: pl.lit(1).cast(pl.Int64).is_in(c), "eq": lambda c, d: c == c, "hash": lambda c, d: c.hash(),
})
cases("categories", CATEGORIES, {
    "cast_str": lambda c, d: c.cast(pl.String), "is_in": lambda c, d: c.is_in(["a"]), "eq": lambda c, d: c == "a",
    "fill_null": lambda c, d: c.fill_null("a"), "concat_str": lambda c, d: pl.concat_str(c, pl.lit("!")),
})
