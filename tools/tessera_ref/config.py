"""Configurations of the Cube 3D GPT, the shape tokenizer and the CLIP text model.

No config file ships with the Cube checkpoints, so every size is inferred from tensor names and shapes
(`*_from_shapes`), exactly as the C++ loader does. Constants that shapes cannot show (eps, RoPE theta,
special-token layout, Fourier carrier) are fields with the published values as defaults.

All `*_from_shapes` functions take a dict name -> shape tuple (from a torch state dict, a safetensors
header or one of the tests/fixtures/cube3d/*.txt lists) and raise ValueError naming the missing or
inconsistent tensor.
"""

import json
import os
import re
from dataclasses import dataclass, field, asdict
from typing import List, Optional


@dataclass
class GptConfig:
    n_embd: int = 1536
    n_head: int = 12
    n_layer: int = 23          # dual-stream blocks; the last one is "condition pre only"
    n_single_layer: int = 1
    mlp_hidden: int = 6144     # SwiGLU hidden width (4 * n_embd in the published models)
    codebook_size: int = 16384  # shape codes 0..codebook_size-1; then BOS, EOS, PAD
    shape_embed_dim: int = 32   # shape_proj input (codebook vector width)
    text_embed_dim: int = 768   # text_proj input (CLIP hidden width)
    use_bbox: bool = True       # v0.5: one extra condition token bbox_proj(xyz)
    rope_theta: float = 10000.0
    eps: float = 1e-6           # non-affine LayerNorms
    qk_norm_eps: float = 1e-5   # per-head RMSNorm on q and k
    num_latents: int = 1024     # tokens generated per shape (from the shape tokenizer)
    text_len: int = 77          # CLIP positions fed as condition

    @property
    def head_dim(self):
        return self.n_embd // self.n_head

    @property
    def vocab_size(self):
        return self.codebook_size + 3

    @property
    def bos_id(self):
        return self.codebook_size

    @property
    def eos_id(self):
        return self.codebook_size + 1

    @property
    def pad_id(self):
        return self.codebook_size + 2

    @property
    def cond_len(self):
        return self.text_len + (1 if self.use_bbox else 0)


@dataclass
class ShapeConfig:
    width: int = 768
    n_head: int = 12
    num_latents: int = 1024
    embed_dim: int = 32          # codebook vector width
    num_codes: int = 16384
    num_freqs: int = 128         # Fourier frequencies per axis
    point_feats: int = 3         # normals appended to the point embedding in the encoder
    encoder_layers: int = 13
    encoder_cross_levels: List[int] = field(default_factory=lambda: [0, 2, 4, 8])
    with_cls_token: bool = True  # encoder.query has num_latents + 1 rows; row 0 is the class token
    decoder_layers: int = 24
    mlp_hidden: int = 3072
    eps: float = 1e-6            # LayerNorms (non-affine in blocks, affine ln_f)
    qk_norm_eps: float = 1e-5
    vq_norm_eps: float = 1e-5    # RMSNorm of the spherical VQ

    @property
    def head_dim(self):
        return self.width // self.n_head

    @property
    def fourier_dim(self):
        return 3 * (2 * self.num_freqs + 1)


@dataclass
class ClipTextConfig:
    vocab_size: int = 49408
    max_position: int = 77
    width: int = 768
    n_layer: int = 12
    n_head: int = 12
    mlp_hidden: int = 3072
    eps: float = 1e-5
    bos_id: int = 49406
    eos_id: int = 49407   # also the padding token in Cube / SD

    @property
    def head_dim(self):
        return self.width // self.n_head


# ---- published and tiny configurations -------------------------------------------------------------

def gpt_v01():
    return GptConfig(use_bbox=False, num_latents=512)


def gpt_v05():
    return GptConfig(use_bbox=True, num_latents=1024)


def shape_v01():
    return ShapeConfig(num_latents=512)


def shape_v05():
    return ShapeConfig(num_latents=1024)


def clip_large():
    return ClipTextConfig()


