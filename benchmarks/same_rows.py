"""Are two nightlies (or two runs) the same, row by row? For checking that a change kept behaviour.

    python benchmarks/same_rows.py BEFORE_DIR AFTER_DIR [--json]

Each directory is a nightly directory (DIR/<tier>/results.parquet) or one run directory. Result rows
are matched on (tier, case_id, stage) and compared on status, blame, reason and fallback_count;
fallback rows are compared as a multiset over what names a fallback (tier, case, model, op, input
shapes and dtypes, reason, count, the model's frame), leaving out the harness' own frame (a source
path, which moves when the harness' code moves). Columns one side lacks are not compared. Prints
the counts and the first differing rows; `--json` prints one object. Exit 0 when identical, 1 if not.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import pandas as pd

KEY = ["tier", "case_id", "stage"]
RESULT_COLUMNS = ["status", "blame", "reason", "fallback_count"]
FALLBACK_COLUMNS = [
    "tier",
    "case_id",
    "model_id",
    "op",
    "input_shapes",
    "input_dtypes",
    "reason",
    "count",
    "model_frame",
]
SHOWN = 20


def _tables(root: Path, name: str) -> pd.DataFrame:
    paths = sorted(root.glob(f"*/{name}.parquet")) or sorted(root.glob(f"{name}.parquet"))
    if not paths:
        raise SystemExit(f"{root}: no {name}.parquet (a nightly or run directory?)")
    return pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)


def _cell(value: object) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if hasattr(value, "tolist"):
        value = value.tolist()
    return json.dumps(value, sort_keys=True, default=str) if isinstance(value, (list, dict)) else str(value)


def compare_results(before: pd.DataFrame, after: pd.DataFrame) -> dict:
    cols = [c for c in RESULT_COLUMNS if c in before and c in after]
    a = {tuple(r[k] for k in KEY): tuple(_cell(r[c]) for c in cols) for r in before.to_dict("records")}
    b = {tuple(r[k] for k in KEY): tuple(_cell(r[c]) for c in cols) for r in after.to_dict("records")}
    changed = [
        {"row": list(k), **{c: [x, y] for c, x, y in zip(cols, a[k], b[k]) if x != y}}
        for k in sorted(a.keys() & b.keys())
        if a[k] != b[k]
    ]
    return {
        "compared": cols,
        "before": len(a),
        "after": len(b),
        "identical": len(a.keys() & b.keys()) - len(changed),
        "changed": len(changed),
        "only_before": len(a.keys() - b.keys()),
        "only_after": len(b.keys() - a.keys()),
        "changed_rows": changed[:SHOWN],
        "only_before_rows": [list(k) for k in sorted(a.keys() - b.keys())][:SHOWN],
        "only_after_rows": [list(k) for k in sorted(b.keys() - a.keys())][:SHOWN],
    }


def compare_fallbacks(before: pd.DataFrame, after: pd.DataFrame) -> dict:
    cols = [c for c in FALLBACK_COLUMNS if c in before and c in after]
    a = Counter(tuple(_cell(r[c]) for c in cols) for r in before.to_dict("records"))
    b = Counter(tuple(_cell(r[c]) for c in cols) for r in after.to_dict("records"))
    return {
        "compared": cols,
        "before": sum(a.values()),
        "after": sum(b.values()),
        "only_before": sum((a - b).values()),
        "only_after": sum((b - a).values()),
        "only_before_rows": [dict(zip(cols, k)) for k in (a - b)][:SHOWN],
        "only_after_rows": [dict(zip(cols, k)) for k in (b - a)][:SHOWN],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="example: python benchmarks/same_rows.py runs/before runs/after --json",
    )
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out = {
        "results": compare_results(_tables(args.before, "results"), _tables(args.after, "results")),
        "fallbacks": compare_fallbacks(_tables(args.before, "fallbacks"), _tables(args.after, "fallbacks")),
    }
    r, f = out["results"], out["fallbacks"]
    same = not (r["changed"] or r["only_before"] or r["only_after"] or f["only_before"] or f["only_after"])
    out["identical"] = same
    if args.json:
        print(json.dumps(out, indent=1, default=str))
    else:
        print(
            f"results: {r['before']} before, {r['after']} after; {r['identical']} identical in "
            f"{', '.join(r['compared'])}; {r['changed']} changed, {r['only_before']} only before, "
            f"{r['only_after']} only after"
        )
        for row in r["changed_rows"]:
            print("  changed:", row)
        print(
            f"fallbacks: {f['before']} before, {f['after']} after; {f['only_before']} only before, "
            f"{f['only_after']} only after"
        )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
