#!/usr/bin/python3
"""Gives the diffusion captions' colour, material and background words whole-word tokens in the
tessera-tiny vocabulary and text encoder, without changing anything the shape engine sees.

Why: tessera-tiny's BPE vocabulary was built from shape captions, so "red", "shiny" or "beige" reached the
text encoder as letter-level pieces it never trained on, and the diffusion UNet could barely tell the
colours apart. This tool appends, for every such word, the merges that join its current pieces into one
token (left to right) and the new tokens (ids from the old vocabulary size up: the special tokens keep
their ids), and grows the text encoder's token embedding by one row per new token, initialised to the mean
of the word's old piece embeddings. train_unet.py --train-new-tokens then learns those rows (and only
those) together with the UNet; export.py writes them back here.

What stays bit-identical: every word that was already one token tokenizes as before (the new merges rank
after all old ones, and a word that is one token has no pair left to merge), so every shape caption gives
the same ids and, the old rows being untouched, the same hidden states: the shape GPT is unaffected. The
tool checks both before writing.

  /usr/bin/python3 tools/train/diffusion/extend_vocab.py [--model-dir assets/models/tessera-tiny]
  /usr/bin/python3 tools/train/diffusion/extend_vocab.py --model-dir NEW --copy-rows-from OLD

The first form is idempotent (words that are already tokens are skipped). The second carries an
extension (tokens, merges and the learned rows) from one model folder to another whose base vocabulary and
text encoder match, e.g. after tools/train/export_tiny.py re-exported the shape model. The extension is
described in text_encoder/extension.json (base vocabulary size, words, ids).
"""

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # tools/
sys.path.insert(0, os.path.dirname(HERE))  # tools/train

import safetensors_io  # noqa: E402
from common import BpeTokenizer  # noqa: E402

EMB = "text_model.embeddings.token_embedding.weight"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
MODEL_DIR = os.path.join(REPO, "assets", "models", "tessera-tiny")


