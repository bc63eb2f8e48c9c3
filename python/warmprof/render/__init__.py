"""Renderers over reports: text, JSON, Chrome/Perfetto trace, PNG, comparison."""

from .base import Renderer

__all__ = ["Renderer"]
