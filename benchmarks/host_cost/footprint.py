#!/usr/bin/env python3
"""What one step of a probe.host_cost case touches: code and data lines and pages, and the stores
into pinned memory, from valgrind's lackey trace of the case on the stand-in runtime (tools/host-cost
--footprint CASE runs it for this tree and the before tree).

    footprint.py --run LABEL LACKEY_LOG STUB_TRACE BINARY [--run ...] [--steps N] [--functions K]

LACKEY_LOG: `valgrind --tool=lackey --trace-mem=yes --log-file=LACKEY_LOG BINARY CASE CALLS`;
STUB_TRACE: the file FERRY_STUB_TRACE named in that run (the stand-in's entry points and pinned
ranges). A step ends where the launch entry point (cudaLaunchKernel, __cudaLaunchKernel or
cudaGraphLaunch) is entered; "at submit" is from the step's last entry into cudaGetDevice (where
step_batch's submit, and every ferry call, begins) to the launch. Each figure is the median of the
last N steps (20). Then, per run, the K functions (15) with the most code lines in the last step
(named by nm; "-" for BINARY leaves them out).

    footprint.py --self-test

checks the figures on a made-up trace.
"""
import argparse
import bisect
import collections
import os
import statistics
import subprocess
import sys
import tempfile

LAUNCHES = ("cudaLaunchKernel", "__cudaLaunchKernel", "cudaGraphLaunch")
FIGURES = [("instructions", "instructions"), ("distinct_instructions", "of them distinct (the code run)"),
           ("code_lines", "code lines (64 B)"), ("code_pages", "code pages (4 KiB)"),
           ("data_lines", "data lines"), ("data_pages", "data pages"), ("pinned_stores", "stores into pinned memory"),
           ("pinned_bytes", "their bytes"), ("pinned_lines", "their lines"),
           ("submit_pinned_stores", "stores into pinned memory at submit"),
           ("submit_pinned_lines", "their lines"), ("submit_new_lines", "of those, lines first stored at submit")]


def read_stub_trace(path):
    entries, pinned = {}, []
    with open(path) as f:
        for line in f:
            p = line.split()
            if p and p[0] == "entry":
                entries[p[1]] = int(p[2], 16)
            elif p and p[0] == "pinned":
                pinned.append((int(p[1], 16), int(p[2])))
    return entries, sorted(pinned)


def steps_of(lackey_log, entries, pinned):
    """Per step: its figures, and the set of its code lines."""
    launch = {entries[n] for n in LAUNCHES if n in entries}
    device = entries.get("cudaGetDevice")
    starts = [lo for lo, _ in pinned]

    def in_pinned(a):
        i = bisect.bisect_right(starts, a) - 1
        return i >= 0 and a < pinned[i][0] + pinned[i][1]

    out = []
    new = lambda: {"n": 0, "code": set(), "at": set(), "data": set(), "stores": [], "device_at": None}
    cur = new()
    with open(lackey_log) as f:
        for line in f:
            if len(line) < 4 or line[0] == "=":
                continue
            if line[0] == "I":
                a = int(line[3:].split(",", 1)[0], 16)
                if a in launch:
                    out.append(cur)
                    cur = new()
                    continue
                if a == device:
                    cur["device_at"] = len(cur["stores"])
                cur["n"] += 1
                cur["at"].add(a)
                cur["code"].add(a >> 6)
                continue
            op = line[1]
            if op not in "LSM":
                continue
            a_text, size = line[3:].split(",", 1)
            a = int(a_text, 16)
            cur["data"].add(a >> 6)
            if op in "SM" and in_pinned(a):
                cur["stores"].append((a, int(size)))
    figures = []
    for s in out[1:]:  # the first holds the set-up before the first launch
        st = s["stores"]
        at = s["device_at"] if s["device_at"] is not None else len(st)
        before_submit = {a >> 6 for a, _ in st[:at]}
        submit = st[at:]
        submit_lines = {a >> 6 for a, _ in submit}
        figures.append(({
            "instructions": s["n"], "distinct_instructions": len(s["at"]),
            "code_lines": len(s["code"]), "code_pages": len({c >> 6 for c in s["code"]}),
            "data_lines": len(s["data"]), "data_pages": len({d >> 6 for d in s["data"]}),
            "pinned_stores": len(st), "pinned_bytes": sum(n for _, n in st), "pinned_lines": len({a >> 6 for a, _ in st}),
            "submit_pinned_stores": len(submit), "submit_pinned_lines": len(submit_lines),
            "submit_new_lines": len(submit_lines - before_submit)}, s["code"]))
    return figures