def gpt_tiny(use_bbox=True):
    return GptConfig(n_embd=64, n_head=4, n_layer=2, n_single_layer=1, mlp_hidden=256,
                     codebook_size=64, shape_embed_dim=8, text_embed_dim=32, use_bbox=use_bbox,
                     num_latents=16)


def shape_tiny():
    return ShapeConfig(width=64, n_head=4, num_latents=16, embed_dim=8, num_codes=64, num_freqs=128,
                       point_feats=3, encoder_layers=3, encoder_cross_levels=[0, 2],
                       with_cls_token=True, decoder_layers=2, mlp_hidden=256)


def clip_tiny():
    return ClipTextConfig(vocab_size=1000, max_position=77, width=32, n_layer=2, n_head=4,
                          mlp_hidden=128, bos_id=998, eos_id=999)


# ---- inference from tensor names and shapes ---------------------------------------------------------

def _need(shapes, name):
    if name not in shapes:
        raise ValueError(f"missing tensor '{name}'")
    return tuple(shapes[name])


def _indices(shapes, prefix):
    pat = re.compile(re.escape(prefix) + r"(\d+)\.")
    found = sorted({int(m.group(1)) for k in shapes for m in [pat.match(k)] if m})
    if found != list(range(len(found))):
        raise ValueError(f"block indices under '{prefix}' are not contiguous from 0: {found}")
    return found


def gpt_from_shapes(shapes, num_latents=None):
    """GptConfig from GPT tensor shapes. num_latents comes from the shape tokenizer (not in the GPT)."""
    vocab, n_embd = _need(shapes, "transformer.wte.weight")
    if vocab < 4:
        raise ValueError(f"transformer.wte.weight: vocabulary {vocab} leaves no shape codes")
    head_dim = _need(shapes, "transformer.dual_blocks.0.attn.pre_x.q_norm.weight")[0]
    if head_dim == 0 or n_embd % head_dim:
        raise ValueError(f"q_norm.weight size {head_dim} does not divide n_embd {n_embd}")
    n_layer = len(_indices(shapes, "transformer.dual_blocks."))
    n_single = len(_indices(shapes, "transformer.single_blocks."))
    if n_layer == 0:
        raise ValueError("no transformer.dual_blocks.* tensors")
    last = f"transformer.dual_blocks.{n_layer - 1}.attn.pre_c.c_k.weight"
    _need(shapes, last)  # the last dual block must be "condition pre only"
    mlp_hidden = _need(shapes, "transformer.dual_blocks.0.post_1.mlp.gate_proj.weight")[0]
    shp = _need(shapes, "shape_proj.weight")
    txt = _need(shapes, "text_proj.weight")
    if shp[0] != n_embd or txt[0] != n_embd:
        raise ValueError("shape_proj/text_proj output width differs from transformer.wte.weight")
    lm = _need(shapes, "lm_head.weight")
    if lm != (vocab, n_embd):
        raise ValueError(f"lm_head.weight shape {lm} != {(vocab, n_embd)}")
    cfg = GptConfig(n_embd=n_embd, n_head=n_embd // head_dim, n_layer=n_layer,
                    n_single_layer=n_single, mlp_hidden=mlp_hidden, codebook_size=vocab - 3,
                    shape_embed_dim=shp[1], text_embed_dim=txt[1],
                    use_bbox="bbox_proj.weight" in shapes)
    if num_latents is not None:
        cfg.num_latents = num_latents
    return cfg


