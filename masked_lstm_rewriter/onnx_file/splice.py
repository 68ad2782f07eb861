# SPDX-License-Identifier: Apache-2.0
"""Put what the pipeline emitted back into the model it read, leaving every other node as it was.

The pipeline works on tf2onnx's graph of the model (:mod:`.model_io`); writing that graph back would
rebuild every node. Instead the original model is kept, and only the difference is applied:

* the nodes the pipeline removed (each rewritten Loop), and the nodes and initializers only they
  used (its trip count, zeros, weights), are dropped; a node or initializer the original model
  did not use stays;
* the nodes the pipeline added go in, their constants as initializers;
* a consumer the pipeline pointed at a new tensor is left as it was: the new tensor takes the
  name of the Loop output it replaces (or an ``Identity`` gives it that name), so graph outputs,
  other loops' bodies and every kept node read the names they read before; but where the old
  tensor stays (a constant a streamed native node started from) or was read in two places that
  now read two tensors, the kept node reads the new one;
* the nodes are put in an order that computes each tensor before its readers, keeping the
  original order of the kept nodes.
"""

from __future__ import annotations

import heapq

import onnx
from onnx import numpy_helper


def splice(original: onnx.ModelProto, graph) -> onnx.ModelProto:
    """``original`` with the difference between it and tf2onnx's ``graph`` of it (rewritten) applied."""
    model = onnx.ModelProto()
    model.CopyFrom(original)
    main = model.graph
    initializers = {t.name for t in main.initializer}
    by_outputs = {tuple(node.output): index for index, node in enumerate(main.node)}
    kept, added, new_constants, repointed = set(), [], [], []
    inputs = {i.name for i in main.input}
    batch = _batch_dimension(main)
    raw = _raw_outputs(graph)
    for node in graph.get_nodes():
        if node.type == "Placeholder" and node.output[0] not in inputs | initializers:
            main.input.append(_value_info(graph, node.output[0], batch))  # a streamed layer's state input
            continue
        if (node.type == "Const" and node.output[0] in initializers) or \
                (node.type == "Placeholder" and node.output[0] in inputs | initializers) or \
                node.output[0] in raw.values():
            continue  # tf2onnx's graph holds initializers (one past 2 GB as an input) and graph inputs as nodes,
            # and an Identity per output
        index = by_outputs.get(tuple(raw.get(o, o) for o in node.output))
        if index is not None and main.node[index].op_type != node.type:
            index = None  # a new node now computes a graph output (a Gather where a Transpose was)
        if index is None:
            node.update_proto()
            if node.type == "Const":
                new_constants.append(numpy_helper.from_array(node.get_tensor_value(as_list=False), node.output[0]))
            else:
                added.append(node.op)
            continue
        kept.add(index)
        repointed += [(index, position, old, new) for position, (old, new) in enumerate(zip(main.node[index].input,
                                                                                         node.input))
                      if old != raw.get(new, new)]
    renames = _renames(main, kept, repointed, initializers | inputs, raw)
    main.output.extend(_value_info(graph, name, batch) for name in graph.outputs
                       if name not in {o.name for o in main.output} and name not in raw)  # a state output
    kept_nodes = [main.node[i] for i in sorted(kept)]
    added = _named_as_before(added, renames, raw)
    nodes, constants = _without_what_only_removed_nodes_used(original.graph, kept_nodes, added,
                                                              list(main.initializer) + new_constants,
                                                              {o.name for o in main.output})
    del main.node[:]
    main.node.extend(_in_order(nodes, {id(n): i for i, n in enumerate(kept_nodes)}, main))
    _keep_only(main.initializer, constants)
    names = {o for n in main.node for o in n.output} | {t.name for t in main.initializer} | \
        {i.name for i in main.input}
    kept_info = [info for info in main.value_info if info.name in names]
    del main.value_info[:]
    main.value_info.extend(kept_info)
    return model


def _renames(main, kept: set, repointed: list, defined: set, raw: dict) -> dict:
    """{old: new} for the kept nodes' inputs the pipeline pointed at new tensors (``repointed``: (node index,
    input position, old, new)), for the new tensor to take the old name: where the old tensor is gone
    (a removed Loop's output) and every reader moves to the same new one. Any other input is repointed
    in the kept node itself: the old tensor stays defined (an initializer, a graph input, a kept node's
    output; ``defined``: the first two), or one tensor fed two inputs that now read two (a native
    node's initial h and c, both the same zeros, each replaced by a streamed state input)."""
    defined = defined | {o for i in kept for o in main.node[i].output}
    news: dict = {}
    for _, _, old, new in repointed:
        news.setdefault(old, set()).add(raw.get(new, new))
    renames = {}
    for index, position, old, new in repointed:
        if old in defined or len(news[old]) > 1:
            main.node[index].input[position] = raw.get(new, new)
        else:
            renames.setdefault(old, new)
    return renames


def _keep_only(initializers, constants: list) -> None:
    """``initializers`` (a graph's, in place) made ``constants``: the others deleted where they are and
    the new ones appended; re-adding a tensor past 2 GB would make protobuf serialize it, which it cannot."""
    names = {t.name for t in constants}
    for index in reversed(range(len(initializers))):
        if initializers[index].name not in names:
            del initializers[index]
    present = {t.name for t in initializers}
    for tensor in constants:
        if tensor.name not in present:
            initializers.add().CopyFrom(tensor)


def _raw_outputs(graph) -> dict:
    """tf2onnx's graph computes each graph output as ``<node>_raw_output_N`` and copies it into the
    output's name with an Identity (``<node>_graph_outputs_Identity__N``; a rewrite may have pointed it
    at another tensor): that name -> the graph output's."""
    raw = {}
    for output in graph.outputs:
        node = graph.get_node_by_output(output)
        if node is not None and node.type == "Identity" and \
                ("_raw_output_" in node.input[0] or "_graph_outputs_Identity" in node.name):
            raw[node.input[0]] = output
    return raw


