"""A character-level decoder LM small enough for a microcontroller, in tpuedge's decoder protocol.

    tpuedge build examples/char_lm/model.py:build --target mcu --cache-length 128 --board nrf52840
    tpuedge generate build/char_lm/mcu --prompt "The sun rises in the"

`build()` returns the trained `CharLM`: the float16 weights in char_lm.safetensors beside this
file, which `python examples/char_lm/train.py` writes (deterministically: fixed seed, one
thread). The forward follows the protocol (shared_ir/generative/decoder.py) in a form whose
decode step runs fully int8 in TFLite-Micro:
- learned absolute positions, looked up with F.embedding (no sin/cos in the graph: TFLM's SIN
  and COS take float only);
- the causal mask bounded: rows of a constant table (0 where a position may be read, -30 past
  it), looked up by position; a float32-min mask forces the masked scores' int8 scale so wide
  that every real score rounds alike, and a comparison of positions (LESS_EQUAL) is no op the
  mcu check takes;
- attention as einsums, so the converter writes BATCH_MATMUL over the caches with no TRANSPOSE
  (TFLM would keep a transposed copy of the cache in its arena);
- ReLU MLPs (TFLM has no GELU kernel) and a hand-written RMS norm, whose weight `build()`
  folds into the layer after it (one int8 multiply, and its rounding, fewer).
"""

import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["CharConfig", "CharLM", "build", "train", "save", "tokenizer", "tokenizer_json", "corpus_text", "WEIGHTS"]

MASKED = -30.0  # a few times the scores' range: masked rows get exp(-30) of the weight
UNK = "<unk>"


@dataclass(frozen=True)
class CharConfig:
    d_model: int = 96
    layers: int = 3
    heads: int = 4
    kv_heads: int = 2  # grouped-query attention: half the KV cache of one KV head per query head
    ffn: int = 192
    max_positions: int = 128  # the longest cache it can be built with (positions it was trained on)
    eps: float = 1e-5
    # training (train.py)
    seed: int = 0
    steps: int = 1500
    batch: int = 16
    lr: float = 5e-3


def corpus_text() -> str:
    """tpuedge's own corpus (quantize/data/lm_corpus.txt, which ships with it), its passages
    joined by blank lines instead of its `---` separator lines."""
    from importlib.resources import files

    text = (files("tpuedge.quantize") / "data" / "lm_corpus.txt").read_text(encoding="utf-8")
    passages = [p.strip() for p in text.replace("\r\n", "\n").split("\n---\n")]
    return "\n\n".join(p for p in passages if p)


def vocabulary() -> list[str]:
    """<unk> then every character of the corpus, sorted: a fixed vocabulary for a fixed corpus."""
    return [UNK, *sorted(set(corpus_text()))]


def tokenizer_json() -> str:
    """A tokenizers-library tokenizer.json: one token per character (unknown ones: <unk>)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {ch: i for i, ch in enumerate(vocabulary())}
    impl = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    # each character its own piece; (?m) is Oniguruma's dot-matches-newline
    impl.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")
    impl.decoder = decoders.Fuse()
    return impl.to_str()


def tokenizer():
    """The tpuedge Tokenizer that export_decoder writes beside the build (no BOS, no EOS)."""
    from tpuedge.shared_ir.generative.tokenizer import Tokenizer

    return Tokenizer(tokenizer_json())


class _Config:
    """What the decoder capture reads of a model's config: the positions it was trained for."""

    def __init__(self, max_positions: int):
        self.max_position_embeddings = max_positions


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps)
        return x if self.weight is None else x * self.weight

    def fold_into(self, *linears: nn.Linear) -> None:
        """Scale the input columns of the Linears reading this norm by its weight and drop it:
        the same function, one int8 multiply (and its rounding) fewer."""
        with torch.no_grad():
            for linear in linears:
                linear.weight.mul_(self.weight[None, :])
        self.weight = None


