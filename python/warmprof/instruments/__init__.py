"""Instruments: one context manager per source, each writing native recorder events."""

from .base import Instrument

__all__ = ["Instrument"]
