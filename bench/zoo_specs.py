"""The zoo's models as MODEL specs for the CLI and the benches that run it: `bench/zoo_specs.py:NAME`
builds zoo model NAME (bench/zoo_models.py), e.g. `tpuedge build bench/zoo_specs.py:mtcnn_onet ...`
or `python bench/cache.py --zoo mtcnn_onet,kws_dscnn`."""

from __future__ import annotations

from zoo_models import ZOO


def __getattr__(name: str):
    """A factory per zoo model (module attribute lookup, PEP 562): ZOO[name].build."""
    if name in ZOO:
        return ZOO[name].build
    raise AttributeError(f"no zoo model {name!r}; the zoo has {', '.join(ZOO)}")
