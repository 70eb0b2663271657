"""The census of bad input: every public entry point of course_lib, called wrongly, must say so clearly.

A table of bad calls (wrong types, shapes, dtypes, ranges, NaN, empty inputs, mismatched sizes)
over the public functions and classes the lessons and exercises use. Two sources feed it:
  * BASES: one valid call per entry point; each of its arguments is then replaced, one at a
    time, by a value of the wrong kind (a string where no string is accepted, None where None
    is not accepted). The valid call itself must return, so that a refusal is the bad
    argument's doing.
  * CASES: hand-written attacks on shapes, dtypes, ranges, NaN, empty and mismatched inputs.
Each bad call names the argument(s) it spoils.

How a call is classified (in this order):
  silent    it returns (or still runs after SECONDS: it took the bad argument and went on).
  deep      the error was not raised by a `raise` statement in course_lib: its innermost frame
            is in torch or Python, or is a course_lib line that is not a `raise` (an operation
            torch or Python refused, such as `a @ b`, `x.shape` of a string or `int(x)`).
  internal  a course_lib `raise` below the entry point (the outermost course_lib frame): some
            course_lib frame between them is not trusted to raise for it; or the exception is
            not a ValueError or TypeError (an AssertionError, a KeyError ...). Trusted: a guard
            (course_lib/guards.py), a validator (a function named require_*, check_*,
            _require_*, _check_*), and another public entry point (a public function, or the
            __init__ / __post_init__ / __call__ / forward of a public class, or a comprehension in
            one of them), which checks its own arguments. A private helper or a nested
            function (a training step's closure) is not.
  vague     a ValueError or TypeError raised where it may be, whose message does not name the
            spoilt argument as the caller spelt it (as a word; "config.d_model" names d_model)
            or does not say what was expected (the words "must", "expected", "should", or "out
            of range" / "does not broadcast", which the guards follow with the range or
            the shapes).
  clear     the rest: a ValueError or TypeError from the entry point, its guards, or an entry
            point it calls, that names the caller's argument and says what was expected.

The goal, asserted per module: 0 silent, 0 deep, 0 internal, 0 vague.
`python tests/test_guards.py` prints the census and every call that is not clear.
"""

from __future__ import annotations

import inspect
import linecache
import math
import re
import signal
import sys
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch

import course_lib

LIB = Path(course_lib.__file__).resolve().parent
VALIDATOR = re.compile(r"^_?(require|check)_")
EXPECTED = re.compile(r"\b(must|expected|should|out of range|does not broadcast)\b")
KINDS = ("clear", "vague", "internal", "deep", "silent")


@dataclass
class Call:
    module: str      # the module the entry point lives in (course_lib.<module>)
    entry: str       # the entry point, e.g. "softmax" or "Attention.forward"
    attack: str      # what is wrong with the call
    names: tuple[str, ...]  # the argument(s) a clear message names (any one of them)
    run: Callable[[], object]

    @property
    def label(self) -> str:
        return f"{self.module}.{self.entry}: {self.attack}"


class _RanOn(BaseException):
    """Raised by the alarm in a call that neither returns nor refuses within SECONDS."""


SECONDS = 5


def _ran_on(signum, frame):
    raise _RanOn


def _in_course_lib(filename: str) -> bool:
    return Path(filename).resolve().is_relative_to(LIB)


def _trusted(code) -> bool:
    """A frame below the entry point that may raise for it: a guard, a validator, or another public
    entry point of course_lib (which validates its own arguments: the learner's argument reaches
    it under its own name)."""
    if Path(code.co_filename).name == "guards.py" or VALIDATOR.match(code.co_name):
        return True
    parts = code.co_qualname.split(".")
    while parts[-1] in COMPREHENSIONS and parts[-2:-1] == ["<locals>"]:
        parts = parts[:-2]
    return all(not part.startswith(("_", "<")) or part in DUNDERS for part in parts)


DUNDERS = ("__init__", "__post_init__", "__call__")
# a comprehension inside a function is that function's own code (a check over its arguments)
COMPREHENSIONS = ("<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>")


def classify(call: Call) -> tuple[str, str]:
    """(kind, what happened) for one bad call; see the module docstring for the rules."""
    before = signal.signal(signal.SIGALRM, _ran_on)
    signal.alarm(SECONDS)
    try:
        call.run()
    except _RanOn:
        return "silent", f"still running after {SECONDS} s: the bad argument was taken"
    except Exception as error:  # every failure is classified, none escapes
        frames = [(frame.f_code, line) for frame, line in traceback.walk_tb(error.__traceback__)]
        text = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        ours = [(code, line) for code, line in frames if _in_course_lib(code.co_filename)]
        code, line = frames[-1]
        source = linecache.getline(code.co_filename, line).strip()
        where = f"{Path(code.co_filename).name}:{line} in {code.co_name}"
        if not ours or ours[-1] != frames[-1] or not source.startswith("raise"):
            return "deep", f"{text} (at {where})"
        below = [(c, n) for c, n in ours[1:] if not _trusted(c)]
        if below or not isinstance(error, (ValueError, TypeError)):
            if below:
                where = f"{Path(below[0][0].co_filename).name}:{below[0][1]} in {below[0][0].co_qualname}"
            return "internal", f"{text} (at {where})"
        message = str(error)
        # a ModelConfig field may be named as the config's: "config.d_model" names d_model
        named = any(re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)|\bconfig\.{re.escape(name)}(?!\w)", message)
                    for name in call.names)
        if not named or not EXPECTED.search(message):
            return "vague", f"{text} (at {where})"
        return "clear", text
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    return "silent", "returned"


# ------------------------------------------------------------------ what to call

from course_lib import (attention, attention_graph, attention_scores, claims, copying, logic_rules,  # noqa: E402
                        masks, measure, model, multi_head, normalization, optimizers, permutation, plots,
                        positional_encoding, runs, torch_copy, training, transformer)

g = torch.Generator().manual_seed(0)


def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=dtype)


def nan(*shape: int) -> torch.Tensor:
    x = randn(*shape)
    x.view(-1)[0] = float("nan")
    return x


def cfg(**fields) -> model.ModelConfig:
    return model.ModelConfig(**{"vocab_size": 8, "max_len": 8, "d_model": 8, "seed": 0, **fields})


def decoder(**fields) -> model.DecoderOnly:
    return model.DecoderOnly(cfg(**fields))


def ids(B: int = 2, T: int = 5, V: int = 8) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=g)


def weights(*shape: int) -> torch.Tensor:
    return torch.softmax(randn(*shape), dim=-1)


