# SPDX-License-Identifier: Apache-2.0
"""Plan: what the layers of a graph need before their nodes are emitted, once per mask.

:mod:`.batch` gives each layer a mask of its input's batch (broadcast where that is not proven),
:mod:`.masks` the lengths, the post-padding guard or the reorder of ``"any"``,
:mod:`.schedule` the length-aware schedule's segments, and :mod:`.pairs` which forward and
backward layers become one bidirectional node.
"""
