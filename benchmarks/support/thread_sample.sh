#!/usr/bin/env bash
# thread_sample.sh OUT LABEL CMD...: runs CMD (its output into OUT.log), sampling each of its
# threads from /proc every 0.5 s (comm, utime and stime in clock ticks, the CPU it last ran on,
# voluntary and involuntary context switches); the last sample of each thread goes to OUT, a line
# each, then "LABEL rc=N". Whether another thread of a benchmark's process competes with its main
# thread (benchmarks/results/h200/launch/threads.txt).
out=$1 label=$2; shift 2
"$@" > "$out.log" 2>&1 &
pid=$!
declare -A last
while kill -0 $pid 2>/dev/null; do
  for t in /proc/$pid/task/*; do
    [ -r "$t/stat" ] || continue
    s=$(cat "$t/stat" 2>/dev/null) || continue
    rest=${s#*) }; comm=${s#*(}; comm=${comm%%)*}
    read -ra f <<<"$rest"
    v=$(awk '/^voluntary_ctxt_switches/{v=$2} /^nonvoluntary_ctxt_switches/{n=$2} END{print v, n}' "$t/status" 2>/dev/null)
    last[${t##*/}]="$label tid ${t##*/} comm $comm utime ${f[11]} stime ${f[12]} cpu ${f[36]} vol/invol $v"
  done
  sleep 0.5
done
wait $pid; rc=$?
printf '%s\n' "${last[@]}" | sort -k3n > "$out"
echo "$label rc=$rc" >> "$out"
