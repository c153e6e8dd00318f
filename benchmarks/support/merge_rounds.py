#!/usr/bin/env python3
"""Merges the rounds of one benchmark into one JSON. tools/gpu-check runs the rounds: a benchmark
built against a before tree in FERRY_BENCH_ROUNDS rounds alternating with its before build (each
build's rounds merged apart), and bench.decode_step in rounds alternating with the PyTorch-in-Python
step (decode_step_torch.py, a separate process: it cannot be interleaved with ferry's rows, so the
two processes take turns, each round's PyTorch run just before that round's bench.decode_step, which
reads it with --torch-step and computes host_vs_torch_graph from the pair):

  rows:    every row of the rounds, matched by its "step" label where rows have one, else by its
           place (every round of one binary writes its rows in one order); each number the median
           over the rounds that have it (null where none has); text from the first round that has
           the row. The PyTorch row is relabelled to say how it was measured.
  targets: each target's median over the rounds that measured it (null where none did; then not
           met), except those whose goal is 0 (syncs and allocations per step: one round with any
           is a miss), which take the worst round.
  rounds:  the number of rounds merged; "round_targets": every round's target values, in order.
  host_profile: every round's lines, each with its round's number.

Usage: merge_rounds.py OUT.json ROUND1.json [ROUND2.json ...]
"""
import json
import statistics
import sys

TORCH_LABEL_PREFIX = "PyTorch in Python"


def torch_label(rounds):
    return (f"{TORCH_LABEL_PREFIX} (decode_step_torch.py, separate process, {rounds} rounds alternating with this "
            "benchmark's: medians)")


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def merge(docs):
    if not docs:
        raise ValueError("merge_rounds: no round to merge")
    n = len(docs)
    order, by_label = [], {}
    for d in docs:
        for place, r in enumerate(d.get("rows", [])):
            label = r.get("step", place)
            if label not in by_label:
                order.append(label)
                by_label[label] = []
            by_label[label].append(r)
    rows = []
    for label in order:
        rs = by_label[label]
        keys = []
        for r in rs:
            keys += [k for k in r if k not in keys]
        row = {}
        for k in keys:
            values = [r.get(k) for r in rs if k in r]
            numbers = [v for v in values if is_number(v)]
            if numbers:  # a value every round has alike (a size, a count) stays as written
                row[k] = numbers[0] if len(set(numbers)) == 1 else statistics.median(numbers)
            else:
                row[k] = next((v for v in values if v is not None), None)
        if isinstance(label, str) and label.startswith(TORCH_LABEL_PREFIX):
            row["step"] = torch_label(len(rs))
        rows.append(row)
    names, per_name = [], {}
    for d in docs:
        for t in d.get("targets", []):
            if t["name"] not in per_name:
                names.append(t["name"])
                per_name[t["name"]] = []
            per_name[t["name"]].append(t)
    targets = []
    for name in names:
        ts = per_name[name]
        op, goal = ts[0]["op"], ts[0]["target"]
        values = [t.get("value") for t in ts if is_number(t.get("value"))]
        if not values:
            value = None
        elif goal == 0:
            value = max(values) if op == "<=" else min(values)
        else:
            value = statistics.median(values)
        met = value is not None and (value <= goal if op == "<=" else value >= goal)
        targets.append({"name": name, "value": value, "op": op, "target": goal, "met": met})
    out = {k: v for k, v in docs[0].items() if k not in ("rows", "targets", "host_profile")}
    profile = [dict(p, round=i + 1) for i, d in enumerate(docs) for p in d.get("host_profile", [])]
    if profile:
        out["host_profile"] = profile
    out.update({"rows": rows, "targets": targets, "rounds": n,
                "round_targets": [{t["name"]: t.get("value") for t in d.get("targets", [])} for d in docs]})
    return out


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    docs = []
    for path in argv[2:]:
        with open(path) as f:
            docs.append(json.load(f))
    merged = merge(docs)
    with open(argv[1], "w") as f:
        json.dump(merged, f, indent=1)
        f.write("\n")
    for t in merged["targets"]:
        rounds = ", ".join("missing" if r.get(t["name"]) is None else f"{r[t['name']]:.3g}"
                           for r in merged["round_targets"])
        value = "missing" if t["value"] is None else f"{t['value']:.3g}"
        print(f"  {t['name']}: {value} ({'met' if t['met'] else 'missed'}, wanted {t['op']} {t['target']}; "
              f"rounds: {rounds})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
