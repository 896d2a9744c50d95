"""Reading YAML a user typed (run configs, profile app files) with bounds: no duplicate keys, no alias bombs,
no nesting deep enough to exhaust Python's stack.

PyYAML's safe loader shares an aliased node, so a "billion laughs" file loads
at once, but every consumer that walks it (pydantic, an error message's repr)
walks the expanded tree.  The composer here counts the nodes an alias stands
for and stops past ``MAX_NODES``; it stops nesting past ``MAX_DEPTH`` before
the composer's recursion reaches Python's limit (about 330 levels).  Each
fault is a ``yaml.YAMLError`` with ``problem`` and ``problem_mark``, as
PyYAML's own are, so callers report it in one line with its line number.
"""

from __future__ import annotations

MAX_NODES = 100_000  # scalars, lists and mappings after aliases are expanded; a config has a few hundred
MAX_DEPTH = 100  # nested lists and mappings; a config nests 3 deep


def load(text: str):
    """``yaml.safe_load(text)`` within the bounds above (yaml.YAMLError past them)."""
    import yaml

    loader = _loader_class()(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


_LOADER = None


def _loader_class():
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import yaml
    from yaml.composer import Composer
    from yaml.events import AliasEvent
    from yaml.nodes import MappingNode, SequenceNode

    class LimitError(yaml.YAMLError):
        def __init__(self, problem: str, mark):
            super().__init__(problem)
            self.problem, self.problem_mark = problem, mark

    class BoundedLoader(yaml.SafeLoader):
        def __init__(self, stream):
            super().__init__(stream)
            self._depth = 0
            self._nodes = 0
            self._sizes: dict[int, int] = {}

        def _size(self, node) -> int:
            # Nodes ``node`` stands for when expanded; memoised, so each node is counted once.
            known = self._sizes.get(id(node))
            if known is not None:
                return known
            self._sizes[id(node)] = 1  # a recursive alias (a list holding itself) counts once
            if isinstance(node, SequenceNode):
                size = 1 + sum(self._size(child) for child in node.value)
            elif isinstance(node, MappingNode):
                size = 1 + sum(self._size(k) + self._size(v) for k, v in node.value)
            else:
                size = 1
            self._sizes[id(node)] = size
            return size

        def _count(self, added: int, mark) -> None:
            self._nodes += added
            if self._nodes > MAX_NODES:
                raise LimitError(f"more than {MAX_NODES} values once aliases are expanded "
                                 f"(an alias bomb?)", mark)

        def compose_node(self, parent, index):
            event = self.peek_event()
            if self.check_event(AliasEvent):
                node = self.anchors.get(event.anchor)
                if node is not None:
                    self._count(self._size(node), event.start_mark)
                return Composer.compose_node(self, parent, index)
            self._count(1, event.start_mark)
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise LimitError(f"nested more than {MAX_DEPTH} deep", event.start_mark)
            try:
                return Composer.compose_node(self, parent, index)
            finally:
                self._depth -= 1

        def fetch_flow_collection_start(self, TokenClass):
            # The scanner reads a whole line ahead of the composer (a `[` might open a simple key), so a line
            # of 20 000 `[` took seconds before the composer's depth check saw the first 100: stop here.
            super().fetch_flow_collection_start(TokenClass)
            if self.flow_level > MAX_DEPTH:
                raise LimitError(f"nested more than {MAX_DEPTH} deep", self.get_mark())

        def construct_mapping(self, node, deep=False):
            if isinstance(node, MappingNode):
                seen = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue  # `<<: *base` then a key overrides the merged one, as YAML means it to
                    key = self.construct_object(key_node, deep=True)
                    try:
                        if key in seen:
                            raise LimitError(f"duplicate key {str(key)[:80]!r}", key_node.start_mark)
                        seen.add(key)
                    except TypeError:
                        pass  # an unhashable key: SafeConstructor reports it
            return super().construct_mapping(node, deep=deep)

    _LOADER = BoundedLoader
    return _LOADER
