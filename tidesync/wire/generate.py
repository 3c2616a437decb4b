"""Regenerates `sync_pb2.py` and `sync_pb2.pyi` from `sync.proto` with grpc_tools' protoc.

Run `python -m tidesync.wire.generate [TARGET_DIR]`; the default target is this package.
"""

from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
from pathlib import Path

WIRE_DIR = Path(__file__).resolve().parent
SOURCE_ROOT = WIRE_DIR.parent.parent
PROTO_PATH = "tidesync/wire/sync.proto"
"""The proto's name in the descriptor pool: package-qualified, so it cannot collide."""


class ProtocError(RuntimeError):
    """protoc refused the schema; its own messages were printed to stderr."""


def generate(target_dir: Path = WIRE_DIR) -> list[Path]:
    """Write the generated Python module and its type stub into `target_dir`."""
    # Imported here: grpc_tools is a development dependency, not needed at run time.
    protoc = importlib.import_module("grpc_tools.protoc")

    target_dir.mkdir(parents=True, exist_ok=True)
    stem = PROTO_PATH.removesuffix(".proto")
    written = []
    with tempfile.TemporaryDirectory() as scratch:
        status = protoc.main([
            "protoc", f"--proto_path={SOURCE_ROOT}", f"--python_out={scratch}",
            f"--pyi_out={scratch}", str(SOURCE_ROOT / PROTO_PATH),
        ])
        if status != 0:
            raise ProtocError(f"protoc exited with status {status}")
        # protoc mirrors the proto's path below the output directory; flatten it.
        for suffix in ("_pb2.py", "_pb2.pyi"):
            generated = Path(scratch) / f"{stem}{suffix}"
            written.append(Path(shutil.copyfile(generated, target_dir / generated.name)))
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    for path in generate(Path(args[0]) if args else WIRE_DIR):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
