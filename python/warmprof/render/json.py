"""A report (any kind) or a comparison as JSON: the saved format itself."""

from __future__ import annotations

from typing import Any

from .base import Renderer
from .registry import register


@register
class JsonRenderer(Renderer):
    format = "json"
    kinds = ("trace", "probe", "op_probe", "trace_repeat", "watch", "warmup", "buckets", "run", "comparison")
    extension = ".json"
    about = "the saved format itself"

    def render(self, obj: Any) -> str:
        return obj.to_json() + "\n"
