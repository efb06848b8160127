#!/bin/sh
# Phase 6, after start_p6.sh: export, evaluation with phase 4's recogniser, ship rule
# (tools/train/finish_run.sh). Re-runnable.
set -eu
cd "$(dirname "$0")/../../../.."
exec sh tools/train/finish_run.sh tools/train/records/tessera-tiny-p6
