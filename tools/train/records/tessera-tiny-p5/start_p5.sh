#!/bin/sh
# tessera-tiny phase 5 (session 8): two runs side by side on the two cores, both on phase 4's codes.
# - autoencoder: phase 4's, decoder only (encoder, embedder and codebook frozen bit for bit, so the
#   token ids of every shape, tokens.npz copied from phase 4, stay valid), 6000 steps at lr 1.5e-4;
# - GPT: a larger one from scratch (192 wide, 6 heads of 32, 6 dual blocks + 1 single, SwiGLU 512:
#   5.6 M parameters vs 1.5 M) over phase 4's frozen text encoder, 2200 steps at lr 1e-3.
# Then export / evaluate / ship rule as run_finetune.sh (run_p5_finish.sh). Resume: run this again.
set -eu
# One BLAS thread per process: two processes share the two cores (OpenBLAS otherwise adds a spinning
# helper thread per process, which cost a third of each process's CPU time in system time here).
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
RUN=tools/train/records/tessera-tiny-p5
P4=tools/train/records/tessera-tiny-p4
/usr/bin/python3 tools/train/train_autoencoder.py --run-dir $RUN --threads 1 --init-from $P4/ae_ckpt.pt \
  --train-decoder-only --family-weights auto --steps 6000 --lr 1.5e-4 --warmup 50 --n-points 1024 \
  --n-query 1024 --tail-prob 0.3 >> $RUN/ae.log 2>&1 &
/usr/bin/python3 tools/train/train_gpt.py --run-dir $RUN --threads 1 --ae-ckpt $P4/ae_ckpt.pt \
  --text-from $P4/gpt_ckpt.pt --freeze-text --n-embd 192 --n-layer 6 --mlp-hidden 512 \
  --steps 2200 --lr 1e-3 --warmup 200 >> $RUN/gpt.log 2>&1 &
wait
