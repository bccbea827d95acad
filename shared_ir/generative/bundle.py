"""`ProgramBundle`: named entry points that share one set of weights.

A decoder bundle (generative/capture.py) holds `prefill_<n>` entries and `decode`, its cache as
explicit inputs and outputs; a bucket bundle (generative/buckets.py) holds one entry per size of
a variable axis. Every entry is a Program whose parameters are the same tensors, so a backend
that lowers the entries together stores each weight once.
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from tpuedge.shared_ir.errors import InternalError, Problem, UserError
from tpuedge.shared_ir.generative.decoder import DECODE

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.shared_ir.generative.decoder import DecoderSpec
    from tpuedge.shared_ir.generative.tokenizer import Tokenizer
    from tpuedge.shared_ir.program import Program

__all__ = ["ProgramBundle"]

_FORMAT = "tpuedge-bundle-v1"


class ProgramBundle:
    def __init__(
        self,
        entries: "dict[str, Program]",
        *,
        name: str,
        decoder: "DecoderSpec | None" = None,
        buckets: dict | None = None,
        tokenizer: "Tokenizer | None" = None,
    ):
        if not entries or (decoder is None) == (buckets is None):
            raise InternalError("a ProgramBundle holds entries and exactly one of a decoder spec or buckets")
        self.entries = dict(entries)
        self.name = name
        self.decoder = decoder
        self.buckets = buckets
        self.tokenizer = tokenizer
        first = next(iter(self.entries.values())).exported_program.state_dict
        for entry, program in self.entries.items():
            state = program.exported_program.state_dict
            if state.keys() != first.keys() or any(state[k] is not first[k] for k in state):
                raise InternalError(f"entry {entry} of bundle {name} does not share the first entry's weights")

    @property
    def kind(self) -> str:
        return "decoder" if self.decoder is not None else "buckets"

    @property
    def entry_names(self) -> list[str]:
        return list(self.entries)

    @property
    def parameter_count(self) -> int:
        return next(iter(self.entries.values())).parameter_count

    @property
    def op_histogram(self) -> dict[str, int]:
        """The ops of the entry with the most (they share their ops)."""
        return max((p.op_histogram for p in self.entries.values()), key=lambda h: sum(h.values()))

    def rewrites(self, target: str) -> list[str]:
        return list(dict.fromkeys(note for p in self.entries.values() for note in p.rewrites(target)))

    def describe(self) -> dict:
        """The bundle's interface as JSON: kind, spec, each entry's inputs and outputs."""
        return {
            "format": _FORMAT,
            "kind": self.kind,
            "name": self.name,
            **({"decoder": self.decoder.to_json()} if self.decoder else {"buckets": self.buckets}),
            "entries": {
                name: {"inputs": [s.to_json() for s in p.inputs], "outputs": [s.to_json() for s in p.outputs]}
                for name, p in self.entries.items()
            },
        }

    @cached_property
    def fingerprint(self) -> str:
        """sha256 over the bundle's interface, every entry's graph and the shared weights once."""
        from tpuedge.shared_ir.fingerprint import canonical_graph_text, fingerprint_tensors

        digest = hashlib.sha256(json.dumps(self.describe(), sort_keys=True).encode())
        for name, program in self.entries.items():
            digest.update(f"\nentry {name}\n".encode())
            digest.update(canonical_graph_text(program.exported_program).encode())
        fingerprint_tensors(digest, next(iter(self.entries.values())).exported_program)
        if self.tokenizer is not None:
            digest.update(self.tokenizer.digest.encode())
        return digest.hexdigest()

    # ---- targets ---------------------------------------------------------------------
    def check(self, target: str) -> list[Problem]:
        """Every problem `target` has with any entry, each once (the entries share their ops)."""
        seen: dict[tuple[str, str], Problem] = {}
        for program in self.entries.values():
            for problem in program.check(target):
                seen.setdefault((problem.kind, problem.subject), problem)
        return list(seen.values())

    def lower(self, target: str, **options: Any):
        from tpuedge.shared_ir.targets import get_target

        return get_target(target).lower_bundle(self, **options)

    # ---- reference -------------------------------------------------------------------
    def reference(self):
        """A StepRunner running the entries in torch: the float IR every artifact is compared with."""
        if self.decoder is None:
            raise UserError(f"{self.name} is a bucket bundle, not a decoder: it has no prefill and decode to run.")
        return TorchStepRunner(self)

    def __repr__(self) -> str:
        return f"ProgramBundle({self.name!r}, {self.kind}, entries={self.entry_names}, params={self.parameter_count})"


class TorchStepRunner:
    """The bundle's entries run by torch over their own graphs (Program.run)."""

    def __init__(self, bundle: ProgramBundle):
        self.bundle = bundle
        self.prefill_lengths = bundle.decoder.prefill_lengths
        self.cache_length = bundle.decoder.cache_length

    def initial_cache(self) -> list:
        spec = self.bundle.decoder
        return [np.zeros(shape, spec.cache_dtype) for shape in spec.cache_shapes]

    def run(self, entry: str, tokens, input_pos, cache):
        import torch

        # one thread: a decode step is many small ops, which torch runs 2-5x slower on two
        # threads of a two-core machine, and a runtime under test runs beside it
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            outputs = self.bundle.entries[entry].run(tokens, input_pos, *cache, memo=False)
        finally:
            torch.set_num_threads(threads)
        return (outputs[0], outputs[1:]) if entry == DECODE else (None, outputs)