def base_fingerprint(weights, base):
    """sha1 over every tensor of a text encoder (name-sorted, float32 bytes) with the token embedding
    cut to its first `base` rows: what extension rows were learned against. weights: name -> array
    (numpy or torch)."""
    import hashlib
    h = hashlib.sha1()
    for name in sorted(k for k in weights if "position_ids" not in k):
        a = weights[name]
        a = a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)
        a = np.ascontiguousarray(a, dtype=np.float32)
        if name == EMB:
            a = a[:base]
        h.update(name.encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def file_base_fingerprint(model_dir, base):
    weights, _ = safetensors_io.load(_paths(model_dir)[2])
    return base_fingerprint(weights, base)


def shape_words():
    """Every word the shape captions use (tools/shapes' vocabulary)."""
    sys.path.insert(0, REPO)
    from tools.shapes import captions  # noqa: E402
    return sorted(set(captions.vocabulary_words()))


def caption_words():
    """The words the diffusion captions add (render.py's vocabulary), plus the framing words."""
    sys.path.insert(0, HERE)
    import render  # noqa: E402  (numpy only)
    return sorted(set(render.extra_vocabulary()) | {"a", "an", "of", "render", "model"})


def _paths(model_dir):
    return (os.path.join(model_dir, "vocab.json"), os.path.join(model_dir, "merges.txt"),
            os.path.join(model_dir, "text_encoder", "model.safetensors"),
            os.path.join(model_dir, "text_encoder", "config.json"),
            os.path.join(model_dir, "text_encoder", "extension.json"))


def _read_merges(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    header = [ln for ln in lines if ln.startswith("#version")]
    merges = [tuple(ln.split()) for ln in lines if ln and not ln.startswith("#version") and len(ln.split()) == 2]
    return (header[0] if header else "#version: 0.2"), merges


def _write_atomic(path, write):
    tmp = path + ".tmp"
    write(tmp)
    os.replace(tmp, path)


def _write_text(path, text):
    _write_atomic(path, lambda p: open(p, "w", encoding="utf-8").write(text))


def plan(model_dir, words):
    """(new merges [(a, b)], new tokens [str] in id order, {word: its old pieces}) for the words that are
    not one token yet."""
    vpath, mpath = _paths(model_dir)[:2]
    with open(vpath, encoding="utf-8") as f:
        vocab = json.load(f)
    header, merges = _read_merges(mpath)
    new_merges, new_tokens, old_pieces = [], [], {}
    known = set(vocab)
    for word in words:
        # Re-read the merges learned so far: a later word may reuse an earlier word's pieces.
        tok = _tokenizer_from(vocab, merges + new_merges)
        sym = "".join(tok.byte_encoder[b] for b in word.encode("utf-8"))
        pieces = tok.bpe(sym)
        if len(pieces) == 1:
            continue
        old_pieces[word] = pieces
        cur = pieces[0]
        for p in pieces[1:]:
            new_merges.append((cur, p))
            cur = cur + p
            if cur not in known:
                known.add(cur)
                new_tokens.append(cur)
    return new_merges, new_tokens, old_pieces


def _tokenizer_from(vocab, merges):
    return BpeTokenizer.from_data(vocab, merges)


def extend(model_dir, words):
    vpath, mpath, wpath, cpath, xpath = _paths(model_dir)
    new_merges, new_tokens, old_pieces = plan(model_dir, words)
    with open(vpath, encoding="utf-8") as f:
        vocab = json.load(f)
    header, merges = _read_merges(mpath)
    weights, meta = safetensors_io.load(wpath)
    emb = np.asarray(weights[EMB], dtype=np.float32)
    if emb.shape[0] != len(vocab):
        raise SystemExit(f"{wpath}: {EMB} has {emb.shape[0]} rows for the {len(vocab)} tokens of {vpath}")
    ext = {"base_vocab_size": len(vocab), "base_merges": len(merges), "words": {}, "tokens": []}
    if os.path.exists(xpath):
        with open(xpath) as f:
            ext = json.load(f)
    if not new_merges:
        print(f"{model_dir}: every word is already one token ({len(vocab)} tokens); nothing to do")
        return ext
    old_tok = _tokenizer_from(vocab, merges)
    new_vocab = dict(vocab)
    for t in new_tokens:
        new_vocab[t] = len(new_vocab)
    new_tok = _tokenizer_from(new_vocab, merges + new_merges)
    # Every old whole-word token and every word of the shape captions tokenizes as before (the new
    # merges rank last, but they could still join the last pieces of a word that stayed in pieces);
    # every new word is one token now.
    checked = [t[:-4] for t in vocab if t.endswith("</w>") and len(t) > 5]
    checked += [w for w in shape_words() if w not in old_pieces]
    for word in checked:
        sym = "".join(new_tok.byte_encoder[b] for b in word.encode("utf-8"))
        if new_tok.bpe(sym) != old_tok.bpe(sym):
            raise SystemExit(f"the extension would change the tokens of the shape word {word!r}: "
                             f"{old_tok.bpe(sym)} -> {new_tok.bpe(sym)}")
    rows = []
    for word, pieces in old_pieces.items():
        sym = "".join(new_tok.byte_encoder[b] for b in word.encode("utf-8"))
        got = new_tok.bpe(sym)
        if len(got) != 1:
            raise SystemExit(f"internal error: {word!r} is {got} after the extension")
        ext["words"][word] = new_vocab[got[0]]
    for t in new_tokens:
        # Initial row: the mean of the rows of the old pieces of what the token spells.
        word_pieces = old_tok.bpe(t[:-4] if t.endswith("</w>") else t)
        ids = [vocab[p] for p in word_pieces if p in vocab]
        rows.append(emb[ids].mean(axis=0) if ids else emb.mean(axis=0))
        ext["tokens"].append(t)
    weights = dict(weights)
    weights[EMB] = np.concatenate([emb, np.stack(rows).astype(np.float32)])
    with open(cpath) as f:
        cfg = json.load(f)
    cfg["vocab_size"] = len(new_vocab)
    _write_atomic(wpath, lambda p: safetensors_io.save(p, weights, meta))
    _write_text(cpath, json.dumps(cfg, indent=2) + "\n")
    _write_text(mpath, "\n".join([header] + [f"{a} {b}" for a, b in merges + new_merges]) + "\n")
    _write_text(vpath, json.dumps(new_vocab, ensure_ascii=False))
    _write_text(xpath, json.dumps(ext, indent=2) + "\n")
    print(f"{model_dir}: {len(old_pieces)} words made whole tokens with {len(new_merges)} merges and "
          f"{len(new_tokens)} new tokens (vocabulary {len(vocab)} -> {len(new_vocab)}): "
          + ", ".join(f"{w}={i}" for w, i in ext["words"].items()))
    return ext


def set_rows(model_dir, rows, base):
    """Writes learned extension rows (float32 [n, width]) into model_dir's text encoder, rows base.."""
    _, _, wpath, _, xpath = _paths(model_dir)
    with open(xpath) as f:
        ext = json.load(f)
    if int(ext["base_vocab_size"]) != int(base):
        raise SystemExit(f"{xpath}: base vocabulary {ext['base_vocab_size']}, the rows were learned over {base}")
    weights, meta = safetensors_io.load(wpath)
    emb = np.array(weights[EMB], dtype=np.float32)
    rows = np.asarray(rows, dtype=np.float32)
    if emb.shape[0] != base + rows.shape[0] or emb.shape[1] != rows.shape[1]:
        raise SystemExit(f"{wpath}: {EMB} is {list(emb.shape)}, cannot take {rows.shape[0]} rows of width "
                         f"{rows.shape[1]} after row {base}")
    emb[base:] = rows
    weights = dict(weights)
    weights[EMB] = emb
    _write_atomic(wpath, lambda p: safetensors_io.save(p, weights, meta))


def copy_rows(dst_dir, src_dir):
    """Carries src_dir's extension to dst_dir: same base vocabulary and same base rows required."""
    s_v, s_m, s_w, _, s_x = _paths(src_dir)
    d_v, d_m, d_w, d_c, d_x = _paths(dst_dir)
    if not os.path.exists(s_x):
        print(f"{src_dir}: no extension.json; nothing to carry")
        return 1
    with open(s_x) as f:
        ext = json.load(f)
    with open(d_v, encoding="utf-8") as f:
        dvocab = json.load(f)
    base = int(ext["base_vocab_size"])
    sw, smeta = safetensors_io.load(s_w)
    dw, dmeta = safetensors_io.load(d_w)
    if len(dvocab) != base and not os.path.exists(d_x):
        raise SystemExit(f"{d_v}: {len(dvocab)} tokens, the extension of {src_dir} extends {base}")
    semb, demb = np.asarray(sw[EMB]), np.asarray(dw[EMB])
    if base_fingerprint(sw, base) != base_fingerprint(dw, base):
        raise SystemExit(f"{d_w}: differs from {s_w} outside the extension rows: the extension's rows "
                         "were learned against another text encoder; retrain them (train_unet.py "
                         "--train-new-tokens)")
    for name in (s_v, s_m):
        with open(name, encoding="utf-8") as f:
            text = f.read()
        _write_text(d_v if name == s_v else d_m, text)
    dw = dict(dw)
    dw[EMB] = semb
    with open(d_c) as f:
        cfg = json.load(f)
    cfg["vocab_size"] = int(semb.shape[0])
    _write_atomic(d_w, lambda p: safetensors_io.save(p, dw, dmeta))
    _write_text(d_c, json.dumps(cfg, indent=2) + "\n")
    _write_text(d_x, json.dumps(ext, indent=2) + "\n")
    print(f"{dst_dir}: extension of {src_dir} carried ({semb.shape[0] - base} tokens)")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", default=MODEL_DIR)
    p.add_argument("--copy-rows-from", default="", help="carry this model folder's extension")
    a = p.parse_args(argv)
    if a.copy_rows_from:
        return copy_rows(a.model_dir, a.copy_rows_from)
    extend(a.model_dir, caption_words())
    return 0


if __name__ == "__main__":
    sys.exit(main())
