"""A values table in one process: plan, read, done (the Spark table plans the same way and
reads the boxes on executors)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from .blocks import read_boxes
from .layout import open_dataset, values_layout
from .plan import LabelCondition, Selection, ValueCondition, chunk_boxes, ruled_out_by_stats

if TYPE_CHECKING:
    from ..core import BaseSession


def read_values(
    session: BaseSession,
    group: str,
    arrays: Sequence[str],
    *,
    where: Sequence[LabelCondition] = (),
    where_values: Sequence[ValueCondition] = (),
    decode: bool = True,
) -> pa.Table:
    """The rows of ``arrays`` (of ``group``) where the conditions on labels hold, reading only
    the chunks they select and whose statistics do not rule ``where_values`` out.

    Rows outside ``where``, and rows whose values miss a condition of ``where_values`` (null
    meets none), are left out.

    >>> july = [LabelCondition("time", ">=", t0), LabelCondition("time", "<", t1)]
    >>> read_values(session, "/", ["tas"], where=july)  # doctest: +SKIP
    """
    layout = values_layout(session, group, arrays, decode)
    selection = Selection.of(layout, where)
    ruled_out = ruled_out_by_stats(session, layout, where_values) if where_values else None
    boxes = chunk_boxes(layout, selection, ruled_out)
    ds = open_dataset(session, layout.group, decode)
    batches = list(read_boxes(ds, layout, selection, boxes, where_values))
    return pa.Table.from_batches(batches, schema=layout.schema())
