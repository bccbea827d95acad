"""MODEL specs: "path/to/file.py:factory", "package.module:factory", a saved ".pt2" Program, or
a local transformers model folder (config.json and weights) of a causal language model.

`factory()` returns `(torch.nn.Module, example_inputs_tuple)`, or a decoder language model
alone: a transformers causal LM (`AutoModelForCausalLM`) or a module following tpuedge's decoder
protocol (shared_ir/generative/decoder.py). A decoder is captured as a ProgramBundle of prefill
and decode entry points (`--prefill-lengths`, `--cache-length`). Every way this can go wrong is
one UserError paragraph (exit 2 in the CLI), never a traceback.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Any

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.sources import user_frame_from_traceback

__all__ = ["load_factory", "load_module_and_inputs", "load_program", "spec_name", "CAPTURE_OPTIONS", "is_model_folder"]

# build options read when the model is captured, not when it is lowered
CAPTURE_OPTIONS = ("prefill_lengths", "cache_length", "buckets")

_FORMAT_HELP = (
    "MODEL is `path/to/file.py:factory`, `package.module:factory`, a `.pt2` saved by `tpuedge export`, or "
    "a transformers causal-LM folder"
)
_GENERIC_STEMS = {"model", "models", "__init__", "main", "net", "build"}


def _split(spec: str) -> tuple[str, str]:
    if ":" not in spec:
        raise UserError(
            f"Model spec {spec!r} names no factory function. {_FORMAT_HELP}, e.g. `examples/digits/model.py:build`."
        )
    where, factory = spec.rsplit(":", 1)
    if not where or not factory.isidentifier():
        raise UserError(f"Model spec {spec!r} is malformed. {_FORMAT_HELP}.")
    return where, factory


def spec_name(spec: str) -> str:
    """A short model name for output folders.

    The file/module stem; for generic stems ("model.py") the factory name without its
    build_/make_ prefix ("models.py:build_mlp" -> "mlp"), else the folder ("digits/model.py:build" -> "digits").
    """
    if is_model_folder(spec):
        return Path(spec).resolve().name.lower()
    where, _, factory = spec.rpartition(":") if ":" in spec else (spec, "", "")
    is_path = where.endswith((".py", ".pt2")) or "/" in where
    stem = Path(where).stem if is_path else where.split(".")[-1]
    if stem not in _GENERIC_STEMS:
        return stem
    for prefix in ("build_", "make_", "get_", "create_"):
        if factory.startswith(prefix) and factory[len(prefix) :]:
            return factory[len(prefix) :]
    if is_path:
        return Path(where).resolve().parent.name
    parts = where.split(".")
    return parts[-2] if len(parts) > 1 else stem


def _import_file(path: Path):
    if not path.is_file():
        raise UserError(f"Model file {path} does not exist. {_FORMAT_HELP}; check the path (relative to {Path.cwd()}).")
    # Registered under a private key (it must not replace a module of the same name the user
    # imported), but executed with __name__ = the file's stem: class paths like
    # "model.DigitsCNN" end up in artifact tensor names, so they must not depend on the process
    # (hash()) or on where the checkout lives, or rebuilds would not be byte-identical.
    name = f"_tpuedge_model_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.resolve().parent))  # let the model file import its neighbours
    try:
        sys.modules[name] = module
        code = spec.loader.get_code(name)
        module.__name__ = path.stem
        exec(code, module.__dict__)  # noqa: S102 - what exec_module does, under the stem's name
    except Exception as exc:
        sys.modules.pop(name, None)
        raise _raised(f"Importing {path}", exc) from exc
    finally:
        sys.path.remove(str(path.resolve().parent))
    return module


def _import_module(dotted: str):
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError as exc:
        if exc.name and dotted.startswith(exc.name):
            raise UserError(
                f"No module {dotted!r} (looked on sys.path and in {Path.cwd()}). {_FORMAT_HELP}; "
                "use a file path ending in .py if the model isn't an installed package."
            ) from exc
        raise _raised(f"Importing {dotted}", exc) from exc
    except Exception as exc:
        raise _raised(f"Importing {dotted}", exc) from exc


def _raised(what: str, exc: BaseException) -> UserError:
    where = user_frame_from_traceback(exc.__traceback__)
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    loc = f" at {where}" if where else ""
    return UserError(f"{what} raised {last}{loc}. Fix the model code so it runs on its own, then retry.")


def load_factory(spec: str):
    where, factory = _split(spec)
    module = _import_file(Path(where)) if where.endswith(".py") or "/" in where else _import_module(where)
    fn = getattr(module, factory, None)
    if fn is None:
        available = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise UserError(
            f"{where} has no attribute {factory!r}. Callables there: {', '.join(available[:12]) or 'none'}. "
            f"{_FORMAT_HELP}."
        )
    if not callable(fn):
        raise UserError(f"{where}:{factory} is a {type(fn).__name__}, not a function. {_FORMAT_HELP}.")
    return fn


def is_model_folder(spec: str) -> bool:
    return Path(spec).is_dir() and (Path(spec) / "config.json").is_file()


def _call_factory(spec: str):
    from tpuedge.shared_ir.stage_times import timed

    with timed("import torch"):
        import torch  # noqa: F401

    with timed("model factory (user code: imports, weights)"):
        fn = load_factory(spec)
        try:
            return fn()
        except Exception as exc:
            raise _raised(f"The model factory {spec}", exc) from exc


def _factory_shape_error(spec: str, result) -> UserError:
    got = type(result).__name__
    if isinstance(result, tuple):
        got = "(" + ", ".join(type(x).__name__ for x in result) + ")"
    return UserError(
        f"The model factory {spec} returned {got}; it must return (torch.nn.Module, example_inputs) "
        "where example_inputs is a tuple of tensors, e.g. `return Net(), (torch.randn(1, 3, 32, 32),)`, "
        "or a decoder language model alone (a transformers causal LM, or a module following tpuedge's decoder protocol)."
    )


def _module_and_inputs(spec: str, result) -> tuple[Any, tuple]:
    import torch

    ok = (
        isinstance(result, tuple)
        and len(result) == 2
        and isinstance(result[0], torch.nn.Module)
        and isinstance(result[1], (tuple, list))
        and all(isinstance(x, torch.Tensor) for x in result[1])
    )
    if not ok:
        raise _factory_shape_error(spec, result)
    return result[0], tuple(result[1])


def load_module_and_inputs(spec: str) -> tuple[Any, tuple]:
    """Call the factory and check it returned `(nn.Module, tuple_of_example_inputs)`."""
    return _module_and_inputs(spec, _call_factory(spec))


def decoder_of(obj: Any):
    """The decoder to capture in a factory's result, or None: a transformers causal LM, a module
    following the decoder protocol, or transformers' static-cache export wrapper (whose causal
    LM is captured with tpuedge's own explicit cache instead)."""
    from tpuedge.shared_ir.generative.hf_decoder import is_hf_causal_lm

    module = obj[0] if isinstance(obj, tuple) and obj else obj
    if is_hf_causal_lm(module):
        return module
    inner = getattr(module, "model", None)
    if type(module).__name__.startswith("TorchExportableModuleWith") and is_hf_causal_lm(inner):
        return inner
    if callable(getattr(module, "kv_cache", None)) and hasattr(module, "vocab_size"):
        return module
    return None


