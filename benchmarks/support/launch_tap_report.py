#!/usr/bin/env python3
"""The launch tap's files side by side (support/launch_tap.cpp; tools/gpu-check's launch phase).

    launch_tap_report.py DIR [--pair ROW=ROW ...]

DIR holds BUILD.MODE.ROUND.json: BUILD "after" (this tree) or "before" (FERRY_BEFORE_TREE's), MODE
"plain" (the launch call alone) or "fence" (a full fence before it, timed apart), one file per
process. (tools/gpu-check now writes "after" files only: bench.decode_step holds the before
tree's rows itself, labelled "before tree: ...", so pair those rows by label; "before" files are
those of runs made before that.) For every row, regime and kernel (the rows the benchmark named; untagged launches left
out) it prints, per build, the median over rounds of the call's median time, and in fence mode the
fence's; then for each --pair A=B (row labels, or their beginnings) and regime, the call time of
A's step kernel minus B's in each build: what A's launch costs more than B's (and in fence mode
the fence's time, A's minus B's: what A's stores still in flight at the launch cost more). A row's step kernel
is the one it launched most, the benchmarks' hold kernels (named *hold*) aside.

    launch_tap_report.py --self-test TAP CHECK

runs CHECK (launch_tap_check) under TAP (liblaunch_tap.so) with and without the fence, and checks
what the tap recorded against the calls CHECK makes; then checks the report on made-up files.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

BUILDS = ("before", "after")
MODES = ("plain", "fence")


def load(directory):
    """{(build, mode): [(round, the tap's file), ...]}."""
    runs = {}
    for name in sorted(os.listdir(directory)):
        parts = name.split(".")
        if len(parts) != 4 or parts[0] not in BUILDS or parts[1] not in MODES or parts[3] != "json":
            continue
        with open(os.path.join(directory, name)) as f:
            runs.setdefault((parts[0], parts[1]), []).append((parts[2], json.load(f)))
    return runs


def medians(rounds, field):
    """{(row, regime, kernel): (median over rounds of the entry's p50 of `field`, of its grid mean,
    and its launches in all rounds)}."""
    seen = {}
    for entries in rounds:
        for e in entries:
            if e["row"] == "(untagged)" or e.get(field) is None:
                continue
            seen.setdefault((e["row"], e["regime"], e["kernel"]), []).append((e[field]["p50"], e["grid_mean"], e["launches"]))
    return {k: (statistics.median(v[0] for v in vs), statistics.median(v[1] for v in vs), sum(v[2] for v in vs))
            for k, vs in seen.items()}


def step_kernel(table, row_prefix, regime):
    """The entry of the row starting with `row_prefix` that launched most in `regime`, hold kernels aside."""
    cands = [(k, v) for k, v in table.items()
             if k[0].startswith(row_prefix) and k[1] == regime and "hold" not in k[2]]
    return max(cands, key=lambda kv: kv[1][2], default=(None, None))[1]


def pair_difference(table, a, b, regime):
    """The median of the step kernel of row `a` minus that of row `b` in `regime`; None if either is absent."""
    x, y = step_kernel(table, a, regime), step_kernel(table, b, regime)
    return x[0] - y[0] if x and y else None


def report(directory, pairs, out=sys.stdout):
    runs = load(directory)
    if not runs:
        print(f"launch tap: no BUILD.MODE.ROUND.json files in {directory}", file=out)
        return 1
    for mode in MODES:
        entries = {b: [doc["entries"] for _, doc in runs.get((b, mode), [])] for b in BUILDS}
        calls = {b: medians(entries[b], "call_us") for b in BUILDS}
        fences = {b: medians(entries[b], "fence_us") for b in BUILDS}
        keys = sorted(set(calls["before"]) | set(calls["after"]))
        if not keys:
            continue
        rounds = {b: len(runs.get((b, mode), [])) for b in BUILDS}
        print(f"launch tap, {mode} ({'a full fence before each call, timed apart' if mode == 'fence' else 'the call alone'}); "
              f"rounds: before {rounds['before']}, after {rounds['after']}; each figure the median over rounds of a "
              f"round's median, us", file=out)
        for key in keys:
            cols = []
            for b in BUILDS:
                c = calls[b].get(key)
                fe = fences[b].get(key)
                text = "-" if c is None else f"call {c[0]:.3f}" + (f" fence {fe[0]:.3f}" if fe else "") + f" (grid {c[1]:.1f})"
                cols.append(f"{b} {text}")
            print(f"  {key[0]} | {key[1]} | {key[2][:60]}: " + "; ".join(cols), file=out)
        for pair in pairs:
            a, b_row = pair.split("=", 1)
            for regime in sorted({k[1] for k in keys}):
                for what, table in (("call", calls), ("fence", fences)):
                    if what == "fence" and mode != "fence":
                        continue
                    diffs = []
                    for b in BUILDS:
                        d = pair_difference(table[b], a, b_row, regime)
                        diffs.append(f"{b} -" if d is None else f"{b} {d:+.3f}")
                    print(f"  {what} of {a} minus {b_row}, {regime}, {mode}: " + ", ".join(diffs), file=out)
    per_process(runs, pairs, out)
    return 0


def per_process(runs, pairs, out):
    """A line per process: the CPUs its busiest thread was on at each row change, the scheduler's
    counts for it, and each pair's call difference per regime (how far processes differ)."""
    print("per process: the main thread's CPUs (CPU: row changes on it), its scheduler counts, and each pair's "
          "call difference, us", file=out)
    for (build, mode), docs in sorted(runs.items()):
        for r, doc in docs:
            main = max(doc.get("threads", []), key=lambda t: t["launches"], default={})
            table = medians([doc["entries"]], "call_us")
            diffs = []
            for pair in pairs:
                a, b = pair.split("=", 1)
                for regime in sorted({k[1] for k in table}):
                    d = pair_difference(table, a, b, regime)
                    if d is not None:
                        diffs.append(f"{a.split()[-1]} {regime} {d:+.3f}")
            cpus = ", ".join(f"{c}: {n}" for c, n in main.get("cpus", {}).items())
            sched = ", ".join(f"{k} {v}" for k, v in main.get("sched", {}).items())
            print(f"  {build} {mode} round {r}: CPUs {{{cpus}}}; {sched or 'no scheduler counts'}; " + "; ".join(diffs),
                  file=out)


def self_test(tap, check):
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as d:
        for fence in ("0", "1"):
            path = os.path.join(d, f"after.{'fence' if fence == '1' else 'plain'}.1.json")
            env = dict(os.environ, LD_PRELOAD=tap, FERRY_LAUNCH_TAP_OUT=path, FERRY_LAUNCH_TAP_FENCE=fence)
            r = subprocess.run([check], env=env, capture_output=True, text=True, timeout=60)
            expect(r.returncode == 0, f"fence={fence}: {check} exited {r.returncode}: {r.stderr[-500:]}")
            if not os.path.exists(path):
                failures.append(f"fence={fence}: the tap wrote no {path}")
                continue
            with open(path) as f:
                doc = json.load(f)
            expect(doc["fence"] == (fence == "1"), f"fence={fence}: 'fence' is {doc['fence']}")
            expect(doc["tsc_ghz"] > 0.1, f"fence={fence}: tsc_ghz {doc['tsc_ghz']}")
            got = {(e["row"], e["regime"], e["call"], e["kernel"]): e for e in doc["entries"]}
            want = {("one", "bursts", "cudaLaunchKernel", "alpha()"): (30, 4, 4),
                    ("one", "bursts", "cudaLaunchKernel", "beta()"): (20, 6, 6),
                    ("two", "GPU idle", "cudaLaunchKernel", "alpha()"): (10, 1, 10),
                    ("two", "GPU idle", "cudaGraphLaunch", "(graph)"): (5, 0, 0),
                    ("(untagged)", "", "cudaLaunchKernel", "alpha()"): (7, 1, 1)}
            expect(set(got) == set(want), f"fence={fence}: entries {sorted(got)}, wanted {sorted(want)}")
            threads = doc.get("threads", [])
            expect(len(threads) == 1 and threads[0]["launches"] == 72 and sum(threads[0]["cpus"].values()) == 3,
                   f"fence={fence}: threads {threads} (wanted one, 72 launches, 3 row changes)")
            for key, (n, lo, hi) in want.items():
                e = got.get(key)
                if not e:
                    continue
                expect((e["launches"], e["grid_min"], e["grid_max"]) == (n, lo, hi),
                       f"fence={fence} {key}: launches/grid {e['launches']} {e['grid_min']} {e['grid_max']}, wanted {n} {lo} {hi}")
                c = e["call_us"]
                expect(0 < c["p10"] <= c["p50"] <= c["p90"], f"fence={fence} {key}: call quantiles {c}")
                expect((e["fence_us"] is not None) == (fence == "1"), f"fence={fence} {key}: fence_us {e['fence_us']}")

        # A process that launches nothing (a benchmark's child, which inherits LD_PRELOAD) writes nothing.
        quiet = os.path.join(d, "child.json")
        env = dict(os.environ, LD_PRELOAD=tap, FERRY_LAUNCH_TAP_OUT=quiet)
        subprocess.run([sys.executable, "-c", "pass"], env=env, timeout=60)
        expect(not os.path.exists(quiet), "a process without launches wrote the tap's file")

    # The report on made-up rounds: the pair's difference per build, hold kernels aside.
    def entry(row, regime, kernel, p50, launches=100, fence=None):
        stats = {"p10": p50, "p50": p50, "p90": p50, "mean": p50}
        return {"row": row, "regime": regime, "call": "cudaLaunchKernel", "kernel": kernel, "launches": launches,
                "grid_min": 16, "grid_max": 16, "grid_mean": 16.0, "call_us": stats,
                "fence_us": None if fence is None else dict(stats, p50=fence)}

    with tempfile.TemporaryDirectory() as d:
        for build, ferry_call in (("before", (4.0, 4.2, 4.4)), ("after", (5.0, 5.6, 5.2))):
            for r, call in enumerate(ferry_call, 1):
                doc = {"tsc_ghz": 3.0, "fence": False, "threads": [{"tid": 1, "launches": 600, "cpus": {"3": 9},
                                                                    "sched": {"se.nr_migrations": 0}}], "entries": [
                    entry("ferry step", "bursts", "run_step", call),
                    entry("ferry step", "bursts", "ferry_bench::hold_kernel(unsigned long long)", 50.0, launches=500),
                    entry("floor B'", "bursts", "floor_step_kernel", 4.0),
                    entry("(untagged)", "", "run_step", 99.0)]}
                with open(os.path.join(d, f"{build}.plain.{r}.json"), "w") as f:
                    json.dump(doc, f)
        with tempfile.TemporaryFile("w+") as out:
            report(d, ["ferry=floor"], out)
            out.seek(0)
            text = out.read()
        expect("call of ferry minus floor, bursts, plain: before +0.200, after +1.200" in text, f"report's pair line:\n{text}")
        expect("(untagged)" not in text, f"report shows untagged launches:\n{text}")
        expect("after plain round 2: CPUs {3: 9}; se.nr_migrations 0; ferry bursts +1.600" in text,
               f"report's line of a process:\n{text}")

    for f in failures:
        print("FAILED:", f)
    print(f"launch tap self-test: {len(failures)} failures")
    return 1 if failures else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", nargs="?")
    p.add_argument("--pair", action="append", default=[], help="ROW=ROW (labels or their beginnings)")
    p.add_argument("--self-test", nargs=2, metavar=("TAP", "CHECK"))
    a = p.parse_args()
    if a.self_test:
        return self_test(*a.self_test)
    if not a.dir:
        p.error("DIR is required")
    return report(a.dir, a.pair)


if __name__ == "__main__":
    sys.exit(main())
