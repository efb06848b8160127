#!/bin/sh
# tessera-tiny diffusion v6 (session 11): v5's UNet unchanged + a DECODER-ONLY fine-tune of the VAE.
# Why: the colour check's misses (green -> dark teal, purple -> grey) were traced to the VAE, not the UNet:
# decoding the training set's own latents gives green objects (24,100,33) -> (29,49,47) and purple
# (92,34,117) -> (97,86,112) (median object RGB over 16 white-background renders); the decoder had 995
# steps. The encoder is frozen (--decoder-only), so latents.npy, the latent scale and the UNet stay as
# they are. Exported into this folder only; shipped when the colour check is better. Resumable.
set -eu
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
R=tools/train/records/tessera-diffusion-v6
V5=tools/train/records/tessera-diffusion-v5
for f in unet_ckpt.pt unet_done.json unet_metrics.jsonl; do [ -f $R/$f ] || cp $V5/$f $R/; done
/usr/bin/python3 tools/train/diffusion/train_vae.py --run-dir $R --threads 1 --steps 4000 \
  --init-from $V5/vae_ckpt.pt --decoder-only --lr 5e-4 --fg-weight 6 --budget-minutes 28 >> $R/vae.log 2>&1
rm -rf /tmp/tt-v6 && mkdir -p /tmp/tt-v6 && cp -r assets/models/tessera-tiny/. /tmp/tt-v6/
/usr/bin/python3 tools/train/diffusion/export.py --run-dir $R --out $R/export --model-dir /tmp/tt-v6 >> $R/export.log 2>&1
echo "$(date '+%F %T') v6 done" >> $R/vae.log
