"""tessera_ref: fp32 PyTorch reference models (Cube 3D GPT, shape tokenizer, CLIP text model, SD 1.x
UNet and VAE decoder) whose state_dict keys equal the real checkpoints' keys; the oracle for the C++
parity tests.

Run with Debian's /usr/bin/python3 + python3-torch. Modules: config (configs and inference from tensor
shapes), st_io (safetensors on numpy), cube_gpt, shape_tokenizer, clip_text, sd_unet and sd_vae
(CompVis key layout).
"""

import torch


def randomize_(module, seed, weight_gain=1.0):
    """Deterministically fills every parameter of module (shared parameters once) with values that
    exercise each term: Linear/Embedding weights ~ N(0, 1/fan_in) * weight_gain, biases ~ 0.1 N(0,1),
    norm scales ~ 1 + 0.2 N(0,1) (so a missing scale multiplication shows), Fourier weights ~ N(0,1) * sqrt(F/2) as
    trained, other tensors ~ N(0,1).
    Parameters are visited in sorted-name order, so the values depend only on names, shapes and seed."""
    g = torch.Generator().manual_seed(seed)
    params = dict(module.named_parameters())  # shared tensors appear once
    with torch.no_grad():
        for name in sorted(params):
            p = params[name]
            r = torch.randn(p.shape, generator=g)
            leaf = name.rsplit(".", 1)[-1]
            owner = name.rsplit(".", 2)[-2] if name.count(".") >= 1 else ""
            if leaf == "bias" or leaf == "cb_bias":
                p.copy_(0.1 * r)
            elif p.dim() == 1:  # norm scales, cb_weight
                p.copy_(1.0 + 0.2 * r)
            elif owner == "embedder":  # Fourier frequencies, as trained: randn * sqrt(F / 2)
                p.copy_(r * (0.5 * p.shape[1]) ** 0.5)
            elif leaf == "weight" and p.dim() == 2:
                p.copy_(r * weight_gain / (p.shape[1] ** 0.5))
            else:
                p.copy_(r)
    return module
