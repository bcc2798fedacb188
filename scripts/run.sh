#!/usr/bin/env bash
# The main job. Until the trainer exists, this demonstrates the sandbox as training uses it:
# it validates CRUXEval's 800 programs, shows what azr exec records for ordinary programs and for
# attacks, and prints the sandbox's throughput.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
AZR=build/bin/azr
SHARED="${AZR_SHARED_DIR:-$(cd .. && pwd)/shared}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== azr --version"
$AZR --version

echo; echo "== ordinary programs and attacks, one JSON line each (azr exec --jsonl)"
$AZR exec --jsonl examples/sandbox_demo.jsonl --timeout 1 --determinism

echo; echo "== CRUXEval: 800 real programs through the sandbox"
python3 - "$SHARED/benchmarks/cruxeval/cruxeval.jsonl" > "$tmp/crux.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print(json.dumps({"id": d["id"], "program": d["code"], "input": d["input"]}))
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

echo; echo "== throughput and latency vs a process per job (bench/sandbox_bench)"
build/bin/sandbox_bench --rounds 2 --baseline-jobs 200