class Block(nn.Module):
    def __init__(self, c: CharConfig):
        super().__init__()
        self.c = c
        head_dim = c.d_model // c.heads
        self.norm1, self.norm2 = RMSNorm(c.d_model, c.eps), RMSNorm(c.d_model, c.eps)
        self.q = nn.Linear(c.d_model, c.heads * head_dim, bias=False)
        self.k = nn.Linear(c.d_model, c.kv_heads * head_dim, bias=False)
        self.v = nn.Linear(c.d_model, c.kv_heads * head_dim, bias=False)
        self.o = nn.Linear(c.heads * head_dim, c.d_model, bias=False)
        self.up = nn.Linear(c.d_model, c.ffn)
        self.down = nn.Linear(c.ffn, c.d_model)

    def forward(self, x, mask, input_pos, k_cache, v_cache):
        """x [1, T, D]; mask [T, S] additive; caches [1, KV, S, hd] -> (x, new caches)."""
        from tpuedge.shared_ir.generative.cache_ops import cache_write

        c = self.c
        t, head_dim, groups = x.shape[1], c.d_model // c.heads, c.heads // c.kv_heads
        h = self.norm1(x)
        q = self.q(h).view(1, t, c.heads, head_dim).transpose(1, 2) * head_dim**-0.5  # [1, H, T, hd]
        k = self.k(h).view(1, t, c.kv_heads, head_dim).transpose(1, 2)  # [1, KV, T, hd]
        v = self.v(h).view(1, t, c.kv_heads, head_dim).transpose(1, 2)
        k_cache = cache_write(k_cache, k, input_pos, 2)
        v_cache = cache_write(v_cache, v, input_pos, 2)
        q = q.reshape(1, c.kv_heads, groups * t, head_dim)  # query head kv * groups + g, row g * T + t
        scores = torch.einsum("bkqd,bksd->bkqs", q, k_cache)  # BATCH_MATMUL(adj_y): no transposed cache
        scores = scores.view(c.kv_heads, groups, t, -1) + mask
        weights = torch.softmax(scores, dim=-1).view(1, c.kv_heads, groups * t, -1)
        out = torch.einsum("bkqs,bksd->bkqd", weights, v_cache)  # [1, KV, G*T, hd]
        out = out.reshape(1, c.heads, t, head_dim).transpose(1, 2).reshape(1, t, c.heads * head_dim)
        x = x + self.o(out)
        x = x + self.down(F.relu(self.up(self.norm2(x))))
        return x, k_cache, v_cache


