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
Shapes use the course's names (course_lib/__init__.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Sequence

import torch
from torch import Tensor

from .attention_scores import scaled_dot_product_attention, softmax
from .guards import (require_count, require_float, require_instance, require_integer, require_number,
                     require_same_dtype)
from .training import train

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

    require_row_stochastic("weights", weights, max_rank=2)  # one (T, S) matrix
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
    position i's last state traces back to token j. Rows still sum to 1.
    """
    _require_layers(layer_weights)
    rollout = with_residual(layer_weights[0], residual)
    for weights in layer_weights[1:]:
        rollout = with_residual(weights, residual) @ rollout  # (..., T, T): one more layer on top
    return rollout


def layered_graph(layer_weights: Sequence[Tensor], residual: float = 0.0,
                  threshold: float = 0.0) -> nx.DiGraph:
    """Every layer's graph stacked: node (l, i) is position i after layer l (l = 0: the tokens).

    layer_weights: one (T, T) per layer. An edge (l, i) -> (l - 1, j) carries layer l's weight
    (with the residual self-loop) when above `threshold`. With threshold 0, the paths from (L, i)
    to (0, j) multiply out to attention_rollout(...)[i, j].
    """
    import networkx as nx

    _require_layers(layer_weights)
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
