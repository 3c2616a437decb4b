"""The committed `sync_pb2.py`/`.pyi` are exactly what `python -m tidesync.wire.generate`
produces from `sync.proto`: editing the proto without regenerating fails here."""

from __future__ import annotations

from pathlib import Path

from tidesync.wire import generate


def test_committed_generated_code_matches_the_proto(tmp_path: Path) -> None:
    for fresh in generate.generate(tmp_path):
        committed = generate.WIRE_DIR / fresh.name
        assert committed.exists(), f"{fresh.name} is not committed"
        assert committed.read_text() == fresh.read_text(), (
            f"{fresh.name} is stale: run `python -m tidesync.wire.generate`"
        )


def test_generated_module_loads_under_a_package_qualified_name() -> None:
    from tidesync.wire import sync_pb2

    assert sync_pb2.DESCRIPTOR.name == generate.PROTO_PATH
    assert sync_pb2.DESCRIPTOR.package == "tidesync.sync.v1"
