"""What a SavedModel holds, per MetaGraph, in plain values two TensorFlow versions can compare.

Used by `scripts/original_export_v2.py` (under TF 2.15, on the original's exports) and by
`tests/test_export_v2.py` (on this library's), so both record the same facts.
"""

from __future__ import annotations

import re

from tensorflow.python.saved_model import loader_impl


def describe(path: str | bytes) -> dict:
    """Tag sets -> signature keys, op types of the graph and its functions, batching ops, outputs, variables."""
    graphs = {}
    for meta_graph in loader_impl.parse_saved_model(path).meta_graphs:
        nodes = meta_graph.graph_def.node
        functions = {  # function names without TensorFlow's hash or counter suffix
            re.sub(r"(_[A-Za-z0-9]{11}|_\d+)$", "", f.signature.name): sorted({n.op for n in f.node_def})
            for f in meta_graph.graph_def.library.function
        }
        graphs[",".join(sorted(meta_graph.meta_info_def.tags))] = {
            "signatures": sorted(meta_graph.signature_def),
            "ops": sorted({node.op for node in nodes}),
            "functions": functions,
            "batch_ops": sorted(node.name for node in nodes if node.op == "BatchFunction"),
            "outputs": {
                key: {name: info.name for name, info in sorted(signature.outputs.items())}
                for key, signature in sorted(meta_graph.signature_def.items())
            },
            "variables": sorted(node.name for node in nodes if node.op == "VarHandleOp"),
        }
    return graphs
