#!/usr/bin/env bash
# Issue 10: does self-play teach the model more than the warm start alone, at matched compute?
# Per seed: (1) warm start (azr bootstrap), (2) self-play from it (azr train, held-out eval),
# (3) control: more warm start from the same model on new generated data for the same wall-clock time.
# Run from the repository root. See experiments/selfplay_vs_warmstart/README.md.
set -euo pipefail

AZR=${AZR:-build/bin/azr}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SMOKE=${SMOKE:-0}
if [[ "$SMOKE" == 1 ]]; then
  SEEDS=${SEEDS:-1}
  WARM_STEPS=${WARM_STEPS:-2}
  SELFPLAY_STEPS=${SELFPLAY_STEPS:-2}
  EVAL_EVERY=${EVAL_EVERY:-1}
  OUT=${OUT:-runs/experiments/selfplay-vs-warmstart-smoke-$(date +%Y%m%d-%H%M%S)}
  # tiny data, short answers, no CRUXEval, small batches: the whole pipeline in a few minutes
  BOOT_EXTRA=(--set bootstrap.tasks_per_type=8 --set bootstrap.heldout_per_type=4 --set eval.max_tokens=16
              --set eval.benchmarks=[])
  TRAIN_EXTRA=(--set eval.max_tokens=16 --set eval.benchmarks=[] --set algorithm.batch_size=2
               --set seeding.target=4 --set seeding.max_rounds=1)
else
  SEEDS=${SEEDS:-1 2 3}
  WARM_STEPS=${WARM_STEPS:-1600}   # configs/bootstrap.toml's
  SELFPLAY_STEPS=${SELFPLAY_STEPS:-40}
  EVAL_EVERY=${EVAL_EVERY:-5}
  OUT=${OUT:-runs/experiments/selfplay-vs-warmstart-$(date +%Y%m%d-%H%M%S)}
  BOOT_EXTRA=()
  TRAIN_EXTRA=()
fi
# BOOT=DIR: one warm-start model (an `azr bootstrap` output) shared by every seed instead of a warm
# start per seed; the seeds then vary the self-play and the control only. boot-S links to it.
BOOT=${BOOT:-}
# HELDOUT=FILE: the held-out tasks for self-play's evaluation and the control (default: the warm
# start's own heldout.jsonl), e.g. a larger set made by `azr bootstrap --set bootstrap.steps=0
# --set bootstrap.heldout_per_type=256` from the same seed (so it excludes that seed's training tasks).
HELDOUT=${HELDOUT:-}
# extra --set overrides for every command, e.g. EXTRA_SETS="--set algorithm.lr=3e-4" (word-split)
read -r -a USER_EXTRA <<< "${EXTRA_SETS:-}"
# ... and for the control only, e.g. CONTROL_SETS="--set bootstrap.lr=1.5e-3" (the warm start's own
# continuation learning rate, so the control continues it as it was trained)
read -r -a CONTROL_EXTRA <<< "${CONTROL_SETS:-}"

mkdir -p "$OUT"
echo "out: $OUT  seeds: $SEEDS  warm_steps: $WARM_STEPS  selfplay_steps: $SELFPLAY_STEPS  eval_every: $EVAL_EVERY  smoke: $SMOKE"
now() { date +%s.%N; }
json_get() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): d=d[k]
print(d)' "$1" "$2"; }

for seed in $SEEDS; do
  boot=$OUT/boot-$seed sp=$OUT/selfplay-$seed ctl=$OUT/control-$seed

  t0=$(now)
  reused=0
  if [[ -n "$BOOT" ]]; then
    echo "== seed $seed: shared warm start $BOOT -> $boot"
    if [[ -e "$boot" && ! -L "$boot" ]]; then
      echo "run.sh: $boot is a warm start of an earlier run without BOOT; use another OUT" >&2
      exit 2
    fi
    ln -sfn "$(cd "$BOOT" && pwd)" "$boot"
  elif [[ -f "$boot/model.safetensors" ]]; then  # written last: a finished warm start of a rerun
    echo "== seed $seed: warm start $boot already made, reused (whatever the settings now; delete it to remake it)"
    reused=1
  else
    echo "== seed $seed: warm start -> $boot"
    "$AZR" bootstrap configs/bootstrap.toml --output "$boot" --set run.seed="$seed" \
      --set bootstrap.steps="$WARM_STEPS" ${BOOT_EXTRA[@]+"${BOOT_EXTRA[@]}"} ${USER_EXTRA[@]+"${USER_EXTRA[@]}"}
  fi
  t1=$(now)
  heldout=${HELDOUT:-$boot/heldout.jsonl}

  echo "== seed $seed: self-play -> $sp"
  rm -rf "$sp"   # a fresh run, not a silent resume
  "$AZR" train configs/quickstart.toml --run-dir "$sp" --set run.seed="$seed" \
    --set model.preset= --set model.path="$boot" \
    --set eval.heldout_tasks="$heldout" --set eval.at_start=true --set eval.every="$EVAL_EVERY" \
    --set run.steps="$SELFPLAY_STEPS" --set logging.console=plain --set checkpoint.every=0 \
    ${TRAIN_EXTRA[@]+"${TRAIN_EXTRA[@]}"} ${USER_EXTRA[@]+"${USER_EXTRA[@]}"}
  t2=$(now)
  rm -rf "$sp/checkpoints"   # the final checkpoint is not needed for the comparison
  sp_s=$(python3 -c "print(f'{$t2 - $t1:.3f}')")

  # compute match: as many warm-start steps as fit in the self-play wall-clock time
  ws_s=$(json_get "$boot/bootstrap.json" warm_start.seconds)
  ws_n=$(json_get "$boot/bootstrap.json" warm_start.steps)
  ctl_steps=$(python3 -c "import sys; s,w,n=map(float,sys.argv[1:]); print(max(1, round(s / (w / n))) if n > 0 and w > 0 else 1)" "$sp_s" "$ws_s" "$ws_n")
  rm -rf "$ctl"   # a rerun's control starts again, as its self-play did
  echo "== seed $seed: control, $ctl_steps warm-start steps (self-play took ${sp_s}s; warm start ${ws_s}s / $ws_n steps) -> $ctl"
  "$AZR" bootstrap configs/bootstrap.toml --output "$ctl" --set run.seed="$seed" \
    --set model.preset= --set model.path="$boot" \
    --set bootstrap.heldout_from="$heldout" --set bootstrap.data_offset=1 \
    ${BOOT_EXTRA[@]+"${BOOT_EXTRA[@]}"} ${USER_EXTRA[@]+"${USER_EXTRA[@]}"} ${CONTROL_EXTRA[@]+"${CONTROL_EXTRA[@]}"} \
    --set bootstrap.steps="$ctl_steps"
  t3=$(now)

  python3 - "$OUT/timing-$seed.json" "$seed" "$t0" "$t1" "$t2" "$t3" "$ctl_steps" "$reused" <<'PY'
import json, sys
path, seed, t0, t1, t2, t3, steps, reused = sys.argv[1:]
t0, t1, t2, t3 = map(float, (t0, t1, t2, t3))
json.dump({"seed": int(seed), "warm_start_wall_s": None if reused == "1" else t1 - t0, "selfplay_wall_s": t2 - t1,
           "control_wall_s": t3 - t2, "control_steps": int(steps)}, open(path, "w"), indent=2)
PY
done

echo "== analyze"
python3 "$HERE/analyze.py" "$OUT"
