"""Procedural shape dataset for training tessera-tiny (SDF primitives, families, captions).

Modules: sdf (numpy SDFs), families (seeded shape families), captions (true
captions), dataset (sampling, IoU helpers, CLI).  See README.md.
"""

from .captions import make_caption
from .families import FAMILIES, HALF_EXTENT, MIN_THICKNESS, Shape, make_shape

__all__ = ["FAMILIES", "HALF_EXTENT", "MIN_THICKNESS", "Shape", "make_caption", "make_shape"]
