#!/bin/sh
# tessera-tiny phase 13ae (issue 22, session 20): the shipped shape tokenizer's decoder trained on, decoder
# only (encoder, shared Fourier embedder and codebook frozen bit for bit, so every shape keeps its token ids
# and the shipped GPT stays valid). Why: its held-out IoU is 0.855 (issue target 0.92) and the box family
# is its worst but one (phase 5's own validation: box 0.65, table 0.46), while "a box" / "a cube" are the
# first prompts that fail; sampled decodes of "a box" (8 seeds, CLI) match 1 of 8. 12000 steps (twice
# phase 5's), fresh cosine at peak 1.5e-4, worst families drawn more often (--family-weights "${FAMILY_WEIGHTS}").
# Data: .cache/tessera-data (300 per family, seed 1; run_all.sh's commands). Resume: run this again.
set -eu
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
RUN=tools/train/records/tessera-tiny-p13ae
SHIPPED=tools/train/records/tessera-tiny-shipped
FAMILY_WEIGHTS=arch=1.596,bottle=1.06,box=1.698,capsule=1.11,chair=1.646,cone=1.206,cylinder=1.072,dumbbell=1.192,house=1.138,lamp=1.568,mug=1.54,mushroom=1.41,pyramid=1.104,ring=1.184,snowman=1.086,sphere=1.04,table=2.072,torus=1.356,tree=1.102
[ -f $SHIPPED/ae_ckpt.pt ] || /usr/bin/python3 tools/train/import_tiny.py --run-dir $SHIPPED
/usr/bin/python3 tools/train/train_autoencoder.py --run-dir $RUN --threads 1 --init-from $SHIPPED/ae_ckpt.pt \
  --train-decoder-only --family-weights "${FAMILY_WEIGHTS}" --steps ${STEPS:-12000} --lr 1.5e-4 --warmup 50 --n-points 1024 \
  --n-query 1024 --tail-prob 0.3 --eval-every 1000 --max-minutes ${MAX_MINUTES:-130} >> $RUN/ae.log 2>&1
