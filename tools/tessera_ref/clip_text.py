"""Reference CLIP text model (Hugging Face key names, `text_model.*`) in plain fp32 PyTorch.

Pre-LN transformer: token + position embeddings, layers of
x += out_proj(attn(layer_norm1(x))) and x += fc2(quick_gelu(fc1(layer_norm2(x)))), quick_gelu(x) =
x * sigmoid(1.702 x), then final_layer_norm. Attention is causal; an optional attention mask (1 = real
token, 0 = padding, as the tokenizer returns it) additionally hides padded positions as keys. Cube runs
CLIP with that mask, which changes the hidden states at the padded positions.
"""

from typing import Optional

import torch
import torch.nn as nn

from .config import ClipTextConfig
from .cube_gpt import attend, merge_heads, split_heads


class Embeddings(nn.Module):
    def __init__(self, cfg: ClipTextConfig, device=None):
        super().__init__()
        self.token_embedding = nn.Embedding(cfg.vocab_size, cfg.width, device=device)
        self.position_embedding = nn.Embedding(cfg.max_position, cfg.width, device=device)

    def forward(self, ids):
        return self.token_embedding(ids) + self.position_embedding(torch.arange(ids.shape[1]))


class Attention(nn.Module):
    def __init__(self, cfg: ClipTextConfig, device=None):
        super().__init__()
        w = cfg.width
        self.n_head = cfg.n_head
        self.q_proj = nn.Linear(w, w, device=device)
        self.k_proj = nn.Linear(w, w, device=device)
        self.v_proj = nn.Linear(w, w, device=device)
        self.out_proj = nn.Linear(w, w, device=device)

    def forward(self, x, mask):
        q = split_heads(self.q_proj(x), self.n_head)
        k = split_heads(self.k_proj(x), self.n_head)
        v = split_heads(self.v_proj(x), self.n_head)
        return self.out_proj(merge_heads(attend(q, k, v, mask)))


class MLP(nn.Module):
    def __init__(self, cfg: ClipTextConfig, device=None):
        super().__init__()
        self.fc1 = nn.Linear(cfg.width, cfg.mlp_hidden, device=device)
        self.fc2 = nn.Linear(cfg.mlp_hidden, cfg.width, device=device)

    def forward(self, x):
        h = self.fc1(x)
        return self.fc2(h * torch.sigmoid(1.702 * h))


class Layer(nn.Module):
    def __init__(self, cfg: ClipTextConfig, device=None):
        super().__init__()
        self.self_attn = Attention(cfg, device=device)
        self.layer_norm1 = nn.LayerNorm(cfg.width, eps=cfg.eps, device=device)
        self.mlp = MLP(cfg, device=device)
        self.layer_norm2 = nn.LayerNorm(cfg.width, eps=cfg.eps, device=device)

    def forward(self, x, mask):
        x = x + self.self_attn(self.layer_norm1(x), mask)
        return x + self.mlp(self.layer_norm2(x))


class Encoder(nn.Module):
    def __init__(self, cfg: ClipTextConfig, device=None):
        super().__init__()
        self.layers = nn.ModuleList([Layer(cfg, device=device) for _ in range(cfg.n_layer)])


class TextTransformer(nn.Module):
    def __init__(self, cfg: ClipTextConfig, device=None):
        super().__init__()
        self.embeddings = Embeddings(cfg, device=device)
        self.encoder = Encoder(cfg, device=device)
        self.final_layer_norm = nn.LayerNorm(cfg.width, eps=cfg.eps, device=device)


class ClipTextModel(nn.Module):
    def __init__(self, cfg: ClipTextConfig, device=None):
        super().__init__()
        self.cfg = cfg
        self.text_model = TextTransformer(cfg, device=device)

    @torch.no_grad()
    def forward(self, ids, attention_mask: Optional[torch.Tensor] = None, hidden_states=None):
        """ids (B,T) int, attention_mask (B,T) 1/0 or None -> last hidden state (B,T,W) after
        final_layer_norm. hidden_states, when a list, receives the embeddings output and every
        layer's output (before final_layer_norm), as HF's output_hidden_states does."""
        tm = self.text_model
        t = ids.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool).tril()[None, None]       # (1,1,T,T)
        if attention_mask is not None:
            mask = mask & attention_mask.bool()[:, None, None, :]           # hide padded keys
        x = tm.embeddings(ids)
        if hidden_states is not None:
            hidden_states.append(x)
        for layer in tm.encoder.layers:
            x = layer(x, mask)
            if hidden_states is not None:
                hidden_states.append(x)
        return tm.final_layer_norm(x)


def tokens_for_ids(cfg: ClipTextConfig, body_ids, length=None):
    """[BOS] + body + [EOS], padded with EOS to `length` (default max_position), and the attention
    mask (1 on BOS..EOS, 0 on padding) as the CLIP tokenizer with padding='max_length' returns them."""
    length = length or cfg.max_position
    seq = [cfg.bos_id] + list(body_ids)[: length - 2] + [cfg.eos_id]
    mask = [1] * len(seq) + [0] * (length - len(seq))
    seq = seq + [cfg.eos_id] * (length - len(seq))
    return torch.tensor(seq, dtype=torch.long), torch.tensor(mask, dtype=torch.long)
