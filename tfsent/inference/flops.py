"""Matrix-product FLOPs of an encoder forward pass: what a batch shape costs, counted, never timed.

The engine compares plans with these counts (padded rows against packed sequences, ``packing: auto``) and
``bench/flops.py`` reports them. A multiply-add is 2 FLOPs; only matrix products count (over 98% of the work at
sentence lengths). Per sequence of ``L`` tokens, hidden ``H``, feed-forward ``I`` and ``N`` layers:

- projections Q, K, V and the attention output ``4 * 2*L*H*H``, feed-forward in and out ``2 * 2*L*H*I``;
- attention scores ``Q K^T`` and the weighted sum ``P V``: ``2 * 2*L*L*H`` (all heads together);

so ``N * 4*L*H * (2*H + I + L)``: a token's attention grows with the sequence it sits in, its other work does not.
A classification head (pooler ``2*H*H``, classifier ``2*H*C``) runs once per head slot.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class EncoderFlops:
    """The sizes FLOPs depend on.

    Attributes:
        hidden: hidden size ``H``.
        layers: transformer layers ``N``.
        intermediate: feed-forward size ``I``.
        num_labels: classifier outputs ``C`` (0: no classification head).
    """

    hidden: int
    layers: int
    intermediate: int
    num_labels: int = 0

    @classmethod
    def from_config(cls, config: Any, *, num_labels: int = 0) -> "EncoderFlops":
        """Sizes from a transformers config (or a dict of its fields); DistilBERT's ``dim``/``n_layers``/
        ``hidden_dim`` names included."""
        get = config.get if isinstance(config, Mapping) else lambda k, d=None: getattr(config, k, d)

        def first(*keys):
            return int(next(v for v in (get(k) for k in keys) if v is not None))

        return cls(hidden=first("hidden_size", "dim"), layers=first("num_hidden_layers", "n_layers"),
                   intermediate=first("intermediate_size", "hidden_dim"), num_labels=num_labels)

    def sequence(self, length: int) -> int:
        """Encoder FLOPs of one sequence of ``length`` tokens (padding included)."""
        h, L = self.hidden, int(length)
        return self.layers * 4 * L * h * (2 * h + self.intermediate + L)

    def head(self) -> int:
        """FLOPs of one classification-head slot (0 without a head)."""
        h = self.hidden
        return 2 * h * h + 2 * h * self.num_labels if self.num_labels else 0
