"""`python -m benchmarks wire` runs end to end, on its built-in workloads and on Debezium
records an operator supplies (--input, --columns), and ends with its ratio line.

Only the shape of the output is checked: sizes depend on the workload, so no thresholds.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.unit.debezium_records import fixtures_dir

REPOSITORY = Path(__file__).resolve().parents[2]
RATIO_LINE = re.compile(r"^wire ratio=(\d+\.\d+)$")


def run_wire(*args: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "wire", *args],
        cwd=REPOSITORY, capture_output=True, text=True, timeout=600, check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()


def document(name: str) -> object:
    """A Debezium fixture record, as its file holds it."""
    return json.loads((fixtures_dir() / name).read_text())


def ratio_of(lines: list[str]) -> float:
    ratio = RATIO_LINE.fullmatch(lines[-1])
    assert ratio is not None, lines[-1]
    return float(ratio.group(1))


def test_wire_benchmark_compares_both_workloads_with_debezium_json() -> None:
    lines = run_wire("--quick")
    assert lines[0] == "benchmark: wire"
    for workload in ("wide rows", "narrow ship rows"):
        for label in ("Debezium JSON payload-only, zstd-3", "Debezium JSON with schemas, zstd-3",
                      "UploadBatchV2 zstd-3 (as the ship sends)"):
            assert any(line.startswith(f"[{workload}] {label}") for line in lines), label
    assert ratio_of(lines) > 0


def test_wire_benchmark_measures_records_an_operator_supplies(tmp_path: Path) -> None:
    created = document("mysql_create_value_with_schema__docs_modern.json")
    assert isinstance(created, dict)
    records = [
        {"topic": "dbserver1.inventory.customers", "partition": 0, "offset": 7,
         "key": {"id": created["payload"]["after"]["id"]}, "value": created},
        {"topic": "mysql-server-1.inventory.customers", "partition": 0, "offset": 8,
         "key": {"id": 1004}, "value": document("mysql_update_payload__docs_modern.json")},
        {"topic": "mysql-server-1.inventory.customers", "partition": 0, "offset": 9,
         "key": {"id": 1004}, "value": None},
    ]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    columns = tmp_path / "columns.json"
    columns.write_text(json.dumps({"inventory.customers": {
        "id": "int", "first_name": "varchar(255)", "last_name": "varchar(255)",
        "email": "varchar(255)"}}))
    lines = run_wire("--input", str(path), "--columns", str(columns))
    assert any(line.startswith("[records.jsonl] records / events") and "3 / 2" in line
               for line in lines), lines
    assert ratio_of(lines) > 0


def test_wire_benchmark_takes_kcat_lines_and_names_a_broken_line(tmp_path: Path) -> None:
    created = document("mysql_create_value_with_schema__docs_modern.json")
    assert isinstance(created, dict)
    # `kcat -J` prints the value as text under `payload`, beside fields of its own.
    line = {"topic": "dbserver1.inventory.customers", "partition": 0, "offset": 3,
            "tstype": "create", "ts": 1700000000000, "broker": 1,
            "key": json.dumps({"id": created["payload"]["after"]["id"]}),
            "payload": json.dumps(created)}
    path = tmp_path / "kcat.jsonl"
    path.write_text(json.dumps(line) + "\n")
    lines = run_wire("--input", str(path))
    assert any(line.startswith("[kcat.jsonl] records / events") and "1 / 1" in line
               for line in lines), lines
    assert ratio_of(lines) > 0

    for text, problem in (("{not json\n", "kcat.jsonl:2: not a JSON object"),
                          (json.dumps({**line, "offset": "seven"}) + "\n",
                           "kcat.jsonl:2: offset must be a whole number >= 0")):
        path.write_text(json.dumps(line) + "\n" + text)
        result = subprocess.run(
            [sys.executable, "-m", "benchmarks", "wire", "--input", str(path)],
            cwd=REPOSITORY, capture_output=True, text=True, timeout=600, check=False)
        assert result.returncode != 0
        assert problem in result.stderr
        assert "Traceback" not in result.stderr


def test_records_that_are_no_change_count_on_neither_side(tmp_path: Path) -> None:
    # A real topic dump holds tombstones, transaction markers and schema changes beside the
    # changes. The ship sends none of them as events, so the JSON side must not count them
    # either: the same changes with and without them give the same sizes and ratio.
    created = document("mysql_create_value_with_schema__docs_modern.json")
    assert isinstance(created, dict)
    topic = "dbserver1.inventory.customers"
    key = {"id": created["payload"]["after"]["id"]}
    changes = [{"topic": topic, "offset": 1, "key": key, "value": created}]
    others = [
        {"topic": topic, "offset": 2, "key": key, "value": None},
        {"topic": "dbserver1.transaction", "offset": 0, "key": None,
         "value": document("mysql_transaction_topic_begin__docs.json")},
        {"topic": "dbserver1.transaction", "offset": 1, "key": None,
         "value": document("mysql_transaction_topic_end__docs.json")},
        {"topic": "dbserver1", "offset": 0, "key": None,
         "value": document("mysql_schema_change_topic_value__docs.json")},
    ]
    only = tmp_path / "changes.jsonl"
    only.write_text("".join(json.dumps(record) + "\n" for record in changes))
    mixed = tmp_path / "dump.jsonl"
    mixed.write_text("".join(json.dumps(record) + "\n" for record in changes + others))

    def sizes(lines: list[str], name: str) -> list[str]:
        return [" ".join(line.split("]", 1)[1].split()) for line in lines
                if line.startswith(f"[{name}] ") and "B/event" in line]

    alone, dumped = run_wire("--input", str(only)), run_wire("--input", str(mixed))
    assert sizes(dumped, "dump.jsonl") == sizes(alone, "changes.jsonl")
    assert ratio_of(dumped) == ratio_of(alone)
    assert any(line.startswith("[dump.jsonl] records / events") and "5 / 1" in line
               for line in dumped), dumped
    for reason in ("skipped: TOMBSTONE", "skipped: TRANSACTION_BOUNDARY"):
        assert any(f"left out of both sides, {reason}" in line for line in dumped), reason


def test_payload_only_records_without_column_types_say_what_is_missing(tmp_path: Path
                                                                        ) -> None:
    update = document("mysql_update_payload__docs_modern.json")
    path = tmp_path / "payload.jsonl"
    path.write_text(json.dumps({"topic": "mysql-server-1.inventory.customers", "offset": 8,
                                "key": {"id": 1004}, "value": update}) + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "wire", "--input", str(path)],
        cwd=REPOSITORY, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode != 0
    assert "blocked: TYPE_INFO_MISSING 1" in result.stderr
    assert "--columns TYPES.json" in result.stderr
    assert "Traceback" not in result.stderr
