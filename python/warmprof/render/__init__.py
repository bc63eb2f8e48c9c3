"""Renderers over reports and comparisons, found by format name and kind in one registry (registry.py).
Importing this package loads no renderer module; it makes str() of a report or a comparison the
registry's "text" format."""

from ..report.base import set_text_renderer
from .base import Renderer
from .registry import (
    Format,
    find,
    formats,
    from_extension,
    get,
    kind_of,
    register,
    render,
    text_of,
)

set_text_renderer(text_of)

__all__ = ["Format", "Renderer", "find", "formats", "from_extension", "get", "kind_of", "register", "render", "text_of"]
