"""Entry point: `python -m benchmarks NAME [--quick]` runs one benchmark and prints its report."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import benchmarks
from benchmarks.harness import Report

_NOT_BENCHMARKS = {"harness", "__main__"}


def available() -> list[str]:
    return sorted(
        m.name for m in pkgutil.iter_modules(benchmarks.__path__)
        if m.name not in _NOT_BENCHMARKS and not m.name.startswith("_")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", add_help=False)
    parser.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    parser.add_argument("name", nargs="?", choices=available())
    parser.add_argument("--quick", action="store_true", help="smaller sizes (for smoke tests)")
    args, rest = parser.parse_known_args(argv)
    if args.name is None:
        if not args.help:
            parser.error("name the benchmark to run")
        parser.print_help()
        return 0
    module = importlib.import_module(f"benchmarks.{args.name}")
    options: dict[str, object] = {}
    if hasattr(module, "add_arguments") or args.help:  # a benchmark's own options
        own = argparse.ArgumentParser(prog=f"python -m benchmarks {args.name} [--quick]",
                                      description=(module.__doc__ or "").split("\n\n")[0])
        if hasattr(module, "add_arguments"):
            module.add_arguments(own)
        options = vars(own.parse_args([*rest, "--help"] if args.help else rest))
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    report = Report(args.name)
    module.run(report, quick=args.quick, **options)
    print(report.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
