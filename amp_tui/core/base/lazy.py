"""A cached property without functools.cached_property's lock.

On Python 3.11 functools.cached_property takes a lock shared by every instance on each first
access: the search's candidates and segment tables compute about 1,500 such properties per idle-node
search of the paper cluster, and the lock cost a few per cent of it (Python 3.12 dropped the lock).
Two threads computing the same property at once both compute it and one value is kept: the
properties are pure functions of their object, so either is right.
"""

from __future__ import annotations


class cached_property:  # (named as the functools one it stands in for)
    """Computed on first access, then stored in the instance's __dict__ (which later accesses
    read without calling this descriptor)."""

    def __init__(self, func):
        self.func = func
        self.attrname = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner, name: str) -> None:
        self.attrname = name

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        value = instance.__dict__[self.attrname] = self.func(instance)
        return value
