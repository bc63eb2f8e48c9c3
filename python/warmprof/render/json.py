"""A report (trace or probe) or a comparison as JSON: the saved format itself."""

from __future__ import annotations

from typing import Any

from .base import Renderer


class JsonRenderer(Renderer):
    extension = ".json"

    def render(self, obj: Any) -> str:
        return obj.to_json() + "\n"
