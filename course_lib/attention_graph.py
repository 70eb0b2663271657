"""Lesson 10: attention as a graph, and as the descent of an energy.

Graph: a weight matrix A (T, S) whose rows sum to 1 is a weighted directed graph: an edge
i -> j of weight A[i, j] says "query i reads A[i, j] of its output from key j". Stacking
layers multiplies the matrices: (A2 A1)[i, j] sums, over every middle position k, the product
of the edge weights along the path i -> k -> j. Attention rollout (Abnar & Zuidema 2020) adds
the residual as a self-loop before multiplying. Rollout multiplies attention weights only (no
OV maps), so `token_ablation`, which replaces one token and measures how far a prediction
moves, says which positions a prediction actually uses.

Energy: the modern Hopfield network (Ramsauer et al. 2020) stores S patterns, the rows of X
(S, D), and updates a state xi (D,) by xi <- softmax(beta X xi) X: one attention step whose
query is xi and whose keys and values are the patterns, at scale beta. Its energy
    E(xi) = -lse(beta, X xi) + xi.xi / 2 + log(S) / beta + M^2 / 2,
lse(beta, z) = log(sum exp(beta z)) / beta, M = the largest pattern norm, never increases
along the updates. Its fixed points (Ramsauer et al.'s names): the global fixed point, the
average of all patterns (small beta); metastable states, averages of a subset of similar
patterns (`clustered_patterns` makes such subsets); and fixed points near a single pattern.
Program: a small RASP (Weiss et al. 2021) compiled, as tracr (Lindner et al. 2023) does, into
the weights of the course's DecoderOnly: each selector is one head's graph (`compile_program`).
Shapes use the course's names (course_lib/__init__.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, NamedTuple, Sequence

import torch
from torch import Tensor

from .attention_scores import scaled_dot_product_attention, softmax
from .guards import (require_bool, require_choice, require_count, require_float, require_instance, require_integer,
                     require_number, require_same_dtype)
from .model import DecoderOnly, ModelConfig, require_ids
from .training import IGNORE, train, train_tiny_model

if TYPE_CHECKING:  # networkx and matplotlib are imported where a graph is built or drawn:
    import networkx as nx  # importing this module (exercise set 10's checks do) stays quick

RETRIEVAL_TRIALS = 200  # random pattern sets behind every retrieval rate the lesson shows
ROW_SUM_TOLERANCE = 1e-5  # float32 softmax rows sum to 1 within a few ulps; this is far above that


# ---------------------------------------------------------------- the graph

def require_row_stochastic(name: str, weights: Tensor, max_rank: int | None = None) -> Tensor:
    """Raise unless `weights` (..., T, S) is >= 0 with every row summing to 1 (or an all-zero row,
    a query whose every key was masked)."""
    require_float(name, weights, 2, max_rank)
    if weights.numel() and (weights < 0).any():
        raise ValueError(f"{name} must be non-negative (attention weights), got {float(weights.min()):.3g}")
    sums = weights.sum(-1)
    bad = ((sums - 1).abs() > ROW_SUM_TOLERANCE) & (sums != 0)
    if bad.any():
        raise ValueError(f"{name} must have rows summing to 1 (as softmax's), got one of {float(sums[bad][0]):.6g}")
    return weights


def attention_graph(weights: Tensor, labels: Sequence[str] | None = None,
                    threshold: float = 0.0) -> nx.DiGraph:
    """The weighted directed graph of one attention matrix: weights (T, S) -> DiGraph.

    Nodes 0..max(T, S)-1 (attribute `label`); an edge i -> j with attribute `weight` =
    weights[i, j] for every weight above `threshold` (query i reads from key j).
    """
    import networkx as nx

    require_float("weights", weights)
    if weights.dim() != 2:  # a layer's or model's weights are (B, H, T, S): draw one example's one head
        raise ValueError(f"weights must be one (T, S) matrix to draw, got shape {tuple(weights.shape)} "
                         f"(a model's are (B, H, T, S): pick one example's one head, e.g. weights[0, 0])")
    require_row_stochastic("weights", weights)
    threshold = require_number("threshold", threshold, non_negative=True, at_most=1.0)
    n = max(weights.shape)
    labels = _require_labels(labels, n)
    graph = nx.DiGraph()
    graph.add_nodes_from((i, {"label": labels[i]}) for i in range(n))
    for i, j in (weights > threshold).nonzero().tolist():
        graph.add_edge(i, j, weight=float(weights[i, j]))
    return graph


def _require_labels(labels: Sequence[str] | None, n: int) -> list[str]:
    labels = [str(i) for i in range(n)] if labels is None else [str(label) for label in labels]
    if len(labels) != n:
        raise ValueError(f"labels must name all {n} positions, got {len(labels)} labels")
    return labels


def with_residual(weights: Tensor, residual: float = 0.5) -> Tensor:
    """residual * I + (1 - residual) * weights: the residual stream as a self-loop.

    Abnar & Zuidema (2020) use residual = 0.5: 0.5 W + 0.5 I.

    weights (..., T, T) -> (..., T, T), still row-stochastic. residual=0 gives the weights alone.
    """
    require_row_stochastic("weights", weights)
    residual = require_number("residual", residual, non_negative=True, at_most=1.0)
    if weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"weights must be self-attention (T, T) to add a self-loop, got {tuple(weights.shape)}")
    eye = torch.eye(weights.shape[-1], dtype=weights.dtype)
    return residual * eye + (1 - residual) * weights


def _require_layers(layer_weights: object) -> None:
    """A non-empty list of row-stochastic (..., T, T) weights of one shape and dtype, one per layer."""
    if isinstance(layer_weights, Tensor) or not isinstance(layer_weights, Sequence) or not len(layer_weights):
        raise TypeError("layer_weights must be a non-empty list of (..., T, T) tensors, one per layer")
    for n, weights in enumerate(layer_weights):
        require_row_stochastic(f"layer_weights[{n}]", weights)
        if weights.shape != layer_weights[0].shape:
            raise ValueError(f"layer_weights must share one shape: layer_weights[{n}] has {tuple(weights.shape)}, "
                             f"layer_weights[0] {tuple(layer_weights[0].shape)}")
    require_same_dtype(**{f"layer_weights[{n}]": w for n, w in enumerate(layer_weights)})


def attention_rollout(layer_weights: Sequence[Tensor], residual: float = 0.5) -> Tensor:
    """Product of the layers' weights, last layer first: A_L ... A_2 A_1 (each with the residual).

    layer_weights: one (..., T, T) per layer, first layer first -> (..., T, T). Entry [i, j] is the
    sum over every path i -> k_{L-1} -> ... -> j of the product of its edge weights: how much of
    position i's last state traces back to token j. Rows still sum to 1. A model's
    layer_weights, (B, H, T, T) each, roll out per example and per head; with one head (H = 1),
    that head's rollout is the model's.
    """
    _require_layers(layer_weights)
    rollout = with_residual(layer_weights[0], residual)
    for weights in layer_weights[1:]:
        rollout = with_residual(weights, residual) @ rollout  # (..., T, T): one more layer on top
    return rollout


def layered_graph(layer_weights: Sequence[Tensor], residual: float = 0.0,
                  threshold: float = 0.0) -> nx.DiGraph:
    """Every layer's graph stacked: node (l, i) is position i after layer l (l = 0: the tokens).

    layer_weights: one (T, T) per layer (from a model's (B, H, T, T): weights[0, 0]). An edge
    (l, i) -> (l - 1, j) carries layer l's weight (with the residual self-loop) when above
    `threshold`. With threshold 0, the paths from (L, i) to (0, j) multiply out to
    attention_rollout(...)[i, j].
    """
    import networkx as nx

    _require_layers(layer_weights)
    if layer_weights[0].dim() != 2:
        raise ValueError(f"layer_weights must be (T, T) each, one example's, to draw: got shape "
                         f"{tuple(layer_weights[0].shape)} (a model's are (B, H, T, T): pick one "
                         f"example's one head, e.g. weights[0, 0])")
    threshold = require_number("threshold", threshold, non_negative=True, at_most=1.0)

    T = layer_weights[0].shape[-1]
    graph = nx.DiGraph()
    graph.add_nodes_from((layer, i) for layer in range(len(layer_weights) + 1) for i in range(T))
    for layer, weights in enumerate(layer_weights, start=1):
        mixed = with_residual(weights, residual)
        for i, j in (mixed > threshold).nonzero().tolist():
            graph.add_edge((layer, i), (layer - 1, j), weight=float(mixed[i, j]))
    return graph


def token_ablation(model: Callable[[Tensor], Tensor], ids: Tensor, replacement: int,
                   query: int = -1) -> Tensor:
    """How much replacing each token moves the prediction at `query`: ids (1, T) -> (T,).

    Entry j is the largest change of any output probability at position `query` when the token
    at j alone is replaced by `replacement`; model maps ids (1, T) to logits (1, T, V). A
    position whose entry is 0 does not matter to that prediction, whatever a rollout says.
    """
    require_instance("model", model, Callable, "a function of ids (a model)")
    require_integer("ids", ids, 2, 2)
    require_count("replacement", replacement, minimum=0)
    vocab_size = getattr(getattr(model, "config", None), "vocab_size", None)  # a course model knows its V
    if vocab_size is not None and replacement >= vocab_size:
        raise ValueError(f"replacement must be a token id in 0..{vocab_size - 1}, got {replacement}")
    if isinstance(query, bool) or not isinstance(query, int):
        raise TypeError(f"query must be an int (a position), got {type(query).__name__} {query!r}")
    if ids.shape[0] != 1:
        raise ValueError(f"ids must hold one sequence (1, T), got shape {tuple(ids.shape)}")
    T = ids.shape[1]
    if not -T <= query < T:
        raise ValueError(f"query must be a position of the sequence (T={T}), got {query}")
    edited = ids.repeat(T, 1)  # (T, T): row j is the sequence with token j replaced
    edited[torch.arange(T), torch.arange(T)] = replacement
    with torch.no_grad():
        base = model(ids)[0, query].softmax(-1)  # (V,)
        moved = model(edited)[:, query].softmax(-1)  # (T, V)
    return (moved - base).abs().amax(-1)


def line_layout(n: int) -> dict[int, tuple[float, float]]:
    """Fixed node positions for a graph of n tokens: a row, so a sentence reads left to right."""
    require_count("n", n)
    return {i: (float(i), 0.0) for i in range(n)}


def draw_graph(graph: nx.DiGraph, ax, pos: dict | None = None, curved: bool = True,
               highlight: Sequence[tuple[int, int]] = ()) -> None:
    """Draw an attention graph with networkx on a matplotlib axis: edge width and darkness
    grow with the weight; node labels from the `label` attribute (else the node itself).

    Edges in `highlight` (pairs (query, key)) are drawn in orange on top of the others; the
    axis limits leave room for the arcs, so no node or arc is clipped.
    """
    import matplotlib.pyplot as plt
    import networkx as nx
    from matplotlib.patches import Circle

    require_instance("graph", graph, nx.DiGraph, "a networkx DiGraph")
    pos = line_layout(graph.number_of_nodes()) if pos is None else pos
    highlight = {tuple(edge) for edge in highlight}
    missing = highlight - set(graph.edges)
    if missing:
        raise ValueError(f"highlight names edges the graph does not have: {sorted(missing)}")
    labels = {node: data.get("label", str(node)) for node, data in graph.nodes(data=True)}
    rad = -0.45 if curved else 0.0  # arcs bend to one side, so edges i -> j and j -> i part
    style = {"ax": ax, "arrowsize": 8, "node_size": 420, "min_target_margin": 9,
             "connectionstyle": f"arc3,rad={rad}"}
    # networkx draws a self-loop as a stub hidden by its node: a ring above the node instead
    loops = [e for e in graph.edges if e[0] == e[1]]
    for u, _ in loops:
        x, y = pos[u]
        weight = graph.edges[u, u]["weight"]
        colour = "#d9661f" if (u, u) in highlight else plt.get_cmap("Greys")((weight + 0.6) / 2.0)
        ax.add_patch(Circle((x, y + 0.3), 0.16, fill=False, edgecolor=colour,
                            linewidth=0.4 + 1.6 * weight))
    plain = [e for e in graph.edges if e not in highlight and e[0] != e[1]]
    weights = [graph.edges[e]["weight"] for e in plain]
    # light greys, thin lines: strong edges stay readable where several end on one node
    nx.draw_networkx_edges(graph, pos, edgelist=plain, width=[0.4 + 1.6 * w for w in weights],
                           edge_color=weights, edge_cmap=plt.get_cmap("Greys"), edge_vmin=-0.6,
                           edge_vmax=1.4, **style)
    marked = sorted(e for e in highlight if e[0] != e[1])
    nx.draw_networkx_edges(graph, pos, edgelist=marked, edge_color="#d9661f",
                           width=[0.8 + 2 * graph.edges[e]["weight"] for e in marked], **style)
    nx.draw_networkx_nodes(graph, pos, ax=ax, node_size=420, node_color="#fbe3cf",
                           edgecolors="#d9661f")
    nx.draw_networkx_labels(graph, pos, labels=labels, ax=ax, font_size=7.5)
    xs = [pos[node][0] for node in graph.nodes] or [0.0]
    # an arc3 curve peaks at its chord's midpoint + rad / 2 * (dy, -dx): equal axis scales make
    # that offset the same in data and on screen, so the limits below contain every arc
    ys = [pos[node][1] for node in graph.nodes] or [0.0]
    ys += [pos[u][1] + 0.3 + 0.16 for u, _ in loops]  # the rings' tops
    for u, v in graph.edges:
        (x1, y1), (x2, y2) = pos[u], pos[v]
        ys.append((y1 + y2) / 2 - rad / 2 * (x2 - x1))
    ax.set_aspect("equal")
    ax.set_xlim(min(xs) - 0.6, max(xs) + 0.6)
    ax.set_ylim(min(ys) - 0.6, max(ys) + 0.6)
    ax.set_axis_off()


# ---------------------------------------------------------------- the energy

def _require_patterns(xi: Tensor, patterns: Tensor, beta: float) -> float:
    require_float("xi", xi, min_rank=1)
    require_float("patterns", patterns, min_rank=2)
    require_same_dtype(xi=xi, patterns=patterns)
    if xi.shape[-1] != patterns.shape[-1]:
        raise ValueError(f"xi and patterns must share their width D: xi has shape {tuple(xi.shape)}, patterns "
                         f"{tuple(patterns.shape)}")
    if patterns.shape[-2] == 0:
        raise ValueError("patterns holds no pattern (S = 0): there is nothing to retrieve")
    try:
        torch.broadcast_shapes(xi.shape[:-1], patterns.shape[:-2])
    except RuntimeError:
        raise ValueError(f"xi's batch (...) and patterns' (..., S, D) batch must broadcast: xi has shape "
                         f"{tuple(xi.shape)}, patterns {tuple(patterns.shape)}") from None
    return require_number("beta", beta, positive=True)


def hopfield_update(xi: Tensor, patterns: Tensor, beta: float) -> tuple[Tensor, Tensor]:
    """One modern Hopfield step, xi <- softmax(beta X xi) X: attention with the state as the query.

    xi: (..., D) states; patterns X: (..., S, D) stored rows (keys and values at once). Returns
    (new states (..., D), weights (..., S)). Runs through the course's one attention path.
    """
    beta = _require_patterns(xi, patterns, beta)
    out, weights = scaled_dot_product_attention(xi.unsqueeze(-2), patterns, patterns,
                                                scale=beta)  # (..., 1, D), (..., 1, S)
    return out.squeeze(-2), weights.squeeze(-2)  # (..., D), (..., S)


def hopfield_energy(xi: Tensor, patterns: Tensor, beta: float) -> Tensor:
    """E(xi) = -log(sum_s exp(beta x_s.xi)) / beta + xi.xi / 2 + log(S) / beta + M^2 / 2.

    xi: (..., D), patterns: (..., S, D) -> (...). The constants make E >= 0 (Ramsauer et al.).
    """
    beta = _require_patterns(xi, patterns, beta)
    scores = (patterns @ xi.unsqueeze(-1)).squeeze(-1)  # (..., S): x_s . xi
    S = patterns.shape[-2]
    largest = patterns.norm(dim=-1).amax(-1)  # (...): M
    return (-torch.logsumexp(beta * scores, -1) / beta + 0.5 * (xi * xi).sum(-1)
            + math.log(S) / beta + 0.5 * largest ** 2)


def hopfield_run(xi: Tensor, patterns: Tensor, beta: float,
                 steps: int = 5) -> tuple[Tensor, Tensor]:
    """`steps` updates from xi: (states (steps + 1, ..., D), energies (steps + 1, ...)).

    The start comes first in both."""
    require_count("steps", steps, minimum=0)
    states, energies = [xi], [hopfield_energy(xi, patterns, beta)]
    for _ in range(steps):
        xi = hopfield_update(xi, patterns, beta)[0]
        states.append(xi)
        energies.append(hopfield_energy(xi, patterns, beta))
    return torch.stack(states), torch.stack(energies)


def random_patterns(n_patterns: int, width: int, n_sets: int = 1, seed: int = 0) -> Tensor:
    """n_sets sets of n_patterns random unit-norm patterns (float64): (n_sets, S, D)."""
    require_count("n_patterns", n_patterns)
    require_count("width", width, minimum=2)
    require_count("n_sets", n_sets)
    generator = torch.Generator().manual_seed(require_count("seed", seed, minimum=0))
    x = torch.randn(n_sets, n_patterns, width, generator=generator,
                    dtype=torch.float64)  # (n_sets, S, D)
    return x / x.norm(dim=-1, keepdim=True)


def clustered_patterns(n_clusters: int, per_cluster: int, width: int, spread: float,
                       n_sets: int = 1, seed: int = 0) -> Tensor:
    """n_sets sets of unit patterns in n_clusters tight groups (float64): (n_sets, S, D).

    Each group is a random unit centre plus Gaussian offsets of norm about `spread`, then
    normalised; pattern s belongs to group s // per_cluster (S = n_clusters * per_cluster).
    """
    require_count("n_clusters", n_clusters)
    require_count("per_cluster", per_cluster)
    require_count("width", width, minimum=2)
    require_count("n_sets", n_sets)
    spread = require_number("spread", spread, non_negative=True)
    generator = torch.Generator().manual_seed(require_count("seed", seed, minimum=0))
    centres = torch.randn(n_sets, n_clusters, 1, width, generator=generator, dtype=torch.float64)
    centres = centres / centres.norm(dim=-1, keepdim=True)  # (n_sets, K, 1, D)
    offsets = torch.randn(n_sets, n_clusters, per_cluster, width, generator=generator,
                          dtype=torch.float64)
    x = centres + spread * offsets / math.sqrt(width)  # (n_sets, K, m, D)
    x = x / x.norm(dim=-1, keepdim=True)
    return x.reshape(n_sets, n_clusters * per_cluster, width)


def noisy_queries(patterns: Tensor, noise: float, seed: int = 0) -> tuple[Tensor, Tensor]:
    """For each set, one random pattern plus Gaussian noise of norm about noise * |pattern|.

    patterns (B, S, D) -> (queries (B, D), targets (B,) the index of the pattern each started from).
    """
    require_float("patterns", patterns, 3, 3)
    noise = require_number("noise", noise, non_negative=True)
    generator = torch.Generator().manual_seed(require_count("seed", seed, minimum=0))
    B, S, D = patterns.shape
    targets = torch.randint(S, (B,), generator=generator)
    clean = patterns[torch.arange(B), targets]  # (B, D)
    g = torch.randn(B, D, generator=generator, dtype=patterns.dtype)
    return clean + noise * clean.norm(dim=-1, keepdim=True) * g / math.sqrt(D), targets


def retrieved(states: Tensor, patterns: Tensor, targets: Tensor, tolerance: float = 0.1) -> Tensor:
    """Boolean (B,): each state lies within tolerance * |pattern| of its target pattern.

    A mixture of several patterns sits far from each of them, so it does not count even when
    its nearest pattern is the right one. states (B, D), patterns (B, S, D), targets (B,).
    """
    require_float("states", states, 2, 2)
    require_float("patterns", patterns, 3, 3)
    tolerance = require_number("tolerance", tolerance, positive=True)
    B, S, D = patterns.shape
    if states.shape != (B, D):
        raise ValueError(f"states must be (B, D) = {(B, D)} for patterns of shape {tuple(patterns.shape)}, "
                         f"got {tuple(states.shape)}")
    require_integer("targets", targets, 1, 1)
    if len(targets) != B or (B and not (0 <= int(targets.min()) and int(targets.max()) < S)):
        raise ValueError(f"targets must be B={B} pattern indices in 0..{S - 1}, got {targets.tolist()}")
    target = patterns[torch.arange(len(patterns)), targets]  # (B, D)
    return (states - target).norm(dim=-1) < tolerance * target.norm(dim=-1)


def retrieval_rate(n_patterns: int, beta: float, noise: float, width: int = 32,
                   trials: int = RETRIEVAL_TRIALS,
                   steps: int = 3, seed: int = 0) -> float:
    """Share of noisy queries that end (after `steps` updates) on their own pattern."""
    require_count("trials", trials)
    patterns = random_patterns(n_patterns, width, trials, seed)  # (trials, S, D)
    queries, targets = noisy_queries(patterns, noise, seed + 1)
    states, _ = hopfield_run(queries, patterns, beta, steps)
    return float(retrieved(states[-1], patterns, targets).double().mean())


# ---------------------------------------------------------------- seed 003's claims

def _require_force_field(x: object, y: object, W: object) -> None:
    """x (T, D), y (T, d_k), W (d_k, d_k), floats of one dtype."""
    require_float("x", x, 2, 2)
    require_float("y", y, 2, 2)
    require_float("W", W, 2, 2)
    require_same_dtype(x=x, y=y, W=W)
    if len(y) != len(x):
        raise ValueError(f"y must have one row per row of x: x has shape {tuple(x.shape)}, y {tuple(y.shape)}")
    if W.shape != (y.shape[1], y.shape[1]):
        raise ValueError(f"W must be (d_k, d_k) = {(y.shape[1], y.shape[1])} for y of shape {tuple(y.shape)}, "
                         f"got {tuple(W.shape)}")


def force_field_energy(x: Tensor, y: Tensor, W: Tensor) -> Tensor:
    """Seed 003's energy E = -sum_ij (y_i W y_j) |x_i - x_j|^2.

    x (T, D), y (T, d_k), W (d_k, d_k) -> ()."""
    _require_force_field(x, y, W)
    coupling = y @ W @ y.T  # (T, T): a_ij = y_i W y_j
    distances = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)  # (T, T)
    return -(coupling * distances).sum()


def claimed_force_field_gradient(x: Tensor, y: Tensor, W: Tensor) -> Tensor:
    """The gradient seed 003 writes for that energy: dE/dx_i = 2 sum_j (y_i W y_j)(x_j - x_i).

    x (T, D), y (T, d_k), W (d_k, d_k) -> (T, D)."""
    _require_force_field(x, y, W)
    coupling = y @ W @ y.T  # (T, T)
    return 2 * (coupling @ x - coupling.sum(-1, keepdim=True) * x)


def associative_batch(n_examples: int, n_patterns: int, width: int, noise: float,
                      seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """A retrieval task, fresh patterns per example.

    Returns (patterns (B, S, D), noisy queries (B, D), targets (B,))."""
    require_count("n_examples", n_examples)
    patterns = random_patterns(n_patterns, width, n_examples, seed)
    return (patterns, *noisy_queries(patterns, noise, seed + 1))


def free_alignment(patterns: Tensor, goal: Tensor, steps: int = 100, lr: float = 0.1) -> Tensor:
    """A free alignment per example, fitted through the loss (seed 003's w_ij, no score function).

    patterns (B, S, D), goal (B, D) -> weights (B, S). Each example gets its own logits l_b;
    the course's loop fits softmax(l_b) so that sum_s w_bs x_bs comes close to goal_b. Nothing
    computes w from a query: it depends on the data only through the loss.
    """
    require_float("patterns", patterns, 3, 3)
    require_float("goal", goal, 2, 2)
    require_same_dtype(patterns=patterns, goal=goal)
    if goal.shape != patterns.shape[::2]:
        raise ValueError(f"goal must be (B, D) = {tuple(patterns.shape[::2])}, got {tuple(goal.shape)}")
    logits = torch.zeros(patterns.shape[:2], dtype=patterns.dtype, requires_grad=True)  # (B, S)

    def loss_of_step(_: int) -> Tensor:
        output = (softmax(logits).unsqueeze(-2) @ patterns).squeeze(-2)  # (B, D)
        return ((output - goal) ** 2).sum()  # a sum: each example's logits see only its own loss

    train(loss_of_step, [logits], steps, lr=lr)
    return softmax(logits.detach())


# ---------------------------------------------------------------- a compiled program (RASP)
#
# Weiss et al. (2021), "Thinking Like Transformers": a program in RASP is built from two
# sequence operations (s-ops) given with the input, `tokens` and `indices`, element-wise maps,
# and two attention operations: select(keys, queries, predicate) makes a selector, the (T, T)
# boolean matrix whose [q, k] entry is predicate(keys[k], queries[q]); aggregate(selector,
# values) averages the selected values (here: exactly one is selected, or all carry one value);
# selector_width(selector) counts the selected keys of each query. A selector IS an attention
# graph: an edge q -> k for each selected key. Lindner et al. (2023, tracr) compile such a
# program into transformer weights; `compile_program` below does that, smaller, into the
# course's DecoderOnly: every s-op gets its own columns of the residual stream (one per value:
# a one-hot "categorical" encoding, or one column holding a number), every select-aggregate is
# one attention layer, every map one MLP.

PREDICATES: dict[str, Callable[[object, object], bool]] = {  # predicate(key, query)
    "==": lambda k, q: k == q, "!=": lambda k, q: k != q, "<": lambda k, q: k < q,
    "<=": lambda k, q: k <= q, ">": lambda k, q: k > q, ">=": lambda k, q: k >= q,
    "true": lambda k, q: True,
}
BOS_ID = 0  # a compiled model reads [BOS, x_1, ..., x_T]: every head can fall back on BOS
NONE = -1  # run_compiled's output where RASP's is None: a query that selected nothing


class SOp:
    """A sequence operation: one value per position. Build them with the functions below."""

    def __init__(self, kind: str, inputs: tuple = (), fn: Callable | None = None, numerical: bool = False,
                 name: str = ""):
        self.kind, self.inputs, self.fn, self.numerical, self.name = kind, inputs, fn, numerical, name or kind

    def __repr__(self) -> str:
        return f"SOp({self.name})"


class Selector(NamedTuple):
    """select(keys, queries, predicate): query position q selects key position k when
    predicate(keys[k], queries[q])."""
    keys: SOp
    queries: SOp
    predicate: str


tokens = SOp("tokens")
indices = SOp("indices")


def _require_sop(name: str, sop: object, categorical: bool = True) -> SOp:
    require_instance(name, sop, SOp, "an s-op (tokens, indices, or one built from them)")
    if categorical and sop.numerical:
        raise ValueError(f"{name} must be categorical (one value per position from a finite set), got the "
                         f"numerical s-op {sop.name!r}")
    return sop


def select(keys: SOp, queries: SOp, predicate: str) -> Selector:
    """The selector whose [q, k] entry is predicate(keys[k], queries[q]); predicate one of PREDICATES."""
    _require_sop("keys", keys)
    _require_sop("queries", queries)
    return Selector(keys, queries, require_choice("predicate", predicate, tuple(PREDICATES)))


def aggregate(selector: Selector, values: SOp, name: str = "") -> SOp:
    """Each query's selected values, averaged. Categorical values must be one value per query
    (one key selected, or all the selected keys agree); a query that selects nothing gets None
    (RASP's default; a compiled model outputs NONE there). Numerical values (a numerical s-op)
    give a numerical aggregate: the mean of the selected numbers, 0 when nothing is selected,
    as tracr's numerical aggregate (e.g. `rasp_frac_prevs`)."""
    require_instance("selector", selector, Selector, "a Selector (see select)")
    values = _require_sop("values", values, categorical=False)
    return SOp("aggregate", (selector, values), numerical=values.numerical, name=name)


def selector_width(selector: Selector, name: str = "") -> SOp:
    """How many keys each query selects: a categorical s-op with values 0..max_len."""
    require_instance("selector", selector, Selector, "a Selector (see select)")
    return SOp("selector_width", (selector,), name=name)


def map_values(fn: Callable[[object], object], sop: SOp, numerical: bool = False, name: str = "") -> SOp:
    """fn applied at every position; numerical=True makes the result one number per position
    (a numerical map) instead of a one-hot category. A map of a numerical s-op (a number in, a
    number out) compiles to tracr's numerical MLP: `_set_numerical_mlp`."""
    require_instance("fn", fn, Callable, "a function of one value")
    require_bool("numerical", numerical)
    _require_sop("sop", sop, categorical=False)
    if sop.numerical and not numerical:
        raise ValueError(f"sop {sop.name!r} is numerical: a map of it must be numerical too (numerical=True), "
                         "as tracr's numerical MLP")
    return SOp("map", (sop,), fn, numerical, name)


def sequence_map(fn: Callable[[object, object], object], first: SOp, second: SOp, name: str = "") -> SOp:
    """fn(first[i], second[i]) at every position i (categorical)."""
    require_instance("fn", fn, Callable, "a function of two values")
    return SOp("sequence_map", (_require_sop("first", first), _require_sop("second", second)), fn, name=name)


def rasp_reverse() -> SOp:
    """Weiss et al.'s reverse: length = selector_width(select(tokens, tokens, true)), then each
    query i reads the token at opp_index = length - i - 1."""
    length = selector_width(select(tokens, tokens, "true"), name="length")
    opp_index = sequence_map(lambda n, i: n - i - 1, length, indices, name="opp_index")
    return aggregate(select(indices, opp_index, "=="), tokens, name="reverse")


def rasp_histogram() -> SOp:
    """How often each position's token occurs: selector_width(select(tokens, tokens, ==))."""
    return selector_width(select(tokens, tokens, "=="), name="histogram")


def rasp_sort() -> SOp:
    """Sort of distinct tokens (Weiss et al.): a token's place is the count of smaller tokens;
    query i reads the token whose place is i."""
    place = selector_width(select(tokens, tokens, "<"), name="place")
    return aggregate(select(place, indices, "=="), tokens, name="sort")


def rasp_sort_stable() -> SOp:
    """Sort that allows repeated tokens, as RASP's make_sort: ties are broken by index. Each
    position's key is the pair (token, index), all distinct, and pairs compare token first, so a
    token's place is the count of smaller tokens plus the count of equal ones before it (RASP
    adds min_key * index / max_seq_len to the token; the order is the same)."""
    key = sequence_map(lambda t, i: (t, i), tokens, indices, name="key")
    place = selector_width(select(key, key, "<"), name="place")
    return aggregate(select(place, indices, "=="), tokens, name="sort")


def rasp_frac_prevs(token: int = 1) -> SOp:
    """tracr's frac_prevs: at each position, the share of the tokens so far (itself included)
    that equal `token`. A numerical map (1 or 0 per position) averaged by a numerical aggregate
    over select(indices, indices, "<="): one number per position, in its own column."""
    require_count("token", token)
    is_token = map_values(lambda t: 1.0 if t == token else 0.0, tokens, numerical=True, name="is_token")
    return aggregate(select(indices, indices, "<="), is_token, name="frac_prevs")


PROGRAMS: dict[str, Callable[[], SOp]] = {"reverse": rasp_reverse, "histogram": rasp_histogram, "sort": rasp_sort}


def _nodes(program: SOp) -> list[SOp]:
    """Every s-op the program reads, inputs before their users."""
    order: list[SOp] = []
    seen: set[int] = set()

    def visit(sop: SOp) -> None:
        if id(sop) in seen:
            return
        seen.add(id(sop))
        for part in sop.inputs:
            for inner in ((part.keys, part.queries) if isinstance(part, Selector) else (part,)):
                visit(inner)
        order.append(sop)

    visit(program)
    return order


def run_program(program: SOp, sequence: Sequence[int]) -> list:
    """The program interpreted in plain Python on one input (no tensors, no weights): RASP's
    meaning, the reference the compiled model is checked against."""
    _require_sop("program", program, categorical=False)
    if not isinstance(sequence, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool)
                                                          for t in sequence):
        raise TypeError(f"sequence must be a list of int tokens, got {type(sequence).__name__} {sequence!r:.60}")
    values: dict[int, list] = {}
    n = len(sequence)

    def selected(sel: Selector) -> list[list[int]]:  # per query, the selected key positions
        keys, queries, pred = values[id(sel.keys)], values[id(sel.queries)], PREDICATES[sel.predicate]
        return [[k for k in range(n) if pred(keys[k], queries[q])] for q in range(n)]

    for sop in _nodes(program):
        if sop.kind == "tokens":
            out = list(sequence)
        elif sop.kind == "indices":
            out = list(range(n))
        elif sop.kind == "map":
            out = [sop.fn(x) for x in values[id(sop.inputs[0])]]
        elif sop.kind == "sequence_map":
            out = [sop.fn(x, y) for x, y in zip(values[id(sop.inputs[0])], values[id(sop.inputs[1])])]
        elif sop.kind == "selector_width":
            out = [len(ks) for ks in selected(sop.inputs[0])]
        elif sop.numerical:  # a numerical aggregate: the mean of the selected numbers (0 for none)
            sel, vals = sop.inputs[0], values[id(sop.inputs[1])]
            out = [sum(vals[k] for k in ks) / len(ks) if ks else 0.0 for ks in selected(sel)]
        else:  # aggregate: the selected values' one value (None when nothing is selected)
            sel, vals = sop.inputs[0], values[id(sop.inputs[1])]
            out = [sorted({vals[k] for k in ks})[0] if ks else None for ks in selected(sel)]
        values[id(sop)] = out
    return values[id(program)]


class CompiledProgram(NamedTuple):
    model: DecoderOnly  # its blocks' weights are the program
    columns: dict[str, list[int]]  # each s-op's residual-stream columns (by name; a repeated name gets " (2)"...)
    heads: list[str]  # per block, the operation its attention layer computes ("" for none)
    n_symbols: int  # the inputs it was compiled for: symbols 1..n_symbols


def compile_program(program: SOp, n_symbols: int, max_len: int, sharpness: float = 60.0) -> CompiledProgram:
    """Weights for the course's DecoderOnly (no norm, learned positions, not causal, one head)
    that compute `program` on inputs [BOS, x_1..x_T], x in 1..n_symbols, T <= max_len.

    Residual stream: a column "one" (1 everywhere), "bos" (1 at BOS), then one column per value
    of each categorical s-op. A select-aggregate is one attention layer: the query projection
    writes, for query value q, the row predicate(., q) over the key columns, the key projection
    copies the key's one-hot, so a score is sharpness * [selected]; BOS scores sharpness / 2
    (aggregate: the fallback when nothing is selected) or sharpness (selector_width: BOS is
    always counted, so the weight on BOS is 1 / (width + 1)). An MLP turns that 1 / (width + 1)
    into a one-hot of the width with ReLU steps, and each map is a lookup table, one hidden
    unit per input value (a pair, for sequence_map). The logits are the output s-op's one-hot,
    token id = value (a numerical program's number stays in its column: see residual_stream).
    """
    _require_sop("program", program, categorical=False)
    require_count("n_symbols", n_symbols)
    require_count("max_len", max_len)
    sharpness = require_number("sharpness", sharpness, positive=True)
    nodes = _nodes(program)
    value_sets: dict[int, list] = {}
    for sop in nodes:  # the values each s-op can take on any input
        if sop.kind == "tokens":
            vals = range(1, n_symbols + 1)
        elif sop.kind == "indices":
            vals = range(max_len)
        elif sop.kind == "selector_width":
            vals = range(max_len + 1)
        elif sop.kind == "map":
            vals = {sop.fn(x) for x in value_sets[id(sop.inputs[0])]}
        elif sop.kind == "sequence_map":
            vals = {sop.fn(x, y) for x in value_sets[id(sop.inputs[0])] for y in value_sets[id(sop.inputs[1])]}
        elif sop.numerical:  # a mean of 1..max_len selected numbers, or 0 when none is selected
            vals = _means(value_sets[id(sop.inputs[1])], max_len)
        else:
            vals = value_sets[id(sop.inputs[1])]
        value_sets[id(sop)] = sorted(vals)
    out_values = [] if program.numerical else value_sets[id(program)]  # a number is read from its column
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in out_values):
        raise ValueError(f"program's values must be token ids (ints >= 0) to be read out, got {out_values}")

    # the residual stream's columns, and when each s-op is ready: sublayer 2b is block b's
    # attention, 2b + 1 its MLP; attention layers hold one operation, MLPs add their hidden units
    columns: dict[int, list[int]] = {}
    width = 2  # "one", "bos"
    for sop in nodes:
        n = 1 if sop.numerical else len(value_sets[id(sop)])
        columns[id(sop)], width = list(range(width, width + n)), width + n
    scratch: dict[int, int] = {}
    for sop in nodes:
        if sop.kind == "selector_width":  # where the head writes 1 / (width + 1)
            scratch[id(sop)], width = width, width + 1
    ready: dict[int, int] = {}
    attention_at: dict[int, SOp] = {}
    mlp_units: dict[int, int] = {}
    for sop in nodes:
        inputs = [s for part in sop.inputs
                  for s in ((part.keys, part.queries) if isinstance(part, Selector) else (part,))]
        start = max((ready[id(s)] for s in inputs), default=0)
        if sop.kind in ("tokens", "indices"):
            ready[id(sop)] = 0
        elif sop.kind in ("aggregate", "selector_width"):
            slot = start + start % 2  # the next attention sublayer
            while slot in attention_at:
                slot += 2
            attention_at[slot] = sop
            ready[id(sop)] = slot + 1
            if sop.kind == "selector_width":
                mlp_units[slot + 1] = mlp_units.get(slot + 1, 0) + 2 * max_len + 1
                ready[id(sop)] = slot + 2
        else:
            slot = start + 1 - start % 2  # the next MLP sublayer
            units = len(value_sets[id(sop.inputs[0])]) * (len(value_sets[id(sop.inputs[1])])
                                                          if sop.kind == "sequence_map" else 1)
            if sop.inputs[0].numerical:  # a start unit, then two per step between input values
                units = 2 * units - 1
            mlp_units[slot] = mlp_units.get(slot, 0) + units
            ready[id(sop)] = slot + 1
    n_blocks = max(1, (max(ready.values()) + 1) // 2)
    config = ModelConfig(vocab_size=max(n_symbols, *out_values, 1) + 1, max_len=max_len + 1, d_model=width,
                         d_ff=max(mlp_units.values(), default=0), n_decoder_layers=n_blocks, n_heads=1,
                         norm="none", positions="learned", causal=False, bias=True)  # one head per selector
    model = DecoderOnly(config).double()
    col = lambda sop, value: columns[id(sop)][value_sets[id(sop)].index(value)]
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.tokens.weight[BOS_ID, 1] = 1.0  # "bos"
        for v in range(1, n_symbols + 1 if id(tokens) in columns else 1):
            model.tokens.weight[v, col(tokens, v)] = 1.0
        model.positions.table.weight[:, 0] = 1.0  # "one"
        for i in range(max_len if id(indices) in columns else 0):
            model.positions.table.weight[i + 1, col(indices, i)] = 1.0  # BOS has no index
        for slot, sop in attention_at.items():
            _set_head(model.layers[slot // 2].attention, sop, col, columns, value_sets, scratch, sharpness)
        used = {}  # per MLP sublayer, hidden units filled so far
        for sop in nodes:
            if sop.kind not in ("selector_width", "map", "sequence_map"):
                continue
            slot = ready[id(sop)] - 1  # the MLP sublayer that finishes it
            ffn = model.layers[slot // 2].ffn
            used[slot] = _set_mlp(ffn, sop, used.get(slot, 0), col, columns, value_sets, scratch, max_len)
        for v in out_values:
            model.readout.weight[v, col(program, v)] = 1.0
    heads = [attention_at[2 * b].name if 2 * b in attention_at else "" for b in range(n_blocks)]
    names: dict[str, list[int]] = {}
    for sop in nodes:  # two s-ops may share a name (the default is their kind): each keeps its columns
        name = next(n for n in (sop.name, *(f"{sop.name} ({k})" for k in range(2, len(nodes) + 2)))
                    if n not in names)
        names[name] = columns[id(sop)]
    return CompiledProgram(model, names, heads, n_symbols)


def _set_head(head, sop: SOp, col: Callable, columns: dict, value_sets: dict, scratch: dict,
              sharpness: float) -> None:
    """One attention layer computing select + aggregate (or the count of selector_width)."""
    sel = sop.inputs[0]
    scale = sharpness * math.sqrt(head.d_head)  # the layer divides scores by sqrt(d_head)
    pred = PREDICATES[sel.predicate]
    for q in value_sets[id(sel.queries)]:
        for k in value_sets[id(sel.keys)]:
            if pred(k, q):  # the key's own column is the shared query/key coordinate
                head.query.weight[col(sel.keys, k), col(sel.queries, q)] = scale
    for k in value_sets[id(sel.keys)]:
        head.key.weight[col(sel.keys, k), col(sel.keys, k)] = 1.0
    head.key.weight[1, 1] = 1.0  # BOS's key: its "bos" column ...
    counting = sop.kind == "selector_width"
    head.query.weight[1, 0] = scale * (1.0 if counting else 0.5)  # ... met by every query's "one"
    head.out.weight.copy_(torch.eye(head.out.weight.shape[0], dtype=head.out.weight.dtype))
    if counting:
        head.value.weight[scratch[id(sop)], 1] = 1.0  # BOS's weight, 1 / (width + 1)
    elif sop.numerical:  # the mean of the selected keys' numbers: equal scores, equal weights
        head.value.weight[columns[id(sop)][0], columns[id(sop.inputs[1])][0]] = 1.0
    else:
        values = sop.inputs[1]
        for v in value_sets[id(values)]:
            head.value.weight[col(sop, v), col(values, v)] = 1.0


def _set_mlp(ffn, sop: SOp, first: int, col: Callable, columns: dict, value_sets: dict, scratch: dict,
             max_len: int) -> int:
    """Hidden units first, first + 1, ... of one FFN compute `sop`; returns the next free unit."""
    w1, b1, w2 = ffn.linear1.weight, ffn.linear1.bias, ffn.linear2.weight  # linear2.bias stays 0, as set
    h = first
    if sop.kind == "selector_width":  # x = 1 / (n + 1): step_k = [n <= k] = [x > t_k], two ReLUs each
        x, steep = scratch[id(sop)], 4.0 * (max_len + 1) * (max_len + 2)  # 2 / the narrowest gap
        for k in range(max_len):
            t = (1 / (k + 1) + 1 / (k + 2)) / 2
            w1[h, x], b1[h] = steep, 1.0 - steep * t  # relu(steep (x - t) + 1) - relu(steep (x - t))
            w1[h + 1, x], b1[h + 1] = steep, -steep * t
            w1[h, 1] = w1[h + 1, 1] = -2 * (steep + 1)  # off at BOS: it must hold no value a key could match
            for unit, sign in ((h, 1.0), (h + 1, -1.0)):  # one-hot(k) = step_k - step_(k-1)
                w2[col(sop, k), unit] += sign
                w2[col(sop, k + 1), unit] -= sign
            h += 2
        w1[h, 0], w1[h, 1] = 1.0, -1.0  # step_max_len: relu(one - bos), 1 except at BOS
        w2[col(sop, max_len), h] = 1.0
        return h + 1
    if sop.kind == "map" and sop.inputs[0].numerical:
        return _set_numerical_mlp(ffn, sop, first, columns, value_sets)
    if sop.kind == "map":
        for v in value_sets[id(sop.inputs[0])]:
            w1[h, col(sop.inputs[0], v)] = 1.0
            if sop.numerical:
                w2[columns[id(sop)][0], h] = float(sop.fn(v))
            else:
                w2[col(sop, sop.fn(v)), h] = 1.0
            h += 1
        return h
    first_sop, second_sop = sop.inputs  # sequence_map: unit (a, b) = relu(onehot_a + onehot_b - 1)
    for a in value_sets[id(first_sop)]:
        for b in value_sets[id(second_sop)]:
            w1[h, col(first_sop, a)] = w1[h, col(second_sop, b)] = 1.0
            b1[h] = -1.0
            w2[col(sop, sop.fn(a, b)), h] = 1.0
            h += 1
    return h


def _means(values: Sequence[float], max_len: int, most: int = 100_000) -> set[float]:
    """Every mean of 1..max_len numbers drawn (with repeats) from `values`, and 0: what a
    numerical aggregate can write."""
    from itertools import combinations_with_replacement

    if math.comb(len(values) + max_len, max_len) > most:
        raise ValueError(f"a numerical aggregate of {len(values)} values over up to max_len={max_len} keys has too "
                         f"many possible means to compile a map of it: use fewer values or a smaller max_len")
    out = {0.0}
    for n in range(1, max_len + 1):
        out |= {sum(bag) / n for bag in combinations_with_replacement(values, n)}
    return out


def _set_numerical_mlp(ffn, sop: SOp, first: int, columns: dict, value_sets: dict) -> int:
    """tracr's numerical MLP (its "discretising layer"): f of a number x known to lie in the
    sorted set x_0 < ... < x_(n-1). Output f(x_0) + sum_k (f(x_k) - f(x_(k-1))) step_k(x), where
    step_k(x) = relu(L (x - b_k) + 1) - relu(L (x - b_k)) is 1 above b_k = (x_(k-1) + x_k) / 2
    and 0 below b_k - 1 / L; L = 4 / the smallest gap, so every x_k sits on a flat part. Units
    first.. of ffn: one start unit relu(one - bos) (0 at BOS), then two per step, off at BOS."""
    w1, b1, w2 = ffn.linear1.weight, ffn.linear1.bias, ffn.linear2.weight
    xs = value_sets[id(sop.inputs[0])]
    fx = [float(sop.fn(x)) for x in xs]
    x_col, out = columns[id(sop.inputs[0])][0], columns[id(sop)][0]
    gap = min((b - a for a, b in zip(xs, xs[1:])), default=1.0)
    steep = 4.0 / gap
    off = steep * (2 * max(abs(x) for x in xs) + 1) + 2  # at BOS, every step's input is below 0
    w1[first, 0], w1[first, 1] = 1.0, -1.0  # the start unit carries f(x_0)
    w2[out, first] = fx[0]
    h = first + 1
    for k in range(1, len(xs)):
        edge = (xs[k - 1] + xs[k]) / 2
        w1[h, x_col], b1[h] = steep, 1.0 - steep * edge
        w1[h + 1, x_col], b1[h + 1] = steep, -steep * edge
        w1[h, 1] = w1[h + 1, 1] = -off
        w2[out, h], w2[out, h + 1] = fx[k] - fx[k - 1], fx[k - 1] - fx[k]
        h += 2
    return h


def every_sequence(n_symbols: int, length: int) -> Tensor:
    """All n_symbols ** length rows of symbols 1..n_symbols: (n_symbols ** length, length)."""
    require_count("n_symbols", n_symbols)
    require_count("length", length)
    if n_symbols ** length > 1_000_000:
        raise ValueError(f"n_symbols ** length = {n_symbols ** length} rows is too many to list")
    grid = torch.cartesian_prod(*[torch.arange(1, n_symbols + 1)] * length)
    return grid.reshape(-1, length)


def run_compiled(compiled: CompiledProgram, sequences: Tensor) -> Tensor:
    """The compiled model's answer: sequences (B, T) in 1..n_symbols -> (B, T), the argmax of
    its logits at every position after BOS, or NONE (-1) where no output value is written (a
    query whose selector selects nothing reads BOS, which carries no value: RASP's None). The
    model's last attention weights stay in compiled.model.layer_weights (one (B, 1, 1 + T, 1 + T)
    per block: one head each). A numerical program's number is read with residual_stream."""
    _require_compiled_input(compiled, sequences)
    ids = _with_bos(compiled, sequences)  # (B, 1 + T)
    with torch.no_grad():
        logits = compiled.model(ids)[:, 1:]  # (B, T, V); the model checks ids < V and the length
    best, answer = logits.max(-1)  # a written value's logit is 1, an unwritten one's 0
    return answer.masked_fill(best < 0.5, NONE)


def _require_compiled_input(compiled: object, sequences: object) -> None:
    """compiled a CompiledProgram; sequences (B, T) integer symbols in 1..compiled.n_symbols."""
    require_instance("compiled", compiled, CompiledProgram, "a CompiledProgram (see compile_program)")
    require_integer("sequences", sequences, 2, 2)
    if sequences.numel() and not 1 <= int(sequences.min()) <= int(sequences.max()) <= compiled.n_symbols:
        raise ValueError(f"sequences must hold symbols 1..{compiled.n_symbols}, the ones compiled for (0 is BOS), "
                         f"got values from {int(sequences.min())} to {int(sequences.max())}")


def _with_bos(compiled: CompiledProgram, sequences: Tensor) -> Tensor:
    """sequences (B, T) of symbols >= 1 -> ids (B, 1 + T) with BOS first."""
    bos = torch.full((len(sequences), 1), BOS_ID, dtype=sequences.dtype)
    return torch.cat([bos, sequences], 1)


def residual_stream(compiled: CompiledProgram, sequences: Tensor) -> Tensor:
    """The residual stream after the last block, BOS dropped: sequences (B, T) -> (B, T, D).
    compiled.columns[name] says which columns hold which s-op."""
    _require_compiled_input(compiled, sequences)
    ids = _with_bos(compiled, sequences)
    model = compiled.model
    require_ids(ids, model.config, "BOS + sequences")
    with torch.no_grad():
        x = model.positions.add(model.tokens(ids).to(model.readout.weight.dtype))  # (B, 1 + T, D)
        for block in model.layers:
            x = block.run(x)[0]
    return x[:, 1:]


# ---------------------------------------------------------------- the compiled program beside training

def program_answer(task: str, sequences: Tensor) -> Tensor:
    """What each program should output, from its definition (not from RASP): sequences (B, T)
    -> (B, T): the reversed row, each token's count in its row, or the sorted row."""
    require_choice("task", task, tuple(PROGRAMS))
    require_integer("sequences", sequences, 2, 2)
    if task == "reverse":
        return sequences.flip(-1)
    if task == "sort":
        return sequences.sort(-1).values
    return (sequences[:, :, None] == sequences[:, None, :]).sum(-1)  # (B, T, T) matches -> counts


def random_sequences(task: str, n_sequences: int, length: int, n_symbols: int, generator: torch.Generator,
                     held_out: bool | None = None) -> Tensor:
    """n_sequences rows of `length` symbols in 1..n_symbols (distinct ones for "sort", which
    RASP's sort assumes): any rows (held_out=None), or all from the held-out part (lesson 09's
    is_held_out, about 1 row in 7) or none of it (held_out=False, for training)."""
    from .transformer import is_held_out

    require_choice("task", task, tuple(PROGRAMS))
    require_count("n_sequences", n_sequences)
    require_count("length", length)
    require_count("n_symbols", n_symbols)
    require_instance("generator", generator, torch.Generator)
    if held_out is not None:
        require_bool("held_out", held_out)
    if task == "sort" and length > n_symbols:
        raise ValueError(f"sort needs distinct symbols: length={length} must be at most n_symbols={n_symbols}")
    rows: list[Tensor] = []
    for _ in range(20):  # about 1 row in 7 is held out: draw plenty
        draw = 8 * n_sequences + 16
        if task == "sort":
            x = torch.rand(draw, n_symbols, generator=generator).argsort(-1)[:, :length] + 1
        else:
            x = torch.randint(1, n_symbols + 1, (draw, length), generator=generator)
        rows.append(x if held_out is None else x[is_held_out(x) == held_out])
        if sum(len(r) for r in rows) >= n_sequences:
            return torch.cat(rows)[:n_sequences]
    raise ValueError(f"held_out={held_out}: too few rows of length={length} in 1..n_symbols={n_symbols} are "
                     f"{'' if held_out else 'not '}held out to draw n_sequences={n_sequences}; use held_out=None")


def train_like(compiled: CompiledProgram, task: str, length: int, seed: int = 0, steps: int = 100,
               lr: float = 1e-2, n_sequences: int = 64) -> DecoderOnly:
    """A DecoderOnly of the compiled model's very config (its seed: `seed`), trained from random
    weights on `task` at one length, on inputs [BOS, x] outside the held-out part. The seed comes
    fourth so that run_each can train seeds side by side: run_each(partial(train_like, compiled,
    task, length, steps=...), seeds, workers=2)."""
    require_instance("compiled", compiled, CompiledProgram, "a CompiledProgram (see compile_program)")
    require_choice("task", task, tuple(PROGRAMS))
    require_count("seed", seed, minimum=0)
    config = compiled.model.config
    model = DecoderOnly(ModelConfig(**{**config.__dict__, "seed": seed})).double()
    n_symbols = compiled.n_symbols

    def make_batch(generator: torch.Generator) -> tuple[Tensor, Tensor]:
        x = random_sequences(task, n_sequences, length, n_symbols, generator, held_out=False)
        ignore = torch.full((n_sequences, 1), IGNORE)  # no loss at BOS
        return _with_bos(compiled, x), torch.cat([ignore, program_answer(task, x)], 1)

    train_tiny_model(model, make_batch, steps, lr, seed)
    return model


def attention_correlation(first: Tensor, second: Tensor) -> float:
    """Pearson correlation of two attention maps over all their entries: (..., T, S) twice -> float."""
    require_float("first", first, min_rank=2)
    require_float("second", second, min_rank=2)
    if first.shape != second.shape:
        raise ValueError(f"first and second must have one shape, got {tuple(first.shape)} and {tuple(second.shape)}")
    pair = torch.stack([first.flatten(), second.flatten()]).double()
    if (pair.std(-1) == 0).any():
        raise ValueError("an attention map that is the same everywhere has no correlation with anything")
    return float(torch.corrcoef(pair)[0, 1])


def weight_by_key_value(weights: Tensor, sequences: Tensor, n_symbols: int) -> Tensor:
    """Where a head looks, by the key's token: weights (B, T, 1 + T) (one head, queries after BOS,
    key 0 = BOS), sequences (B, T) in 1..n_symbols -> (T, n_symbols), entry [i, v - 1] the mean
    weight query i puts on the key holding token v (BOS's share left out)."""
    require_float("weights", weights, 3, 3)
    require_integer("sequences", sequences, 2, 2)
    require_count("n_symbols", n_symbols)
    B, T = sequences.shape
    if weights.shape != (B, T, T + 1):
        raise ValueError(f"weights must be (B, T, 1 + T) = {(B, T, T + 1)} for sequences of shape "
                         f"{(B, T)} (a model's (B, H, 1 + T, 1 + T): take w[:, 0, 1:]), got {tuple(weights.shape)}")
    if sequences.numel() and not 1 <= int(sequences.min()) <= int(sequences.max()) <= n_symbols:
        raise ValueError(f"sequences must hold symbols 1..n_symbols={n_symbols}")
    onehot = torch.nn.functional.one_hot(sequences - 1, n_symbols).to(weights.dtype)  # (B, T keys, V)
    return torch.einsum("bqk,bkv->qv", weights[:, :, 1:], onehot) / max(B, 1)


class SortStudy(NamedTuple):
    """One trained sorter beside the compiled one, on held-out rows (see `study_trained_sort`)."""
    whole: float  # share of held-out rows sorted whole
    place: float  # largest |correlation| of any trained block with the compiled `place` head
    sort: float  # largest correlation of any trained block with the compiled `sort` head
    block: int  # that block (0-based)
    on_read: float  # its mean weight on the key the compiled sort head reads (the i-th smallest)
    by_value: float  # correlation of its weight_by_key_value table with the compiled head's


def study_trained_sort(compiled: CompiledProgram, trained: DecoderOnly, held: Tensor) -> SortStudy:
    """A model trained on sort (train_like(compiled, "sort", ...)) beside the compiled sorter
    (rasp_sort: block 1 `place`, block 2 `sort`) on held-out rows held (B, T) of distinct symbols."""
    require_instance("trained", trained, DecoderOnly, "a DecoderOnly (from train_like)")
    _require_compiled_input(compiled, held)
    if compiled.heads[:2] != ["place", "sort"]:
        raise ValueError(f"compiled must be rasp_sort's (heads place, sort), got heads {compiled.heads}")
    ids = _with_bos(compiled, held)
    run_compiled(compiled, held)
    place_map, sort_map = (w[:, 0, 1:] for w in compiled.model.layer_weights[:2])  # (B, T, 1 + T)
    with torch.no_grad():
        answer = trained(ids)[:, 1:].argmax(-1)  # (B, T); its weights stay: the held-out rows'
    maps = [w[:, 0, 1:] for w in trained.layer_weights]
    to_sort = [attention_correlation(sort_map, m) for m in maps]
    block = max(range(len(maps)), key=to_sort.__getitem__)
    read = held.argsort(-1) + 1  # (B, T): the key the compiled head reads at query i (+ 1: BOS)
    n = compiled.n_symbols
    return SortStudy(
        whole=float((answer == held.sort(-1).values).all(-1).double().mean()),
        place=max(abs(attention_correlation(place_map, m)) for m in maps),
        sort=to_sort[block], block=block,
        on_read=float(maps[block].gather(-1, read[..., None]).mean()),
        by_value=attention_correlation(weight_by_key_value(maps[block], held, n),
                                       weight_by_key_value(sort_map, held, n)))