class CharLM(nn.Module):
    """forward(tokens int32 [1, T], input_pos int32 [T], *kv_cache) -> (logits [1, T, vocab], *new_kv_cache)."""

    def __init__(self, config: CharConfig = CharConfig(), vocab_size: int | None = None):
        super().__init__()
        self.c = config
        self.vocab_size = int(vocab_size or len(vocabulary()))
        self.config = _Config(config.max_positions)
        self.tokens = nn.Embedding(self.vocab_size, config.d_model)
        self.positions = nn.Embedding(config.max_positions, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = RMSNorm(config.d_model, config.eps)
        self.head = nn.Linear(config.d_model, self.vocab_size, bias=False)
        self.tokenizer = None  # set by build(): export_decoder writes it beside the artifact
        rows = torch.arange(config.max_positions)
        self.register_buffer("mask_rows", torch.where(rows[None, :] <= rows[:, None], 0.0, MASKED), persistent=False)

    def kv_cache(self, cache_length: int) -> list[torch.Tensor]:
        c = self.c
        shape = (1, c.kv_heads, cache_length, c.d_model // c.heads)
        return [torch.zeros(shape) for _ in range(2 * c.layers)]

    def forward(self, tokens, input_pos, *kv_cache):
        cache_length = kv_cache[0].shape[2]
        x = self.tokens(tokens.reshape(-1)) + F.embedding(input_pos, self.positions.weight)
        x = x.unsqueeze(0)
        mask = F.embedding(input_pos, self.mask_rows[:, :cache_length])  # [T, S]: row p reads 0..p
        new = []
        for i, block in enumerate(self.blocks):
            x, k, v = block(x, mask, input_pos, kv_cache[2 * i], kv_cache[2 * i + 1])
            new += [k, v]
        return (self.head(self.norm(x)), *new)

    def sequence_logits(self, ids: torch.Tensor) -> torch.Tensor:
        """Training form: ids [B, T] int64 -> logits [B, T, vocab], causal, no cache."""
        c = self.c
        b, t = ids.shape
        head_dim = c.d_model // c.heads
        x = self.tokens(ids) + self.positions.weight[:t]
        for block in self.blocks:
            h = block.norm1(x)
            q = block.q(h).view(b, t, c.heads, head_dim).transpose(1, 2)
            k = block.k(h).view(b, t, c.kv_heads, head_dim).transpose(1, 2).repeat_interleave(c.heads // c.kv_heads, 1)
            v = block.v(h).view(b, t, c.kv_heads, head_dim).transpose(1, 2).repeat_interleave(c.heads // c.kv_heads, 1)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + block.o(out.transpose(1, 2).reshape(b, t, -1))
            x = x + block.down(F.relu(block.up(block.norm2(x))))
        return self.head(self.norm(x))


def train(config: CharConfig = CharConfig(), log=None) -> tuple[CharLM, float]:
    """(the model trained on the corpus, its final training loss): AdamW on random windows of
    max_positions characters, a warm-up then a cosine schedule; one thread and a fixed seed, so the same
    machine gives the same weights (and builds byte-identical artifacts)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # deterministic; on two cores also not slower for a model this small
    try:
        torch.manual_seed(config.seed)
        model = CharLM(config)
        index = {ch: i for i, ch in enumerate(vocabulary())}
        data = torch.tensor([index[ch] for ch in corpus_text()], dtype=torch.long)
        generator = torch.Generator().manual_seed(config.seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.01)
        warmup = max(1, config.steps // 20)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda step: (
                min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(step, config.steps) / config.steps))
            ),
        )
        window = config.max_positions + 1
        recent = []
        for step in range(config.steps):
            starts = torch.randint(0, len(data) - window, (config.batch,), generator=generator)
            batch = torch.stack([data[s : s + window] for s in starts.tolist()])
            logits = model.sequence_logits(batch[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, model.vocab_size), batch[:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            recent = (recent + [loss.item()])[-20:]
            if log is not None and (step % 100 == 0 or step == config.steps - 1):
                log(f"step {step:4d}  loss {sum(recent) / len(recent):.3f}")
        return model.eval(), sum(recent) / len(recent)
    finally:
        torch.set_num_threads(threads)


WEIGHTS = Path(__file__).with_name("char_lm.safetensors")  # float16: 2 bytes a parameter, under 500 KB


def save(model: CharLM, path: Path = WEIGHTS) -> None:
    """The weights in float16 (safetensors: the same weights give the same bytes), written to a
    temp file and renamed, so a reader never sees half of it."""
    from safetensors.torch import save

    state = {name: tensor.detach().to(torch.float16).contiguous() for name, tensor in model.state_dict().items()}
    temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temp.write_bytes(save(state))
    os.replace(temp, path)


def build(config: CharConfig = CharConfig()) -> CharLM:
    """The trained CharLM (float32, from the float16 weights train.py wrote) with its tokenizer."""
    from safetensors.torch import load_file

    if not WEIGHTS.is_file():
        raise FileNotFoundError(f"{WEIGHTS} is missing: run `python examples/char_lm/train.py` to train the model")
    model = CharLM(config)
    model.load_state_dict({name: tensor.float() for name, tensor in load_file(WEIGHTS).items()})
    for block in model.blocks:
        block.norm1.fold_into(block.q, block.k, block.v)
        block.norm2.fold_into(block.up)
    model.norm.fold_into(model.head)
    model.tokenizer = tokenizer()
    return model.eval()
