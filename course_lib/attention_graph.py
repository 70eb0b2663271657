"""Lesson 10: attention as a graph, and as the descent of an energy.

Graph: a weight matrix A (T, S) whose rows sum to 1 is a weighted directed graph: an edge
i -> j of weight A[i, j] says "query i reads A[i, j] of its output from key j". Stacking
layers multiplies the matrices: (A2 A1)[i, j] sums, over every middle position k, the product
of the edge weights along the path i -> k -> j. Attention rollout (Abnar & Zuidema 2020) adds
the residual as a self-loop before multiplying.

Energy: the modern Hopfield network (Ramsauer et al. 2020) stores S patterns, the rows of X
(S, D), and updates a state xi (D,) by xi <- softmax(beta X xi) X: one attention step whose
query is xi and whose keys and values are the patterns, at scale beta. Its energy
    E(xi) = -lse(beta, X xi) + xi.xi / 2 + log(S) / beta + M^2 / 2,
lse(beta, z) = log(sum exp(beta z)) / beta, M = the largest pattern norm, never increases
along the updates. Shapes use the course's names (course_lib/__init__.py).
"""

from __future__ import annotations

import math
from typing import Sequence

import matplotlib.pyplot as plt
import networkx as nx
import torch
from torch import Tensor

from .attention_scores import scaled_dot_product_attention, softmax
from .guards import require_count, require_float, require_number, require_same_dtype
from .training import train

ROW_SUM_TOLERANCE = 1e-5  # float32 softmax rows sum to 1 within a few ulps; this is far above that


# ---------------------------------------------------------------- the graph

def require_row_stochastic(name: str, weights: Tensor) -> Tensor:
    """Raise unless `weights` (..., T, S) is >= 0 with every row summing to 1 (or an all-zero row,
    a query whose every key was masked)."""
    require_float(name, weights, min_rank=2)
    if weights.numel() and (weights < 0).any():
        raise ValueError(f"{name} must be non-negative (attention weights), got a minimum of "
                         f"{float(weights.min()):.3g}")
    sums = weights.sum(-1)
    bad = ((sums - 1).abs() > ROW_SUM_TOLERANCE) & (sums != 0)
    if bad.any():
        raise ValueError(f"{name} must have rows summing to 1 (row-stochastic, as softmax gives), "
                         f"got a row summing to {float(sums[bad][0]):.6g}")
    return weights


def attention_graph(weights: Tensor, labels: Sequence[str] | None = None,
                    threshold: float = 0.0) -> nx.DiGraph:
    """The weighted directed graph of one attention matrix: weights (T, S) -> DiGraph.

    Nodes 0..max(T, S)-1 (attribute `label`); an edge i -> j with attribute `weight` =
    weights[i, j] for every weight above `threshold` (query i reads from key j).
    """
    require_row_stochastic("weights", weights)
    if weights.dim() != 2:
        raise ValueError(f"weights must be one (T, S) matrix, got shape {tuple(weights.shape)}")
    threshold = require_number("threshold", threshold, non_negative=True, at_most=1.0)
    n = max(weights.shape)
    labels = _labels(labels, n)
    graph = nx.DiGraph()
    graph.add_nodes_from((i, {"label": labels[i]}) for i in range(n))
    for i, j in (weights > threshold).nonzero().tolist():
        graph.add_edge(i, j, weight=float(weights[i, j]))
    return graph


def _labels(labels: Sequence[str] | None, n: int) -> list[str]:
    labels = [str(i) for i in range(n)] if labels is None else [str(label) for label in labels]
    if len(labels) != n:
        raise ValueError(f"labels must name all {n} positions, got {len(labels)} labels")
    return labels


def with_residual(weights: Tensor, residual: float = 0.5) -> Tensor:
    """residual * I + (1 - residual) * weights: the residual stream as a self-loop (Abnar & Zuidema).

    weights (..., T, T) -> (..., T, T), still row-stochastic. residual=0 gives the weights alone.
    """
    require_row_stochastic("weights", weights)
    residual = require_number("residual", residual, non_negative=True, at_most=1.0)
    if weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"weights must be self-attention (T, T) to add a self-loop, got {tuple(weights.shape)}")
    eye = torch.eye(weights.shape[-1], dtype=weights.dtype)
    return residual * eye + (1 - residual) * weights


