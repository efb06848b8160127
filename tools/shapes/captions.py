"""Captions that are true to a shape's parameters.

Every adjective and noun variant has an explicit rule over *metrics* of the
shape (see ``metrics``); a word is only used when its rule holds, so the
caption is true by construction, and the rules are data (``ADJECTIVES``,
``NOUN_RULES``) so tests can re-check them against metrics measured from the
SDF itself.  Metrics (units of the [-1, 1] cube; full extents, not half):

  L     largest extent max(W, H, D)            -> size words
  Wh    horizontal extent max(W, D)
  r     aspect H / Wh                          -> tall / short / flat / wide
  q     torus tube radius / major radius       -> thin / thick torus
  wall  ring wall thickness / outer radius     -> thin / thick ring
  box   largest / smallest extent              -> cube / slab

Captions are lower-case ASCII words separated by single spaces: no digits and
no punctuation, so CLIP-style tokenisation round-trips them exactly.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

from .families import Shape

# A condition is (metric, op, threshold) with op in {"<=", ">="}.
Condition = Tuple[str, str, float]

# group -> list of (word, conditions).  Synonyms share conditions.
_SIZE = [
    ("tiny", [("L", "<=", 0.6)]),
    ("small", [("L", "<=", 0.95)]),
    ("little", [("L", "<=", 0.95)]),
    ("big", [("L", ">=", 1.5)]),
    ("large", [("L", ">=", 1.5)]),
]
_HEIGHT = [
    ("tall", [("r", ">=", 1.6)]),
    ("high", [("r", ">=", 1.6)]),
    ("short", [("r", "<=", 0.8)]),
    ("flat", [("r", "<=", 0.4)]),
    ("low", [("r", "<=", 0.4)]),
]
_WIDTH = [
    ("wide", [("r", "<=", 0.67)]),
    ("broad", [("r", "<=", 0.67)]),
    ("thin", [("r", ">=", 2.0), ("Wh", "<=", 0.6)]),
    ("slender", [("r", ">=", 2.0), ("Wh", "<=", 0.6)]),
    ("narrow", [("r", ">=", 2.0), ("Wh", "<=", 0.6)]),
    ("fat", [("r", ">=", 0.6), ("r", "<=", 1.3), ("Wh", ">=", 1.0)]),
    ("chunky", [("r", ">=", 0.6), ("r", "<=", 1.3), ("Wh", ">=", 1.0)]),
]
_TUBE = [
    ("thin", [("q", "<=", 0.25)]),
    ("thick", [("q", ">=", 0.5)]),
    ("fat", [("q", ">=", 0.5)]),
]
_WALL = [
    ("thin", [("wall", "<=", 0.2)]),
    ("thick", [("wall", ">=", 0.4)]),
]

# Adjective groups used per family, in caption order (size first, as in English).
_GROUPS_DEFAULT = [("size", _SIZE), ("height", _HEIGHT), ("width", _WIDTH)]
_GROUPS_BY_FAMILY = {
    "sphere": [("size", _SIZE)],
    "torus": [("size", _SIZE), ("tube", _TUBE)],
    "ring": [("size", _SIZE), ("height", _HEIGHT), ("wall", _WALL)],
}

ADJECTIVES: Dict[str, Dict[str, List[Condition]]] = {}
for _fam_groups in [_GROUPS_DEFAULT] + list(_GROUPS_BY_FAMILY.values()):
    for _g, _words in _fam_groups:
        for _w, _c in _words:
            ADJECTIVES.setdefault(_g, {})[_w] = _c


def adjective_groups(family: str):
    """[(group, [(word, conditions)])] used for ``family``, in caption order."""
    return _GROUPS_BY_FAMILY.get(family, _GROUPS_DEFAULT)


# family -> list of (noun phrase, conditions, required tag or None).
NOUN_RULES: Dict[str, List[Tuple[str, List[Condition], object]]] = {
    "sphere": [("sphere", [], None), ("ball", [], None), ("orb", [], None)],
    "box": [("box", [], ("rounded", False)), ("block", [], ("rounded", False)),
            ("cuboid", [], ("rounded", False)), ("cube", [("box", "<=", 1.15)], ("rounded", False)),
            ("slab", [("box", ">=", 4.0)], ("rounded", False)),
            ("rounded box", [], ("rounded", True)), ("rounded block", [], ("rounded", True)),
            ("rounded cube", [("box", "<=", 1.15)], ("rounded", True))],
    "cylinder": [("cylinder", [], None), ("disc", [("r", "<=", 0.35)], None), ("disk", [("r", "<=", 0.35)], None),
                 ("pillar", [("r", ">=", 2.5)], None), ("column", [("r", ">=", 2.5)], None)],
    "cone": [("cone", [], None), ("truncated cone", [], ("truncated", True))],
    "capsule": [("capsule", [], None), ("pill", [], None)],
    "torus": [("torus", [], None), ("donut", [], None), ("doughnut", [], None)],
    "ring": [("ring", [], None), ("washer", [("r", "<=", 0.3)], None),
             ("tube", [("r", ">=", 1.5)], None), ("pipe", [("r", ">=", 1.5)], None)],
    "pyramid": [("pyramid", [], None)],
    "mug": [("mug", [], None), ("cup", [], None), ("coffee mug", [], None)],
    "snowman": [("snowman", [], None)],
    "dumbbell": [("dumbbell", [], None)],
    "arch": [("arch", [], None), ("archway", [], None)],
    "mushroom": [("mushroom", [], None), ("toadstool", [], None)],
    "tree": [("tree", [], None), ("pine tree", [], ("conifer", True)), ("fir tree", [], ("conifer", True))],
    "table": [("table", [], None), ("round table", [], ("round", True))],
    "chair": [("chair", [], None)],
    "bottle": [("bottle", [], None)],
    "lamp": [("lamp", [], None), ("table lamp", [], None), ("desk lamp", [], None)],
    "house": [("house", [], None), ("hut", [], None), ("cottage", [], None)],
}

# (template, weight); {np} is the article + adjectives + noun phrase.
TEMPLATES: List[Tuple[str, float]] = [
    ("{np}", 0.4),
    ("a model of {np}", 0.15),
    ("a render of {np}", 0.15),
    ("an object shaped like {np}", 0.15),
    ("a sculpture of {np}", 0.15),
]


def metrics_from_extents(extents: Sequence[float], tags: Dict[str, object] | None = None) -> Dict[str, float]:
    """Caption metrics from full extents (W, H, D) plus family tags (q, wall)."""
    w, h, d = (float(v) for v in extents)
    wh = max(w, d)
    m = {"L": max(w, h, d), "Wh": wh, "r": h / wh, "box": max(w, h, d) / min(w, h, d)}
    for k in ("tube_ratio", "wall_ratio"):
        if tags and k in tags:
            m["q" if k == "tube_ratio" else "wall"] = float(tags[k])
    return m


def metrics(shape: Shape) -> Dict[str, float]:
    return metrics_from_extents(shape.extents, shape.tags)


def holds(conditions: Sequence[Condition], m: Dict[str, float], slack: float = 0.0) -> bool:
    """True if every condition holds; ``slack`` relaxes thresholds relatively (for tests)."""
    for metric, op, thr in conditions:
        v = m[metric]
        if op == "<=" and not v <= thr * (1 + slack):
            return False
        if op == ">=" and not v >= thr * (1 - slack):
            return False
    return True


def _tag_ok(tag, tags) -> bool:
    return tag is None or bool(tags.get(tag[0], False)) == tag[1]


def true_nouns(shape: Shape) -> List[str]:
    m = metrics(shape)
    return [n for n, cond, tag in NOUN_RULES[shape.family] if _tag_ok(tag, shape.tags) and holds(cond, m)]


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def make_caption(shape: Shape, rng: np.random.Generator) -> str:
    """Deterministic (given rng state) caption whose every word is true for ``shape``."""
    m = metrics(shape)
    nouns = true_nouns(shape)
    noun = nouns[int(rng.integers(len(nouns)))]
    groups = []
    for _g, words in adjective_groups(shape.family):
        ok = [w for w, cond in words if holds(cond, m)]
        if ok:
            groups.append(ok)
    n_adj = int(rng.choice(3, p=[0.2, 0.4, 0.4]))
    n_adj = min(n_adj, len(groups))
    chosen = sorted(rng.choice(len(groups), size=n_adj, replace=False)) if n_adj else []
    adjs = [groups[i][int(rng.integers(len(groups[i])))] for i in chosen]
    phrase_words = adjs + [noun]
    np_text = article(phrase_words[0]) + " " + " ".join(phrase_words)
    weights = np.array([w for _, w in TEMPLATES])
    template = TEMPLATES[int(rng.choice(len(TEMPLATES), p=weights / weights.sum()))][0]
    return template.format(np=np_text)


# Short captions: what people type first (tools/train/first_prompts.tsv), i.e. the noun phrase without a
# template: (form, weight). "bare" = the noun alone ("cube", "donut"); "a" = article + noun ("a ball");
# "adj" = article + one true adjective + noun ("a flat box", "a thick ring"). None of them uses a template,
# so the held-out "a sculpture of ..." stays held out.
SHORT_FORMS: List[Tuple[str, float]] = [("bare", 0.3), ("a", 0.4), ("adj", 0.3)]


def make_short_caption(shape: Shape, rng: np.random.Generator) -> str:
    """A short caption (SHORT_FORMS) whose every word is true for ``shape``, like make_caption's; the
    family's own word ("torus", "mug") half of the time when it is true, else any true noun."""
    m = metrics(shape)
    nouns = true_nouns(shape)
    noun = nouns[int(rng.integers(len(nouns)))]
    if shape.family in nouns and rng.random() < 0.5:
        noun = shape.family
    weights = np.array([w for _, w in SHORT_FORMS])
    form = SHORT_FORMS[int(rng.choice(len(SHORT_FORMS), p=weights / weights.sum()))][0]
    if form == "bare":
        return noun
    words = [noun]
    if form == "adj":
        ok = [w for _g, group in adjective_groups(shape.family) for w, cond in group if holds(cond, m)]
        if ok:
            words = [ok[int(rng.integers(len(ok)))], noun]
    return article(words[0]) + " " + " ".join(words)


def vocabulary_words() -> List[str]:
    """Every word a caption can contain (plus family names), sorted."""
    words = set()
    for groups in [_GROUPS_DEFAULT] + list(_GROUPS_BY_FAMILY.values()):
        for _g, ws in groups:
            words.update(w for w, _ in ws)
    for fam, rules in NOUN_RULES.items():
        words.add(fam)
        for n, _, _ in rules:
            words.update(n.split())
    for t, _ in TEMPLATES:
        words.update(w for w in t.split() if not w.startswith("{"))
    words.update(["a", "an"])
    return sorted(words)
