"""The edge backend's generative path: a ProgramBundle (a decoder's prefill and decode, or the
buckets of a variable axis) as one LiteRT flatbuffer with a signature per entry point, each
weight stored once; LM quantization recipes; the artifact that generates text on LiteRT."""

__all__: list[str] = []
