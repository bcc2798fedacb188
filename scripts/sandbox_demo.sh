#!/usr/bin/env bash
# A tour of the sandbox and the buffer: what the sandbox records for ordinary programs and for
# attacks, CRUXEval's 800 programs through it, the same tasks in a task buffer, and its throughput.
set -euo pipefail
cd "$(dirname "$0")/.."
AZR_TARGETS="azr azr-zygote sandbox_bench" ./scripts/build.sh   # not every test and benchmark
AZR=build/bin/azr
SHARED="${AZR_SHARED_DIR:-$(cd .. && pwd)/shared}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== azr --version"
$AZR --version

echo; echo "== ordinary programs and attacks, one JSON line each (azr exec --jsonl)"
$AZR exec --jsonl examples/sandbox_demo.jsonl --timeout 1 --determinism

echo; echo "== CRUXEval: 800 real programs through the sandbox"
python3 - "$SHARED/benchmarks/cruxeval/cruxeval.jsonl" "$tmp/crux.jsonl" "$tmp/tasks.jsonl" <<'PY'
import json, sys
with open(sys.argv[2], "w") as jobs, open(sys.argv[3], "w") as tasks:
    for line in open(sys.argv[1]):
        d = json.loads(line)
        jobs.write(json.dumps({"id": d["id"], "program": d["code"], "input": d["input"]}) + "\n")
        tasks.write(json.dumps({"type": "deduction", "program": d["code"], "input": d["input"],
                                "output": d["output"]}) + "\n")
PY
start=$(date +%s.%N)
$AZR exec --jsonl "$tmp/crux.jsonl" --input-mode expression > "$tmp/out.jsonl"
end=$(date +%s.%N)
python3 - "$tmp/out.jsonl" "$start" "$end" <<'PY'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
secs = float(sys.argv[3]) - float(sys.argv[2])
print("statuses:", dict(collections.Counter(r["status"] for r in rows)))
print(f"{len(rows)} jobs in {secs:.2f} s including start-up ({len(rows)/secs:.0f} jobs/s)")
PY

echo; echo "== the same tasks in a task buffer (azr buffer import / stats / list / show)"
$AZR buffer import "$tmp/buffer.db" "$tmp/tasks.jsonl"
$AZR buffer stats "$tmp/buffer.db" | sed -n 1,7p
$AZR buffer list "$tmp/buffer.db" --limit 5
$AZR buffer show "$tmp/buffer.db" 2

echo; echo "== throughput and latency vs a process per job (bench/sandbox_bench)"
build/bin/sandbox_bench --rounds 2 --baseline-jobs 200 --data "$SHARED/benchmarks/cruxeval/cruxeval.jsonl"
