"""One generic registry for every pluggable component: datapools, metrics, algorithms, models."""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

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

    def __init__(self, kind: str) -> None:
        self.kind = kind
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
        if name not in self._items:
            raise UnknownNameError(self.unknown_message(name))
        return self._items[name]

    def unknown_message(self, name: str) -> str:
        return f"unknown {self.kind} {name!r}; valid {self.kind} ids: {', '.join(sorted(self._items))}"

    def names(self) -> list[str]:
        return sorted(self._items)

    def describe(self) -> dict[str, str]:
        return {name: self._descriptions[name] for name in self.names()}

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
