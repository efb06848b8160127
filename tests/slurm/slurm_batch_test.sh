#!/usr/bin/env bash
# ctest slurm.batch_array (label slurm, issue 23): a real single-node Slurm (Debian's slurm-wlm and
# munge, installed by scripts/setup.sh) started here on localhost, a sharded `tessera batch` of 12
# prompts of tessera-tiny submitted with deploy/slurm/submit.sh as a 4-task array plus its merge
# step, one task cancelled midway and requeued (scontrol requeue), and the merged manifest checked:
# every item's candidates once, files present with their SHA-256. The daemons are stopped after.
#   tests/slurm/slurm_batch_test.sh TESSERA_BINARY SOURCE_DIR
# Exit 77 (ctest: skipped) without root or passwordless sudo, which the daemons need.
set -euo pipefail
tessera=$(realpath "$1")
src=$(realpath "$2")
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if sudo -n true 2>/dev/null; then SUDO="sudo -E"; else
    echo "SKIP: starting slurmctld/slurmd/munged needs root or passwordless sudo"
    exit 77
  fi
fi
for bin in munged munge unmunge slurmctld slurmd sbatch squeue scontrol; do
  command -v "$bin" >/dev/null || { echo "FAIL: $bin not found (scripts/setup.sh installs slurm-wlm and munge)"; exit 1; }
done

work=$(mktemp -d /tmp/tessera-slurm.XXXXXX)
chmod 755 "$work"
host=$(hostname -s)
started_munge=0
cleanup() {
  set +e
  SLURM_CONF="$work/slurm.conf" scancel --quiet --user="$(id -un)" 2>/dev/null
  for pidfile in "$work/slurmd.pid" "$work/slurmctld.pid"; do
    [[ -f $pidfile ]] && $SUDO kill "$(cat "$pidfile")" 2>/dev/null
  done
  sleep 1
  for pidfile in "$work/slurmd.pid" "$work/slurmctld.pid"; do
    [[ -f $pidfile ]] && $SUDO kill -9 "$(cat "$pidfile")" 2>/dev/null
  done
  if [[ $started_munge == 1 && -f /run/munge/munged.pid ]]; then
    $SUDO kill "$(cat /run/munge/munged.pid)" 2>/dev/null
  fi
  if [[ ${KEEP_SLURM_WORK:-0} != 1 ]]; then $SUDO rm -rf "$work"; else echo "kept $work"; fi
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$work"/slurmctld.log "$work"/slurmd.log "$work"/out/*.log; do
    [[ -f $f ]] && { echo "--- $f"; tail -n 30 "$f"; }
  done
  exit 1
}

# munge: a key if there is none, the daemon unless one answers already.
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  if [[ ! -s /etc/munge/munge.key ]]; then
    $SUDO mkdir -p /etc/munge
    $SUDO dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    $SUDO chown munge:munge /etc/munge/munge.key 2>/dev/null || true
    $SUDO chmod 400 /etc/munge/munge.key
  fi
  $SUDO mkdir -p /run/munge /var/log/munge /var/lib/munge
  $SUDO chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  $SUDO munged --force >/dev/null 2>&1 || $SUDO -u munge munged --force >/dev/null 2>&1 || true
  started_munge=1
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n | unmunge >/dev/null 2>&1 || fail "munged did not come up"
fi

# A one-node cluster on this host, ports of its own, everything under $work.
mem=$(free -m | awk '/^Mem:/ {print $2}')
port=$((20000 + RANDOM % 20000))
mkdir -p "$work/state" "$work/spool" "$work/out"
cat >"$work/slurm.conf" <<EOF
ClusterName=tessera-test
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
NodeName=$host CPUs=$(nproc) RealMemory=$((mem * 9 / 10)) State=UNKNOWN
PartitionName=main Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$work/slurm.conf"
$SUDO slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
$SUDO slurmd -f "$SLURM_CONF" || fail "slurmd did not start"
for _ in $(seq 100); do
  state=$(sinfo -h -N -o %t 2>/dev/null | head -n1 || true)
  [[ $state == idle* ]] && break
  sleep 0.2