# One valid call per entry point: (module, entry, the callable, its keyword arguments).
# The callable and the arguments are built afresh for every call.
BASES: list[tuple[str, str, Callable[[], Callable], Callable[[], dict]]] = [
    # lesson 01
    ("attention_scores", "softmax", lambda: attention_scores.softmax, lambda: dict(logits=randn(3, 4), dim=-1)),
    ("attention_scores", "naive_softmax", lambda: attention_scores.naive_softmax, lambda: dict(logits=randn(3, 4), dim=-1)),
    ("attention_scores", "attention_scores", lambda: attention_scores.attention_scores,
     lambda: dict(q=randn(3, 4), k=randn(5, 4), scale=0.5)),
    ("attention_scores", "scaled_dot_product_attention", lambda: attention_scores.scaled_dot_product_attention,
     lambda: dict(q=randn(3, 4), k=randn(5, 4), v=randn(5, 2), mask=torch.ones(3, 5, dtype=torch.bool), scale=0.5,
                  bias=randn(3, 5))),
    # the layer's split and merge are its internals (attention._split_heads); lesson 08 checks and calls them
    ("multi_head", "split_heads", lambda: multi_head.split_heads, lambda: dict(x=randn(2, 5, 8), n_heads=2)),
    ("multi_head", "merge_heads", lambda: multi_head.merge_heads, lambda: dict(x=randn(2, 2, 5, 4))),
    ("attention", "Attention", lambda: attention.Attention,
     lambda: dict(d_model=8, d_k=4, d_v=4, d_memory=6, bias=True, n_heads=2)),
    ("attention", "Attention.forward", lambda: attention.Attention(8, n_heads=2),
     lambda: dict(x=randn(2, 5, 8), mask=torch.ones(5, 5, dtype=torch.bool), bias=randn(5, 5))),
    ("attention_scores", "entropy", lambda: attention_scores.entropy, lambda: dict(weights=weights(3, 4), dim=-1)),
    ("attention_scores", "project_qkv", lambda: attention_scores.project_qkv,
     lambda: dict(x=randn(5, 8), w_q=randn(8, 4), w_k=randn(8, 4), w_v=randn(8, 4))),
    ("attention_scores", "dot_product_moments", lambda: attention_scores.dot_product_moments,
     lambda: dict(d_k=4, n_samples=100, seed=0)),
    ("attention_scores", "softmax_saturation", lambda: attention_scores.softmax_saturation,
     lambda: dict(d_k=4, scaled=True, n_queries=8, n_keys=4, seed=0)),
    ("attention_scores", "train_alignment", lambda: attention_scores.train_alignment,
     lambda: dict(x=randn(5, 8), w_q=randn(8, 4), w_k=randn(8, 4), query=0, key=1, steps=2, lr=0.1)),
    # lesson 02
    ("masks", "causal_mask", lambda: masks.causal_mask, lambda: dict(T=4, S=5)),
    ("masks", "padding_mask", lambda: masks.padding_mask, lambda: dict(lengths=[3, 5], S=5, side="right")),
    ("masks", "additive_mask", lambda: masks.additive_mask,
     lambda: dict(mask=torch.ones(3, 5, dtype=torch.bool), dtype=torch.float64)),
    ("masks", "encoder_self_attention", lambda: masks.encoder_self_attention,
     lambda: dict(layer=attention.Attention(8), source=randn(2, 5, 8), source_lengths=[3, 5])),
    ("masks", "decoder_self_attention", lambda: masks.decoder_self_attention,
     lambda: dict(layer=attention.Attention(8), target=randn(2, 5, 8), target_lengths=[3, 5])),
    ("masks", "cross_attention", lambda: masks.cross_attention,
     lambda: dict(layer=attention.Attention(8), target=randn(2, 4, 8), source=randn(2, 5, 8),
                  source_lengths=[3, 5])),
    ("masks", "AdditiveScorer", lambda: masks.AdditiveScorer, lambda: dict(d_q=4, d_k=4, d_hidden=6)),
    ("masks", "AdditiveScorer.forward", lambda: masks.AdditiveScorer(4, 4, 6), lambda: dict(q=randn(3, 4), k=randn(5, 4))),
    ("masks", "additive_attention", lambda: masks.additive_attention,
     lambda: dict(scorer=masks.AdditiveScorer(4, 4, 6), q=randn(3, 4), k=randn(5, 4), v=randn(5, 2),
                  mask=torch.ones(3, 5, dtype=torch.bool))),
    ("masks", "toy_embedding", lambda: masks.toy_embedding, lambda: dict(word="cat", language="EN")),
    ("masks", "matching_layer", lambda: masks.matching_layer, lambda: dict(d_model=8, sharpness=4.0)),
    ("masks", "fit_additive_scorer", lambda: masks.fit_additive_scorer,
     lambda: dict(scorer=masks.AdditiveScorer(4, 4, 6), q=randn(3, 4), k=randn(5, 4), target_weights=weights(3, 5),
                  mask=torch.ones(3, 5, dtype=torch.bool), steps=2, lr=0.05)),
    ("measure", "operations_per_score", lambda: measure.operations_per_score,
     lambda: dict(kind="additive", d_k=4, d_hidden=6, T=3, S=2)),
    ("measure", "seconds_per_score", lambda: measure.seconds_per_score,
     lambda: dict(score_fn=attention_scores.attention_scores, q=randn(3, 4), k=randn(5, 4), repeats=1)),
    ("measure", "future_perturbation", lambda: measure.future_perturbation,
     lambda: dict(fn=lambda x: x.cumsum(0), x=randn(4, 3), seed=0)),
    ("measure", "influence_matrix", lambda: measure.influence_matrix, lambda: dict(fn=lambda x: x.cumsum(0), x=randn(4, 3))),
    ("measure", "prefix_outputs", lambda: measure.prefix_outputs, lambda: dict(fn=lambda x: x.cumsum(0), x=randn(4, 3))),
    ("model", "ModelConfig", lambda: model.ModelConfig,
     lambda: dict(vocab_size=8, max_len=8, d_model=8, n_heads=2, d_ff=16, n_decoder_layers=1, n_encoder_layers=1,
                  norm="pre", positions="learned", causal=True, residual=True, bias=True, eps=1e-5, seed=0)),
    ("model", "FeedForward", lambda: model.FeedForward, lambda: dict(d_model=8, d_ff=16)),
    ("model", "FeedForward.forward", lambda: model.FeedForward(8, 16), lambda: dict(x=randn(2, 5, 8))),
    ("model", "Block", lambda: model.Block, lambda: dict(config=cfg(d_ff=16), cross=True)),
    ("model", "Block.forward", lambda: model.Block(cfg(d_ff=16, n_heads=2)),
     lambda: dict(x=randn(2, 5, 8), mask=torch.ones(5, 5, dtype=torch.bool))),
    ("model", "DecoderOnly", lambda: model.DecoderOnly, lambda: dict(config=cfg())),
    ("model", "DecoderOnly.forward", lambda: decoder(), lambda: dict(ids=ids())),
    ("model", "EncoderDecoder", lambda: model.EncoderDecoder, lambda: dict(config=cfg(causal=True))),
    ("model", "EncoderDecoder.forward", lambda: model.EncoderDecoder(cfg()),
     lambda: dict(src=ids(2, 5), tgt_in=ids(2, 4), src_mask=torch.ones(2, 5, dtype=torch.bool))),
    ("model", "LearnedPositions", lambda: model.LearnedPositions, lambda: dict(max_len=8, d_model=8)),
    ("torch_copy", "to_torch_mha_mask", lambda: torch_copy.to_torch_mha_mask, lambda: dict(mask=torch.ones(3, 5, dtype=torch.bool))),
    ("torch_copy", "to_torch", lambda: torch_copy.to_torch, lambda: dict(mine=attention.Attention(8, n_heads=2), batch_first=True)),
    ("torch_copy", "from_torch", lambda: torch_copy.from_torch,
     lambda: dict(mine=attention.Attention(8, n_heads=2, bias=True),
                  theirs=torch.nn.MultiheadAttention(8, 2, batch_first=True))),
    ("training", "train_tiny_model", lambda: training.train_tiny_model,
     lambda: dict(model=decoder(), make_batch=lambda gen: (ids(4, 5), ids(4, 5)), steps=1, lr=0.03, seed=0,
                  progress=False)),
    ("measure", "train_next_token", lambda: measure.train_next_token,
     lambda: dict(causal=True, steps=1, vocab=4, T=4, d_model=8, batch=4, seed=0)),
    # lesson 03
    ("permutation", "random_permutation", lambda: permutation.random_permutation, lambda: dict(n=5, generator=torch.Generator())),
    ("permutation", "inverse_permutation", lambda: permutation.inverse_permutation, lambda: dict(perm=torch.tensor([2, 0, 1]))),
    ("permutation", "permute_tokens", lambda: permutation.permute_tokens, lambda: dict(x=randn(2, 3, 4), perm=torch.tensor([2, 0, 1]))),
    ("permutation", "permutation_matrix", lambda: permutation.permutation_matrix,
     lambda: dict(perm=torch.tensor([2, 0, 1]), dtype=torch.float64)),
    ("permutation", "linear", lambda: permutation.linear, lambda: dict(x=randn(3, 4), weight=randn(4, 2), bias=randn(2))),
    ("permutation", "self_attention", lambda: permutation.self_attention,
     lambda: dict(x=randn(3, 4), w_q=randn(4, 2), w_k=randn(4, 2), w_v=randn(4, 2), b_q=randn(2), b_k=randn(2), b_v=randn(2),
                  mask=torch.ones(3, 3, dtype=torch.bool))),
    ("permutation", "random_block", lambda: permutation.random_block,
     lambda: dict(D=8, d_ff=16, generator=torch.Generator(), dtype=torch.float64)),
    ("permutation", "res_post", lambda: permutation.res_post, lambda: dict(block=permutation.random_block(8, 16))),
    ("permutation", "with_token_norms", lambda: permutation.with_token_norms, lambda: dict(block=permutation.random_block(8, 16))),
    ("permutation", "norm_over_tokens", lambda: permutation.norm_over_tokens,
     lambda: dict(x=randn(2, 3, 4), weight=randn(4), bias=randn(4), eps=1e-5)),
    ("permutation", "equivariance_gap", lambda: permutation.equivariance_gap,
     lambda: dict(f=lambda x: x * 2, x=randn(3, 4), perm=torch.tensor([2, 0, 1]))),
    ("permutation", "match_rows", lambda: permutation.match_rows, lambda: dict(a=randn(3, 4), b=randn(3, 4), atol=1e-5)),
    ("permutation", "format_bound", lambda: permutation.format_bound, lambda: dict(bound=1e-5)),
    ("permutation", "describe_gap", lambda: permutation.describe_gap, lambda: dict(gap=1e-7, bound=1e-5)),
    # lesson 04
    ("positional_encoding", "rotate_pairs", lambda: positional_encoding.rotate_pairs,
     lambda: dict(x=randn(3, 4), angles=randn(3, 2))),
    ("positional_encoding", "block_rotation", lambda: positional_encoding.block_rotation,
     lambda: dict(angles=randn(2), scales=torch.ones(2))),
    ("positional_encoding", "frequencies", lambda: positional_encoding.frequencies, lambda: dict(d_model=8, base=100.0)),
    ("positional_encoding", "wavelength", lambda: positional_encoding.wavelength, lambda: dict(d_model=8, j=1, base=100.0)),
    ("positional_encoding", "sinusoidal_encoding", lambda: positional_encoding.sinusoidal_encoding,
     lambda: dict(positions=5, d_model=8, base=100.0, dtype=torch.float64)),
    ("positional_encoding", "sinusoidal_dot", lambda: positional_encoding.sinusoidal_dot,
     lambda: dict(offsets=3, d_model=8, base=100.0)),
    ("positional_encoding", "shift_matrix", lambda: positional_encoding.shift_matrix, lambda: dict(k=2, d_model=8, base=100.0)),
    ("positional_encoding", "SinusoidalPositionalEncoding", lambda: positional_encoding.SinusoidalPositionalEncoding,
     lambda: dict(max_len=8, d_model=8, base=100.0)),
    ("positional_encoding", "apply_rope", lambda: positional_encoding.apply_rope,
     lambda: dict(x=randn(2, 5, 8), positions=torch.arange(5), base=100.0)),
    ("positional_encoding", "RotaryPositions", lambda: positional_encoding.RotaryPositions, lambda: dict(base=100.0)),
    ("positional_encoding", "alibi_slopes", lambda: positional_encoding.alibi_slopes, lambda: dict(n_heads=4)),
    ("positional_encoding", "alibi_bias", lambda: positional_encoding.alibi_bias, lambda: dict(length=5, slopes=torch.ones(2))),
    ("positional_encoding", "ALiBiPositions", lambda: positional_encoding.ALiBiPositions, lambda: dict(slope=0.5, learned=True)),
    ("positional_encoding", "positions_for", lambda: positional_encoding.positions_for,
     lambda: dict(kind="rope", config=cfg(), base=100.0, alibi_slope=0.5, learned_slope=False)),
    ("positional_encoding", "tiny_model", lambda: positional_encoding.tiny_model,
     lambda: dict(kind="alibi", base=100.0, alibi_slope=0.5, learned_slope=True)),
    ("positional_encoding", "previous_token_batch", lambda: positional_encoding.previous_token_batch,
     lambda: dict(n_sequences=4, length=5, vocab_size=8)),
    ("positional_encoding", "train_previous_token", lambda: positional_encoding.train_previous_token,
     lambda: dict(model=positional_encoding.tiny_model("learned"), train_length=4, steps=1, lr=0.02, batch=4, seed=0)),
    ("positional_encoding", "measure_previous_token", lambda: positional_encoding.measure_previous_token,
     lambda: dict(model=positional_encoding.tiny_model("learned"), length=4, n_sequences=4, seed=1)),
    # lesson 05
    ("normalization", "batch_statistics", lambda: normalization.batch_statistics,
     lambda: dict(x=randn(2, 3, 4), mask=torch.ones(2, 3, dtype=torch.bool))),
    ("normalization", "normalize", lambda: normalization.normalize,
     lambda: dict(x=randn(2, 3, 4), mean=randn(4), var=torch.ones(4), eps=1e-5)),
    ("normalization", "batch_norm", lambda: normalization.batch_norm,
     lambda: dict(x=randn(2, 3, 4), running_mean=torch.zeros(4), running_var=torch.ones(4), weight=torch.ones(4),
                  bias=torch.zeros(4), training=True, momentum=0.1, eps=1e-5, mask=torch.ones(2, 3, dtype=torch.bool))),
    ("normalization", "BatchNorm", lambda: normalization.BatchNorm, lambda: dict(num_features=4, eps=1e-5, momentum=0.1)),
    ("normalization", "BatchNorm.forward", lambda: normalization.BatchNorm(4),
     lambda: dict(x=randn(2, 3, 4), mask=torch.ones(2, 3, dtype=torch.bool))),
    ("normalization", "layer_norm", lambda: normalization.layer_norm,
     lambda: dict(x=randn(2, 3, 4), weight=torch.ones(4), bias=torch.zeros(4), eps=1e-5)),
    ("normalization", "rms_norm", lambda: normalization.rms_norm, lambda: dict(x=randn(2, 3, 4), weight=torch.ones(4), eps=1e-5)),
    ("normalization", "LayerNorm", lambda: normalization.LayerNorm, lambda: dict(num_features=4, eps=1e-5)),
    ("normalization", "LayerNorm.forward", lambda: normalization.LayerNorm(4), lambda: dict(x=randn(2, 3, 4))),
    ("normalization", "RMSNorm", lambda: normalization.RMSNorm, lambda: dict(num_features=4, eps=1e-5)),
    ("normalization", "RMSNorm.forward", lambda: normalization.RMSNorm(4), lambda: dict(x=randn(2, 3, 4))),
    ("normalization", "normalize_tokens", lambda: normalization.normalize_tokens,
     lambda: dict(kind="batch", x=randn(2, 3, 4), mask=torch.ones(2, 3, dtype=torch.bool), eps=1e-5)),
    ("normalization", "dependence_mask", lambda: normalization.dependence_mask,
     lambda: dict(fn=lambda x: x * 2, x=randn(2, 3, 4), index=(0, 1, 2))),
    ("normalization", "expected_slice", lambda: normalization.expected_slice,
     lambda: dict(kind="layer", shape=(2, 3, 4), b=0, t=1, d=2)),
    ("normalization", "sigmoid_slope", lambda: normalization.sigmoid_slope, lambda: dict(z=randn(3))),
    ("normalization", "sigmoid_layer_gradient", lambda: normalization.sigmoid_layer_gradient,
     lambda: dict(scale=1.0, shift=0.0, normalized=True, n_tokens=8, d_in=4, d_out=4, seed=0)),
    ("normalization", "residual_block", lambda: normalization.residual_block, lambda: dict(d_model=8, d_ff=16, placement="pre")),
    ("normalization", "block_stack", lambda: normalization.block_stack,
     lambda: dict(placement="post", depth=2, d_model=8, d_ff=16, seed=0)),
    ("normalization", "depth_profile", lambda: normalization.depth_profile,
     lambda: dict(blocks=normalization.block_stack("pre", 2, 8, 16), x=randn(2, 3, 8, dtype=torch.float64),
                  upstream=randn(2, 3, 8, dtype=torch.float64))),
    ("normalization", "toy_batch", lambda: normalization.toy_batch, lambda: dict(others=["the dog sat on a mat"], length=4, padding=1)),
    ("normalization", "labelled_inputs", lambda: normalization.labelled_inputs,
     lambda: dict(seeds=[0, 1], n=4, shift=1.0, test=True, d_in=6, n_classes=3)),
    ("normalization", "SeedMLP", lambda: normalization.SeedMLP,
     lambda: dict(seeds=[0, 1], norm="batch", bias=False, d_in=4, width=6, n_classes=3)),
    ("normalization", "SeedMLP.forward", lambda: normalization.SeedMLP([0, 1], "batch", d_in=4),
     lambda: dict(x=randn(2, 3, 4))),
    ("normalization", "train_seed_mlps", lambda: normalization.train_seed_mlps,
     lambda: dict(seeds=[0, 1], norm="layer", steps=2, lr=0.1, batch=4, bias=True)),
    ("normalization", "steps_to_reach", lambda: normalization.steps_to_reach,
     lambda: dict(losses=randn(2, 5), level=0.5, window=2)),
    ("normalization", "shifted_accuracy", lambda: normalization.shifted_accuracy,
     lambda: dict(model=normalization.SeedMLP([0, 1], "none"), seeds=[0, 1], shift=2.0, n=8)),
    ("normalization", "train_shifted", lambda: normalization.train_shifted,
     lambda: dict(model=normalization.SeedMLP([0, 1], "none"), seeds=[0, 1], steps=2, trained=0, shift=2.0,
                  lr=0.1, batch=4)),
    # lesson 06
    ("copying", "position_copy_head", lambda: copying.position_copy_head,
     lambda: dict(d_model=8, offset=1, tokens=slice(0, 2), positions=slice(2, 4), write=slice(4, 6), gap=20.0, bias=True,
                  dtype=torch.float64)),
    ("copying", "content_copy_head", lambda: copying.content_copy_head,
     lambda: dict(d_model=8, match_from=slice(0, 2), match_to=slice(2, 4), tokens=slice(4, 6), write=slice(6, 8), gap=20.0,
                  bias=True, dtype=torch.float64)),
    ("copying", "token_codes", lambda: copying.token_codes, lambda: dict(vocab_size=8, width=4, seed=0)),
    ("copying", "coherence", lambda: copying.coherence, lambda: dict(codes=randn(8, 4))),
    ("copying", "source_weight", lambda: copying.source_weight, lambda: dict(gap=5.0, n_keys=4)),
    ("copying", "gap_needed", lambda: copying.gap_needed, lambda: dict(n_keys=4, coherence=0.1)),
    ("copying", "hand_set_copy_model", lambda: copying.hand_set_copy_model,
     lambda: dict(codes=copying.token_codes(8, 8), max_len=8, offset=1, gap=20.0, positions=True)),
    ("copying", "hand_set_induction_model", lambda: copying.hand_set_induction_model,
     lambda: dict(codes=copying.token_codes(8, 8), max_len=8, gap=20.0)),
    ("copying", "copy_batch", lambda: copying.copy_batch, lambda: dict(n_sequences=4, length=5, vocab_size=8, offset=1)),
    ("copying", "copy_targets", lambda: copying.copy_targets, lambda: dict(ids=ids(), offset=1)),
    ("copying", "every_token_everywhere", lambda: copying.every_token_everywhere,
     lambda: dict(vocab_size=4, length=5, offset=1, seed=0)),
    ("copying", "induction_batch", lambda: copying.induction_batch,
     lambda: dict(n_sequences=4, length=10, vocab_size=8, periods=(3, 4), prefix=(0, 2))),
    ("copying", "repeat_once_batch", lambda: copying.repeat_once_batch, lambda: dict(n_sequences=4, length=6, vocab_size=8)),
    ("copying", "copy_accuracy", lambda: copying.copy_accuracy,
     lambda: dict(model=decoder(), ids=ids(), targets=copying.copy_targets(ids(), 1))),
    ("copying", "copy_accuracies", lambda: copying.copy_accuracies,
     lambda: dict(model=decoder(), batches=[(ids(), copying.copy_targets(ids(), 1))])),
    ("copying", "copy_lead", lambda: copying.copy_lead,
     lambda: dict(model=decoder(), ids=ids(), targets=copying.copy_targets(ids(), 1))),
    ("copying", "weight_on_source", lambda: copying.weight_on_source, lambda: dict(weights=weights(2, 1, 5, 5), offset=1)),
    ("copying", "matching_keys", lambda: copying.matching_keys, lambda: dict(ids=ids())),
    ("copying", "induction_scores", lambda: copying.induction_scores, lambda: dict(weights=weights(2, 1, 5, 5), ids=ids())),
    ("copying", "second_layer_weights", lambda: copying.second_layer_weights,
     lambda: dict(model=decoder(n_decoder_layers=2), ids=ids(), embedding_only="")),
    ("copying", "ov_circuit", lambda: copying.ov_circuit, lambda: dict(model=decoder(), layer=0)),
    ("copying", "ov_copy_scores", lambda: copying.ov_copy_scores, lambda: dict(ov=randn(8, 8))),
    ("copying", "repeated_tokens_batch", lambda: copying.repeated_tokens_batch,
     lambda: dict(n_sequences=4, half=3, vocab_size=8)),
    ("copying", "run_ablated", lambda: copying.run_ablated,
     lambda: dict(model=decoder(n_decoder_layers=2), ids=ids(), layer=0, how="mean")),
    ("copying", "position_losses", lambda: copying.position_losses,
     lambda: dict(logits=randn(2, 5, 8), targets=copying.copy_targets(ids(), 1))),
    ("copying", "composition_scores", lambda: copying.composition_scores,
     lambda: dict(model=decoder(n_decoder_layers=2), samples=3, seed=0)),
    ("copying", "order_blind_loss", lambda: copying.order_blind_loss, lambda: dict(half=4)),
    ("copying", "repeated_tokens_probe", lambda: copying.repeated_tokens_probe,
     lambda: dict(model=decoder(n_decoder_layers=2), **dict(zip(("ids", "targets"), copying.repeated_tokens_batch(2, 2, 8)(g))),
                  layer=None, ablate=0, how="mean")),
    ("copying", "train_induction_runs", lambda: copying.train_induction_runs,
     lambda: dict(models=[(1, "learned")], probe=tuple(copying.repeated_tokens_batch(2, 3, 24)(g)), every=100, seed=0,
                  workers=1, progress=False)),  # the lesson's defaults: one 300-step run of one layer, about a second
    ("copying", "logit_paths", lambda: copying.logit_paths, lambda: dict(model=decoder(n_decoder_layers=2), ids=ids())),
    ("copying", "step_of_change", lambda: copying.step_of_change,
     lambda: dict(steps=[0, 10, 20], values=[0.0, 0.5, 1.0], share=0.5)),
    ("copying", "loss_bump", lambda: copying.loss_bump, lambda: dict(losses=[3.0, 2.0, 2.5, 1.0], window=2)),
    ("copying", "train_copy_model", lambda: copying.train_copy_model,
     lambda: dict(vocab_size=8, length=5, d_model=8, offset=1, steps=1, lr=0.005, seed=0, batch=4)),
    ("copying", "train_induction_model", lambda: copying.train_induction_model,
     lambda: dict(vocab_size=8, length=10, d_model=8, steps=1, lr=0.01, seed=0, periods=(2, 3), prefix=(0, 2), batch=4,
                  progress=False, layers=2, positions="learned", on_step=None)),
    ("copying", "unnormalised_attention", lambda: copying.unnormalised_attention,
     lambda: dict(q=randn(3, 4), k=randn(5, 4), v=randn(5, 2))),
    ("copying", "unnormalised_copy_fit", lambda: copying.unnormalised_copy_fit,
     lambda: dict(tokens=randn(4, 3), context=randn(2, 3), steps=1, lr=0.1, seed=0)),
    ("copying", "unnormalised_copy_fits", lambda: copying.unnormalised_copy_fits,
     lambda: dict(problems=[dict(tokens=randn(4, 3), context=randn(2, 3), steps=1)], workers=1)),
    ("copying", "softmax_copy_error", lambda: copying.softmax_copy_error,
     lambda: dict(tokens=randn(4, 3), context=randn(2, 3), query=randn(3))),
    # lesson 07
    ("logic_rules", "encode", lambda: logic_rules.encode, lambda: dict(words=["John", "father", "mother", "Mary"])),
    ("logic_rules", "decode", lambda: logic_rules.decode, lambda: dict(ids=torch.tensor([0, 1, 2]))),
    ("logic_rules", "rule_targets", lambda: logic_rules.rule_targets,
     lambda: dict(ids=logic_rules.encode(["John", "father", "mother", "Mary"]).unsqueeze(0))),
    ("logic_rules", "sentence_batch", lambda: logic_rules.sentence_batch,
     lambda: dict(rules=logic_rules.RULES, people=logic_rules.PEOPLE, batch=4)),
    ("logic_rules", "composition_head", lambda: logic_rules.composition_head, lambda: dict(gap=20.0)),
    ("logic_rules", "friend_enemy_model", lambda: logic_rules.friend_enemy_model, lambda: dict(gap=10.0)),
    ("logic_rules", "answer_lead", lambda: logic_rules.answer_lead,
     lambda: dict(logits=randn(2, 4, 8), targets=torch.tensor([[-100, -100, -100, 1], [-100, -100, -100, 2]]))),
    ("logic_rules", "strictly_right", lambda: logic_rules.strictly_right,
     lambda: dict(logits=randn(2, 4, 8), targets=torch.tensor([[-100, -100, -100, 1], [-100, -100, -100, 2]]))),
    ("logic_rules", "nearby_answers", lambda: logic_rules.nearby_answers, lambda: dict(pair=("father", "father"))),
    ("logic_rules", "answer_kind", lambda: logic_rules.answer_kind,
     lambda: dict(pair=("father", "father"), answer="grandfather")),
    ("logic_rules", "random_layer_features", lambda: logic_rules.random_layer_features,
     lambda: dict(n_relations=4, d_ff=8, generator=torch.Generator())),
    ("logic_rules", "symmetric_gram", lambda: logic_rules.symmetric_gram, lambda: dict(x=randn(8, 4), blocks=2)),
    ("logic_rules", "rules_right", lambda: logic_rules.rules_right, lambda: dict(d_ff=8, n_relations=6, n_answers=4, seed=0)),
    ("logic_rules", "capacity_curve", lambda: logic_rules.capacity_curve,
     lambda: dict(d_ffs=[4, 8], n_relations=6, n_answers=4, seed=0)),
    ("logic_rules", "trained_rules_right", lambda: logic_rules.trained_rules_right,
     lambda: dict(d_ffs=[4, 8], n_relations=4, n_answers=4, seeds=[0, 1], steps=2, lr=0.05)),
    ("logic_rules", "fano_bits", lambda: logic_rules.fano_bits,
     lambda: dict(right=torch.tensor([10.0, 20.0]), table=torch.tensor([36.0, 36.0]), n_answers=4)),
    ("logic_rules", "fit_power_law", lambda: logic_rules.fit_power_law,
     lambda: dict(x=torch.tensor([1.0, 2.0, 4.0]), y=torch.tensor([1.0, 4.0, 16.0]))),
    # lesson 08
    ("multi_head", "multiply_adds", lambda: multi_head.multiply_adds, lambda: dict(d_model=8, n_heads=2, T=4, S=5)),
    ("multi_head", "head_weights", lambda: multi_head.head_weights,
     lambda: dict(layer=attention.Attention(8, n_heads=2), head=1)),
    ("multi_head", "qk_matrix", lambda: multi_head.qk_matrix, lambda: dict(layer=attention.Attention(8, n_heads=2), head=1)),
    ("multi_head", "ov_matrix", lambda: multi_head.ov_matrix, lambda: dict(layer=attention.Attention(8, n_heads=2), head=1)),
    ("multi_head", "without_heads", lambda: multi_head.without_heads,
     lambda: dict(model=decoder(n_heads=2), heads=[1], layer=0)),
    ("multi_head", "two_relation_targets", lambda: multi_head.two_relation_targets, lambda: dict(ids=ids(2, 8, 6), n_symbols=6)),
    ("multi_head", "split_answer", lambda: multi_head.split_answer, lambda: dict(classes=torch.tensor([0, 7, 35]), n_symbols=6)),
    ("multi_head", "two_relation_batch", lambda: multi_head.two_relation_batch, lambda: dict(n_sequences=4, length=8, n_symbols=6)),
    ("multi_head", "multi_head_model", lambda: multi_head.multi_head_model,
     lambda: dict(n_heads=2, n_symbols=6, length=8, d_model=8, seed=0)),
    ("multi_head", "train_two_relations", lambda: multi_head.train_two_relations,
     lambda: dict(n_heads=2, n_symbols=6, length=8, d_model=8, steps=1, lr=0.015, batch=4, seed=0)),
    ("multi_head", "relation_accuracy", lambda: multi_head.relation_accuracy,
     lambda: dict(model=multi_head.multi_head_model(2, d_model=8), n_sequences=4, seed=1)),
    ("multi_head", "relation_attention", lambda: multi_head.relation_attention,
     lambda: dict(model=multi_head.multi_head_model(2, d_model=8), n_sequences=4, seed=1)),
    ("multi_head", "logit_parts", lambda: multi_head.logit_parts,
     lambda: dict(model=multi_head.multi_head_model(2, d_model=8), ids=ids(2, 8, 6))),
    ("multi_head", "relation_logits", lambda: multi_head.relation_logits, lambda: dict(logits=randn(2, 8, 36), n_symbols=6)),
    ("multi_head", "relation_margins", lambda: multi_head.relation_margins,
     lambda: dict(model=multi_head.multi_head_model(2, d_model=8), n_sequences=4, seed=1)),
    # lesson 09
    ("transformer", "transformer", lambda: transformer.transformer, lambda: dict(config=transformer.transformer_config(d_model=8))),
    ("transformer", "torch_gaps", lambda: transformer.torch_gaps,
     lambda: dict(norm_first=True, n_layers=1, d_model=8, n_heads=2, d_ff=8, seed=0)),
    ("transformer", "task_answer", lambda: transformer.task_answer, lambda: dict(task="reverse", src=ids(2, 5))),
    ("transformer", "is_held_out", lambda: transformer.is_held_out, lambda: dict(src=ids(2, 5))),
    ("transformer", "toy_batch", lambda: transformer.toy_batch,
     lambda: dict(task="sort", n_sequences=4, length=5, n_symbols=6, generator=torch.Generator(), held_out=False)),
    ("transformer", "train_transformer", lambda: transformer.train_transformer,
     lambda: dict(task="reverse", config=transformer.transformer_config(d_model=8), steps=1, n_sequences=4, length=4, lr=0.003,
                  seed=0, progress=False)),
    ("transformer", "greedy_decode", lambda: transformer.greedy_decode,
     lambda: dict(model=transformer.transformer(transformer.transformer_config(d_model=8)), src=ids(2, 5), steps=3, cache=True,
                  src_mask=torch.ones(2, 5, dtype=torch.bool))),
    ("transformer", "greedy_decode", lambda: transformer.greedy_decode,
     lambda: dict(model=transformer.decoder_only(transformer.transformer_config(d_model=8)), src=ids(2, 5), steps=3,
                  cache=True, src_mask=None)),
    ("transformer", "decoder_only", lambda: transformer.decoder_only,
     lambda: dict(config=transformer.transformer_config(d_model=8))),
    ("transformer", "joined", lambda: transformer.joined,
     lambda: dict(batch=transformer.toy_batch("reverse", 2, 4, 5, torch.Generator()))),
    ("transformer", "sequence_loss", lambda: transformer.sequence_loss,
     lambda: dict(model=transformer.decoder_only(transformer.transformer_config(d_model=8)),
                  batch=transformer.toy_batch("reverse", 2, 4, 5, torch.Generator()))),
    ("transformer", "train_seeds", lambda: transformer.train_seeds,
     lambda: dict(task="reverse", config=transformer.transformer_config(d_model=8), seeds=[0], steps=1, n_sequences=4,
                  length=4, lr=0.003, gpt=True, progress=False, workers=1, background=False)),
    ("transformer", "exact_match", lambda: transformer.exact_match, lambda: dict(predicted=ids(2, 5), answer=ids(2, 5))),
    ("transformer", "held_out_accuracy", lambda: transformer.held_out_accuracy,
     lambda: dict(model=transformer.transformer(transformer.transformer_config(d_model=8)), task="sort", n_sequences=4,
                  length=4, seed=1)),
    ("transformer", "parameter_counts", lambda: transformer.parameter_counts, lambda: dict(model=decoder())),
    ("transformer", "time_one_pass_vs_steps", lambda: transformer.time_one_pass_vs_steps,
     lambda: dict(lengths=[2, 4], d_model=8, repeats=1)),
    ("transformer", "time_block_vs_rnn", lambda: transformer.time_block_vs_rnn,
     lambda: dict(lengths=[2, 4], d_model=8, n_sequences=2, repeats=1)),
    ("transformer", "depth_probe", lambda: transformer.depth_probe,
     lambda: dict(config=transformer.transformer_config(d_model=8), task="sort", length=4, seed=0, n_sequences=4)),
    ("transformer", "rank_one_residual", lambda: transformer.rank_one_residual, lambda: dict(x=randn(4, 3))),
    ("transformer", "position_probe", lambda: transformer.position_probe,
     lambda: dict(model=transformer.transformer(transformer.transformer_config(d_model=8)), src=ids(4, 5))),
    ("transformer", "hand_set_reverser", lambda: transformer.hand_set_reverser,
     lambda: dict(length=4, vocab_size=7, max_len=8, sharpness=30.0, token_scale=20.0)),
    # lesson 10
    ("attention_graph", "attention_graph", lambda: attention_graph.attention_graph,
     lambda: dict(weights=weights(3, 3), labels=["a", "b", "c"], threshold=0.1)),
    ("attention_graph", "with_residual", lambda: attention_graph.with_residual, lambda: dict(weights=weights(3, 3), residual=0.5)),
    ("attention_graph", "attention_rollout", lambda: attention_graph.attention_rollout,
     lambda: dict(layer_weights=[weights(3, 3), weights(3, 3)], residual=0.5)),
    ("attention_graph", "layered_graph", lambda: attention_graph.layered_graph,
     lambda: dict(layer_weights=[weights(3, 3), weights(3, 3)], residual=0.0, threshold=0.0)),
    ("attention_graph", "token_ablation", lambda: attention_graph.token_ablation,
     lambda: dict(model=decoder(), ids=ids(1, 5), replacement=0, query=-1)),
    ("attention_graph", "line_layout", lambda: attention_graph.line_layout, lambda: dict(n=4)),
    ("attention_graph", "select", lambda: attention_graph.select,
     lambda: dict(keys=attention_graph.tokens, queries=attention_graph.indices, predicate="<")),
    ("attention_graph", "aggregate", lambda: attention_graph.aggregate,
     lambda: dict(selector=attention_graph.select(attention_graph.indices, attention_graph.indices, "=="),
                  values=attention_graph.tokens)),
    ("attention_graph", "selector_width", lambda: attention_graph.selector_width,
     lambda: dict(selector=attention_graph.select(attention_graph.tokens, attention_graph.tokens, "=="))),
    ("attention_graph", "map_values", lambda: attention_graph.map_values,
     lambda: dict(fn=abs, sop=attention_graph.tokens, numerical=False)),
    ("attention_graph", "sequence_map", lambda: attention_graph.sequence_map,
     lambda: dict(fn=max, first=attention_graph.tokens, second=attention_graph.indices)),
    ("attention_graph", "run_program", lambda: attention_graph.run_program,
     lambda: dict(program=attention_graph.rasp_sort(), sequence=[3, 1, 2])),
    ("attention_graph", "compile_program", lambda: attention_graph.compile_program,
     lambda: dict(program=attention_graph.rasp_sort(), n_symbols=4, max_len=4, sharpness=60.0)),
    ("attention_graph", "run_compiled", lambda: attention_graph.run_compiled,
     lambda: dict(compiled=attention_graph.compile_program(attention_graph.rasp_sort(), 4, 4),
                  sequences=torch.tensor([[3, 1, 2]]))),
    ("attention_graph", "residual_stream", lambda: attention_graph.residual_stream,
     lambda: dict(compiled=attention_graph.compile_program(attention_graph.rasp_sort(), 4, 4),
                  sequences=torch.tensor([[3, 1, 2]]))),
    ("attention_graph", "program_answer", lambda: attention_graph.program_answer,
     lambda: dict(task="histogram", sequences=torch.tensor([[3, 1, 3]]))),
    ("attention_graph", "random_sequences", lambda: attention_graph.random_sequences,
     lambda: dict(task="sort", n_sequences=3, length=3, n_symbols=4, generator=torch.Generator(), held_out=None)),
    ("attention_graph", "attention_correlation", lambda: attention_graph.attention_correlation,
     lambda: dict(first=weights(3, 3), second=weights(3, 3))),
    ("attention_graph", "hopfield_update", lambda: attention_graph.hopfield_update,
     lambda: dict(xi=randn(4), patterns=randn(5, 4), beta=2.0)),
    ("attention_graph", "hopfield_energy", lambda: attention_graph.hopfield_energy,
     lambda: dict(xi=randn(4), patterns=randn(5, 4), beta=2.0)),
    ("attention_graph", "hopfield_run", lambda: attention_graph.hopfield_run,
     lambda: dict(xi=randn(4), patterns=randn(5, 4), beta=2.0, steps=2)),
    ("attention_graph", "random_patterns", lambda: attention_graph.random_patterns,
     lambda: dict(n_patterns=5, width=4, n_sets=2, seed=0)),
    ("attention_graph", "clustered_patterns", lambda: attention_graph.clustered_patterns,
     lambda: dict(n_clusters=2, per_cluster=3, width=4, spread=0.1, n_sets=1, seed=0)),
    ("attention_graph", "noisy_queries", lambda: attention_graph.noisy_queries,
     lambda: dict(patterns=randn(2, 5, 4), noise=0.1, seed=0)),
    ("attention_graph", "retrieved", lambda: attention_graph.retrieved,
     lambda: dict(states=randn(3, 4), patterns=randn(3, 5, 4), targets=torch.tensor([0, 1, 2]), tolerance=0.1)),
    ("attention_graph", "retrieval_rate", lambda: attention_graph.retrieval_rate,
     lambda: dict(n_patterns=4, beta=2.0, noise=0.1, width=8, trials=4, steps=1, seed=0)),
    ("attention_graph", "force_field_energy", lambda: attention_graph.force_field_energy,
     lambda: dict(x=randn(5, 4), y=randn(5, 3), W=randn(3, 3))),
    ("attention_graph", "claimed_force_field_gradient", lambda: attention_graph.claimed_force_field_gradient,
     lambda: dict(x=randn(5, 4), y=randn(5, 3), W=randn(3, 3))),
    ("attention_graph", "associative_batch", lambda: attention_graph.associative_batch,
     lambda: dict(n_examples=4, n_patterns=3, width=4, noise=0.1, seed=0)),
    ("attention_graph", "free_alignment", lambda: attention_graph.free_alignment,
     lambda: dict(patterns=randn(2, 5, 4), goal=randn(2, 4), steps=2, lr=0.1)),
    # beneath every lesson
    ("claims", "claim", lambda: claims.claim,
     lambda: dict(statement="it holds", holds=True, measured=0.5, bound="at least 0.1")),
    ("claims", "demonstrate", lambda: claims.demonstrate,
     lambda: dict(statement="it holds", holds=True, measured=0.5, bound="at least 0.1")),
    ("claims", "at_least", lambda: claims.at_least, lambda: dict(value=0.5, limit=0.1)),
    ("claims", "at_most", lambda: claims.at_most, lambda: dict(value=0.05, limit=0.1)),
    ("training", "train", lambda: training.train,
     lambda: _train_args()),
    ("runs", "run_each", lambda: runs.run_each,
     lambda: dict(job=abs, items=[1, -2], workers=1, progress=False, names=["a", "b"])),
    ("runs", "start_each", lambda: runs.start_each,
     lambda: dict(job=abs, items=[1, -2], progress=False, names=["a", "b"], finish=list)),
    ("plots", "heatmap", lambda: plots.heatmap,
     lambda: dict(matrix=weights(2, 3), row_labels=["a", "b"], col_labels=["x", "y", "z"], title="t")),
    ("plots", "svg_heatmap", lambda: plots.svg_heatmap,
     lambda: dict(matrix=weights(2, 3), row_labels=["a", "b"], col_labels=["x", "y", "z"], title="t", cell=20)),
    ("plots", "svg_colour_bar", lambda: plots.svg_colour_bar, lambda: dict(limit=1.0, title="t", length=40)),
    ("plots", "svg_bars", lambda: plots.svg_bars, lambda: dict(values=[0.5, -0.2], labels=["a", "b"], title="t")),
    ("plots", "nice_ticks", lambda: plots.nice_ticks, lambda: dict(low=0.0, high=1.0, count=5)),
    ("plots", "svg_curve", lambda: plots.svg_curve,
     lambda: dict(xs=[1, 2, 3], series={"a": [1.0, 2.0, 3.0]}, x_label="x", y_label="y")),
]


