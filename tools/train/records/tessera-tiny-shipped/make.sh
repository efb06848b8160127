#!/bin/sh
# The shipped tessera-tiny (assets/models/tessera-tiny, as of commit 786d1f4: the p6/p11 GPT average) turned
# back into training checkpoints (ae_ckpt.pt, gpt_ckpt.pt, base vocabulary; not in git) by
# tools/train/import_tiny.py, with the export round trip checked. Phase 12 starts from them.
set -eu
cd "$(dirname "$0")/../../../.."
/usr/bin/python3 tools/train/import_tiny.py --run-dir tools/train/records/tessera-tiny-shipped
