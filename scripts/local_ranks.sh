#!/usr/bin/env bash
# Runs a command as N ranks on this machine, the way torchrun starts them: each rank gets RANK,
# WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and MASTER_PORT, which azr reads
# as a torchrun launch (trainer/dist.h) and serves with its TCP backend. For a machine without
# mpirun or torchrun, and for an azr built without MPI (AZR_MPI=OFF); on a GPU machine the ranks
# share its GPUs (local rank modulo the GPUs), each planning for its share of the memory.
#
#   scripts/local_ranks.sh N [--port P] [--logs DIR] -- COMMAND [ARGS...]
#
# Rank 0 writes to this terminal; rank r > 0 to DIR/rank<r>.log (default: a new temporary
# directory, named on stderr). When a rank fails, the others get SIGTERM, and SIGKILL 10 s later
# (a peer waiting in a collective would otherwise wait out its timeout; azr answers SIGTERM by
# finishing its step), and the failed rank's last lines go to stderr. SIGINT or SIGTERM to this
# script passes SIGTERM to every rank, once, and it exits (130 or 143) once they have. MASTER_PORT
# defaults to the environment's, else a random port in 20000-31999.
# Exit status: 0 when every rank exits 0; else the first failing rank's; 2 for usage.
set -uo pipefail

usage() {
  echo "usage: scripts/local_ranks.sh N [--port P] [--logs DIR] -- COMMAND [ARGS...]" >&2
  exit 2
}
if ((BASH_VERSINFO[0] < 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] < 1))); then
  echo "local_ranks: needs bash 5.1 or later (wait -n -p); this is $BASH_VERSION" >&2
  exit 2
fi
[[ $# -ge 1 && $1 =~ ^[1-9][0-9]*$ ]] || usage
n=$1
shift
port=${MASTER_PORT:-$((20000 + RANDOM % 12000))}   # below Linux's ephemeral ports (32768-)
logs=""
while [[ $# -gt 0 && $1 != "--" ]]; do
  case $1 in
    --port) [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || usage; port=$2; shift 2 ;;
    --logs) [[ $# -ge 2 ]] || usage; logs=$2; shift 2 ;;
    *) usage ;;
  esac
done
[[ $# -ge 2 && $1 == "--" ]] || usage
shift
if [[ -z $logs ]]; then
  logs=$(mktemp -d "${TMPDIR:-/tmp}/local-ranks.XXXXXX")
fi
mkdir -p "$logs" || exit 2
if ((n > 1)); then
  others="rank 1 writes to $logs/rank1.log"
  ((n == 2)) || others="ranks 1-$((n - 1)) write to $logs/rank<r>.log"
  echo "local_ranks: $n ranks on port $port; $others" >&2
fi

declare -A rank_of=()   # pid -> rank, for the ranks still running
killer=""               # the SIGKILL that follows a failure's SIGTERM
stop_after_failure() {
  local pids=("${!rank_of[@]}")
  ((${#pids[@]})) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null
  [[ -z $killer ]] || return 0
  # (Off this script's output: a reader of it must not wait out the sleep.)
  (sleep 10; kill -KILL "${pids[@]}") > /dev/null 2>&1 < /dev/null &
  killer=$!
}
# Stopped from outside: SIGTERM to every rank, once, and no SIGKILL (azr finishes its step and
# writes a checkpoint; who stopped this script escalates if it wants), then this script exits
# with the signal's status once every rank has.
on_signal() {
  trap '' TERM INT
  echo "local_ranks: stopped by SIG$1; stopping every rank" >&2
  if ((${#rank_of[@]})); then   # (a bare wait would also wait for a failure's SIGKILL sleeper)
    kill -TERM "${!rank_of[@]}" 2>/dev/null
    wait "${!rank_of[@]}" 2>/dev/null
  fi
  [[ -z $killer ]] || kill "$killer" 2>/dev/null
  [[ $1 == INT ]] && exit 130
  exit 143
}
# A signal while the ranks start is acted on once they all have (none is left behind).
caught=""
trap 'caught=TERM' TERM
trap 'caught=INT' INT
for ((r = 0; r < n; r++)); do
  vars=(RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port)
  if ((r == 0)); then
    env "${vars[@]}" "$@" &
  else
    env "${vars[@]}" "$@" > "$logs/rank$r.log" 2>&1 &
  fi
  rank_of[$!]=$r
done
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT
[[ -z $caught ]] || on_signal "$caught"

status=0
finished() {  # pid, exit status
  local r=${rank_of[$1]}
  unset "rank_of[$1]"
  if (($2 != 0 && status == 0)); then
    status=$2
    echo "local_ranks: rank $r exited with status $2; stopping the others" >&2
    if ((r > 0)); then tail -n 20 "$logs/rank$r.log" | sed "s/^/[rank $r] /" >&2; fi
    stop_after_failure
  fi
}
while ((${#rank_of[@]})); do
  pid=""
  wait -n -p pid "${!rank_of[@]}"
  rc=$?
  if [[ -n ${pid-} ]]; then
    finished "$pid" "$rc"
    continue
  fi
  # None of them, by wait -n: bash drops a job that a signal ended from its job table once it
  # starts another process (it keeps the status, which a wait by pid returns). Those by pid.
  listed=" $(jobs -p | tr '\n' ' ') "
  reaped=0
  for p in "${!rank_of[@]}"; do
    [[ $listed == *" $p "* ]] && continue
    wait "$p"
    finished "$p" $?
    reaped=1
  done
  ((reaped)) || sleep 0.1
done
# Every rank is reaped: a SIGKILL still pending would only find their pids reused.
[[ -z $killer ]] || kill "$killer" 2>/dev/null
exit "$status"
