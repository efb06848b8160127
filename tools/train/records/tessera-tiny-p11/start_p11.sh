#!/bin/sh
# tessera-tiny phase 11 (session 12): more training shapes. Phase 10 showed the GPT is data-limited (300
# shapes per family: more steps over them raise the held-out loss). The dataset is extended to 1000 per
# family (indices 300-999 generated with the same seed and sample settings; the first 300 are the existing
# shards, so it is a superset), encoded with phase 5's autoencoder (= phase 4's encoder, the codes the
# shipped GPT was trained on), and phase 6's shipped GPT is trained on over it (fresh cosine, peak 3e-4).
# Same frozen text encoder and vocabulary. Resume: run this again.
# Then: sh tools/train/finish_run.sh tools/train/records/tessera-tiny-p11
set -eu
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
RUN=tools/train/records/tessera-tiny-p11
P5=tools/train/records/tessera-tiny-p5
DATA=.cache/tessera-data-1000
[ -f $DATA/train/manifest.json ] || { echo "$DATA: generate it first (see tools/train/README.md, phase 11)" >&2; exit 1; }
for f in ae_ckpt.pt ae_done.json vocab; do [ -e $RUN/$f ] || cp -r $P5/$f $RUN/; done
/usr/bin/python3 tools/train/train_gpt.py --run-dir $RUN --data $DATA --threads ${THREADS:-2} \
  --ae-ckpt $RUN/ae_ckpt.pt --init-from tools/train/records/tessera-tiny-p6/gpt_weights_step1639.pt --freeze-text \
  --n-embd 192 --n-layer 6 --mlp-hidden 512 --steps ${STEPS:-2000} --lr 3e-4 --warmup 30 \
  --eval-every 500 --max-minutes ${MAX_MINUTES:-105} >> $RUN/gpt.log 2>&1
