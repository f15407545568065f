"""One generic registry for every pluggable component: datapools, metrics, algorithms, models.

A registry with an entry-point ``group`` also takes components from outside the package, as RL4LMs'
registries take ``add(...)`` from user code: a name ``package.module:Class`` is imported
(:func:`grueflow.plugins.load`), and a plain name that is not registered is looked up among the installed
packages' entry points of ``group`` (``[project.entry-points."grueflow.metrics"]``). Either is checked by the
registry's ``check`` and fails like an unknown name, at parse time.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, Callable, Generic, Iterator, Optional, TypeVar

from grueflow import plugins
from grueflow.io import shown

T = TypeVar("T")


class UnknownNameError(KeyError):
    """An unknown registry name; the message lists the valid names."""

    def __str__(self) -> str:  # KeyError quotes its message; show it plain
        return str(self.args[0])


class Registry(Generic[T]):
    """Maps names to components, with one-line descriptions for listings.

    Every lookup of an unknown name raises :class:`UnknownNameError` naming the
    bad value and listing the valid ones, so a typo fails before any work starts.
    """

    def __init__(self, kind: str, group: Optional[str] = None, check: Optional[Callable[[Any], None]] = None) -> None:
        self.kind = kind
        self.group = group  # entry-point group of plugins; None: built-in names only
        self._check = check  # raises ValueError when an object cannot be one of these components
        self._items: dict[str, T] = {}
        self._descriptions: dict[str, str] = {}

    def register(self, name: str, description: str = "") -> Callable[[T], T]:
        def decorator(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = item
            self._descriptions[name] = description or (getattr(item, "__doc__", "") or "").strip().split("\n")[0]
            return item

        return decorator

    def get(self, name: str) -> T:
        if name in self._items:
            return self._items[name]
        if self.group is not None and plugins.is_import_path(name):
            return self._plugin(name, plugins.load(name, self.kind))
        entry = self._entry_points().get(name)
        if entry is None:
            raise UnknownNameError(self.unknown_message(name))
        try:
            loaded = entry.load()
        except (ImportError, AttributeError) as error:
            raise ValueError(f"{self.kind} {name!r} (entry point {entry.value!r} of {self.group!r}) does not load: "
                             f"{error}") from None
        return self._plugin(name, loaded)

    def _plugin(self, name: str, component: Any) -> T:
        if self._check is not None:
            try:
                self._check(component)
            except ValueError as error:
                raise ValueError(f"{self.kind} {name!r}: {error}") from None
        return component

    def _entry_points(self) -> dict[str, Any]:
        if self.group is None:
            return {}
        return {entry.name: entry for entry in metadata.entry_points(group=self.group)}

    def unknown_message(self, name: str) -> str:
        message = f"unknown {self.kind} {shown(name)}; valid {self.kind} ids: {', '.join(self.names())}"
        if self.group is not None:
            message += f"; or one of your own by import path (package.module:Class) or entry point ({self.group})"
        return message

    def names(self) -> list[str]:
        """The registered names and the installed entry points' names."""
        return sorted({*self._items, *self._entry_points()})

    def describe(self) -> dict[str, str]:
        """Every name with its one-line description (an entry point's: where it loads from)."""
        entries = self._entry_points()
        return {name: self._descriptions.get(name) or f"plugin {entries[name].value}" for name in self.names()}

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