done
[[ ${state:-} == idle* ]] || fail "the node is not idle (sinfo: ${state:-nothing})"
echo "slurm up: $(sinfo -h -o '%P %a %D %t %C')"

# 12 prompts, 2 variations each: 24 candidates over 4 shards of 3 items.
prompts="$work/prompts.txt"
printf '%s\n' "a cube" "a ball" "a chair" "a torus" "a mug" "a cone" "a table" "a lamp" \
  "a tall cylinder" "a house" "a tree" "a ring" >"$prompts"
out="$work/out"
export TESSERA="$tessera"
export SBATCH_ARGS="--cpus-per-task=1"
ids=$("$src/deploy/slurm/submit.sh" 4 "$prompts" "$out" --variations 2 --seed 11 --resolution 33)
array=$(awk '{print $2}' <<<"$ids")
merge=$(awk '{print $4}' <<<"$ids")
echo "submitted: array $array, merge $merge"

# Cancel task 2 midway (once it is running), and requeue it.
victim="${array}_2"
for _ in $(seq 300); do
  [[ $(squeue -h -j "$victim" -o %T 2>/dev/null) == RUNNING ]] && break
  sleep 0.1
done
[[ $(squeue -h -j "$victim" -o %T 2>/dev/null) == RUNNING ]] || fail "task 2 never ran"
sleep 0.6
done_before=0  # the task's manifest may not exist yet on a loaded machine
[[ -f "$out/manifest-2-of-4.jsonl" ]] && done_before=$(wc -l <"$out/manifest-2-of-4.jsonl")
scontrol requeue "$victim" || fail "scontrol requeue $victim"
echo "requeued $victim after $done_before of its 6 candidates"
# A requeued task is held (reason BeginTime, a few minutes) once it is pending again: let it start
# now (asked again until it runs: an update made while the requeue is still under way is undone).
for _ in $(seq 100); do
  [[ $(squeue -h -j "$victim" -o %T 2>/dev/null) == PENDING ]] && break
  sleep 0.1
done
for _ in $(seq 240); do
  state=$(squeue -h -j "$victim" -o '%T %r' 2>/dev/null || true)
  case $state in
    PENDING*) scontrol update JobId="$victim" StartTime=now >/dev/null 2>&1 || true ;;
    *) break ;;  # running again, or done
  esac
  sleep 0.25
done
echo "task 2 after the requeue: ${state:-finished}"

# Everything done (the merge runs after the whole array succeeded).
for _ in $(seq 1200); do
  [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
  sleep 0.25
done
[[ -z $(squeue -h -o %i) ]] || fail "jobs still queued after 300 s: $(squeue -h -o '%i %T %r')"

merge_log="$out/tessera-merge-$merge.log"
[[ -f $merge_log ]] || fail "no merge log ($merge_log): the merge step did not run"
grep -q "merged 4 shards: 24 candidates of 12 items, every one once" "$merge_log" ||
  fail "merge: $(cat "$merge_log")"
grep -q "restart 1" "$out/tessera-batch-${array}_2.log" ||
  fail "task 2 was not restarted: $(cat "$out/tessera-batch-${array}_2.log")"
python3 - "$out" <<'EOF' || fail "manifest check"
import hashlib, json, os, sys
out = sys.argv[1]
entries = [json.loads(line) for line in open(os.path.join(out, "manifest.jsonl"))]
keys = [(e["item"], e["candidate"]) for e in entries]
assert len(entries) == 24 and len(set(keys)) == 24, (len(entries), len(set(keys)))
assert sorted(keys) == [(i, c) for i in range(12) for c in range(2)], keys
for e in entries:
    data = open(os.path.join(out, e["file"]), "rb").read()
    assert hashlib.sha256(data).hexdigest() == e["sha256"], e["file"]
    assert data[:4] == b"glTF", e["file"]
    assert e["seed"] == 11 + e["candidate"], e
leftovers = [n for n in os.listdir(out) if ".tmp-" in n]
assert not leftovers, leftovers
print("manifest: 24 candidates of 12 items, each once, checksums match")
EOF
echo "PASS: 4-task array with one task requeued midway, merged"