def _named_as_before(added: list, renames: dict, raw: dict) -> list:
    """The added nodes, each tensor that replaces a removed one renamed after it (an Identity where the
    replacement is not an added node's own output, or replaces two); what they read of a graph output
    read by its name (``raw``: :func:`_raw_outputs`)."""
    produced = {o for node in added for o in node.output}
    taken, aliases = dict(raw), []
    for old, new in renames.items():
        new = raw.get(new, new)
        if new in produced and new not in taken:
            taken[new] = old
        else:
            aliases.append(onnx.helper.make_node("Identity", [new], [old], name=f"{old}_renamed"))
    for node in added:
        _rename(node, taken)
    return added + [_renamed_inputs(alias, taken) for alias in aliases]


def _renamed_inputs(node, names: dict):
    _rename(node, names)
    return node


def _rename(node, names: dict) -> None:
    """Rename tensors in ``node`` and in the graphs it holds (an If's branches read outer names)."""
    for position, name in enumerate(node.input):
        if name in names:
            node.input[position] = names[name]
    for position, name in enumerate(node.output):
        if name in names:
            node.output[position] = names[name]
    for attribute in node.attribute:
        for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
            for inner in subgraph.node:
                _rename(inner, names)
            for output in subgraph.output:
                if output.name in names:
                    output.name = names[output.name]


def _reads(node) -> set:
    """Every tensor ``node`` reads, the ones its subgraphs read from outside included."""
    read = {name for name in node.input if name}
    for attribute in node.attribute:
        for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
            inner = {o for n in subgraph.node for o in n.output} | {i.name for i in subgraph.input} | \
                {t.name for t in subgraph.initializer}
            read |= {name for n in subgraph.node for name in _reads(n)} - inner
            read |= {o.name for o in subgraph.output} - inner
    return read


def _live(nodes: list, outputs: set) -> set:
    """ids of the nodes some graph output depends on."""
    producers = {o: node for node in nodes for o in node.output}
    live, pending = set(), list(outputs)
    while pending:
        node = producers.get(pending.pop())
        if node is None or id(node) in live:
            continue
        live.add(id(node))
        pending.extend(_reads(node))
    return live


def _value_info(graph, name: str, batch=None):
    """A graph input's or output's type, as tf2onnx's graph declares it (``-1``: a dynamic axis; a dynamic
    first axis as ``batch`` where that is given, a name or a size: a streamed state's rows are the model's)."""
    shape = graph.get_shape(name)
    dims = None if shape is None else [d if d >= 0 else (batch if i == 0 else None) for i, d in enumerate(shape)]
    return onnx.helper.make_tensor_value_info(name, graph.get_dtype(name), dims)


def _batch_dimension(graph):
    """The first input's first axis (its batch): its name, or its size where it is fixed; None where it has neither."""
    dims = graph.input[0].type.tensor_type.shape.dim if graph.input else []
    return (dims[0].dim_param or dims[0].dim_value or None) if dims else None


def _without_what_only_removed_nodes_used(original, kept: list, added: list, constants: list, outputs: set) -> tuple:
    """(nodes, initializers) less those only the removed nodes used: what the original model computed
    for its outputs and the new one does not (``outputs``: the new model's, a streamed layer's state
    outputs included); what it left unused stays."""
    before = {o.name for o in original.output}
    was_live = {o for node in original.node if id(node) in _live(list(original.node), before) for o in node.output}
    left_unused = [n for n in kept if not set(n.output) & was_live]  # stays, with what it reads
    live = _live(kept + added, outputs | {name for node in left_unused for name in _reads(node)})
    unused_ids = {id(n) for n in left_unused}
    nodes = [n for n in kept + added if id(n) in live or id(n) in unused_ids]
    read = {name for node in nodes for name in _reads(node)} | outputs
    was_read = {name for node in original.node for name in _reads(node)} | before
    originals = {t.name for t in original.initializer}
    return nodes, [t for t in constants if t.name in read or (t.name in originals and t.name not in was_read)]


def _in_order(nodes: list, position: dict, graph) -> list:
    """``nodes`` in an order that computes every tensor before its readers: the kept nodes in their
    original order (``position``), each added node right after the last node it reads."""
    producer = {o: node for node in nodes for o in node.output}
    index = {id(node): i for i, node in enumerate(nodes)}
    sources = {id(n): {index[id(producer[t])] for t in _reads(n) if t in producer} for n in nodes}
    readers = {}
    for node in nodes:
        for source in sources[id(node)]:
            readers.setdefault(source, []).append(node)
    rank, ready, ordered = {}, [], []

    def push(node):
        i = index[id(node)]
        if id(node) in position:
            rank[i] = (position[id(node)], 0, i)
        else:
            rank[i] = (max((rank[s][0] for s in sources[id(node)]), default=-1), 1, i)
        heapq.heappush(ready, rank[i])

    waiting = {id(n): set(sources[id(n)]) for n in nodes}
    for node in nodes:
        if not waiting[id(node)]:
            push(node)
    while ready:
        node = nodes[heapq.heappop(ready)[2]]
        ordered.append(node)
        for reader in readers.get(index[id(node)], ()):
            waiting[id(reader)].discard(index[id(node)])
            if not waiting[id(reader)]:
                push(reader)
    if len(ordered) != len(nodes):
        raise RuntimeError(f"the rewritten graph of {graph.name!r} has a cycle")
    return ordered
