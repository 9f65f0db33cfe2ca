"""The k-nearest-neighbour graph of a training set and a graph convolution over it (SMILE's encoder).

SMILE (docs/methods.md, "smile") recovers a label distribution for every training row with a
two-layer graph convolutional network over the rows' k-nearest-neighbour graph. The official code
builds that network from DGL's ``GraphConv``; DGL does not install beside current PyTorch, so the
graph and the layer are written here in plain PyTorch, with DGL's arithmetic, in DGL's order, so
that the two agree on the same weights (``tests/test_losses_smile.py`` pins the normalisation by
hand; ``tools/smile_side_by_side.py`` compares with DGL itself).

The graph is directed: row ``i`` sends an edge to each of its ``k`` nearest other rows (Euclidean
distance of the features; ties go to the lower row number). A convolution with DGL's
``norm="both"`` scales each sender by ``1/sqrt(out-degree)`` (always ``k`` here), sums what
arrives at each row, and scales the sum by ``1/sqrt(in-degree)``, an in-degree of 0 counting as 1:

    h_j = b + (1 / sqrt(max(in_j, 1))) * sum over edges i -> j of (x_i / sqrt(out_i)) W

No self-loops are added, so a row that is nobody's neighbour receives nothing and its output is
the bias alone (the official code allows such rows, ``allow_zero_in_degree=True``).
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

__all__ = ["Block", "KnnGraph", "GraphConv", "knn_neighbours", "nearest_rows"]

#: rows of the distance matrix computed at once when the graph is built (float64: 8 bytes x N per row)
CHUNK_ROWS = 1024


#: the graphs of the last few feature matrices seen on the CPU: a sweep trains many runs on one
#: split (a grid of learning rates, batch sizes, weight decays), and on a large set the distances
#: cost far more than a run's first steps (delicious, 12,920 x 500: 27 to 39 s on the loaded 2-core
#: development machine, benchmarks/bench_smile.py)
_RECENT: OrderedDict[tuple, Tensor] = OrderedDict()
RECENT_GRAPHS = 4


def knn_neighbours(features: Tensor, k: int, *, chunk_rows: int = CHUNK_ROWS) -> Tensor:
    """:func:`nearest_rows`, remembered for the last :data:`RECENT_GRAPHS` CPU feature matrices
    (keyed by their bytes, so equal features give the very same graph without the distances)."""
    if features.device.type != "cpu":
        return nearest_rows(features, k, chunk_rows=chunk_rows)
    data = features.detach().contiguous()
    key = (hashlib.blake2b(data.numpy(), digest_size=16).hexdigest(), tuple(data.shape), str(data.dtype), k)
    if key in _RECENT:
        _RECENT.move_to_end(key)
        return _RECENT[key].clone()
    neighbours = nearest_rows(features, k, chunk_rows=chunk_rows)
    _RECENT[key] = neighbours.clone()
    while len(_RECENT) > RECENT_GRAPHS:
        _RECENT.popitem(last=False)
    return neighbours


def nearest_rows(features: Tensor, k: int, *, chunk_rows: int = CHUNK_ROWS) -> Tensor:
    """``[N, k]`` long: each row's ``k`` nearest other rows, in increasing row order.

    Distances are those scikit-learn's ``euclidean_distances`` gives float32 features, which the
    official code uses: squared distances ``|x|^2 - 2 x.y + |y|^2`` in float64, clipped at 0,
    rounded to float32, then the square root in float32. The rounding to float32 makes near-equal
    distances equal, and equal distances go to the lower row number, as the official code's
    repeated ``argmin`` (first minimum) chooses them. Computed ``chunk_rows`` rows at a time on the
    features' device, so a large set never holds an N x N matrix.
    """
    n = features.shape[0]
    x = features.detach().to(torch.float64)
    sq = (x * x).sum(dim=1)
    out = torch.empty(n, k, dtype=torch.long, device=features.device)
    for start in range(0, n, chunk_rows):
        rows = slice(start, min(start + chunk_rows, n))
        d2 = -2.0 * (x[rows] @ x.T)
        d2 += sq[rows, None]
        d2 += sq[None, :]
        dist = d2.to(torch.float32).clamp_min_(0.0).sqrt_()
        local = torch.arange(rows.stop - rows.start, device=features.device)
        dist[local, local + start] = math.inf  # a row is not its own neighbour
        kth = dist.topk(k, dim=1, largest=False).values[:, k - 1 : k]
        below = dist < kth
        ties = dist == kth
        room = k - below.sum(dim=1, keepdim=True)  # how many of the tied rows still fit, lowest first
        chosen = below | (ties & (ties.cumsum(dim=1) <= room))
        out[rows] = chosen.nonzero()[:, 1].view(-1, k)
    return out


class Block(NamedTuple):
    """The edges of a graph from ``sources`` into ``receivers`` (row ids), for one convolution that
    computes only the ``receivers``' rows: row ``a`` of :meth:`propagate`'s result sums the rows of
    its input (one per source, in ``sources`` order) that send an edge to ``receivers[a]``."""

    receivers: Tensor
    sources: Tensor
    #: the edges as positions in ``receivers`` and ``sources``, sorted by receiver, then source
    edge_receivers: Tensor
    edge_sources: Tensor

    def propagate(self, h: Tensor) -> Tensor:
        """Each receiver's sum over its senders, added edge by edge: on the CPU a row's terms in
        increasing source order, the order DGL's sum takes; on a GPU in an order of its own, the
        same from run to run under ``--deterministic``. Its gradient is the same kind of sum.
        ``h`` may carry leading run dimensions (``[..., S, F]``): each run's rows are summed alike."""
        out = h.new_zeros(*h.shape[:-2], len(self.receivers), h.shape[-1])
        return out.index_add(-2, self.edge_receivers, h.index_select(-2, self.edge_sources))


