"""Every error tidesync raises on purpose shares one root, and every "cannot be reached now"
error one family, so an entrypoint tells them from bugs and from each other."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

from graphql import GraphQLError

import tidesync
from tidesync.domain.errors import ErrorCode, TidesyncError, Unavailable

# Not raised at run time: the code generator's own error.
_BUILD_TOOLS = {"tidesync.wire.generate"}


def _error_classes() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(tidesync.__path__, "tidesync."):
        if module_info.name in _BUILD_TOOLS or module_info.name.endswith("_pb2"):
            continue
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, BaseException)
                    and value.__module__ == module.__name__):
                found[f"{value.__module__}.{name}"] = value
    return list(found.values())


def test_every_error_derives_from_the_root() -> None:
    classes = _error_classes()
    assert len(classes) > 40
    # The console's errors are GraphQL errors (the library's own root), shown to clients.
    outside = [f"{cls.__module__}.{cls.__name__}" for cls in classes
               if not issubclass(cls, TidesyncError | GraphQLError)]
    assert outside == []


def test_every_unavailable_error_is_of_one_family() -> None:
    unavailable = [cls for cls in _error_classes()
                   if cls.__name__.endswith("Unavailable") and not issubclass(cls, GraphQLError)]
    assert len(unavailable) >= 8
    assert [cls.__name__ for cls in unavailable if not issubclass(cls, Unavailable)] == []
    assert all(isinstance(cls.code, ErrorCode) for cls in unavailable)


def test_every_error_code_is_one_of_the_enum() -> None:
    classes = [cls for cls in _error_classes() if issubclass(cls, TidesyncError)]
    assert [f"{cls.__module__}.{cls.__name__}" for cls in classes
            if not isinstance(cls.code, ErrorCode)] == []
    # The errors that narrow their code per case are raised with a literal code: each one is
    # a member too (an unknown one would fail only when that case happens).
    narrowing = [cls.__name__ for cls in classes if "__init__" in vars(cls)
                 and "code" in inspect.signature(cls.__init__).parameters]
    assert len(narrowing) >= 5
    source = "\n".join(path.read_text(encoding="utf-8")
                       for path in Path(tidesync.__file__).parent.rglob("*.py"))
    pattern = r"\b(?:" + "|".join(narrowing) + r")\(\s*\"([A-Z_]+)\""
    used = set(re.findall(pattern, source))
    assert used and used <= {code.value for code in ErrorCode}
