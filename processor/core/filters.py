"""Which transactions and changes the processor keeps: user, client and table filters.

A filtered transaction buffers nothing; it still finishes (outcome "filtered"), so its late events
are dropped like any finished transaction's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Filters:
    include_users: frozenset[str] = frozenset()
    exclude_users: frozenset[str] = frozenset()
    include_clients: frozenset[str] = frozenset()
    exclude_clients: frozenset[str] = frozenset()
    include_tables: frozenset[str] = frozenset()
    exclude_tables: frozenset[str] = frozenset()

    @classmethod
    def from_config(cls, cfg: Any) -> Filters:
        return cls(**{f: getattr(cfg, f) for f in cls.__dataclass_fields__})

    def table_excluded(self, table: str | None) -> bool:
        if table is None:
            return False
        return table in self.exclude_tables or bool(self.include_tables and table not in self.include_tables)

    def filters_identity(self) -> bool:
        """Whether any user or client rule is set (identity_excluded is then always False)."""
        return bool(self.include_users or self.exclude_users or self.include_clients or self.exclude_clients)

    def identity_excluded(self, user: str | None, client: str | None) -> bool:
        if user is not None and (user in self.exclude_users or (self.include_users and user not in self.include_users)):
            return True
        if client is not None and (
            client in self.exclude_clients or (self.include_clients and client not in self.include_clients)
        ):
            return True
        return False