def _train_args() -> dict:
    w = torch.zeros(3, requires_grad=True)
    return dict(loss_of_step=lambda step: (w - 1).pow(2).sum(), parameters=[w], steps=2, lr=0.1, optimizer="adam",
                progress=False)


def _accepts_string(annotation: str) -> bool:
    # Measured: claim's measured value, which may be a string
    return any(word in annotation for word in ("str", "object", "Sequence", "Iterable", "Any", "Callable", "Measured"))


def _accepts_none(parameter: inspect.Parameter) -> bool:
    return parameter.default is None or "None" in str(parameter.annotation) or parameter.annotation is inspect._empty


def _signature_of(target: Callable) -> inspect.Signature:
    if isinstance(target, torch.nn.Module):
        return inspect.signature(target.forward)
    return inspect.signature(target)


def _bound(make: Callable[[], Callable], args: Callable[[], dict], name: str, value: object) -> Callable[[], object]:
    def run() -> object:
        kwargs = args()
        kwargs[name] = value
        return make()(**kwargs)
    return run


def wrong_kind_calls() -> list[Call]:
    """Each argument of each valid call in BASES replaced by a string, then by None (where not accepted)."""
    calls = []
    for module, entry, make, args in BASES:
        parameters = _signature_of(make()).parameters
        for name in args():
            parameter = parameters[name]
            annotation = str(parameter.annotation)
            if not _accepts_string(annotation) and parameter.annotation is not inspect._empty:
                calls.append(Call(module, entry, f"{name}='oops'", (name,), _bound(make, args, name, "oops")))
            if not _accepts_none(parameter):
                calls.append(Call(module, entry, f"{name}=None", (name,), _bound(make, args, name, None)))
    return calls


