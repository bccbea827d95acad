"""Two zoo runs' artifacts, file by file: which builds wrote the same bytes.

    python bench/zoo.py --peers none --builds-only --out before/     # on one checkout
    python bench/zoo.py --peers none --builds-only --out after/      # on the other
    python bench/zoo_compare.py before/zoo.json after/zoo.json [--out compare.json]

A row per (model, target): "same" (every file's sha256 equal), "manifest only" (the model files
equal; the manifest, which names tool versions, is not), "differs" (the files that do),
or "only one built" / "neither built" with the error. Exit 1 when any build differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _rows(path: Path) -> dict[tuple[str, str], dict]:
    return {(r["model"], r["target"]): r for r in json.loads(path.read_text())["rows"]}


def compare(before: dict, after: dict) -> list[dict]:
    out = []
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key, {}), after.get(key, {})
        da, db = a.get("sha256"), b.get("sha256")
        row = {"model": key[0], "target": key[1]}
        if da is None and db is None:
            row.update(result="neither built", before=a.get("error", "not run"), after=b.get("error", "not run"))
        elif da is None or db is None:
            said = [r.get("error", "built") if r else "not run" for r in (a, b)]
            row.update(result="only one built", before=said[0], after=said[1])
        else:
            differ = sorted(f for f in set(da) | set(db) if da.get(f) != db.get(f))
            # the manifest records tool versions, and each file's sha256: alone it is no model change
            result = "same" if not differ else "manifest only" if differ == ["manifest.json"] else "differs"
            row.update(result=result, files=differ)
        out.append(row)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--out", type=Path, help="write the rows as JSON")
    opts = parser.parse_args()
    rows = compare(_rows(opts.before), _rows(opts.after))
    for r in rows:
        detail = ", ".join(r.get("files", [])) or (
            f"before: {r['before']}; after: {r['after']}" if "before" in r else ""
        )
        print(f"{r['model']:<28} {r['target']:<22} {r['result']:<15} {detail}")
    kinds = ("same", "manifest only", "differs", "only one built", "neither built")
    counts = {k: sum(r["result"] == k for r in rows) for k in kinds}
    print(", ".join(f"{v} {k}" for k, v in counts.items()))
    if opts.out:
        opts.out.write_text(json.dumps({"rows": rows, "counts": counts}, indent=1) + "\n")
    return 1 if counts["differs"] else 0


if __name__ == "__main__":
    sys.exit(main())