def symbols(binary):
    """The executable's functions, by address: (address, size, name), from nm."""
    syms = []
    text = subprocess.run(["nm", "-C", "-S", "--defined-only", "-n", binary], capture_output=True, text=True).stdout
    for line in text.splitlines():
        p = line.split(" ", 3)
        if len(p) == 4 and p[2] in "tTwW":
            syms.append((int(p[0], 16), int(p[1], 16), p[3]))
    return syms


def functions(syms, code_lines, base):
    """{function: code lines of `code_lines` in it}, by the symbols' addresses and sizes."""
    starts = [s[0] for s in syms]
    by = collections.Counter()
    for ln in code_lines:
        a = (ln << 6) - base
        i = bisect.bisect_right(starts, a) - 1
        by[syms[i][2] if i >= 0 and a < syms[i][0] + max(syms[i][1], 64) else "(outside the executable)"] += 1
    return by


def load_base(syms, entries):
    """Where the executable was loaded: the stand-in's cudaLaunchKernel, traced against nm's."""
    return next((entries["cudaLaunchKernel"] - at for at, _, name in syms if name == "cudaLaunchKernel"), None)


def report(runs, last, top, out=sys.stdout):
    results = []
    for label, log, stub, binary in runs:
        entries, pinned = read_stub_trace(stub)
        steps = steps_of(log, entries, pinned)[-last:]
        if not steps:
            print(f"footprint: {label}: no complete step in {log}", file=out)
            return 1
        results.append((label, steps, binary, entries))
    print(f"{'per step (median of the last steps)':44}" + "".join(f"{r[0]:>14}" for r in results), file=out)
    for key, name in FIGURES:
        print(f"  {name:42}" + "".join(f"{statistics.median(f[key] for f, _ in r[1]):14g}" for r in results), file=out)
    for label, steps, binary, entries in results:
        if binary == "-":
            continue
        syms = symbols(binary)
        base = load_base(syms, entries)
        if base is None:
            print(f"{label}: no cudaLaunchKernel in {binary}'s symbols: functions not named", file=out)
            continue
        print(f"{label}: code lines of the last step by function (the {top} with most)", file=out)
        for name, n in functions(syms, steps[-1][1], base).most_common(top):
            print(f"  {n:4d} {name[:160]}", file=out)
    return 0


def self_test():
    failures = []
    with tempfile.TemporaryDirectory() as d:
        stub, log = os.path.join(d, "stub"), os.path.join(d, "lackey")
        with open(stub, "w") as f:
            f.write("entry cudaLaunchKernel 0x9000\nentry cudaGetDevice 0x8000\npinned 0x100000 4096\n")
        lines = ["==1== lackey\n", "I  00001000,4\n", " S 00100000,8\n", "I  00009000,4\n"]  # set-up, then a launch
        for step in range(3):
            lines += ["I  00001000,4\n", "I  00001004,4\n", "I  00001000,4\n", "I  00002040,4\n",  # 4 run, 3 distinct
                      " L 00200000,8\n", " S 00100000,8\n", " S 00100008,8\n", " M 00100040,4\n",  # pinned: lines 0, 1
                      "I  00008000,4\n",  # cudaGetDevice: submit begins
                      " S 00100040,8\n", " S 00100080,8\n", " S 00300000,8\n",  # pinned at submit: line 1 again, line 2 new
                      "I  00009000,4\n"]
        with open(log, "w") as f:
            f.writelines(lines)
        figs = steps_of(log, *read_stub_trace(stub))
        want = {"instructions": 5, "distinct_instructions": 4, "code_lines": 3, "code_pages": 3, "data_lines": 5,
                "data_pages": 3, "pinned_stores": 5, "pinned_bytes": 36, "pinned_lines": 3, "submit_pinned_stores": 2,
                "submit_pinned_lines": 2, "submit_new_lines": 1}
        if len(figs) != 3:
            failures.append(f"{len(figs)} steps, wanted 3")
        for f, _ in figs:
            for k, v in want.items():
                if f[k] != v:
                    failures.append(f"{k}: {f[k]}, wanted {v}")
        with tempfile.TemporaryFile("w+") as out:
            report([("after", log, stub, "-")], 20, 5, out)
            out.seek(0)
            text = out.read()
        row = [line for line in text.splitlines() if "of those, lines first stored at submit" in line]
        if len(row) != 1 or row[0].split()[-1] != "1":
            failures.append(f"report:\n{text}")
    for f in sorted(set(failures)):
        print("FAILED:", f)
    print(f"footprint self-test: {len(set(failures))} failures")
    return 1 if failures else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", nargs=4, action="append", default=[],
                   metavar=("LABEL", "LACKEY_LOG", "STUB_TRACE", "BINARY"))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--functions", type=int, default=15)
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args()
    if a.self_test:
        return self_test()
    if not a.run:
        p.error("--run is required")
    return report(a.run, a.steps, a.functions)


if __name__ == "__main__":
    sys.exit(main())
