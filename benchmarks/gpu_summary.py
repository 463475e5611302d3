"""The GPU check's summary: every step's status and the key numbers of its result files, in
``<out>/summary.json`` and a Markdown table page ``<out>/summary.md``.

    python benchmarks/gpu_summary.py --out /tmp/gpu-check --device cuda --seconds 412

Reads ``<out>/steps.jsonl`` (one line per step, written by gpu_check.sh) and ``<out>/results/``:
``build_run-async.json`` and ``build_run-sync.json``, ``learner*.json`` (with their profiles), ``vram.json``,
``inference-*.json``, ``quickstart_summary.json``.
A missing or unreadable file leaves its section empty; the summary is written regardless.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import time
from typing import Any

STEPS = ("setup", "learner", "learner_mixed", "inference", "build_async", "build_sync", "vram", "quickstart")
BUILD_KEYS = ("ok", "error", "build_s", "start_s", "learner_steps", "first_learner_step_wall_s",
              "s_per_learner_step_after_first", "learner_steps_per_min", "trained_tokens_per_s",
              "generated_tokens_per_s", "learner_wait_share", "new_checkpoints_served", "total_s")
MODES = ("async", "sync")
QUICKSTART_KEYS = ("learner_steps", "wall_s", "train_wall_s", "improved", "warnings")


def load(path: str) -> Any:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def step_statuses(out: str) -> list[dict]:
    found: dict[str, dict] = {}
    if os.path.isfile(os.path.join(out, "steps.jsonl")):
        with open(os.path.join(out, "steps.jsonl")) as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                found[row["step"]] = row
    return [found.get(name, {"step": name, "status": "not run"}) for name in STEPS]


def rows_of(pattern: str) -> list[dict]:
    rows = []
    for path in sorted(glob.glob(pattern)):
        doc = load(path)
        if isinstance(doc, dict):
            rows += [dict(r, file=os.path.basename(path)) for r in doc.get("rows", []) if isinstance(r, dict)]
        elif isinstance(doc, list):
            rows += [r for r in doc if isinstance(r, dict)]
    return rows


def inference_side_by_side(rows: list[dict]) -> list[dict]:
    """One row per (arch, weights, batch): before and after tok/s and their ratio."""
    table: dict[tuple, dict] = {}
    for r in rows:
        if "engine" not in r:
            continue
        key = (r.get("arch"), r.get("weights"), r.get("batch"))
        entry = table.setdefault(key, {"arch": key[0], "weights": key[1], "batch": key[2]})
        entry[f"{r['engine']} tok/s"] = r.get("tok/s")
        if r["engine"] == "after":
            entry["kv cache"] = r.get("kv cache")
            entry["after graphs compiled"] = r.get("graphs compiled")
    for entry in table.values():
        before, after = entry.get("before tok/s"), entry.get("after tok/s")
        entry["x before"] = after / before if before and after else None
    return list(table.values())


def builds(res: str) -> list[dict]:
    """The build() runs, async and sync, and (a third row) async over sync where both have rates."""
    rows = []
    for mode in MODES:
        doc = load(os.path.join(res, f"build_run-{mode}.json"))
        if isinstance(doc, dict):
            rows.append({"mode": mode, **{k: doc.get(k) for k in BUILD_KEYS}})
    both = {r["mode"]: r for r in rows}
    if len(both) == 2:
        ratio = {"mode": "async / sync"}
        for key in ("learner_steps_per_min", "trained_tokens_per_s", "generated_tokens_per_s"):
            a, b = both["async"].get(key), both["sync"].get(key)
            ratio[key] = a / b if a and b else None
        rows.append(ratio)
    return rows


def profiles(res: str, top: int = 12) -> list[dict]:
    """Per profiled variant of the learner files: the device time by kind of kernel, then its top kernels."""
    rows = []
    for path in sorted(glob.glob(os.path.join(res, "learner*.json"))):
        doc = load(path)
        facts = (doc or {}).get("settings", {}).get("batch_facts", {}) if isinstance(doc, dict) else {}
        for arch, fact in facts.items():
            for variant, prof in (fact.get("profile") or {}).items():
                base = {"file": os.path.basename(path), "arch": arch, "variant": variant}
                rows.append({**base, "kernel": "(all kernels: busy s / wall s)", "calls": None,
                             "self_s": prof.get("busy_s"), "share": prof.get("busy_share_of_wall")})
                rows += [{**base, "kernel": f"(kind) {kind}", "calls": None, "self_s": sec,
                          "share": sec / prof["busy_s"] if prof.get("busy_s") else None}
                         for kind, sec in prof.get("time_by_kind_s", {}).items()]
                rows += [{**base, "kernel": k["name"][:90], "calls": k["calls"], "self_s": k["self_s"],
                          "share": k["share"]} for k in prof.get("top", [])[:top]]
    return rows


def markdown(rows: list[dict]) -> str:
    if not rows:
        return "(none)\n"
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
        return "-" if v is None else str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def quickstart_brief(quick: dict) -> dict:
    brief = {k: quick[k] for k in QUICKSTART_KEYS if k in quick}
    for when in ("initial", "final"):
        entry = quick.get("eval", {}).get(when)
        if isinstance(entry, dict):
            brief.update({f"{when} {k}": v for k, v in entry.items() if isinstance(v, int | float | str)})
    return brief


def summarise(out: str, device: str, seconds: float | None) -> dict:
    res = os.path.join(out, "results")
    quick = load(os.path.join(res, "quickstart_summary.json")) or {}
    return {
        "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "device": device,
        "seconds": seconds,
        "steps": step_statuses(out),
        "build_run": builds(res),
        "learner": rows_of(os.path.join(res, "learner*.json")),
        "learner_profile": profiles(res),
        "vram": rows_of(os.path.join(res, "vram*.json")),
        "inference": inference_side_by_side(rows_of(os.path.join(res, "inference-*.json"))),
        "quickstart": quickstart_brief(quick) if isinstance(quick, dict) else {},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--seconds", type=float, default=None)
    args = p.parse_args()
    doc = summarise(args.out, args.device, args.seconds)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(doc, f, indent=1, default=repr)
    parts = [f"# GPU check, {doc['time']}, device {doc['device']}, {doc['seconds']} s\n",
             "## Steps\n", markdown(doc["steps"]),
             "## (a) build() through Ray, async and sync\n", markdown(doc["build_run"]),
             "## (b) Learner\n", markdown(doc["learner"]),
             "## (b) Learner profile: device time by kind and top kernels\n", markdown(doc["learner_profile"]),
             "## (c) VRAM\n", markdown(doc["vram"]),
             "## (d) Inference, transformers engine before and after\n", markdown(doc["inference"]),
             "## (e) Quickstart\n", markdown([doc["quickstart"]] if doc["quickstart"] else [])]
    text = "\n".join(parts)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
