"""Shared pieces of the tessera-tiny diffusion training (tools/train/diffusion).

- Configurations: the tiny VAE (decoder = tools/tessera_ref/sd_vae.py at a small config; the encoder,
  training only, is defined here) and the tiny UNet (tools/tessera_ref/sd_unet.py).
- `VaeEncoder`: SD-style KL encoder (conv_in, stride-2 convs with a ResnetBlock per lower level, SiLU, conv_out to
  2 * z channels = mean and log-variance, then quant_conv 1x1) so the first stage is a KL-VAE as SD's.
- SD's scaled-linear noise schedule (1000 steps, beta 0.00085..0.012) for epsilon-prediction training.
- The frozen text encoder of tessera-tiny (tools/tessera_ref/clip_text.py over
  assets/models/tessera-tiny/text_encoder + vocab.json/merges.txt): contexts as SD computes them, the
  77-token sequence [BOS] text [EOS] padded with EOS, causal attention only (no padding mask), last
  hidden state after final_layer_norm.
"""

import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.dirname(HERE)
TOOLS = os.path.dirname(TRAIN)
REPO = os.path.dirname(TOOLS)
for _p in (TOOLS, REPO):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from train import common  # noqa: E402
from tessera_ref import sd_unet, sd_vae, st_io  # noqa: E402
from tessera_ref.clip_text import ClipTextModel  # noqa: E402
from tessera_ref.config import ClipTextConfig  # noqa: E402

RUN_DIR = os.path.join(REPO, "tools/train/records", "tessera-diffusion")
MODEL_DIR = os.path.join(REPO, "assets", "models", "tessera-tiny")
CONTEXT_LEN = 77

# 64x64 RGB <-> 4 x 16 x 16 latents (two x2 upsamples in the decoder). Decoder levels 64 (full
# resolution), 32, 64 channels. Why 64 at full resolution: GroupNorm has SD's 32 groups (the engine's
# constant), and the decoder's last GroupNorm (norm_out) with 32 channels is a per-channel instance
# norm that erases every channel's per-image amplitude; a first VAE with 32 channels there learned the
# backgrounds but lost object colours (green -> black, pink -> white, yellow -> orange; see
# tools/train/records/tessera-diffusion/discarded_vae_v1). With 2 channels per group, ratios survive.
VAE_CONFIG = sd_vae.VaeConfig(z_channels=4, out_channels=3, ch=32, ch_mult=[2, 1, 2], num_res_blocks=0,
                              groups=32)
UNET_HEADS = 4


def unet_config(context_dim, model_channels=32):
    return sd_unet.UNetConfig(in_channels=4, out_channels=4, model_channels=model_channels,
                              channel_mult=[1, 2], num_res_blocks=1, attention_levels=[1],
                              num_heads=UNET_HEADS, context_dim=context_dim, groups=32)


# ---- VAE -------------------------------------------------------------------------------------------------

class VaeEncoder(nn.Module):
    """[B,3,H,W] in [-1,1] -> (mean, logvar) [B,z,H/f,W/f], f = 2^(len(ch_mult)-1)."""

    def __init__(self, cfg: sd_vae.VaeConfig):
        super().__init__()
        g = cfg.groups
        ch = [cfg.ch * m for m in cfg.ch_mult]
        self.conv_in = nn.Conv2d(3, ch[0], 3, padding=1)
        blocks = []
        cin = ch[0]
        for level, c in enumerate(ch):
            if level > 0:  # no block at full resolution: encoding the data set stays cheap
                blocks.append(sd_vae.ResnetBlock(cin, c, g))
                cin = c
            if level != len(ch) - 1:
                blocks.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
        self.down = nn.Sequential(*blocks)
        self.mid = sd_vae.ResnetBlock(cin, cin, g)
        # No GroupNorm before conv_out (SD has one): with 1-2 channels per group it is an instance norm
        # that erases each image's absolute feature levels, i.e. the object colours (the residual paths
        # of the ResnetBlocks carry them past the blocks' own norms).
        self.conv_out = nn.Conv2d(cin, 2 * cfg.z_channels, 3, padding=1)
        self.quant_conv = nn.Conv2d(2 * cfg.z_channels, 2 * cfg.z_channels, 1)

    def forward(self, x):
        h = self.mid(self.down(self.conv_in(x)))
        h = self.quant_conv(self.conv_out(F.silu(h)))
        mean, logvar = h.chunk(2, dim=1)
        return mean, logvar.clamp(-30.0, 20.0)


class KLVae(nn.Module):
    """Encoder + the reference decoder (post_quant_conv + decoder, the exported part)."""

    def __init__(self, cfg=VAE_CONFIG):
        super().__init__()
        self.cfg = cfg
        self.encoder = VaeEncoder(cfg)
        self.first_stage = sd_vae.VaeDecoder(cfg)

    def decode_raw(self, z):
        """Unscaled latents -> image."""
        return self.first_stage(z, scale=1.0)


# ---- noise schedule --------------------------------------------------------------------------------------

def alphas_cumprod(n=1000, beta_start=0.00085, beta_end=0.012):
    betas = np.linspace(beta_start ** 0.5, beta_end ** 0.5, n, dtype=np.float64) ** 2
    return torch.tensor(np.cumprod(1.0 - betas), dtype=torch.float32)


# ---- text encoder ----------------------------------------------------------------------------------------

def load_text_encoder(model_dir=MODEL_DIR):
    """(ClipTextModel in eval mode, BpeTokenizer, config dict, sha-ish fingerprint of the weights)."""
    enc_dir = os.path.join(model_dir, "text_encoder")
    with open(os.path.join(enc_dir, "config.json")) as f:
        hf = json.load(f)
    cfg = ClipTextConfig(vocab_size=hf["vocab_size"], width=hf["hidden_size"], n_layer=hf["num_hidden_layers"],
                         n_head=hf["num_attention_heads"], mlp_hidden=hf["intermediate_size"],
                         max_position=hf["max_position_embeddings"], bos_id=hf["bos_token_id"],
                         eos_id=hf["eos_token_id"], eps=hf.get("layer_norm_eps", 1e-5))
    clip = ClipTextModel(cfg).eval()
    weights, _ = st_io_load(os.path.join(enc_dir, "model.safetensors"))
    missing, unexpected = clip.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()
                                                if "position_ids" not in k}, strict=False)
    if missing:
        raise SystemExit(f"{enc_dir}/model.safetensors: missing tensors {missing[:5]}")
    tok = common.BpeTokenizer(os.path.join(model_dir, "vocab.json"), os.path.join(model_dir, "merges.txt"))
    st = os.stat(os.path.join(enc_dir, "model.safetensors"))
    fp = f"{st.st_size}-{int(st.st_mtime)}-{float(sum(float(p.double().sum()) for p in clip.parameters())):.6f}"
    return clip, tok, hf, fp


def st_io_load(path):
    import safetensors_io
    return safetensors_io.load(path)


@torch.no_grad()
def encode_text(clip, tok, texts, batch=256):
    """[N] texts -> float32 [N, 77, width] contexts (SD convention: EOS padding, no padding mask)."""
    out = []
    for i in range(0, len(texts), batch):
        ids, _ = tok.batch(texts[i:i + batch], CONTEXT_LEN)
        out.append(clip(ids))
    return torch.cat(out)


def count_params(m):
    return sum(p.numel() for p in m.parameters())
