#!/usr/bin/env bash
# Submits a sharded `tessera batch` to Slurm: an array of N tasks, then the merge step once all of
# them succeeded. Prints the two job ids.
#   deploy/slurm/submit.sh N PROMPTS OUT [tessera batch options...]
# Options for sbatch itself (partition, account, GPUs...) go in SBATCH_* environment variables or
# an extra SBATCH_ARGS string, e.g. SBATCH_ARGS="--partition=gpu --gres=gpu:1".
set -euo pipefail
if [[ $# -lt 3 ]]; then
  echo "usage: $0 N PROMPTS OUT [tessera batch options...]" >&2
  exit 2
fi
shards=$1 prompts=$2 out=$3
shift 3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$out"
# shellcheck disable=SC2086
array=$(sbatch --parsable ${SBATCH_ARGS:-} --array="0-$((shards - 1))" --chdir="$out" \
  "$here/tessera-batch.sbatch" "$prompts" "$out" "$@")
# shellcheck disable=SC2086
merge=$(sbatch --parsable ${SBATCH_ARGS:-} --dependency="afterok:${array%%;*}" --chdir="$out" \
  "$here/tessera-merge.sbatch" "$prompts" "$out" "$shards" "$@")
echo "array ${array%%;*} merge ${merge%%;*}"
