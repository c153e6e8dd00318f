#!/usr/bin/env python3
"""Compares one benchmark's targets between two builds of one run: BEFORE.json (the build against
FERRY_BEFORE_TREE) and AFTER.json (this tree), each one run's or merge_rounds.py's medians over its
rounds. tools/gpu-check prints this for every benchmark it builds twice.

A line per target of AFTER:

  before -> after BENCH.NAME: B -> A (wanted OP GOAL; JUDGEMENT[; rounds before ..., after ...])

JUDGEMENT, in the target's direction:
  - "+x% worse" or "-x% better": the change as a time ratio, after/before - 1 for a target wanted
    low (<=), before/after - 1 for one wanted high (>=); "OUTSIDE 5%" follows a worse change above
    the tolerance (--tolerance, 0.05);
  - "equal";
  - "crosses zero, +d": a figure in µs over a floor whose two values are not both positive has no
    ratio; d is after - before in the target's unit (the ratio target of the same rows judges it);
  - "no before figure": the before build has no such target, or did not measure it (a row it needs
    was absent); "no after figure": this build lost a figure the before build had (outside).
The last line counts the targets outside the tolerance. Exit status 0 either way (a comparison is
a report); 2 on bad usage.

Usage: compare_builds.py [--tolerance F] BEFORE.json AFTER.json | --self-test
"""
import json
import sys


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def show(v):
    return "missing" if not is_number(v) else f"{v:.3g}"


def judge(before, after, op, tolerance):
    """(text, outside) for one target's two values."""
    if not is_number(after):
        return ("no after figure" if is_number(before) else "measured in neither build"), is_number(before)
    if not is_number(before):
        return "no before figure", False
    if before == after:
        return "equal", False
    if before <= 0 or after <= 0:
        d = after - before
        return f"crosses zero, {d:+.3g}", False
    worse = after / before - 1 if op == "<=" else before / after - 1
    outside = worse > tolerance
    text = f"{worse * 100:+.1f}% {'worse' if worse > 0 else 'better'}"
    return text + (f"  OUTSIDE {tolerance * 100:g}%" if outside else ""), outside


def rounds_of(doc, name):
    rs = doc.get("round_targets")
    if not rs or len(rs) < 2 or not any(is_number(r.get(name)) for r in rs):
        return None
    return " ".join(show(r.get(name)) for r in rs)


def compare(before, after, tolerance=0.05):
    """The report's lines and the number of targets outside the tolerance."""
    old = {t["name"]: t.get("value") for t in before.get("targets", [])}
    lines, outside = [], 0
    for t in after.get("targets", []):
        name = t["name"]
        text, out = judge(old.get(name), t.get("value"), t["op"], tolerance)
        outside += out
        rb, ra = rounds_of(before, name), rounds_of(after, name)
        if rb or ra:
            text += f"; rounds before {rb or '-'}, after {ra or '-'}"
        lines.append(f"before -> after {after['benchmark']}.{name}: {show(old.get(name))} -> {show(t.get('value'))} "
                     f"(wanted {t['op']} {t['target']}; {text})")
    lines.append(f"{after['benchmark']}: {outside} of {len(after.get('targets', []))} targets more than "
                 f"{tolerance * 100:g}% worse than the before build")
    return lines, outside


def self_test():
    """Each judgement on made-up targets; prints what failed, returns the exit status."""
    def doc(values, rounds=None):
        d = {"benchmark": "b", "targets": [{"name": n, "value": v, "op": op, "target": 1}
                                            for n, (v, op) in values.items()]}
        if rounds:
            d["round_targets"] = rounds
        return d
    before = doc({"low": (1.0, "<="), "low_in": (1.0, "<="), "high": (20.0, ">="), "high_in": (20.0, ">="),
                  "better": (2.0, "<="), "signed": (-0.4, "<="), "zero": (0, "<="), "lost": (1.0, "<=")},
                 [{"low": 0.9}, {"low": 1.1}])
    after = doc({"low": (1.06, "<="), "low_in": (1.04, "<="), "high": (18.9, ">="), "high_in": (19.1, ">="),
                 "better": (1.0, "<="), "signed": (0.6, "<="), "zero": (0, "<="), "lost": (None, "<="),
                 "new": (3.0, ">=")})
    lines, outside = compare(before, after)
    expect = {"b.low:": "+6.0% worse  OUTSIDE 5%; rounds before 0.9 1.1, after -)",
              "b.low_in:": "+4.0% worse)", "b.high:": "+5.8% worse  OUTSIDE 5%)", "b.high_in:": "+4.7% worse)",
              "b.better:": "-50.0% better)", "b.signed:": "crosses zero, +1)", "b.zero:": "equal)",
              "b.lost:": "no after figure)", "b.new:": "no before figure)"}
    failures = [f"{key} {want!r} not in {line!r}" for key, want in expect.items()
                for line in lines if f" {key} " in line and not line.endswith(want)]
    if outside != 3 or lines[-1] != "b: 3 of 9 targets more than 5% worse than the before build":
        failures.append(f"outside {outside}, last line {lines[-1]!r}")
    if len(lines) != len(expect) + 1:
        failures.append(f"{len(lines)} lines")
    for f in failures:
        print("compare_builds self-test:", f)
    return 1 if failures else 0


def main(argv):
    args = argv[1:]
    if args == ["--self-test"]:
        return self_test()
    tolerance = 0.05
    if len(args) >= 2 and args[0] == "--tolerance":
        tolerance = float(args[1])
        args = args[2:]
    if len(args) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    docs = []
    for path in args:
        with open(path) as f:
            docs.append(json.load(f))
    lines, _ = compare(docs[0], docs[1], tolerance)
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
