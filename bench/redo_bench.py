"""SQL_REDO parsing speed: `python -m bench.redo_bench [--rows N] [--sqlglot-rows N] [--seed S]`.

Parses a seeded, realistic mix of LogMiner DML three ways and prints rows/s:

- `parse_dml`: what the Oracle replay calls, the fast parser with sqlglot for what it declines;
- the fast parser alone, on the statements it accepts, on the scanner in use (the compiled one when
  built) and on the pure-Python scanner (processor/sources/redo_scan.py, its fallback);
- sqlglot alone (`parse_dml_sqlglot`), the reference and the speed before the fast parser.

Rates are rows per CPU second of this process, the best of three passes, so other load on a shared
machine counts less (it still slows the caches); the wall-clock rates are printed too.

The mix: 50 % INSERT, 35 % UPDATE, 15 % DELETE over tables of 5-15 columns. Like LogMiner, it quotes
identifiers and numbers ('1234.50'), writes NULL and `IS NULL`, dates as TO_DATE/TO_TIMESTAMP with the
masks Debezium sets for its session, RAW columns as HEXTORAW, LOB columns as EMPTY_CLOB(), full
supplemental logging in WHERE (every column but LOBs, then ROWID), and 1 % of rows with an INTERVAL
column (TO_YMINTERVAL, kept as SQL text) or a column of a type LogMiner cannot show (`Unsupported
Type`, which both parsers reject). `run()` returns a dict for the bench harness (bench.run).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable
from typing import Any

from processor.sources import redo_parser, redo_scan, sql_redo
from processor.sources.redo_values import SqlRedoError

WORDS = ("alpha", "bravo", "O'Brien", "delta", "echo, fox", "golf", "hôtel", "india", "jul; iet", "kilo")
# Column types and their shares: mostly numbers and strings, some dates, timestamps, RAW and LOBs.
KINDS = ("num",) * 35 + ("str",) * 45 + ("date",) * 7 + ("ts",) * 5 + ("raw",) * 4 + ("clob",) * 4


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class _Mix:
    def __init__(self, seed: int, odd_share: float):
        self.rng = random.Random(seed)
        self.odd_share = odd_share
        self.tables = []
        for t in range(8):
            n = self.rng.randint(5, 15)
            kinds = ["num"] + [self.rng.choice(KINDS) for _ in range(n - 1)]
            cols = ["ID"] + [f"{k.upper()}_{i}" for i, k in enumerate(kinds[1:], 1)]
            self.tables.append((f'"APP"."T{t}"', list(zip(cols, kinds))))
        self.row = 0

    def value(self, kind: str, nullable: bool = True) -> str:
        rng = self.rng
        if nullable and rng.random() < 0.12:
            return "NULL"
        if kind == "num":
            return _lit(str(rng.randint(1, 10**6)) if rng.random() < 0.7 else f"{rng.uniform(-1e5, 1e5):.2f}")
        if kind == "str":
            return _lit(f"{rng.choice(WORDS)} {rng.randint(0, 99999)}")
        if kind == "date":
            return f"TO_DATE('20{rng.randint(10, 29)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} 0{rng.randint(0, 9)}:{rng.randint(10, 59)}:{rng.randint(10, 59)}', 'YYYY-MM-DD HH24:MI:SS')"
        if kind == "ts":
            return f"TO_TIMESTAMP('2024-0{rng.randint(1, 9)}-2{rng.randint(0, 8)} 1{rng.randint(0, 9)}:0{rng.randint(0, 9)}:3{rng.randint(0, 9)}.{rng.randint(0, 999999):06d}000', 'YYYY-MM-DD HH24:MI:SS.FF')"
        if kind == "raw":
            return f"HEXTORAW('{rng.randbytes(rng.randint(4, 16)).hex()}')"
        return "EMPTY_CLOB()"

    def statement(self) -> str:
        rng = self.rng
        self.row += 1
        table, cols = rng.choice(self.tables)
        image = [(c, self.value(k, c != "ID")) for c, k in cols]
        unlogged = {c for c, k in cols if k == "clob"}
        if rng.random() < self.odd_share:
            odd = "TO_YMINTERVAL('+01-02')" if rng.random() < 0.5 else "Unsupported Type"
            image[-1] = (image[-1][0], odd)
            if odd == "Unsupported Type":
                unlogged.add(image[-1][0])
        rowid = f"AAAR{self.row:06d}AAEAAAACX"
        r = rng.random()
        if r < 0.5:
            names = ",".join(f'"{c}"' for c, _ in image)
            return f"insert into {table}({names}) values ({','.join(v for _, v in image)});"
        # LogMiner leaves LOB columns (and those of types it cannot show) out of WHERE.
        conds = [(c, v) for c, v in image if c not in unlogged]
        where = " and ".join(f'"{c}" IS NULL' if v == "NULL" else f'"{c}" = {v}' for c, v in conds)
        if r < 0.85:
            changed = rng.sample(cols, min(len(cols) - 1, rng.randint(1, 3)))
            sets = ", ".join(f'"{c}" = {self.value(k)}' for c, k in changed)
            return f"update {table} set {sets} where {where} and ROWID = '{rowid}';"
        return f"delete from {table} where {where} and ROWID = '{rowid}';"


def mix(rows: int, seed: int = 7, odd_share: float = 0.01) -> list[str]:
    """`rows` SQL_REDO statements of the benchmark mix."""
    m = _Mix(seed, odd_share)
    return [m.statement() for _ in range(rows)]


def _rate(fn: Callable[[str], Any], statements: list[str], min_seconds: float = 0.5) -> tuple[float, float]:
    """(rows per CPU second, rows per wall second) of fn over the statements, each the best of three
    passes of at least min_seconds. CPU time leaves out what other processes take on a shared machine."""
    best_cpu = best_wall = 0.0
    for _ in range(3):
        done, cpu0, wall0 = 0, time.process_time(), time.perf_counter()
        while True:
            for s in statements:
                fn(s)
            done += len(statements)
            wall = time.perf_counter() - wall0
            if wall >= min_seconds:
                break
        cpu = time.process_time() - cpu0
        best_cpu, best_wall = max(best_cpu, done / max(cpu, 1e-9)), max(best_wall, done / wall)
    return best_cpu, best_wall


def _fast_outcome(sql: str) -> Any:
    """The fast parser's answer: a Dml, "rejected" (the SqlRedoError sqlglot would raise), or None (declined)."""
    try:
        return sql_redo.parse_dml_fast(sql)
    except SqlRedoError:
        return "rejected"


