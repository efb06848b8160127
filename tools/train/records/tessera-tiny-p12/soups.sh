#!/bin/sh
# Phase 12's probes after training: the final export (probe.sh final) and its weight averages with the
# shipped GPT (tools/train/average_gpt.py; one lineage: p12 was initialised from the shipped GPT, same
# frozen text encoder and codes), each through the first prompts and the held-out metric (Python reference,
# phase 4's judge). probe_soupNN = NN % p12 + (100 - NN) % shipped. None was shipped (tools/train/README.md,
# phase 12). final_cli.json: the final export through the C++ CLI as well (--engine both).
set -eu
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
RUN=tools/train/records/tessera-tiny-p12
sh $RUN/probe.sh final
rm -rf /tmp/p12-final && cp -r /tmp/p12-probe /tmp/p12-final
for w in 75 50 25; do
  /usr/bin/python3 tools/train/average_gpt.py --out /tmp/p12-soup$w /tmp/p12-final:0.$w assets/models/tessera-tiny:$(echo "scale=2; 1 - $w / 100" | bc)
  /usr/bin/python3 tools/train/first_prompts.py --engine python --heldout --model-dir /tmp/p12-soup$w \
    --out $RUN/probe_soup$w.json --sheet $RUN/probe_soup$w.png
done
/usr/bin/python3 tools/train/first_prompts.py --engine both --model-dir /tmp/p12-final --out $RUN/final_cli.json > $RUN/final_cli.log 2>&1
