#!/bin/sh
# tessera-tiny phase 12 (issue 22): the first prompts a newcomer types ("a cube", "cube", "donut", "a flat
# box", tools/train/first_prompts.tsv) on the shipped model. The shipped GPT (the p6/p11 average) is
# turned back into training checkpoints (tools/train/import_tiny.py, round-trip checked) and trained on
# further with short captions added to the template ones (--short-prob: the noun alone, "a" + noun,
# "a" + one true adjective + noun; "a sculpture of ..." stays held out) and 200 extra near-cubic boxes
# (box ratio <= 1.15, ~1 % of boxes: 2 of the 300) drawn twice as often, always captioned "cube".
# Same frozen text encoder (the diffusion model is conditioned on it; its vocabulary extension is
# carried back at export) and the same codes (the shipped shape tokenizer).
# Data: .cache/tessera-data (300 per family, seed 1) and
#   python3 -m tools.shapes.dataset generate --out .cache/tessera-data-cubes/train --families box \
#     --select-noun cube --per-family 200 --start 300 --seed 1 --split train
# Resume: run this again. Probe: tools/train/first_prompts.py --engine python --model-dir <export>.
set -eu
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
RUN=tools/train/records/tessera-tiny-p12
SHIPPED=tools/train/records/tessera-tiny-shipped
DATA=.cache/tessera-data
CUBES=.cache/tessera-data-cubes
for d in $DATA $CUBES; do
  [ -f $d/train/manifest.json ] || { echo "$d: generate it first (see above)" >&2; exit 1; }
done
[ -f $SHIPPED/gpt_ckpt.pt ] || /usr/bin/python3 tools/train/import_tiny.py --run-dir $SHIPPED
[ -e $RUN/vocab ] || cp -r $SHIPPED/vocab $RUN/
/usr/bin/python3 tools/train/train_gpt.py --run-dir $RUN --data $DATA --extra-data $CUBES --threads 1 \
  --ae-ckpt $SHIPPED/ae_ckpt.pt --init-from $SHIPPED/gpt_ckpt.pt --freeze-text \
  --n-embd 192 --n-layer 6 --mlp-hidden 512 --steps ${STEPS:-800} --lr ${LR:-1e-4} --warmup 30 \
  --short-prob 0.35 --focus-words cube --focus-weight 2 \
  --eval-every 200 --ckpt-minutes 5 --max-minutes ${MAX_MINUTES:-75} >> $RUN/gpt.log 2>&1