def run(rows: int = 20000, sqlglot_rows: int = 1000, seed: int = 7) -> dict:
    """Measure; sqlglot gets a prefix of the same mix (at ~3k rows/s the whole mix would take long)."""
    statements = mix(rows, seed)
    outcomes = [_fast_outcome(s) for s in statements]
    accepted = [s for s, o in zip(statements, outcomes) if isinstance(o, sql_redo.Dml)]
    decided = sum(o is not None for o in outcomes)  # parsed, or rejected with sqlglot's reason
    before = sql_redo.stats.as_dict()
    for s in statements:
        try:
            sql_redo.parse_dml(s)
        except SqlRedoError:
            pass
    after = sql_redo.stats.as_dict()
    counts = {k: after[k] - before[k] for k in after}

    def parse(s: str) -> None:
        try:
            sql_redo.parse_dml(s)
        except SqlRedoError:
            pass

    def reference(s: str) -> None:
        try:
            sql_redo.parse_dml_sqlglot(s)
        except SqlRedoError:
            pass

    parse_dml, parse_dml_wall = _rate(parse, statements)
    fast_only, _ = _rate(sql_redo.parse_dml_fast, accepted)  # on the statements it parses
    python_scan = sql_redo.fast_parser(redo_scan)
    fast_python_scan, _ = _rate(python_scan.parse, accepted)
    sqlglot, sqlglot_wall = _rate(reference, statements[:sqlglot_rows], min_seconds=1.0)
    return {
        "rows": rows,
        "avg_statement_bytes": round(sum(map(len, statements)) / len(statements)),
        "fast_path_share": round(decided / rows, 4),
        "counts": counts,
        "parse_dml_rows_per_s": round(parse_dml),
        "fast_only_rows_per_s": round(fast_only),
        "fast_python_scanner_rows_per_s": round(fast_python_scan),
        "scanner": "compiled" if redo_parser.SCANNER is not redo_scan else f"python ({redo_parser.SCANNER_REASON})",
        "sqlglot_rows_per_s": round(sqlglot),
        "speedup": round(parse_dml / sqlglot, 1),
        "parse_dml_rows_per_wall_s": round(parse_dml_wall),
        "sqlglot_rows_per_wall_s": round(sqlglot_wall),
        "target_rows_per_s": 50_000,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--sqlglot-rows", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", action="store_true", help="print the result dict as JSON only")
    args = ap.parse_args(argv)
    r = run(args.rows, args.sqlglot_rows, args.seed)
    if args.json:
        print(json.dumps(r))
        return 0
    print(
        f"SQL_REDO mix: {r['rows']} rows, {r['avg_statement_bytes']} bytes a row; decided by the fast path: "
        f"{r['fast_path_share']:.1%}; parse_dml counts {r['counts']}"
    )
    print(f"  parse_dml (fast + fallback) {r['parse_dml_rows_per_s']:>9,} rows/s")
    print(f"  fast parser alone           {r['fast_only_rows_per_s']:>9,} rows/s   (scanner: {r['scanner']})")
    print(f"  fast parser, Python scanner {r['fast_python_scanner_rows_per_s']:>9,} rows/s")
    print(f"  sqlglot alone               {r['sqlglot_rows_per_s']:>9,} rows/s")
    print(f"  ratio parse_dml / sqlglot   {r['speedup']:>9}x   (target >= {r['target_rows_per_s']:,} rows/s)")
    print(
        f"  (rows per CPU second, best of 3; by the wall clock: parse_dml {r['parse_dml_rows_per_wall_s']:,}, "
        f"sqlglot {r['sqlglot_rows_per_wall_s']:,})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
