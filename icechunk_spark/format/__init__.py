"""Pure encode/decode of every repository file. Bytes and Arrow in, values out; no I/O."""

from .coords import decode_coord, decode_coords, encode_coord, encode_coords
from .ids import new_node_id, new_object_id
from .manifest import REF_SCHEMA, decode_manifest, encode_manifest
from .merge import merge_refs
from .state import FORMAT_VERSION, Ref, SnapshotInfo, State, decode_state, encode_state
from .structure import ArrayMeta, ManifestRef, Node, make_node
from .structure_decode import decode_structure
from .structure_encode import encode_structure
from .txlog import NodeChange, TransactionLog, decode_txlog, encode_txlog

__all__ = [
    "FORMAT_VERSION",
    "REF_SCHEMA",
    "ArrayMeta",
    "ManifestRef",
    "Node",
    "NodeChange",
    "Ref",
    "SnapshotInfo",
    "State",
    "TransactionLog",
    "decode_coord",
    "decode_coords",
    "decode_manifest",
    "decode_state",
    "decode_structure",
    "decode_txlog",
    "encode_coord",
    "encode_coords",
    "encode_manifest",
    "encode_state",
    "encode_structure",
    "encode_txlog",
    "make_node",
    "merge_refs",
    "new_node_id",
    "new_object_id",
]
