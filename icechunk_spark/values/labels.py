"""Labels and indexes of one dimension, both ways.

A dimension's *labels* are the decoded values of the coordinate array of the same name, as
xarray decodes them: CF times become ``datetime64``; on a non-standard calendar (cftime dates,
which Spark has no type for) they are their ISO 8601 text, which sorts as the dates do. A
dimension without a coordinate array is labelled by its integer index. Reading (``table=values``)
turns conditions on labels into the indexes they select; writing tidy rows turns labels into
indexes. Both go through ``Labels``.
"""

from __future__ import annotations

import datetime as dt
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..errors import InvalidInputError

Comparison = Literal["=", "<", "<=", ">", ">="]
_COMPARE: dict[Comparison, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


@dataclass(frozen=True, eq=False)
class Labels:
    """The labels of one dimension, in index order (``values[i]`` labels index ``i``)."""

    dim: str
    values: np.ndarray

    @classmethod
    def indexes(cls, dim: str, size: int) -> Labels:
        """A dimension without a coordinate array: labelled by its index."""
        return cls(dim, np.arange(size, dtype=np.int64))

    @property
    def size(self) -> int:
        return int(self.values.shape[0])

    def where(self, op: Comparison, value: Any) -> np.ndarray:
        """A boolean mask over the indexes: where ``label op value`` holds.

        Raises:
            InvalidInputError: ``value`` cannot be compared with this dimension's labels.
        """
        target = self._comparable(value)
        try:
            mask = _COMPARE[op](self.values, target)
        except TypeError as exc:
            raise InvalidInputError(
                f"cannot compare dimension {self.dim!r} (labels like {self.values[:1]!r}) "
                f"with {value!r}"
            ) from exc
        return np.asarray(mask, dtype=bool).reshape(self.size)

    def where_in(self, values: Sequence[Any]) -> np.ndarray:
        """A boolean mask over the indexes: where the label is one of ``values``."""
        mask = np.zeros(self.size, dtype=bool)
        for value in values:
            mask |= self.where("=", value)
        return mask

    def _comparable(self, value: Any) -> Any:
        """``value`` in the labels' own kind: Spark hands timestamps over as ``datetime``."""
        kind = self.values.dtype.kind
        if kind == "M" and isinstance(value, dt.datetime | dt.date):
            if isinstance(value, dt.datetime) and value.tzinfo is not None:
                value = value.astimezone(dt.UTC).replace(tzinfo=None)
            return np.datetime64(value, "ns")
        if kind == "M" and isinstance(value, str):
            try:
                return np.datetime64(value, "ns")
            except ValueError as exc:
                raise InvalidInputError(
                    f"{value!r} is not a time (dimension {self.dim!r})"
                ) from exc
        return value


def index_ranges(mask: np.ndarray) -> list[tuple[int, int]]:
    """The ``[start, stop)`` runs of true values of ``mask``, in order."""
    padded = np.concatenate([[False], np.asarray(mask, dtype=bool), [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]
