"""Where a prompt's prefix lives when no engine holds it: its home.

With the engines' KV cache events, prefix routing sends a request where
the most of its prompt is cached. A prefix that no engine holds — seen for
the first time, or evicted everywhere since — still needs one engine to
gather on, or its requests compute it on every engine and evict each
other's documents. Rendezvous hashing gives such an engine with no state,
but places documents by chance: 8 documents over two engines split 4/4
only a quarter of the time, and 6/2 as often, so the busier engine runs
past the load cap and its overflow evicts the other engine's documents.

A home is the engine the first request of a prefix went to, the least
loaded where it fitted: documents are spread by the load they bring, as
they arrive, and each comes back to its engine after an eviction. Homes
are this replica's own; with the engines' events, replicas still meet on
whatever engine holds a prefix, so a home only decides where a prefix
nobody holds is computed. Bounded: the least recently used is forgotten
first.
"""

from collections import OrderedDict

# Prefixes remembered: a RAG deployment's documents and system prompts are
# far fewer; unique prompts (each conversation its own prefix) come and go.
HOMES = 65_536


class Homes:
    def __init__(self, size: int = HOMES) -> None:
        if size < 1:
            raise ValueError("homes need room for one prefix at least")
        self._size = size
        self._homes: OrderedDict[int, str] = OrderedDict()

    def get(self, key: int) -> str | None:
        """The engine ``key``'s prefix lives on, if it has one."""
        engine = self._homes.get(key)
        if engine is not None:
            self._homes.move_to_end(key)
        return engine

    def settle(self, key: int, engine: str) -> None:
        """``key``'s prefix lives on ``engine`` from now on."""
        self._homes[key] = engine
        self._homes.move_to_end(key)
        while len(self._homes) > self._size:
            self._homes.popitem(last=False)

    def __len__(self) -> int:
        return len(self._homes)
