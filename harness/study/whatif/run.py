"""``python -m harness.study experiments/whatif/<name>.yaml`` (or ``python -m harness.study.whatif a.yaml b.yaml [--out DIR] [--report-only] [--jobs N]``):
run each study file, write its summary, figure and report (a study with many cells, the summary,
runs them in ``--jobs`` processes, default every usable core); ``--report-only`` rewrites REPORT.md from
the existing summary.csv (after editing a study's ``finding:``). Bad input is one ``error:`` line
(exit 2)."""

from __future__ import annotations

import csv
import importlib
import inspect
import sys
import time
from pathlib import Path

import yaml

from harness.study.whatif import STUDIES
from harness.whatif import usable_cores


def _load(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{path}: no such study file")
    study = yaml.safe_load(p.read_text()) or {}
    if not isinstance(study, dict):
        raise ValueError(f"{path}: a study file is a mapping")  # noqa: TRY004  (one error type for the CLI)
    kind = study.get("kind")
    if kind not in STUDIES:
        raise ValueError(f"{path}: kind={kind!r}; whatif study kinds: {list(STUDIES)}")
    if not study.get("name"):
        raise ValueError(f"{path}: name is required")
    return study


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def _num(v: str):
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(v, v)


def read_csv(path: Path) -> list[dict]:
    with path.open() as f:
        return [{k: _num(v) for k, v in r.items() if v != ""} for r in csv.DictReader(f)]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out_root = Path("results/whatif")
    report_only = False
    jobs: int | str = usable_cores()
    files = []
    it = iter(argv)
    for tok in it:
        if tok == "--out":
            out_root = Path(next(it, ""))
        elif tok == "--report-only":
            report_only = True
        elif tok == "--jobs" or tok.startswith("--jobs="):
            value = tok.split("=", 1)[1] if "=" in tok else next(it, "")
            jobs = int(value) if value.isdigit() and int(value) >= 1 else value
        else:
            files.append(tok)
    try:
        if not isinstance(jobs, int):
            raise ValueError(f"--jobs must be a whole number >= 1, got {jobs!r}")  # noqa: TRY004  (one error type for the CLI)
        if not files:
            raise ValueError("give one or more experiments/whatif/*.yaml files")
        studies = [_load(f) for f in files]   # every file checked before any study runs
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for study in studies:
        mod = importlib.import_module(f"harness.study.whatif.{study['kind']}")
        out = out_root / study["name"]
        t0 = time.perf_counter()
        if report_only:
            rows = read_csv(out / "summary.csv")
        else:
            # A study whose run takes jobs= spreads its cells over that many processes.
            takes_jobs = "jobs" in inspect.signature(mod.run).parameters
            rows = mod.run(study, out, **({"jobs": jobs} if takes_jobs else {}))
            write_csv(rows, out / "summary.csv")
        text = mod.report(study, rows, out)
        (out / "REPORT.md").write_text(text)
        print(f"{study['name']}: {len(rows)} rows, {time.perf_counter() - t0:.1f} s -> {out}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