def attention_rollout(layer_weights: Sequence[Tensor], residual: float = 0.5) -> Tensor:
    """Product of the layers' weights, last layer first: A_L ... A_2 A_1 (each with the residual).

    layer_weights: one (..., T, T) per layer, first layer first -> (..., T, T). Entry [i, j] is the
    sum over every path i -> k_{L-1} -> ... -> j of the product of its edge weights: how much of
    position i's last state traces back to token j. Rows still sum to 1.
    """
    if isinstance(layer_weights, Tensor) or not len(layer_weights):
        raise TypeError("layer_weights must be a non-empty list of (..., T, T) tensors, one per layer")
    for n, weights in enumerate(layer_weights):
        require_row_stochastic(f"layer_weights[{n}]", weights)
    require_same_dtype(**{f"layer_weights[{n}]": w for n, w in enumerate(layer_weights)})
    rollout = with_residual(layer_weights[0], residual)
    for weights in layer_weights[1:]:
        rollout = with_residual(weights, residual) @ rollout  # (..., T, T): one more layer on top
    return rollout


def layered_graph(layer_weights: Sequence[Tensor], residual: float = 0.0, threshold: float = 0.0) -> nx.DiGraph:
    """Every layer's graph stacked: node (l, i) is position i after layer l (l = 0: the tokens).

    layer_weights: one (T, T) per layer. An edge (l, i) -> (l - 1, j) carries layer l's weight
    (with the residual self-loop) when above `threshold`. With threshold 0, the paths from (L, i)
    to (0, j) multiply out to attention_rollout(...)[i, j].
    """
    rollout_check = attention_rollout(layer_weights, residual)  # validates every layer
    if rollout_check.dim() != 2:
        raise ValueError("layer_weights must be (T, T) matrices, one sequence (no batch dimension)")
    threshold = require_number("threshold", threshold, non_negative=True, at_most=1.0)
    T = rollout_check.shape[-1]
    graph = nx.DiGraph()
    graph.add_nodes_from((layer, i) for layer in range(len(layer_weights) + 1) for i in range(T))
    for layer, weights in enumerate(layer_weights, start=1):
        mixed = with_residual(weights, residual)
        for i, j in (mixed > threshold).nonzero().tolist():
            graph.add_edge((layer, i), (layer - 1, j), weight=float(mixed[i, j]))
    return graph


def line_layout(n: int) -> dict[int, tuple[float, float]]:
    """Fixed node positions for a graph of n tokens: a row, so a sentence reads left to right."""
    require_count("n", n)
    return {i: (float(i), 0.0) for i in range(n)}


def draw_graph(graph: nx.DiGraph, ax, pos: dict | None = None, curved: bool = True) -> None:
    """Draw an attention graph with networkx on a matplotlib axis: edge width and darkness
    grow with the weight; node labels from the `label` attribute (else the node itself)."""
    if not isinstance(graph, nx.DiGraph):
        raise TypeError(f"graph must be a networkx DiGraph, got {type(graph).__name__}")
    pos = line_layout(graph.number_of_nodes()) if pos is None else pos
    weights = [graph.edges[e]["weight"] for e in graph.edges]
    labels = {node: data.get("label", str(node)) for node, data in graph.nodes(data=True)}
    nx.draw_networkx_nodes(graph, pos, ax=ax, node_size=420, node_color="#fbe3cf", edgecolors="#d9661f")
    nx.draw_networkx_labels(graph, pos, labels=labels, ax=ax, font_size=9)
    nx.draw_networkx_edges(graph, pos, ax=ax, width=[0.5 + 3 * w for w in weights], edge_color=weights,
                           edge_cmap=plt.get_cmap("Greys"), edge_vmin=-0.3, edge_vmax=1.0, arrowsize=10,
                           connectionstyle="arc3,rad=-0.45" if curved else "arc3", node_size=420)
    ax.set_axis_off()


# ---------------------------------------------------------------- the energy

def _require_patterns(xi: Tensor, patterns: Tensor, beta: float) -> float:
    require_float("xi", xi, min_rank=1)
    require_float("patterns", patterns, min_rank=2)
    require_same_dtype(xi=xi, patterns=patterns)
    if xi.shape[-1] != patterns.shape[-1]:
        raise ValueError(f"xi and patterns must share their width D: xi has shape {tuple(xi.shape)}, "
                         f"patterns {tuple(patterns.shape)}")
    if patterns.shape[-2] == 0:
        raise ValueError("patterns holds no pattern (S = 0): there is nothing to retrieve")
    return require_number("beta", beta, positive=True)


