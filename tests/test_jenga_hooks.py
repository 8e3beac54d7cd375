"""Systems extend the paged manager through documented hooks only: the public ones
(``storage_types``, ``accounted_specs``, ``make_pool``) and the protected hooks listed with their
contracts in ``jenga.manager_base.PROTECTED_HOOKS``. Every underscored method of the manager that a
class in ``jenga/`` overrides must be listed there, and no class outside ``jenga/`` overrides one."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import jenga
import jenga.baselines
from jenga.manager_base import PROTECTED_HOOKS, PagedManager


def _base_private() -> set[str]:
    """The underscored (not dunder) attributes of the manager and its mixins."""
    names = set()
    for cls in PagedManager.__mro__:
        if cls.__module__.startswith("jenga."):
            names |= {n for n in vars(cls) if n.startswith("_") and not n.startswith("__")}
    return names - {"_abc_impl"}


def _jenga_classes() -> list[type]:
    mods = [importlib.import_module(f"jenga.baselines.{m.name}") for m in pkgutil.iter_modules(jenga.baselines.__path__)]
    mods.append(importlib.import_module("jenga.jenga_manager"))
    return [c for m in mods for c in vars(m).values() if inspect.isclass(c) and c.__module__ == m.__name__]


def overrides(classes: list[type]) -> dict[str, set[str]]:
    base = _base_private()
    out: dict[str, set[str]] = {}
    for cls in classes:
        if cls in PagedManager.__mro__:
            continue
        for name in vars(cls):
            if name in base:
                out.setdefault(name, set()).add(f"{cls.__module__}.{cls.__qualname__}")
    return out


def test_every_overridden_private_method_is_a_documented_hook():
    found = overrides(_jenga_classes())
    assert found, "no override found: the scan is blind"
    undocumented = {k: sorted(v) for k, v in found.items() if k not in PROTECTED_HOOKS}
    assert undocumented == {}


def test_every_documented_hook_exists_on_the_manager():
    assert set(PROTECTED_HOOKS) <= _base_private()
    assert all(len(doc) > 20 for doc in PROTECTED_HOOKS.values())


def test_the_check_catches_an_undocumented_override():
    """Negative control: a class overriding an undocumented underscored method is found."""
    undocumented = next(n for n in sorted(_base_private()) if n not in PROTECTED_HOOKS)

    class Sneaky(PagedManager):
        pass

    setattr(Sneaky, undocumented, lambda self, *a: None)
    found = overrides([Sneaky])
    assert undocumented in found and undocumented not in PROTECTED_HOOKS


def test_nothing_outside_jenga_overrides_a_private_manager_method():
    """The harness and the plugin build on the public seams only (DESIGN: no underscored jenga name
    outside jenga/): every manager subclass they define overrides no underscored method."""
    import harness  # noqa: F401  (the harness's own systems, if any, are registered on import)
    from jenga.registry import REGISTRY

    outside = []
    for info in REGISTRY.values():
        cls = getattr(info.factory, "func", info.factory)
        for klass in inspect.getmro(cls) if inspect.isclass(cls) else ():
            if not klass.__module__.startswith("jenga"):
                outside += [f"{klass.__qualname__}.{n}" for n in vars(klass) if n in _base_private()]
    assert outside == []