def shape_from_shapes(shapes):
    """ShapeConfig from shape-tokenizer tensor shapes (encoder tensors optional: decode-only files)."""
    num_latents, width = _need(shapes, "decoder.positional_encodings")
    head_dim = _need(shapes, "decoder.blocks.0.attn.q_norm.weight")[0]
    if head_dim == 0 or width % head_dim:
        raise ValueError(f"decoder q_norm.weight size {head_dim} does not divide width {width}")
    num_codes, embed_dim = _need(shapes, "bottleneck.block.codebook.weight")
    emb = None
    for k in ("embedder.weight", "occupancy_decoder.embedder.weight", "encoder.embedder.weight"):
        if k in shapes:
            emb = tuple(shapes[k])
            break
    if emb is None:
        raise ValueError("missing Fourier weight (embedder.weight or an alias)")
    if emb[0] != 3:
        raise ValueError(f"embedder.weight shape {emb}: expected 3 rows")
    cfg = ShapeConfig(width=width, n_head=width // head_dim, num_latents=num_latents,
                      embed_dim=embed_dim, num_codes=num_codes, num_freqs=emb[1],
                      decoder_layers=len(_indices(shapes, "decoder.blocks.")),
                      mlp_hidden=_need(shapes, "decoder.blocks.0.mlp.up_proj.weight")[0])
    if "encoder.query" in shapes:
        enc_layers = _indices(shapes, "encoder.blocks.")
        cfg.encoder_layers = len(enc_layers)
        cfg.encoder_cross_levels = [i for i in enc_layers
                                    if f"encoder.blocks.{i}.attn.c_q.weight" in shapes]
        rows = shapes["encoder.query"][0]
        if rows not in (num_latents, num_latents + 1):
            raise ValueError(f"encoder.query rows {rows} vs {num_latents} latents")
        cfg.with_cls_token = rows == num_latents + 1
        cfg.point_feats = _need(shapes, "encoder.feat_in.in_layer.weight")[1] - cfg.fourier_dim
    else:
        cfg.encoder_layers = 0
        cfg.encoder_cross_levels = []
    return cfg


def clip_from_shapes(shapes, config_json_path: Optional[str] = None):
    """ClipTextConfig from HF CLIP text tensor shapes.

    The head count is not visible in shapes: it comes from config.json (num_attention_heads) when one is
    given, else from the CLIP convention head_dim = 64.
    """
    vocab, width = _need(shapes, "text_model.embeddings.token_embedding.weight")
    max_pos = _need(shapes, "text_model.embeddings.position_embedding.weight")[0]
    n_layer = len(_indices(shapes, "text_model.encoder.layers."))
    mlp = _need(shapes, "text_model.encoder.layers.0.mlp.fc1.weight")[0]
    n_head = max(1, width // 64)
    cfg = ClipTextConfig(vocab_size=vocab, max_position=max_pos, width=width, n_layer=n_layer,
                         n_head=n_head, mlp_hidden=mlp)
    if config_json_path and os.path.exists(config_json_path):
        with open(config_json_path) as f:
            js = json.load(f)
        cfg.n_head = int(js.get("num_attention_heads", cfg.n_head))
        cfg.eps = float(js.get("layer_norm_eps", cfg.eps))
        cfg.bos_id = int(js.get("bos_token_id", cfg.bos_id))
        cfg.eos_id = int(js.get("eos_token_id", cfg.eos_id))
    return cfg


def clip_hf_config_json(cfg: ClipTextConfig):
    """A Hugging Face CLIPTextConfig-style config.json for cfg (written beside fixture checkpoints)."""
    return {
        "architectures": ["CLIPTextModel"],
        "model_type": "clip_text_model",
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.max_position,
        "hidden_size": cfg.width,
        "intermediate_size": cfg.mlp_hidden,
        "num_hidden_layers": cfg.n_layer,
        "num_attention_heads": cfg.n_head,
        "hidden_act": "quick_gelu",
        "layer_norm_eps": cfg.eps,
        "bos_token_id": cfg.bos_id,
        "eos_token_id": cfg.eos_id,
        "pad_token_id": 1,
        "torch_dtype": "float32",
    }


def read_tensor_list(path):
    """Parses a cube3d-*-tensors.txt list ('name (d0, d1)' per line) into dict name -> shape."""
    out = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"^(\S+) \(([\d, ]*)\)\s*$", line)
            if m:
                dims = tuple(int(d) for d in m.group(2).replace(" ", "").split(",") if d)
                out[m.group(1)] = dims
    return out


def as_dict(cfg):
    d = asdict(cfg)
    return d
