"""Generative capture: a decoder's prefill and decode entry points (and buckets of any variable
axis) as one ProgramBundle sharing one set of weights. See decoder.py for the protocol."""

from tpuedge.shared_ir.generative.capture import DEFAULT_CACHE_LENGTH, DEFAULT_PREFILL_LENGTHS, export_decoder

__all__ = ["export_decoder", "DEFAULT_CACHE_LENGTH", "DEFAULT_PREFILL_LENGTHS"]
