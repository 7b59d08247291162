"""Arrays as tables: the rows of a values table, which chunks a query needs, and the labels of a
dimension both ways (label <-> index), for the Spark tables above and any other engine.

``values_layout`` says what a table over some arrays of a group looks like; ``Selection`` and
``chunk_boxes`` plan the chunks a query reads; ``read_boxes`` reads them into Arrow batches.
The other way, ``write_table`` writes tidy rows as a dataset's arrays (``TidySpec`` says how;
``Grid``, planned by ``plan_grid``, says where each row lands).

xarray (with pandas) and zarr are imported where they are used, not at the top of a module:
every Python worker Spark starts imports this package through the data source, and those
two took about half of its import time (about 1 s of 2 on 2 cores) in workers that mostly
never read a value (``tests/test_architecture.py`` keeps it so).
"""

from .aggregate import FUNCS, AggregatePlan, Partial, aggregate, plan_aggregate, read_partial
from .blocks import box_rows, read_boxes, selected_values
from .chunk_table import chunk_stats_schema, chunk_stats_table
from .grid import Grid, TidySpec
from .labels import Comparison, Labels, index_ranges
from .layout import Dimension, StoredValues, ValueArray, ValuesLayout, open_dataset, values_layout
from .plan import (
    LabelCondition,
    Selection,
    ValueCondition,
    chunk_boxes,
    partitions_of,
    ruled_out_by_stats,
)
from .table import read_values
from .tidy_write import plan_grid, write_table

__all__ = [
    "FUNCS",
    "AggregatePlan",
    "Comparison",
    "Dimension",
    "Grid",
    "LabelCondition",
    "Labels",
    "Partial",
    "Selection",
    "StoredValues",
    "TidySpec",
    "ValueArray",
    "ValueCondition",
    "ValuesLayout",
    "aggregate",
    "box_rows",
    "chunk_boxes",
    "chunk_stats_schema",
    "chunk_stats_table",
    "index_ranges",
    "open_dataset",
    "partitions_of",
    "plan_aggregate",
    "plan_grid",
    "read_boxes",
    "read_partial",
    "read_values",
    "ruled_out_by_stats",
    "selected_values",
    "values_layout",
    "write_table",
]