def hopfield_update(xi: Tensor, patterns: Tensor, beta: float) -> tuple[Tensor, Tensor]:
    """One modern Hopfield step, xi <- softmax(beta X xi) X: attention with the state as the query.

    xi: (..., D) states; patterns X: (..., S, D) stored rows (keys and values at once). Returns
    (new states (..., D), weights (..., S)). Runs through the course's one attention path.
    """
    beta = _require_patterns(xi, patterns, beta)
    out, weights = scaled_dot_product_attention(xi.unsqueeze(-2), patterns, patterns, scale=beta)  # (..., 1, D)
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


def hopfield_run(xi: Tensor, patterns: Tensor, beta: float, steps: int = 5) -> tuple[Tensor, Tensor]:
    """`steps` updates from xi: (states (steps + 1, ..., D), energies (steps + 1, ...)), start first."""
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
    x = torch.randn(n_sets, n_patterns, width, generator=generator, dtype=torch.float64)  # (n_sets, S, D)
    return x / x.norm(dim=-1, keepdim=True)


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
    target = patterns[torch.arange(len(patterns)), targets]  # (B, D)
    return (states - target).norm(dim=-1) < tolerance * target.norm(dim=-1)


def retrieval_rate(n_patterns: int, beta: float, noise: float, width: int = 32, trials: int = 200,
                   steps: int = 3, seed: int = 0) -> float:
    """Share of noisy queries that end (after `steps` updates) on their own pattern."""
    patterns = random_patterns(n_patterns, width, trials, seed)  # (trials, S, D)
    queries, targets = noisy_queries(patterns, noise, seed + 1)
    states, _ = hopfield_run(queries, patterns, beta, steps)
    return float(retrieved(states[-1], patterns, targets).double().mean())


# ---------------------------------------------------------------- seed 003's claims

def force_field_energy(x: Tensor, y: Tensor, W: Tensor) -> Tensor:
    """Seed 003's energy E = -sum_ij (y_i W y_j) |x_i - x_j|^2. x (T, D), y (T, d_k), W (d_k, d_k) -> ()."""
    require_float("x", x, 2, 2)
    require_float("y", y, 2, 2)
    require_float("W", W, 2, 2)
    coupling = y @ W @ y.T  # (T, T): a_ij = y_i W y_j
    distances = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)  # (T, T)
    return -(coupling * distances).sum()


def claimed_force_field_gradient(x: Tensor, y: Tensor, W: Tensor) -> Tensor:
    """The gradient seed 003 writes for that energy: dE/dx_i = 2 sum_j (y_i W y_j)(x_j - x_i). (T, D)."""
    require_float("x", x, 2, 2)
    coupling = y @ W @ y.T  # (T, T)
    return 2 * (coupling @ x - coupling.sum(-1, keepdim=True) * x)


def associative_batch(n_examples: int, n_patterns: int, width: int, noise: float,
                      seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """A retrieval task: (patterns (B, S, D), noisy queries (B, D), targets (B,)), fresh patterns per example."""
    patterns = random_patterns(n_patterns, width, n_examples, seed)
    return (patterns, *noisy_queries(patterns, noise, seed + 1))


def fixed_alignment_accuracy(n_patterns: int = 8, width: int = 32, noise: float = 0.5, steps: int = 100,
                             seed: int = 0) -> float:
    """Train one alignment row w = softmax(logits) that does NOT depend on the data (seed 003: "w_ij
    need not be a function of the data") to retrieve: output sum_s w_s x_s. Returns the share of
    held-out examples whose output's nearest pattern is the target."""
    require_count("steps", steps)
    logits = torch.zeros(n_patterns, dtype=torch.float64, requires_grad=True)
    patterns, _, targets = associative_batch(256, n_patterns, width, noise, seed)
    goal = patterns[torch.arange(len(patterns)), targets]  # (B, D)

    def loss_of_step(_: int) -> Tensor:
        output = softmax(logits) @ patterns  # (B, D): the same graph for every example
        return ((output - goal) ** 2).sum(-1).mean()

    train(loss_of_step, [logits], steps, lr=0.1)
    patterns, _, targets = associative_batch(1000, n_patterns, width, noise, seed + 7)
    with torch.no_grad():
        output = softmax(logits) @ patterns  # (B, D)
        nearest = (patterns @ output.unsqueeze(-1)).squeeze(-1).argmax(-1)  # unit patterns: top dot = nearest
    return float((nearest == targets).double().mean())