class KnnGraph(nn.Module):
    """The directed k-NN graph of ``features`` (``[N, D]``), as index buffers that follow the module.

    ``neighbours`` ``[N, k]``: the rows each row sends an edge to. ``incoming_ptr`` / ``incoming_src``:
    the senders of each row's incoming edges, in increasing order (compressed by receiver), from
    which :meth:`block` cuts the edges a batch needs. The buffers are not saved in checkpoints: they
    are a function of the data, which is also why a batched group's runs share them (``data_buffers``).
    """

    data_buffers = ("neighbours", "out_degree", "in_degree", "incoming_ptr", "incoming_src")

    def __init__(self, features: Tensor, k: int) -> None:
        super().__init__()
        n = features.shape[0]
        neighbours = knn_neighbours(features, k)
        src = torch.arange(n, device=features.device).repeat_interleave(k)
        dst = neighbours.reshape(-1)
        self.num_rows, self.k = n, k
        self.register_buffer("neighbours", neighbours, persistent=False)
        self.register_buffer("out_degree", torch.bincount(src, minlength=n), persistent=False)
        in_degree = torch.bincount(dst, minlength=n)
        self.register_buffer("in_degree", in_degree, persistent=False)
        ptr = torch.zeros(n + 1, dtype=torch.long, device=features.device)
        ptr[1:] = in_degree.cumsum(0)
        self.register_buffer("incoming_ptr", ptr, persistent=False)
        self.register_buffer("incoming_src", src[torch.argsort(dst * n + src)], persistent=False)
        self._norms: dict[tuple, tuple[Tensor, Tensor]] = {}

    def norms(self, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``(1/sqrt(out-degree), 1/sqrt(max(in-degree, 1)))`` per row, ``[N]`` of ``dtype`` (DGL clamps
        both degrees at 1 and takes the power in the features' dtype; every out-degree here is ``k``).
        Computed once per dtype and device: they depend on the graph alone."""
        key = (dtype, self.in_degree.device)
        if key not in self._norms:
            self._norms[key] = (self.out_degree.to(dtype).clamp(min=1).pow(-0.5),
                                self.in_degree.to(dtype).clamp(min=1).pow(-0.5))
        return self._norms[key]

    def block(self, receivers: Tensor | None = None) -> Block:
        """The edges into ``receivers`` (``[R]`` row ids, any order; None: every row) from every row
        that sends one. A receiver that nobody points to has no edge (DGL: it receives nothing)."""
        device = self.incoming_ptr.device
        if receivers is None:
            receivers = torch.arange(self.num_rows, device=device)
        starts = self.incoming_ptr[receivers]
        counts = self.incoming_ptr[receivers + 1] - starts
        edge_receivers = torch.repeat_interleave(counts)  # each receiver's position, once per incoming edge
        edges = torch.arange(len(edge_receivers), device=device) + (starts - counts.cumsum(0) + counts)[edge_receivers]
        sources, edge_sources = torch.unique(self.incoming_src[edges], sorted=True, return_inverse=True)
        return Block(receivers, sources, edge_receivers, edge_sources)

    def adjacency(self, index: Tensor) -> Tensor:
        """The 0/1 adjacency among rows ``index`` (``[B]``): entry ``(a, b)`` is 1 when row
        ``index[b]`` is one of row ``index[a]``'s neighbours (``[B, B]``, float32); for ``[R, B]``
        (R runs' batches), each run's (``[R, B, B]``)."""
        hits = self.neighbours[index].unsqueeze(-1) == index[..., None, None, :]
        return hits.any(dim=-2).to(torch.float32)

    def _apply(self, fn: Any, recurse: bool = True) -> KnnGraph:
        self._norms = {}  # a move or a cast: computed again for the new device or dtype
        return super()._apply(fn, recurse)

    def extra_repr(self) -> str:
        return f"rows={self.num_rows}, k={self.k}"


class GraphConv(nn.Module):
    """One graph convolution with DGL's ``norm="both"``: ``h = b + D_in^-1/2 A (D_out^-1/2 x) W``.

    ``weight`` is ``[in, out]`` (as DGL stores it) with Glorot-uniform initialisation, ``bias``
    starts at zero, both drawn from ``generator``. As in DGL, the product with ``W`` comes before the
    sum over edges when it shrinks the rows (``in > out``) and after it otherwise; the two orders are
    equal in exact arithmetic and round differently, so the order is kept.

    Called with a :class:`Block` and the inputs of its sources, it computes its receivers' rows
    only: the rows a batch needs, not the whole graph's (docs/methods.md, "smile").
    """

    def __init__(self, in_dim: int, out_dim: int, *, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.weight = nn.Parameter(torch.empty(in_dim, out_dim))
        self.bias = nn.Parameter(torch.zeros(out_dim))
        nn.init.xavier_uniform_(self.weight, generator=generator)

    @property
    def weight_first(self) -> bool:
        """Whether the product with ``W`` comes before the sum over edges (DGL: when ``in > out``)."""
        return self.in_dim > self.out_dim

    def forward(self, graph: KnnGraph, x: Tensor, block: Block | None = None) -> Tensor:
        """The receivers' outputs ``[R, out]`` from the sources' inputs ``x`` ``[S, in]``; without a
        block, every row's output from every row's input. With a batched group's stacked weights in
        place of its own (``weight`` ``[runs, in, out]``), one output per run (``[runs, R, out]``),
        from inputs shared by the runs (``[S, in]``) or each run's own (``[runs, S, in]``)."""
        block = graph.block() if block is None else block
        out_norm, in_norm = graph.norms(x.dtype)
        h = x * out_norm[block.sources, None]
        h = block.propagate(torch.matmul(h, self.weight)) if self.weight_first else \
            torch.matmul(block.propagate(h), self.weight)
        return h * in_norm[block.receivers, None] + self.bias.unsqueeze(-2)

    def extra_repr(self) -> str:
        return f"in={self.in_dim}, out={self.out_dim}, norm=both"