def _load_hf_folder(folder: str):
    from tpuedge.shared_ir.stage_times import timed

    with timed("import torch"):
        import torch
    try:
        from transformers import AutoModelForCausalLM
    except ImportError as exc:
        raise UserError(
            f"{folder} is a transformers model folder, and transformers is not installed: `pip install transformers`."
        ) from exc
    with timed("load the transformers model"):
        try:
            return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise UserError(
                f"transformers could not load {folder} as a causal language model ({type(exc).__name__}: {first}); "
                "give a folder with config.json, the weights (safetensors) and tokenizer.json of a causal LM."
            ) from exc


def load_program(spec: str, capture: dict | None = None):
    """MODEL spec -> Program (a `.pt2` is loaded; a factory is called and exported), or a
    ProgramBundle for a decoder language model, captured with `capture`'s prefill lengths and
    cache length (build options; their defaults when not given)."""
    from tpuedge.shared_ir.capture import export
    from tpuedge.shared_ir.program import Program

    if spec.endswith(".pt2"):
        from tpuedge.shared_ir.stage_times import timed

        with timed("load .pt2"):
            return Program.load(spec)
    result = _load_hf_folder(spec) if is_model_folder(spec) else _call_factory(spec)
    capture = capture or {}
    decoder = decoder_of(result)
    if decoder is not None:
        if capture.get("buckets"):
            raise UserError(
                "--buckets is for a model with one variable axis; a decoder LM takes --prefill-lengths and "
                "--cache-length instead."
            )
        return _capture_decoder(decoder, spec, capture)
    module, inputs = _module_and_inputs(spec, result)
    if capture.get("prefill_lengths") or capture.get("cache_length"):
        raise UserError(
            f"--prefill-lengths and --cache-length capture a decoder language model, and {spec} is not one "
            "(a transformers causal LM, or a module following tpuedge's decoder protocol); drop them."
        )
    if capture.get("buckets"):
        from tpuedge.shared_ir.generative.buckets import export_buckets

        return export_buckets(module, inputs, capture["buckets"], name=spec_name(spec))
    return export(module, inputs, name=spec_name(spec))


def _capture_decoder(decoder, spec: str, capture: dict):
    from tpuedge.shared_ir.generative import DEFAULT_CACHE_LENGTH, DEFAULT_PREFILL_LENGTHS, export_decoder
    from tpuedge.shared_ir.generative.decoder import parse_lengths

    from tpuedge.shared_ir.generative.capture import position_limit

    limit = position_limit(decoder)
    cache_length = capture.get("cache_length") or min(DEFAULT_CACHE_LENGTH, limit or DEFAULT_CACHE_LENGTH)
    lengths = (
        parse_lengths(capture.get("prefill_lengths"), "--prefill-lengths")
        or tuple(n for n in DEFAULT_PREFILL_LENGTHS if n <= cache_length)
        or (cache_length,)
    )
    return export_decoder(decoder.eval(), prefill_lengths=lengths, cache_length=int(cache_length), name=spec_name(spec))