def case(module: str, entry: str, attack: str, names: str | tuple[str, ...], run: Callable[[], object]) -> Call:
    return Call(module, entry, attack, (names,) if isinstance(names, str) else names, run)


A, M, P, C = attention_scores, masks, model, copying
bool_ones = lambda *shape: torch.ones(*shape, dtype=torch.bool)  # noqa: E731

CASES: list[Call] = [
    # ---- lesson 01: attention_scores
    case("attention_scores", "softmax", "int logits", "logits", lambda: A.softmax(torch.arange(4))),
    case("attention_scores", "softmax", "dim out of range", "dim", lambda: A.softmax(randn(3, 4), dim=2)),
    case("attention_scores", "softmax", "float mask", "mask", lambda: A.softmax(randn(3, 4), mask=torch.ones(3, 4))),
    case("attention_scores", "softmax", "mask of another shape", "mask", lambda: A.softmax(randn(3, 4), mask=bool_ones(3, 5))),
    case("attention_scores", "softmax", "stable=1", "stable", lambda: A.softmax(randn(3, 4), stable=1)),
    case("attention_scores", "softmax", "dim=1.0", "dim", lambda: A.softmax(randn(3, 4), dim=1.0)),
    case("attention_scores", "naive_softmax", "int logits", "logits", lambda: A.naive_softmax(torch.arange(4))),
    case("attention_scores", "attention_scores", "d_k mismatch", ("q", "k"), lambda: A.attention_scores(randn(3, 4), randn(5, 3))),
    case("attention_scores", "attention_scores", "rank 1 q", "q", lambda: A.attention_scores(randn(4), randn(5, 4))),
    case("attention_scores", "attention_scores", "float64 k with float32 q", ("q", "k"),
         lambda: A.attention_scores(randn(3, 4), randn(5, 4, dtype=torch.float64))),
    case("attention_scores", "attention_scores", "scale nan", "scale", lambda: A.attention_scores(randn(3, 4), randn(5, 4), scale=math.nan)),
    case("attention_scores", "attention_scores", "batches that do not broadcast", ("q", "k"),
         lambda: A.attention_scores(randn(2, 3, 4), randn(3, 5, 4))),
    case("attention_scores", "scaled_dot_product_attention", "v length differs from k", ("k", "v"),
         lambda: A.scaled_dot_product_attention(randn(3, 4), randn(5, 4), randn(6, 2))),
    case("attention_scores", "scaled_dot_product_attention", "mask too large", "mask",
         lambda: A.scaled_dot_product_attention(randn(3, 4), randn(5, 4), randn(5, 2), mask=bool_ones(4, 5))),
    case("attention_scores", "scaled_dot_product_attention", "int mask", "mask",
         lambda: A.scaled_dot_product_attention(randn(3, 4), randn(5, 4), randn(5, 2), mask=torch.ones(3, 5, dtype=torch.int64))),
    case("attention_scores", "scaled_dot_product_attention", "bool bias", "bias",
         lambda: A.scaled_dot_product_attention(randn(3, 4), randn(5, 4), randn(5, 2), bias=bool_ones(3, 5))),
    case("attention_scores", "scaled_dot_product_attention", "bias of another shape", "bias",
         lambda: A.scaled_dot_product_attention(randn(3, 4), randn(5, 4), randn(5, 2), bias=randn(3, 4))),
    case("attention_scores", "scaled_dot_product_attention", "int v", "v",
         lambda: A.scaled_dot_product_attention(randn(3, 4), randn(5, 4), torch.ones(5, 2, dtype=torch.int64))),
    case("attention_scores", "scaled_dot_product_attention", "scale=0", "scale",
         lambda: A.scaled_dot_product_attention(randn(3, 4), randn(5, 4), randn(5, 2), scale=0.0)),
    case("multi_head", "split_heads", "width not divisible", ("x", "n_heads"), lambda: multi_head.split_heads(randn(2, 5, 7), 2)),
    case("multi_head", "split_heads", "n_heads=0", "n_heads", lambda: multi_head.split_heads(randn(2, 5, 8), 0)),
    case("multi_head", "split_heads", "rank-1 x", "x", lambda: multi_head.split_heads(randn(8), 2)),
    case("multi_head", "merge_heads", "rank-2 x", "x", lambda: multi_head.merge_heads(randn(5, 4))),
    case("attention", "Attention", "d_model=0", "d_model", lambda: attention.Attention(0)),
    case("attention", "Attention", "n_heads does not divide d_model", ("n_heads", "d_model"), lambda: attention.Attention(8, n_heads=3)),
    case("attention", "Attention", "d_k=-1", "d_k", lambda: attention.Attention(8, d_k=-1)),
    case("attention", "Attention", "d_model=8.0", "d_model", lambda: attention.Attention(8.0)),
    case("attention", "Attention", "bias=1", "bias", lambda: attention.Attention(8, bias=1)),
    case("attention", "Attention.forward", "wrong width", "x", lambda: attention.Attention(8)(randn(2, 5, 6))),
    case("attention", "Attention.forward", "float64 x, float32 weights", "x",
         lambda: attention.Attention(8)(randn(2, 5, 8, dtype=torch.float64))),
    case("attention", "Attention.forward", "int x", "x", lambda: attention.Attention(8)(torch.ones(2, 5, 8, dtype=torch.int64))),
    case("attention", "Attention.forward", "memory missing with d_memory != d_model", "memory",
         lambda: attention.Attention(8, d_memory=6)(randn(2, 5, 8))),
    case("attention", "Attention.forward", "memory of the wrong width", "memory",
         lambda: attention.Attention(8, d_memory=6)(randn(2, 5, 8), memory=randn(2, 4, 8))),
    case("attention", "Attention.forward", "rotate not callable", "rotate",
         lambda: attention.Attention(8)(randn(2, 5, 8), rotate=3)),
    case("attention", "Attention.forward", "mask of the wrong length", "mask",
         lambda: attention.Attention(8)(randn(2, 5, 8), mask=bool_ones(5, 4))),
    case("attention", "Attention.forward", "float mask", "mask", lambda: attention.Attention(8)(randn(2, 5, 8), mask=torch.ones(5, 5))),
    case("attention", "Attention.forward", "memory batch differs", ("x", "memory"),
         lambda: attention.Attention(8)(randn(2, 5, 8), memory=randn(3, 4, 8))),
    case("attention_scores", "entropy", "int weights", "weights", lambda: A.entropy(torch.ones(3, 4, dtype=torch.int64))),
    case("attention_scores", "entropy", "dim out of range", "dim", lambda: A.entropy(weights(3, 4), dim=3)),
    case("attention_scores", "project_qkv", "w_q of the wrong height", ("w_q", "x"),
         lambda: A.project_qkv(randn(5, 8), randn(7, 4), randn(8, 4), randn(8, 4))),
    case("attention_scores", "project_qkv", "w_q and w_k widths differ", ("w_q", "w_k"),
         lambda: A.project_qkv(randn(5, 8), randn(8, 4), randn(8, 3), randn(8, 4))),
    case("attention_scores", "project_qkv", "rank-3 w_v", "w_v",
         lambda: A.project_qkv(randn(5, 8), randn(8, 4), randn(8, 4), randn(1, 8, 4))),
    case("attention_scores", "dot_product_moments", "d_k=0", "d_k", lambda: A.dot_product_moments(0)),
    case("attention_scores", "dot_product_moments", "n_samples=1", "n_samples", lambda: A.dot_product_moments(4, n_samples=1)),
    case("attention_scores", "softmax_saturation", "scaled='yes'", "scaled", lambda: A.softmax_saturation(4, "yes")),
    case("attention_scores", "softmax_saturation", "n_keys=0", "n_keys", lambda: A.softmax_saturation(4, True, n_keys=0)),
    case("attention_scores", "train_alignment", "query out of range", "query",
         lambda: A.train_alignment(randn(5, 8), randn(8, 4), randn(8, 4), 5, 1, steps=1)),
    case("attention_scores", "train_alignment", "key=-1", "key",
         lambda: A.train_alignment(randn(5, 8), randn(8, 4), randn(8, 4), 0, -1, steps=1)),
    case("attention_scores", "train_alignment", "lr nan", "lr",
         lambda: A.train_alignment(randn(5, 8), randn(8, 4), randn(8, 4), 0, 1, steps=1, lr=math.nan)),
    case("attention_scores", "train_alignment", "steps=0", "steps",
         lambda: A.train_alignment(randn(5, 8), randn(8, 4), randn(8, 4), 0, 1, steps=0)),
    # ---- lesson 02: masks
    case("masks", "causal_mask", "T=-1", "T", lambda: M.causal_mask(-1)),
    case("masks", "causal_mask", "S=-1", "S", lambda: M.causal_mask(3, -1)),
    case("masks", "causal_mask", "T=2.5", "T", lambda: M.causal_mask(2.5)),
    case("masks", "padding_mask", "length above S", "lengths", lambda: M.padding_mask([3, 6], 5)),
    case("masks", "padding_mask", "negative length", "lengths", lambda: M.padding_mask([-1, 2], 5)),
    case("masks", "padding_mask", "float lengths", "lengths", lambda: M.padding_mask(torch.tensor([2.0, 3.0]), 5)),
    case("masks", "padding_mask", "side='middle'", "side", lambda: M.padding_mask([2, 3], 5, side="middle")),
    case("masks", "padding_mask", "lengths a string", "lengths", lambda: M.padding_mask("35", 5)),
    case("masks", "padding_mask", "2-D lengths", "lengths", lambda: M.padding_mask(torch.ones(2, 2, dtype=torch.int64), 5)),
    case("masks", "combine_masks", "no masks", "masks", lambda: M.combine_masks()),
    case("masks", "combine_masks", "float mask", "masks", lambda: M.combine_masks(bool_ones(3, 3), torch.ones(3, 3))),
    case("masks", "combine_masks", "shapes that do not broadcast", "masks", lambda: M.combine_masks(bool_ones(3, 3), bool_ones(2, 4))),
    case("masks", "combine_masks", "a string", "masks", lambda: M.combine_masks(bool_ones(3, 3), "oops")),
    case("masks", "additive_mask", "float mask", "mask", lambda: M.additive_mask(torch.ones(3, 3))),
    case("masks", "additive_mask", "dtype int64", "dtype", lambda: M.additive_mask(bool_ones(3, 3), torch.int64)),
    case("masks", "encoder_self_attention", "lengths of the wrong count", "source_lengths",
         lambda: M.encoder_self_attention(attention.Attention(8), randn(2, 5, 8), [3])),
    case("masks", "encoder_self_attention", "length longer than source", "source_lengths",
         lambda: M.encoder_self_attention(attention.Attention(8), randn(2, 5, 8), [3, 6])),
    case("masks", "encoder_self_attention", "source of the wrong width", "source",
         lambda: M.encoder_self_attention(attention.Attention(8), randn(2, 5, 6))),
    case("masks", "decoder_self_attention", "rank-2 target", "target",
         lambda: M.decoder_self_attention(attention.Attention(8), randn(5, 8), [3, 5])),
    case("masks", "cross_attention", "source batch differs", ("target", "source"),
         lambda: M.cross_attention(attention.Attention(8), randn(2, 4, 8), randn(3, 5, 8))),
    case("masks", "cross_attention", "length above S", "source_lengths",
         lambda: M.cross_attention(attention.Attention(8), randn(2, 4, 8), randn(2, 5, 8), [6, 5])),
    case("masks", "AdditiveScorer", "d_hidden=0", "d_hidden", lambda: M.AdditiveScorer(4, 4, 0)),
    case("masks", "AdditiveScorer.forward", "q of the wrong width", "q", lambda: M.AdditiveScorer(4, 4, 6)(randn(3, 3), randn(5, 4))),
    case("masks", "AdditiveScorer.forward", "int k", "k",
         lambda: M.AdditiveScorer(4, 4, 6)(randn(3, 4), torch.ones(5, 4, dtype=torch.int64))),
    case("masks", "additive_attention", "v length differs from k", ("k", "v"),
         lambda: M.additive_attention(M.AdditiveScorer(4, 4, 6), randn(3, 4), randn(5, 4), randn(4, 2))),
    case("masks", "additive_attention", "mask of the wrong shape", "mask",
         lambda: M.additive_attention(M.AdditiveScorer(4, 4, 6), randn(3, 4), randn(5, 4), randn(5, 2), mask=bool_ones(3, 4))),
    case("masks", "additive_attention", "v of another batch", "v",
         lambda: M.additive_attention(M.AdditiveScorer(4, 4, 6), randn(2, 3, 4), randn(2, 5, 4), randn(3, 5, 2))),
    case("masks", "additive_attention", "scorer not a scorer", "scorer",
         lambda: M.additive_attention(attention.Attention(4), randn(3, 4), randn(5, 4), randn(5, 2))),
    case("masks", "toy_embedding", "unknown word", "word", lambda: M.toy_embedding("zebra", "en")),
    case("masks", "toy_embedding", "unknown language", "language", lambda: M.toy_embedding("cat", "xx")),
    case("masks", "matching_layer", "sharpness nan", "sharpness", lambda: M.matching_layer(8, math.nan)),
    case("masks", "matching_layer", "d_model=0", "d_model", lambda: M.matching_layer(0)),
    case("masks", "fit_additive_scorer", "target_weights of the wrong shape", "target_weights",
         lambda: M.fit_additive_scorer(M.AdditiveScorer(4, 4, 6), randn(3, 4), randn(5, 4), weights(3, 4), steps=1)),
    case("masks", "fit_additive_scorer", "steps=0", "steps",
         lambda: M.fit_additive_scorer(M.AdditiveScorer(4, 4, 6), randn(3, 4), randn(5, 4), weights(3, 5), steps=0)),
    case("masks", "fit_additive_scorer", "lr=-1", "lr",
         lambda: M.fit_additive_scorer(M.AdditiveScorer(4, 4, 6), randn(3, 4), randn(5, 4), weights(3, 5), steps=1, lr=-1.0)),
    # ---- lesson 02: measure
    case("measure", "operations_per_score", "kind='cosine'", "kind", lambda: measure.operations_per_score("cosine", 4)),
    case("measure", "operations_per_score", "d_k=0", "d_k", lambda: measure.operations_per_score("dot", 0)),
    case("measure", "operations_per_score", "T=0", "T", lambda: measure.operations_per_score("dot", 4, T=0)),
    case("measure", "seconds_per_score", "repeats=0", "repeats",
         lambda: measure.seconds_per_score(A.attention_scores, randn(3, 4), randn(5, 4), repeats=0)),
    case("measure", "seconds_per_score", "rank-1 q", "q",
         lambda: measure.seconds_per_score(A.attention_scores, randn(4), randn(5, 4), repeats=1)),
    case("measure", "seconds_per_score", "score_fn returns a number", "score_fn",
         lambda: measure.seconds_per_score(lambda q, k: 1.0, randn(3, 4), randn(5, 4), repeats=1)),
    case("measure", "future_perturbation", "rank-3 x", "x", lambda: measure.future_perturbation(lambda x: x, randn(2, 4, 3))),
    case("measure", "future_perturbation", "fn returns one row", "fn",
         lambda: measure.future_perturbation(lambda x: x[0], randn(4, 3))),
    case("measure", "future_perturbation", "seed=-1", "seed", lambda: measure.future_perturbation(lambda x: x, randn(4, 3), seed=-1)),
    case("measure", "influence_matrix", "int x", "x",
         lambda: measure.influence_matrix(lambda x: x, torch.ones(4, 3, dtype=torch.int64))),
    case("measure", "influence_matrix", "fn returns a number", "fn", lambda: measure.influence_matrix(lambda x: x.sum(), randn(4, 3))),
    case("measure", "prefix_outputs", "empty x", "x", lambda: measure.prefix_outputs(lambda x: x, randn(0, 3))),
    case("measure", "prefix_outputs", "fn returns a number", "fn", lambda: measure.prefix_outputs(lambda x: 1.0, randn(4, 3))),
    # ---- lesson 02: model
    case("model", "ModelConfig", "norm='middle'", "norm", lambda: P.ModelConfig(norm="middle")),
    case("model", "ModelConfig", "positions='spiral'", "positions", lambda: P.ModelConfig(positions="spiral")),
    case("model", "ModelConfig", "n_heads does not divide d_model", ("n_heads", "d_model"), lambda: P.ModelConfig(d_model=8, n_heads=3)),
    case("model", "ModelConfig", "eps nan", "eps", lambda: P.ModelConfig(eps=math.nan)),
    case("model", "ModelConfig", "vocab_size=0", "vocab_size", lambda: P.ModelConfig(vocab_size=0)),
    case("model", "ModelConfig", "d_ff=-1", "d_ff", lambda: P.ModelConfig(d_ff=-1)),
    case("model", "ModelConfig", "causal='yes'", "causal", lambda: P.ModelConfig(causal="yes")),
    case("model", "FeedForward", "d_ff=0", "d_ff", lambda: P.FeedForward(8, 0)),
    case("model", "FeedForward.forward", "wrong width", "x", lambda: P.FeedForward(8, 16)(randn(2, 5, 6))),
    case("model", "FeedForward.forward", "int x", "x", lambda: P.FeedForward(8, 16)(torch.ones(2, 5, 8, dtype=torch.int64))),
    case("model", "Block", "config a dict", "config", lambda: P.Block({"d_model": 8})),
    case("model", "Block.forward", "wrong width", "x", lambda: P.Block(cfg())(randn(2, 5, 6))),
    case("model", "Block.forward", "cross block without memory", "memory", lambda: P.Block(cfg(), cross=True)(randn(2, 5, 8))),
    case("model", "Block.forward", "mask of the wrong length", "mask", lambda: P.Block(cfg())(randn(2, 5, 8), mask=bool_ones(4, 4))),
    case("model", "DecoderOnly.forward", "ids out of the vocabulary", "ids", lambda: decoder()(torch.full((2, 5), 8))),
    case("model", "DecoderOnly.forward", "negative ids", "ids", lambda: decoder()(torch.full((2, 5), -1))),
    case("model", "DecoderOnly.forward", "float ids", "ids", lambda: decoder()(torch.zeros(2, 5))),
    case("model", "DecoderOnly.forward", "an empty batch (2, 0)", "ids",
         lambda: decoder()(torch.zeros(2, 0, dtype=torch.long))),
    case("model", "DecoderOnly.forward", "longer than max_len", "ids", lambda: decoder()(ids(2, 9))),
    case("model", "DecoderOnly.forward", "rank-1 ids", "ids", lambda: decoder()(ids(1, 5)[0])),
    case("model", "DecoderOnly.forward", "bool ids", "ids", lambda: decoder()(bool_ones(2, 5))),
    case("model", "EncoderDecoder.forward", "src and tgt batches differ", ("src", "tgt_in"),
         lambda: P.EncoderDecoder(cfg())(ids(2, 5), ids(3, 4))),
    case("model", "EncoderDecoder.forward", "src_mask of the wrong length", "src_mask",
         lambda: P.EncoderDecoder(cfg())(ids(2, 5), ids(2, 4), bool_ones(2, 4))),
    case("model", "EncoderDecoder.forward", "float src_mask", "src_mask",
         lambda: P.EncoderDecoder(cfg())(ids(2, 5), ids(2, 4), torch.ones(2, 5))),
    case("model", "EncoderDecoder.forward", "tgt_in out of the vocabulary", "tgt_in",
         lambda: P.EncoderDecoder(cfg())(ids(2, 5), torch.full((2, 4), 9))),
    # lesson 02's (B, 1, S) padding mask is taken (tests/test_model.py); one of another length is not
    case("model", "EncoderDecoder.encode", "lesson 02's (B, 1, S) padding mask of another length", "src_mask",
         lambda: P.EncoderDecoder(cfg()).encode(randn(2, 5, 8), M.padding_mask([3, 5], 6))),
    case("model", "EncoderDecoder.encode", "wrong width", "x", lambda: P.EncoderDecoder(cfg()).encode(randn(2, 5, 6))),
    case("model", "EncoderDecoder.decode", "memory batch differs", ("memory", "x"),
         lambda: P.EncoderDecoder(cfg()).decode(randn(2, 4, 8), randn(3, 5, 8))),
    case("model", "EncoderDecoder.embed", "float ids", "ids", lambda: P.EncoderDecoder(cfg()).embed(torch.zeros(2, 4))),
    case("model", "LearnedPositions.forward", "longer than max_len", "x", lambda: P.LearnedPositions(4, 8)(randn(2, 5, 8))),
    case("model", "LearnedPositions.forward", "negative start", "start", lambda: P.LearnedPositions(8, 8)(randn(2, 5, 8), start=-1)),
    case("torch_copy", "to_torch_mha_mask", "float mask", "mask", lambda: torch_copy.to_torch_mha_mask(torch.ones(3, 3))),
    case("torch_copy", "to_torch", "not an Attention", "mine", lambda: torch_copy.to_torch(torch.nn.Linear(8, 8))),
    case("torch_copy", "from_torch", "post-norm block from a pre-norm layer", ("mine", "theirs", "norm"),
         lambda: torch_copy.from_torch(P.Block(cfg(d_ff=16, n_heads=2, norm="post")),
                              torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, norm_first=True, batch_first=True))),
    case("torch_copy", "from_torch", "GELU layer", ("theirs", "activation"),
         lambda: torch_copy.from_torch(P.Block(cfg(d_ff=16, n_heads=2, norm="post")),
                              torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation="gelu", batch_first=True))),
    case("torch_copy", "from_torch", "4 heads instead of 2", ("theirs", "n_heads", "heads"),
         lambda: torch_copy.from_torch(P.Block(cfg(d_ff=16, n_heads=2, norm="post")),
                              torch.nn.TransformerEncoderLayer(8, 4, 16, dropout=0.0, batch_first=True))),
    case("torch_copy", "from_torch", "layer-norm eps 0.1", ("theirs", "eps"),
         lambda: torch_copy.from_torch(P.Block(cfg(d_ff=16, n_heads=2, norm="post")),
                              torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, layer_norm_eps=0.1, batch_first=True))),
    case("torch_copy", "from_torch", "d_ff 32 instead of 16", ("theirs", "d_ff"),
         lambda: torch_copy.from_torch(P.Block(cfg(d_ff=16, n_heads=2, norm="post")),
                              torch.nn.TransformerEncoderLayer(8, 2, 32, dropout=0.0, batch_first=True))),
    case("torch_copy", "from_torch", "width mismatch of an Attention", ("mine", "theirs", "d_model"),
         lambda: torch_copy.from_torch(attention.Attention(8, n_heads=2, bias=True), torch.nn.MultiheadAttention(16, 2, batch_first=True))),
    case("torch_copy", "from_torch", "heads mismatch of an Attention", ("theirs", "n_heads", "heads"),
         lambda: torch_copy.from_torch(attention.Attention(8, n_heads=2, bias=True), torch.nn.MultiheadAttention(8, 4, batch_first=True))),
    case("training", "train_tiny_model", "steps=0", "steps",
         lambda: training.train_tiny_model(decoder(), lambda gen: (ids(4, 5), ids(4, 5)), 0)),
    case("training", "train_tiny_model", "make_batch not callable", "make_batch", lambda: training.train_tiny_model(decoder(), 3, 1)),
    case("measure", "train_next_token", "causal=1", "causal", lambda: measure.train_next_token(1, steps=1)),
    # ---- lesson 03: permutation
    case("permutation", "random_permutation", "n=0", "n", lambda: permutation.random_permutation(0)),
    case("permutation", "inverse_permutation", "a repeated index", "perm", lambda: permutation.inverse_permutation(torch.tensor([0, 0, 1]))),
    case("permutation", "inverse_permutation", "float perm", "perm", lambda: permutation.inverse_permutation(torch.tensor([0.0, 1.0]))),
    case("permutation", "inverse_permutation", "index out of range", "perm", lambda: permutation.inverse_permutation(torch.tensor([0, 3]))),
    case("permutation", "inverse_permutation", "2-D perm", "perm", lambda: permutation.inverse_permutation(torch.tensor([[0, 1]]))),
    case("permutation", "permute_tokens", "perm of the wrong length", "perm",
         lambda: permutation.permute_tokens(randn(2, 3, 4), torch.tensor([1, 0]))),
    case("permutation", "permute_tokens", "rank-1 x", "x", lambda: permutation.permute_tokens(randn(3), torch.tensor([1, 0, 2]))),
    case("permutation", "permutation_matrix", "dtype int64", "dtype",
         lambda: permutation.permutation_matrix(torch.tensor([1, 0]), torch.int64)),
    case("permutation", "linear", "weight of the wrong height", ("weight", "x"), lambda: permutation.linear(randn(3, 4), randn(5, 2))),
    case("permutation", "linear", "bias of the wrong width", "bias", lambda: permutation.linear(randn(3, 4), randn(4, 2), randn(3))),
    case("permutation", "linear", "float64 weight", ("weight", "x"),
         lambda: permutation.linear(randn(3, 4), randn(4, 2, dtype=torch.float64))),
    case("permutation", "self_attention", "w_q and w_k widths differ", ("w_q", "w_k"),
         lambda: permutation.self_attention(randn(3, 4), randn(4, 2), randn(4, 3), randn(4, 2))),
    case("permutation", "self_attention", "mask of the wrong shape", "mask",
         lambda: permutation.self_attention(randn(3, 4), randn(4, 2), randn(4, 2), randn(4, 2), mask=bool_ones(3, 4))),
    case("permutation", "random_block", "D=0", "D", lambda: permutation.random_block(0, 4)),
    case("permutation", "random_block", "dtype int64", "dtype", lambda: permutation.random_block(8, 16, dtype=torch.int64)),
    case("permutation", "without_biases", "unknown projection", "projections",
         lambda: permutation.without_biases(permutation.random_block(8, 16), "w_z")),
    case("permutation", "without_biases", "not a Block", "block", lambda: permutation.without_biases(torch.nn.Linear(2, 2), "q")),
    case("permutation", "res_post", "not a Block", "block", lambda: permutation.res_post(torch.nn.Linear(2, 2))),
    case("permutation", "with_token_norms", "not a Block", "block", lambda: permutation.with_token_norms(torch.nn.Linear(2, 2))),
    case("permutation", "norm_over_tokens", "eps=0", "eps",
         lambda: permutation.norm_over_tokens(randn(2, 3, 4), None, None, eps=0.0)),
    case("permutation", "norm_over_tokens", "weight of the wrong shape", "weight",
         lambda: permutation.norm_over_tokens(randn(2, 3, 4), randn(5, 1), None)),
    case("permutation", "equivariance_gap", "perm of the wrong length", "perm",
         lambda: permutation.equivariance_gap(lambda x: x, randn(3, 4), torch.tensor([1, 0]))),
    case("permutation", "equivariance_gap", "f changes the row count", "f",
         lambda: permutation.equivariance_gap(lambda x: x[:2], randn(3, 4), torch.tensor([1, 0, 2]))),
    case("permutation", "match_rows", "shapes differ", ("a", "b"), lambda: permutation.match_rows(randn(3, 4), randn(3, 5))),
    case("permutation", "match_rows", "atol=-1", "atol", lambda: permutation.match_rows(randn(3, 4), randn(3, 4), atol=-1.0)),
    case("permutation", "bias_after_norm", "norm='group'", "norm", lambda: permutation.bias_after_norm(randn(4), "group")),
    case("permutation", "format_bound", "bound nan", "bound", lambda: permutation.format_bound(math.nan)),
    case("permutation", "describe_gap", "gap=-1", "gap", lambda: permutation.describe_gap(-1.0)),
    # ---- lesson 04: positional_encoding
    case("positional_encoding", "rotate_pairs", "odd width", "x", lambda: positional_encoding.rotate_pairs(randn(3, 5), randn(3, 2))),
    case("positional_encoding", "rotate_pairs", "angles of the wrong width", "angles",
         lambda: positional_encoding.rotate_pairs(randn(3, 4), randn(3, 3))),
    case("positional_encoding", "block_rotation", "scales of the wrong length", "scales",
         lambda: positional_encoding.block_rotation(randn(2), torch.ones(3))),
    case("positional_encoding", "frequencies", "odd d_model", "d_model", lambda: positional_encoding.frequencies(7)),
    case("positional_encoding", "frequencies", "base=-10", "base", lambda: positional_encoding.frequencies(8, base=-10.0)),
    case("positional_encoding", "frequencies", "base nan", "base", lambda: positional_encoding.frequencies(8, base=math.nan)),
    case("positional_encoding", "wavelength", "j out of range", "j", lambda: positional_encoding.wavelength(8, 4)),
    case("positional_encoding", "sinusoidal_encoding", "negative position count", "positions",
         lambda: positional_encoding.sinusoidal_encoding(-1, 8)),
    case("positional_encoding", "sinusoidal_encoding", "bool positions", "positions",
         lambda: positional_encoding.sinusoidal_encoding(bool_ones(3), 8)),
    case("positional_encoding", "sinusoidal_encoding", "dtype int64", "dtype",
         lambda: positional_encoding.sinusoidal_encoding(3, 8, dtype=torch.int64)),
    case("positional_encoding", "sinusoidal_dot", "odd d_model", "d_model", lambda: positional_encoding.sinusoidal_dot(2, 7)),
    case("positional_encoding", "shift_matrix", "k=1.5", "k", lambda: positional_encoding.shift_matrix(1.5, 8)),
    case("positional_encoding", "SinusoidalPositionalEncoding", "max_len=0", "max_len",
         lambda: positional_encoding.SinusoidalPositionalEncoding(0, 8)),
    case("positional_encoding", "SinusoidalPositionalEncoding.forward", "longer than max_len", "x",
         lambda: positional_encoding.SinusoidalPositionalEncoding(4, 8)(randn(2, 5, 8))),
    case("positional_encoding", "SinusoidalPositionalEncoding.forward", "wrong width", "x",
         lambda: positional_encoding.SinusoidalPositionalEncoding(8, 8)(randn(2, 5, 6))),
    case("positional_encoding", "apply_rope", "odd width", "x", lambda: positional_encoding.apply_rope(randn(2, 5, 7))),
    case("positional_encoding", "apply_rope", "positions of the wrong length", "positions",
         lambda: positional_encoding.apply_rope(randn(2, 5, 8), torch.arange(4))),
    case("positional_encoding", "apply_rope", "int x", "x", lambda: positional_encoding.apply_rope(torch.ones(2, 5, 8, dtype=torch.int64))),
    case("positional_encoding", "RotaryPositions", "base=0", "base", lambda: positional_encoding.RotaryPositions(0.0)),
    case("positional_encoding", "alibi_slopes", "n_heads=0", "n_heads", lambda: positional_encoding.alibi_slopes(0)),
    case("positional_encoding", "alibi_bias", "length=0", "length", lambda: positional_encoding.alibi_bias(0, torch.ones(2))),
    case("positional_encoding", "alibi_bias", "2-D slopes", "slopes", lambda: positional_encoding.alibi_bias(3, torch.ones(2, 2))),
    case("positional_encoding", "ALiBiPositions", "slope nan", "slope", lambda: positional_encoding.ALiBiPositions(math.nan)),
    case("positional_encoding", "ALiBiPositions", "learned=1", "learned", lambda: positional_encoding.ALiBiPositions(0.5, 1)),
    case("positional_encoding", "positions_for", "kind='spiral'", "kind", lambda: positional_encoding.positions_for("spiral", cfg())),
    case("positional_encoding", "tiny_model", "kind='spiral'", "kind", lambda: positional_encoding.tiny_model("spiral")),
    case("positional_encoding", "previous_token_batch", "length=1", "length",
         lambda: positional_encoding.previous_token_batch(4, 1, 8)),
    case("positional_encoding", "train_previous_token", "train_length above max_len", "train_length",
         lambda: positional_encoding.train_previous_token(positional_encoding.tiny_model("learned"), train_length=100, steps=1)),
    case("positional_encoding", "measure_previous_token", "length=0", "length",
         lambda: positional_encoding.measure_previous_token(positional_encoding.tiny_model("learned"), 0)),
    case("positional_encoding", "previous_token_runs", "kinds empty", "kinds",
         lambda: positional_encoding.previous_token_runs([], [0], 4, 4)),
    # ---- lesson 05: normalization
    case("normalization", "batch_statistics", "mask of the wrong shape", "mask",
         lambda: normalization.batch_statistics(randn(2, 3, 4), bool_ones(2, 4))),
    case("normalization", "batch_statistics", "all-False mask", "mask",
         lambda: normalization.batch_statistics(randn(2, 3, 4), torch.zeros(2, 3, dtype=torch.bool))),
    case("normalization", "normalize", "var of the wrong width", "var",
         lambda: normalization.normalize(randn(2, 3, 4), randn(4), torch.ones(3), 1e-5)),
    case("normalization", "normalize", "eps=-1", "eps", lambda: normalization.normalize(randn(2, 3, 4), randn(4), torch.ones(4), -1.0)),
    case("normalization", "batch_norm", "momentum=2", "momentum",
         lambda: normalization.batch_norm(randn(2, 3, 4), torch.zeros(4), torch.ones(4), momentum=2.0)),
    case("normalization", "batch_norm", "running_mean of the wrong width", "running_mean",
         lambda: normalization.batch_norm(randn(2, 3, 4), torch.zeros(3), torch.ones(4))),
    case("normalization", "batch_norm", "weight of the wrong width", "weight",
         lambda: normalization.batch_norm(randn(2, 3, 4), torch.zeros(4), torch.ones(4), weight=torch.ones(5))),
    case("normalization", "BatchNorm", "num_features=0", "num_features", lambda: normalization.BatchNorm(0)),
    case("normalization", "BatchNorm", "momentum=-0.1", "momentum", lambda: normalization.BatchNorm(4, momentum=-0.1)),
    case("normalization", "BatchNorm.forward", "wrong width", "x", lambda: normalization.BatchNorm(4)(randn(2, 3, 5))),
    case("normalization", "BatchNorm.forward", "rank-1 x", "x", lambda: normalization.BatchNorm(4)(randn(4))),
    case("normalization", "layer_norm", "weight of the wrong width", "weight",
         lambda: normalization.layer_norm(randn(2, 3, 4), torch.ones(3))),
    case("normalization", "layer_norm", "eps nan", "eps", lambda: normalization.layer_norm(randn(2, 3, 4), eps=math.nan)),
    case("normalization", "layer_norm", "int x", "x", lambda: normalization.layer_norm(torch.ones(2, 3, 4, dtype=torch.int64))),
    case("normalization", "rms_norm", "eps=-1", "eps", lambda: normalization.rms_norm(randn(2, 3, 4), eps=-1.0)),
    case("normalization", "rms_norm", "bias-like weight of the wrong width", "weight",
         lambda: normalization.rms_norm(randn(2, 3, 4), torch.ones(2))),
    case("normalization", "LayerNorm.forward", "wrong width", "x", lambda: normalization.LayerNorm(4)(randn(2, 3, 5))),
    case("normalization", "RMSNorm.forward", "wrong width", "x", lambda: normalization.RMSNorm(4)(randn(2, 3, 5))),
    case("normalization", "RMSNorm", "eps=-1", "eps", lambda: normalization.RMSNorm(4, eps=-1.0)),
    case("normalization", "normalize_tokens", "kind='group'", "kind", lambda: normalization.normalize_tokens("group", randn(2, 3, 4))),
    case("normalization", "train_shifted", "seeds the model was not built with", "seeds",
         lambda: normalization.train_shifted(normalization.SeedMLP([0, 1], "none"), [0], 2, 0, 1.0)),
    case("normalization", "normalize_tokens", "mask with kind='layer'", "mask",
         lambda: normalization.normalize_tokens("layer", randn(2, 3, 4), mask=bool_ones(2, 3))),
    case("normalization", "dependence_mask", "index of the wrong length", "index",
         lambda: normalization.dependence_mask(lambda x: x, randn(2, 3, 4), (0, 1))),
    case("normalization", "dependence_mask", "index out of range", "index",
         lambda: normalization.dependence_mask(lambda x: x, randn(2, 3, 4), (0, 3, 0))),
    case("normalization", "expected_slice", "b out of range", "b", lambda: normalization.expected_slice("layer", (2, 3, 4), 2, 0, 0)),
    case("normalization", "expected_slice", "kind='group'", "kind", lambda: normalization.expected_slice("group", (2, 3, 4), 0, 0, 0)),
    case("normalization", "sigmoid_slope", "int z", "z", lambda: normalization.sigmoid_slope(torch.arange(3))),
    case("normalization", "sigmoid_layer_gradient", "n_tokens=1", "n_tokens",
         lambda: normalization.sigmoid_layer_gradient(1.0, 0.0, True, n_tokens=1)),
    case("normalization", "sigmoid_layer_gradient", "scale nan", "scale",
         lambda: normalization.sigmoid_layer_gradient(math.nan, 0.0, True, n_tokens=8)),
    case("normalization", "residual_block", "placement='middle'", "placement",
         lambda: normalization.residual_block(8, 16, "middle")),
    case("normalization", "block_stack", "depth=0", "depth", lambda: normalization.block_stack("pre", 0, 8, 16)),
    case("normalization", "depth_profile", "x of the wrong width", "x",
         lambda: normalization.depth_profile(normalization.block_stack("pre", 2, 8, 16), randn(2, 3, 6), randn(2, 3, 6))),
    case("normalization", "depth_profile", "upstream of another shape", "upstream",
         lambda: normalization.depth_profile(normalization.block_stack("pre", 2, 8, 16), randn(2, 3, 8), randn(2, 4, 8))),
    case("normalization", "depth_profile", "empty blocks", "blocks",
         lambda: normalization.depth_profile(torch.nn.ModuleList(), randn(2, 3, 8), randn(2, 3, 8))),
    case("normalization", "toy_batch", "length=9", "length", lambda: normalization.toy_batch([], 9)),
    case("normalization", "toy_batch", "others a string", "others", lambda: normalization.toy_batch("the dog", 4)),
    # ---- lesson 06: copying
    case("copying", "position_copy_head", "slice beyond d_model", "positions",
         lambda: C.position_copy_head(8, 1, slice(0, 2), slice(6, 10))),
    case("copying", "position_copy_head", "write and tokens of other widths", ("tokens", "write"),
         lambda: C.position_copy_head(8, 1, slice(0, 2), slice(2, 5), write=slice(5, 8))),
    case("copying", "position_copy_head", "overlapping parts", ("tokens", "positions"),
         lambda: C.position_copy_head(8, 1, slice(0, 2), slice(1, 3))),
    case("copying", "position_copy_head", "gap nan", "gap", lambda: C.position_copy_head(8, 1, slice(0, 2), slice(2, 4), gap=math.nan)),
    case("copying", "position_copy_head", "dtype int64", "dtype",
         lambda: C.position_copy_head(8, 1, slice(0, 2), slice(2, 4), dtype=torch.int64)),
    case("copying", "content_copy_head", "match widths 2 and 3", ("match_from", "match_to"),
         lambda: C.content_copy_head(8, slice(0, 2), slice(2, 5), slice(5, 6), slice(6, 7))),
    case("copying", "content_copy_head", "tokens and write of other widths", ("tokens", "write"),
         lambda: C.content_copy_head(8, slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 7))),
    case("copying", "content_copy_head", "a slice with a step", "match_from",
         lambda: C.content_copy_head(8, slice(0, 4, 2), slice(4, 6), slice(6, 7), slice(7, 8))),
    case("copying", "content_copy_head", "empty slice", "match_from",
         lambda: C.content_copy_head(8, slice(2, 2), slice(2, 2), slice(4, 6), slice(6, 8))),
    case("copying", "token_codes", "width=0", "width", lambda: C.token_codes(8, 0)),
    case("copying", "token_codes", "vocab_size=0", "vocab_size", lambda: C.token_codes(0, 4)),
    case("copying", "coherence", "one code", "codes", lambda: C.coherence(randn(1, 4))),
    case("copying", "coherence", "int codes", "codes", lambda: C.coherence(torch.ones(3, 4, dtype=torch.int64))),
    case("copying", "source_weight", "gap nan", "gap", lambda: C.source_weight(math.nan, 4)),
    case("copying", "source_weight", "n_keys=0", "n_keys", lambda: C.source_weight(1.0, 0)),
    case("copying", "gap_needed", "coherence=1", "coherence", lambda: C.gap_needed(4, 1.0)),
    case("copying", "gap_needed", "coherence nan", "coherence", lambda: C.gap_needed(4, math.nan)),
    case("copying", "hand_set_copy_model", "offset=0", "offset", lambda: C.hand_set_copy_model(C.token_codes(8, 8), 8, offset=0)),
    case("copying", "hand_set_copy_model", "offset above max_len", "offset",
         lambda: C.hand_set_copy_model(C.token_codes(8, 8), 8, offset=9)),
    case("copying", "hand_set_copy_model", "rank-1 codes", "codes", lambda: C.hand_set_copy_model(randn(8), 8)),
    case("copying", "hand_set_induction_model", "max_len=0", "max_len", lambda: C.hand_set_induction_model(C.token_codes(8, 8), 0)),
    case("copying", "copy_batch", "offset above length", "offset", lambda: C.copy_batch(4, 5, 8, offset=5)),
    case("copying", "copy_batch", "offset=0", "offset", lambda: C.copy_batch(4, 5, 8, offset=0)),
    case("copying", "copy_targets", "offset=0", "offset", lambda: C.copy_targets(ids(), 0)),
    case("copying", "copy_targets", "float ids", "ids", lambda: C.copy_targets(torch.zeros(2, 5), 1)),
    case("copying", "copy_targets", "offset above length", "offset", lambda: C.copy_targets(ids(2, 5), 5)),
    case("copying", "copy_targets", "offset=-5 for T=5", "offset", lambda: C.copy_targets(ids(2, 5), -5)),
    case("copying", "copy_targets", "rank-1 ids", "ids", lambda: C.copy_targets(ids(1, 5)[0], 1)),
    case("copying", "copy_targets", "bool ids", "ids", lambda: C.copy_targets(bool_ones(2, 5), 1)),
    case("copying", "every_token_everywhere", "offset=0", "offset", lambda: C.every_token_everywhere(4, 5, 0)),
    case("copying", "induction_batch", "period longer than the sequence", "periods", lambda: C.induction_batch(4, 5, 8, periods=(6,))),
    case("copying", "induction_batch", "empty periods", "periods", lambda: C.induction_batch(4, 10, 8, periods=())),
    case("copying", "induction_batch", "prefix reversed", "prefix", lambda: C.induction_batch(4, 10, 8, prefix=(3, 1))),
    case("copying", "repeat_once_batch", "length=2", "length", lambda: C.repeat_once_batch(4, 2, 8)),
    case("copying", "copy_accuracy", "targets of another shape", "targets",
         lambda: C.copy_accuracy(decoder(), ids(2, 5), ids(2, 4))),
    case("copying", "copy_accuracy", "no target to score", "targets",
         lambda: C.copy_accuracy(decoder(), ids(2, 5), torch.full((2, 5), -100))),
    case("copying", "copy_accuracy", "float targets", "targets", lambda: C.copy_accuracy(decoder(), ids(2, 5), torch.zeros(2, 5))),
    case("copying", "copy_accuracies", "empty batches", "batches", lambda: C.copy_accuracies(decoder(), [])),
    case("copying", "copy_accuracies", "a batch that is not a pair", "batches", lambda: C.copy_accuracies(decoder(), [ids()])),
    case("copying", "copy_lead", "targets of another shape", "targets", lambda: C.copy_lead(decoder(), ids(2, 5), ids(2, 4))),
    case("copying", "weight_on_source", "offset beyond the length", "offset", lambda: C.weight_on_source(weights(2, 1, 5, 5), 5)),
    case("copying", "weight_on_source", "non-square weights", "weights", lambda: C.weight_on_source(weights(2, 1, 5, 4), 1)),
    case("copying", "matching_keys", "float ids", "ids", lambda: C.matching_keys(torch.zeros(2, 5))),
    case("copying", "induction_scores", "weights and ids of other lengths", ("weights", "ids"),
         lambda: C.induction_scores(weights(2, 1, 5, 5), ids(2, 6))),
    case("copying", "induction_scores", "one head's weights without the head axis", "weights",
         lambda: C.induction_scores(weights(2, 5, 5), ids(2, 5))),
    case("copying", "induction_scores", "head out of range", "head",
         lambda: C.induction_scores(weights(2, 1, 5, 5), ids(2, 5), head=1)),
    case("copying", "ov_circuit", "layer out of range", "layer", lambda: C.ov_circuit(decoder(), 1)),
    case("copying", "ov_copy_scores", "non-square ov", "ov", lambda: C.ov_copy_scores(randn(8, 4))),
    case("copying", "train_copy_model", "offset above length", "offset", lambda: C.train_copy_model(8, 5, 8, offset=6, steps=1)),
    case("copying", "train_copy_model", "lr=0", "lr", lambda: C.train_copy_model(8, 5, 8, steps=1, lr=0.0)),
    case("copying", "unnormalised_attention", "d_k mismatch", ("q", "k"),
         lambda: C.unnormalised_attention(randn(3, 4), randn(5, 3), randn(5, 2))),
    case("copying", "unnormalised_attention", "v length differs", ("k", "v"),
         lambda: C.unnormalised_attention(randn(3, 4), randn(5, 4), randn(4, 2))),
    case("copying", "unnormalised_copy_fit", "context of another width", "context",
         lambda: C.unnormalised_copy_fit(randn(4, 3), randn(2, 4), steps=1)),
    case("copying", "unnormalised_copy_fit", "float64 context, float32 tokens", "context",
         lambda: C.unnormalised_copy_fit(randn(4, 3), randn(2, 3, dtype=torch.float64), steps=1)),
    case("copying", "softmax_copy_error", "query of the wrong width", "query",
         lambda: C.softmax_copy_error(randn(4, 3), randn(2, 3), randn(4))),
    # ---- lesson 07: logic_rules
    case("logic_rules", "encode", "unknown word", "words", lambda: logic_rules.encode(["John", "zebra"])),
    case("logic_rules", "encode", "a string, not a list", "words", lambda: logic_rules.encode("John")),
    case("logic_rules", "decode", "id out of the vocabulary", "ids", lambda: logic_rules.decode(torch.tensor([999]))),
    case("logic_rules", "decode", "float ids", "ids", lambda: logic_rules.decode(torch.tensor([0.0]))),
    case("logic_rules", "rule_targets", "rank-1 ids", "ids", lambda: logic_rules.rule_targets(torch.tensor([0, 1, 2, 3]))),
    case("logic_rules", "sentence_batch", "empty people", "people", lambda: logic_rules.sentence_batch(logic_rules.RULES, [])),
    case("logic_rules", "sentence_batch", "unknown relation in rules", "rules",
         lambda: logic_rules.sentence_batch({("zebra", "father"): "uncle"}, logic_rules.PEOPLE)),
    case("logic_rules", "composition_head", "gap nan", "gap", lambda: logic_rules.composition_head(math.nan)),
    case("logic_rules", "answer_lead", "targets of another shape", "targets",
         lambda: logic_rules.answer_lead(randn(2, 4, 8), torch.zeros(2, 3, dtype=torch.int64))),
    case("logic_rules", "strictly_right", "targets above V", "targets",
         lambda: logic_rules.strictly_right(randn(4, 8), torch.full((4,), 8))),
    case("logic_rules", "nearby_answers", "unknown pair", "pair", lambda: logic_rules.nearby_answers(("zebra", "father"))),
    case("logic_rules", "answer_kind", "unknown answer", "answer", lambda: logic_rules.answer_kind(("father", "father"), "zebra")),
    case("logic_rules", "symmetric_gram", "blocks=0", "blocks", lambda: logic_rules.symmetric_gram(randn(8, 4), 0)),
    case("logic_rules", "rules_right", "d_ff=0", "d_ff", lambda: logic_rules.rules_right(0, 6, 4)),
    case("logic_rules", "capacity_curve", "empty d_ffs", "d_ffs", lambda: logic_rules.capacity_curve([], 6, 4)),
    case("logic_rules", "trained_rules_right", "d_ff not a multiple of 4", "d_ffs",
         lambda: logic_rules.trained_rules_right([8, 10], 6, 4)),
    case("logic_rules", "trained_rules_right", "negative seed", "seeds",
         lambda: logic_rules.trained_rules_right([8], 6, 4, seeds=[-1])),
    case("logic_rules", "trained_rules_right", "lr=0", "lr",
         lambda: logic_rules.trained_rules_right([8], 6, 4, lr=0.0)),
    case("logic_rules", "fano_bits", "right above table", ("right", "table"),
         lambda: logic_rules.fano_bits(torch.tensor([40.0]), torch.tensor([36.0]), 4)),
    case("logic_rules", "fano_bits", "n_answers=1", "n_answers",
         lambda: logic_rules.fano_bits(torch.tensor([10.0]), torch.tensor([36.0]), 1)),
    case("logic_rules", "fit_power_law", "non-positive x", "x",
         lambda: logic_rules.fit_power_law(torch.tensor([0.0, 1.0]), torch.tensor([1.0, 2.0]))),
    case("logic_rules", "fit_power_law", "x and y lengths differ", ("x", "y"),
         lambda: logic_rules.fit_power_law(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0, 3.0]))),
    case("logic_rules", "train_rule_models", "empty seeds", "seeds", lambda: logic_rules.train_rule_models([])),
    # ---- lesson 08: multi_head
    case("multi_head", "multiply_adds", "n_heads does not divide d_model", ("n_heads", "d_model"),
         lambda: multi_head.multiply_adds(8, 3)),
    case("multi_head", "multiply_adds", "T=0", "T", lambda: multi_head.multiply_adds(8, 2, T=0)),
    case("multi_head", "head_weights", "head out of range", "head",
         lambda: multi_head.head_weights(attention.Attention(8, n_heads=2), 2)),
    case("multi_head", "qk_matrix", "negative head", "head", lambda: multi_head.qk_matrix(attention.Attention(8, n_heads=2), -1)),
    case("multi_head", "ov_matrix", "not an Attention", "layer", lambda: multi_head.ov_matrix(torch.nn.Linear(8, 8), 0)),
    case("multi_head", "without_heads", "head out of range", "heads",
         lambda: multi_head.without_heads(decoder(n_heads=2), [2])),
    case("multi_head", "without_heads", "layer out of range", "layer",
         lambda: multi_head.without_heads(decoder(n_heads=2), [0], layer=1)),
    case("multi_head", "two_relation_targets", "ids above n_symbols", "ids",
         lambda: multi_head.two_relation_targets(torch.full((2, 8), 7), 6)),
    case("multi_head", "split_answer", "classes above n_symbols squared", "classes",
         lambda: multi_head.split_answer(torch.tensor([36]), 6)),
    case("multi_head", "two_relation_batch", "length=1", "length", lambda: multi_head.two_relation_batch(4, 1, 6)),
    case("multi_head", "multi_head_model", "n_heads=0", "n_heads", lambda: multi_head.multi_head_model(0)),
    case("multi_head", "relation_accuracy", "not a model", "model", lambda: multi_head.relation_accuracy(torch.nn.Linear(2, 2))),
    case("multi_head", "logit_parts", "ids out of the vocabulary", "ids",
         lambda: multi_head.logit_parts(multi_head.multi_head_model(2, d_model=8), torch.full((2, 8), 40))),
    case("multi_head", "relation_logits", "width not n_symbols squared", ("logits", "n_symbols"),
         lambda: multi_head.relation_logits(randn(2, 8, 30), 6)),
    case("multi_head", "train_relation_seeds", "empty seeds", "seeds", lambda: multi_head.train_relation_seeds({2: 1}, ())),
    # ---- lesson 09: transformer
    case("transformer", "transformer_config", "unknown field", "fields", lambda: transformer.transformer_config(width=8)),
    case("transformer", "transformer", "a dict config", "config", lambda: transformer.transformer({"d_model": 8})),
    case("transformer", "task_answer", "task='invert'", "task", lambda: transformer.task_answer("invert", ids(2, 5))),
    case("transformer", "task_answer", "float src", "src", lambda: transformer.task_answer("reverse", torch.zeros(2, 5))),
    case("transformer", "toy_batch", "task='invert'", "task",
         lambda: transformer.toy_batch("invert", 4, 5, 6, torch.Generator())),
    case("transformer", "toy_batch", "n_symbols=0", "n_symbols", lambda: transformer.toy_batch("sort", 4, 5, 0, torch.Generator())),
    case("transformer", "sequence_loss", "batch not a Batch", "batch",
         lambda: transformer.sequence_loss(transformer.transformer(transformer.transformer_config(d_model=8)), (ids(), ids()))),
    case("transformer", "greedy_decode", "steps=0", "steps",
         lambda: transformer.greedy_decode(transformer.transformer(transformer.transformer_config(d_model=8)), ids(2, 5), 0)),
    case("transformer", "greedy_decode", "src_mask of the wrong length", "src_mask",
         lambda: transformer.greedy_decode(transformer.transformer(transformer.transformer_config(d_model=8)), ids(2, 5), 2,
                                           src_mask=bool_ones(2, 4))),
    case("transformer", "greedy_decode", "steps above max_len", "steps",
         lambda: transformer.greedy_decode(transformer.transformer(transformer.transformer_config(d_model=8, max_len=8)),
                                           ids(2, 5), 20)),
    case("transformer", "exact_match", "shapes differ", ("predicted", "answer"),
         lambda: transformer.exact_match(ids(2, 5), ids(2, 4))),
    case("transformer", "exact_match", "empty batch", "predicted",
         lambda: transformer.exact_match(ids(0, 5), ids(0, 5))),
    case("transformer", "held_out_accuracy", "task='invert'", "task",
         lambda: transformer.held_out_accuracy(transformer.transformer(transformer.transformer_config(d_model=8)), "invert")),
    case("transformer", "parameter_counts", "not a module", "model", lambda: transformer.parameter_counts("model")),
    case("transformer", "time_one_pass_vs_steps", "empty lengths", "lengths", lambda: transformer.time_one_pass_vs_steps([])),
    case("transformer", "depth_probe", "task='invert'", "task",
         lambda: transformer.depth_probe(transformer.transformer_config(d_model=8), "invert")),
    case("transformer", "rank_one_residual", "rank-1 x", "x", lambda: transformer.rank_one_residual(randn(4))),
    case("transformer", "position_probe", "a DecoderOnly model", "model",
         lambda: transformer.position_probe(decoder(), ids(4, 5))),
    case("transformer", "position_probe", "one source", "src",
         lambda: transformer.position_probe(transformer.transformer(transformer.transformer_config(d_model=8)), ids(1, 5))),
    case("transformer", "hand_set_reverser", "length above max_len", "length",
         lambda: transformer.hand_set_reverser(length=20, max_len=16)),
    case("transformer", "final_losses", "empty seeds", "seeds",
         lambda: transformer.final_losses("reverse", {"a": lambda s: transformer.transformer_config(d_model=8)}, [], 1, 4, 4, 0.01)),
    # ---- lesson 10: attention_graph
    case("attention_graph", "attention_graph", "rows that do not sum to 1", "weights",
         lambda: attention_graph.attention_graph(torch.ones(3, 3))),
    case("attention_graph", "attention_graph", "labels of the wrong count", "labels",
         lambda: attention_graph.attention_graph(weights(3, 3), ["a", "b"])),
    case("attention_graph", "attention_graph", "rank-3 weights", "weights", lambda: attention_graph.attention_graph(weights(2, 3, 3))),
    case("attention_graph", "attention_graph", "NaN weights", "weights", lambda: attention_graph.attention_graph(nan(3, 3))),
    case("attention_graph", "with_residual", "residual=1.5", "residual", lambda: attention_graph.with_residual(weights(3, 3), 1.5)),
    case("attention_graph", "attention_rollout", "empty list", "layer_weights", lambda: attention_graph.attention_rollout([])),
    case("attention_graph", "attention_rollout", "layers of other sizes", "layer_weights",
         lambda: attention_graph.attention_rollout([weights(3, 3), weights(4, 4)])),
    case("attention_graph", "layered_graph", "a batch of layers (2, T, T)", "layer_weights",
         lambda: attention_graph.layered_graph([weights(2, 3, 3)])),
    case("attention_graph", "layered_graph", "threshold=-1", "threshold",
         lambda: attention_graph.layered_graph([weights(3, 3)], threshold=-1.0)),
    case("attention_graph", "token_ablation", "replacement outside the vocabulary", "replacement",
         lambda: attention_graph.token_ablation(decoder(), ids(1, 5), 99)),
    case("attention_graph", "token_ablation", "query out of range", "query",
         lambda: attention_graph.token_ablation(decoder(), ids(1, 5), 0, query=5)),
    case("attention_graph", "line_layout", "n=0", "n", lambda: attention_graph.line_layout(0)),
    case("attention_graph", "hopfield_update", "xi of the wrong width", "xi",
         lambda: attention_graph.hopfield_update(randn(3), randn(5, 4), 2.0)),
    case("attention_graph", "hopfield_update", "beta nan", "beta", lambda: attention_graph.hopfield_update(randn(4), randn(5, 4), math.nan)),
    case("attention_graph", "hopfield_update", "beta=0", "beta", lambda: attention_graph.hopfield_update(randn(4), randn(5, 4), 0.0)),
    case("attention_graph", "hopfield_energy", "batches that differ", ("xi", "patterns"),
         lambda: attention_graph.hopfield_energy(randn(3, 4), randn(2, 5, 4), 2.0)),
    case("attention_graph", "hopfield_energy", "int patterns", "patterns",
         lambda: attention_graph.hopfield_energy(randn(4), torch.ones(5, 4, dtype=torch.int64), 2.0)),
    case("attention_graph", "hopfield_run", "steps=-1", "steps", lambda: attention_graph.hopfield_run(randn(4), randn(5, 4), 2.0, -1)),
    case("attention_graph", "random_patterns", "n_patterns=0", "n_patterns", lambda: attention_graph.random_patterns(0, 4)),
    case("attention_graph", "clustered_patterns", "spread=-1", "spread",
         lambda: attention_graph.clustered_patterns(2, 3, 4, -1.0)),
    case("attention_graph", "noisy_queries", "noise nan", "noise", lambda: attention_graph.noisy_queries(randn(2, 5, 4), math.nan)),
    case("attention_graph", "retrieved", "targets out of range", "targets",
         lambda: attention_graph.retrieved(randn(3, 4), randn(3, 5, 4), torch.tensor([0, 1, 5]))),
    case("attention_graph", "retrieved", "states of another width", "states",
         lambda: attention_graph.retrieved(randn(3, 3), randn(3, 5, 4), torch.tensor([0, 1, 2]))),
    case("attention_graph", "retrieval_rate", "beta=-1", "beta", lambda: attention_graph.retrieval_rate(4, -1.0, 0.1, width=8, trials=2)),
    case("attention_graph", "force_field_energy", "W of the wrong shape", "W",
         lambda: attention_graph.force_field_energy(randn(5, 4), randn(5, 3), randn(2, 3))),
    case("attention_graph", "claimed_force_field_gradient", "y of another length", "y",
         lambda: attention_graph.claimed_force_field_gradient(randn(5, 4), randn(4, 3), randn(3, 3))),
    case("attention_graph", "associative_batch", "n_examples=0", "n_examples",
         lambda: attention_graph.associative_batch(0, 3, 4, 0.1)),
    case("attention_graph", "free_alignment", "goal of the wrong width", "goal",
         lambda: attention_graph.free_alignment(randn(2, 5, 4), randn(2, 3), steps=1)),
    # ---- beneath: claims, training, plots
    case("claims", "fmt", "a tensor of 2 numbers", "value", lambda: claims.fmt(torch.tensor([1.0, 2.0]))),
    case("claims", "claim", "holds='False'", "holds", lambda: claims.claim("s", "False", measured=1)),
    case("claims", "claim", "holds=nan", "holds", lambda: claims.claim("s", math.nan, measured=1)),
    case("claims", "claim", "holds=1", "holds", lambda: claims.claim("s", 1, measured=1)),
    case("claims", "claim", "holds a list", "holds", lambda: claims.claim("s", [True], measured=1)),
    case("claims", "claim", "holds a multi-element tensor", "holds", lambda: claims.claim("s", bool_ones(3), measured=1)),
    case("claims", "claim", "holds a float tensor", "holds", lambda: claims.claim("s", torch.tensor(1.0), measured=1)),
    case("claims", "claim", "holds None", "holds", lambda: claims.claim("s", None, measured=1)),
    case("claims", "claim", "measured=None", "measured", lambda: claims.claim("s", True, measured=None)),
    case("claims", "claim", "measured a list of strings", "measured", lambda: claims.claim("s", True, measured=["a", "b"])),
    case("claims", "claim", "measured a multi-element tensor", "measured", lambda: claims.claim("s", True, measured=randn(3))),
    case("claims", "claim", "measured a set", "measured", lambda: claims.claim("s", True, measured={0.5})),
    case("claims", "claim", "measured a mapping with a None", "measured", lambda: claims.claim("s", True, measured={"a": None})),
    case("claims", "claim", "statement empty", "statement", lambda: claims.claim("", True, measured=1)),
    case("claims", "claim", "statement a number", "statement", lambda: claims.claim(3, True, measured=1)),
    case("claims", "claim", "bound a number", "bound", lambda: claims.claim("s", True, measured=1, bound=0.5)),
    case("claims", "demonstrate", "holds='True'", "holds", lambda: claims.demonstrate("s", "True", measured=1)),
    case("claims", "at_least", "value None", "value", lambda: claims.at_least(None, 0.5)),
    case("claims", "at_least", "value a string", "value", lambda: claims.at_least("0.9", 0.5)),
    case("claims", "at_least", "value a multi-element tensor", "value", lambda: claims.at_least(randn(3), 0.5)),
    case("claims", "at_most", "limit nan", "limit", lambda: claims.at_most(0.5, math.nan)),
    case("claims", "at_most", "limit a bool", "limit", lambda: claims.at_most(0.5, True)),
    case("training", "train", "steps=0", "steps", lambda: training.train(**{**_train_args(), "steps": 0})),
    case("training", "train", "lr nan", "lr", lambda: training.train(**{**_train_args(), "lr": math.nan})),
    case("training", "train", "optimizer='rmsprop'", "optimizer", lambda: training.train(**{**_train_args(), "optimizer": "rmsprop"})),
    case("training", "train", "empty parameters", "parameters", lambda: training.train(**{**_train_args(), "parameters": []})),
    case("training", "train", "a parameter without requires_grad", "parameters",
         lambda: training.train(**{**_train_args(), "parameters": [torch.zeros(3)]})),
    case("training", "train", "loss not a scalar", "loss_of_step",
         lambda: training.train(**{**_train_args(), "loss_of_step": lambda step: torch.ones(3, requires_grad=True)})),
    case("training", "train", "loss a float", "loss_of_step",
         lambda: training.train(**{**_train_args(), "loss_of_step": lambda step: 1.0})),
    case("training", "train", "parameters an int tensor", "parameters",
         lambda: training.train(**{**_train_args(), "parameters": [torch.zeros(3, dtype=torch.int64)]})),
    case("optimizers", "Adam", "betas out of range", "betas", lambda: optimizers.Adam([torch.zeros(3, requires_grad=True)], 0.1, (1.0, 0.9))),
    case("optimizers", "Adam", "lr=-1", "lr", lambda: optimizers.Adam([torch.zeros(3, requires_grad=True)], -1.0)),
    case("optimizers", "Adam", "eps=0", "eps", lambda: optimizers.Adam([torch.zeros(3, requires_grad=True)], 0.1, eps=0.0)),
    case("optimizers", "SGD", "lr nan", "lr", lambda: optimizers.SGD([torch.zeros(3, requires_grad=True)], math.nan)),
    case("runs", "run_each", "workers=0", "workers", lambda: runs.run_each(abs, [1], workers=0)),
    case("runs", "run_each", "names of the wrong count", "names", lambda: runs.run_each(abs, [1, 2], names=["a"])),
    case("runs", "run_each", "job not callable", "job", lambda: runs.run_each(3, [1])),
    case("runs", "run_each", "a lambda on 2 workers (it cannot go to another process)", "job",
         lambda: runs.run_each(lambda seed: seed, [1, 2], workers=2)),
    case("training", "progress_bar", "total=0", "total", lambda: training.progress_bar(0)),
    case("plots", "heatmap", "labels of the wrong count", "row_labels", lambda: plots.heatmap(weights(2, 3), ["a"], ["x", "y", "z"])),
    case("plots", "heatmap", "rank-3 matrix", "matrix", lambda: plots.heatmap(weights(2, 2, 3), ["a", "b"], ["x", "y", "z"])),
    case("plots", "svg_heatmap", "col_labels of the wrong count", "col_labels",
         lambda: plots.svg_heatmap(weights(2, 3), ["a", "b"], ["x"])),
    case("plots", "svg_heatmap", "highlight_row out of range", "highlight_row",
         lambda: plots.svg_heatmap(weights(2, 3), ["a", "b"], ["x", "y", "z"], highlight_row=5)),
    case("plots", "svg_bars", "labels of the wrong count", "labels", lambda: plots.svg_bars([0.5, 0.2], ["a"])),
    case("plots", "svg_bars", "NaN value", "values", lambda: plots.svg_bars([math.nan, 0.2], ["a", "b"])),
    case("plots", "svg_bars", "highlight out of range", "highlight", lambda: plots.svg_bars([0.5, 0.2], ["a", "b"], highlight=2)),
    case("plots", "svg_curve", "a series of the wrong length", "series", lambda: plots.svg_curve([1, 2, 3], {"a": [1.0, 2.0]})),
    case("plots", "svg_curve", "empty xs", "xs", lambda: plots.svg_curve([], {})),
]

ALL_CALLS = wrong_kind_calls() + CASES


@pytest.fixture(scope="module")
def census() -> dict[str, list[tuple[Call, str, str]]]:
    import matplotlib
    matplotlib.use("Agg")
    torch.manual_seed(0)
    results: dict[str, list[tuple[Call, str, str]]] = {}
    for call in ALL_CALLS:
        kind, what = classify(call)
        results.setdefault(call.module, []).append((call, kind, what))
    counts = Counter(kind for rows in results.values() for _, kind, _ in rows)
    print(f"\ncensus: {len(ALL_CALLS)} bad calls: " + ", ".join(f"{counts[k]} {k}" for k in KINDS))
    return results


@pytest.mark.parametrize("module, entry, make, args", BASES, ids=[f"{m}.{e}" for m, e, _, _ in BASES])
def test_each_valid_call_returns(module, entry, make, args):
    """The bad calls spoil one argument of these: each must work as it stands."""
    import matplotlib
    matplotlib.use("Agg")
    make()(**args())


MODULES = sorted({call.module for call in ALL_CALLS})


@pytest.mark.parametrize("module", MODULES)
def test_every_bad_call_is_refused_clearly(census, module):
    rows = census[module]
    bad = [f"[{kind}] {call.label} -> {what}"
           for call, kind, what in rows if kind != "clear"]
    assert not bad, f"{len(bad)} of {len(rows)} bad calls into course_lib.{module} are not refused clearly:\n" + "\n".join(bad)


def test_the_census_covers_every_module_and_enough_calls():
    assert len(ALL_CALLS) >= 300
    assert set(MODULES) >= {"attention_scores", "attention", "torch_copy", "masks", "measure", "model", "permutation", "positional_encoding",
                            "normalization", "copying", "logic_rules", "multi_head", "transformer",
                            "attention_graph", "claims", "training", "optimizers", "runs", "plots"}


def test_the_classifier_tells_the_kinds_apart():
    """The rules above, on calls whose kind is known by construction."""
    from course_lib.guards import require_count

    def inner(n):
        return helper(n)

    def helper(n):
        raise ValueError("n must be positive")

    assert classify(Call("x", "f", "returns", ("n",), lambda: 3))[0] == "silent"
    assert classify(Call("x", "f", "torch refuses", ("n",), lambda: torch.ones(2) @ torch.ones(3)))[0] == "deep"
    assert classify(Call("x", "f", "guard", ("n",), lambda: require_count("n", 0)))[0] == "clear"
    assert classify(Call("x", "f", "guard, other name", ("m",), lambda: require_count("n", 0)))[0] == "vague"
    # a raise outside course_lib (here, in this file) is not course_lib's: deep
    assert classify(Call("x", "f", "outside", ("n",), lambda: inner(0)))[0] == "deep"
    # an AssertionError raised by course_lib is internal whatever its message
    assert classify(Call("x", "f", "assert", ("holds",), lambda: claims.claim("s", False, measured=1.0)))[0] == "internal"


if __name__ == "__main__":
    import matplotlib
    matplotlib.use("Agg")
    counts: Counter[str] = Counter()
    for call in ALL_CALLS:
        kind, what = classify(call)
        counts[kind] += 1
        if kind != "clear":
            print(f"{kind:8} {call.label} -> {what}")
    print(f"census: {len(ALL_CALLS)} bad calls: " + ", ".join(f"{counts[k]} {k}" for k in KINDS))
    sys.exit(0)
