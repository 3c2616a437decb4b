"""A seeded stream of narrow-row changes as a ship's own systems write them, as Debezium records.

Positions every minute (a track log and the vessel's current state), engine readings, noon
reports, fuel tank soundings and fuel log entries with fixed-scale decimals, maintenance job
status changes and crew changes with names from many languages; rows of 8-20 columns, about
three quarters of the changes updates of 3-4 columns. Maintenance jobs and crew are two-way
tables (their rows carry the sync metadata columns); the rest only go ashore.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal

from tidesync.capture.envelope_writer import (
    ColumnDefinition,
    DebeziumEnvelopeWriter,
    DebeziumRecord,
    EnvelopeOp,
    SourceInfo,
    TableDefinition,
)
from tidesync.domain.values import Value

NODE_ID = "ship-0042"
DATABASE = "vessel_ops"
TOPIC_PREFIX = "ship0042"
PARTITIONS = 3
TWO_WAY_TABLES = frozenset({(DATABASE, "maintenance_jobs"), (DATABASE, "crew_members")})
_EPOCH = dt.datetime(2025, 3, 1, tzinfo=dt.UTC)
_SYNC_COLUMNS = (("_sync_revision", "char(36)"), ("_sync_origin", "varchar(64)"),
                 ("_sync_event_id", "char(36)"), ("_sync_updated_at", "datetime(6)"))

_FIRST = ("Łukasz", "José", "Nguyễn Văn", "Søren", "Oğuz", "Андрей", "李明", "Αλέξανδρος",
          "María José", "Jürgen", "Chloé", "Rajesh", "Ngozi", "Mikael", "Ştefan", "Mateus")
_LAST = ("Kowalczyk", "García Peña", "Trần", "Jørgensen", "Yılmaz", "Смирнов", "王", "Παπαδόπουλος",
         "Müller", "Lefèvre", "Santos", "Dąbrowski", "Okafor", "Nyström", "Ionescu", "Reyes")
_RANKS = ("MASTER", "CHIEF_OFFICER", "SECOND_OFFICER", "CHIEF_ENGINEER", "SECOND_ENGINEER",
          "ELECTRICIAN", "BOSUN", "AB", "OS", "OILER", "COOK", "STEWARD")
_EQUIPMENT = ("ME cylinder 3", "AE2 turbocharger", "FO purifier 1", "steering gear pump B",
              "ballast pump 2", "emergency generator", "OWS", "freshwater generator",
              "lifeboat davit port", "fire pump", "air compressor 1", "sewage plant")
_REMARKS = ("checked ok", "minor leak at flange, tightened", "awaiting spare parts from Rotterdam",
            "postponed due to weather", "filter replaced", "readings normal", "vibration noted",
            "crew briefed", "to be verified by chief engineer", "carried over from last port")
_JOB_STATUS = ("PLANNED", "DUE", "IN_PROGRESS", "POSTPONED", "DONE")
_CREW_STATUS = ("ONBOARD", "ON_LEAVE", "SIGNED_OFF")


def _enum(values: tuple[str, ...]) -> str:
    return "enum(" + ",".join(f"'{value}'" for value in values) + ")"


def _table(name: str, columns: list[tuple[str, str]], two_way: bool = False) -> TableDefinition:
    if two_way:
        columns = columns + list(_SYNC_COLUMNS)
    return TableDefinition(DATABASE, name, tuple(
        ColumnDefinition.parse(column, kind, nullable=column not in ("id",))
        for column, kind in columns), ("id",))


TABLES = {table.table: table for table in (
    _table("position_reports", [
        ("id", "bigint"), ("vessel_id", "int"), ("reported_at", "datetime"),
        ("latitude", "decimal(9,6)"), ("longitude", "decimal(10,6)"), ("sog_kn", "decimal(4,1)"),
        ("cog_deg", "decimal(4,1)"), ("heading_deg", "smallint"),
        ("nav_status", _enum(("UNDERWAY", "AT_ANCHOR", "MOORED"))), ("source", "varchar(16)")]),
    _table("vessel_state", [
        ("id", "int"), ("vessel_id", "int"), ("latitude", "decimal(9,6)"),
        ("longitude", "decimal(10,6)"), ("sog_kn", "decimal(4,1)"), ("cog_deg", "decimal(4,1)"),
        ("draught_m", "decimal(4,2)"), ("destination", "varchar(32)"), ("eta", "datetime"),
        ("updated_at", "datetime(3)")]),
    _table("engine_readings", [
        ("id", "int"), ("engine_code", "varchar(8)"), ("running_hours", "decimal(10,1)"),
        ("load_pct", "tinyint"), ("rpm", "smallint"), ("exhaust_temp_c", "decimal(5,1)"),
        ("lube_oil_bar", "decimal(4,2)"), ("alarm_state", _enum(("NORMAL", "WARNING", "ALARM"))),
        ("remarks", "varchar(255)"), ("updated_at", "datetime(3)")]),
    _table("noon_reports", [
        ("id", "bigint"), ("voyage_no", "varchar(16)"), ("report_date", "date"),
        ("latitude", "decimal(9,6)"), ("longitude", "decimal(10,6)"),
        ("distance_nm", "decimal(6,1)"), ("avg_speed_kn", "decimal(4,1)"),
        ("me_fo_mt", "decimal(7,3)"), ("ae_fo_mt", "decimal(7,3)"), ("rob_fo_mt", "decimal(9,3)"),
        ("wind_force", "tinyint"), ("sea_state", "tinyint"), ("remarks", "text"),
        ("status", _enum(("DRAFT", "SUBMITTED", "ACCEPTED"))), ("submitted_by", "varchar(64)"),
        ("updated_at", "datetime")]),
    _table("fuel_tanks", [
        ("id", "int"), ("tank_code", "varchar(8)"), ("grade", _enum(("VLSFO", "MGO", "HFO"))),
        ("capacity_m3", "decimal(8,2)"), ("rob_m3", "decimal(8,2)"), ("rob_mt", "decimal(8,3)"),
        ("temperature_c", "decimal(4,1)"), ("density", "decimal(6,4)"),
        ("sounded_at", "datetime"), ("sounded_by", "varchar(64)")]),
    _table("fuel_log", [
        ("id", "bigint"), ("tank_id", "int"), ("entry_at", "datetime"),
        ("kind", _enum(("CONSUMPTION", "TRANSFER", "BUNKER", "SAMPLE"))),
        ("quantity_mt", "decimal(8,3)"), ("quantity_m3", "decimal(8,2)"),
        ("density", "decimal(6,4)"), ("remarks", "varchar(255)"), ("logged_by", "varchar(64)")]),
    _table("maintenance_jobs", [
        ("id", "int"), ("job_code", "varchar(16)"), ("equipment", "varchar(64)"),
        ("title", "varchar(128)"), ("status", _enum(_JOB_STATUS)), ("priority", "tinyint"),
        ("due_date", "date"), ("completed_at", "datetime"), ("assigned_to", "varchar(64)"),
        ("remarks", "text")], two_way=True),
    _table("crew_members", [
        ("id", "int"), ("first_name", "varchar(64)"), ("last_name", "varchar(64)"),
        ("rank", _enum(_RANKS)), ("nationality", "char(2)"), ("status", _enum(_CREW_STATUS)),
        ("cabin", "varchar(8)"), ("embarked_on", "date"), ("disembark_due", "date"),
        ("updated_at", "datetime")], two_way=True),
)}


def column_types() -> dict[str, dict[str, str]]:
    """The tables' MySQL column types as `--columns` takes them (for payload-only records)."""
    return {f"{DATABASE}.{name}": {column.name: _type_text(column) for column in table.columns}
            for name, table in TABLES.items()}


def _type_text(column: ColumnDefinition) -> str:
    if column.data_type == "enum":
        return _enum(column.allowed)
    if column.data_type == "decimal":
        return f"decimal({column.precision},{column.scale})"
    if column.fsp:
        return f"{column.data_type}({column.fsp})"
    if column.length is not None:
        return f"{column.data_type}({column.length})"
    return column.data_type


@dataclass(frozen=True, slots=True)
class Record:
    """One queue record: coordinates and the Debezium key and value (with schemas)."""

    topic: str
    partition: int
    offset: int
    record: DebeziumRecord


@dataclass
class _State:
    rows: dict[str, dict[int, dict[str, Value]]] = field(default_factory=dict)
    next_id: dict[str, int] = field(default_factory=dict)


class _Ship:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = _EPOCH
        self.writer = DebeziumEnvelopeWriter(TOPIC_PREFIX)
        self.state = _State()
        self.offsets: dict[tuple[str, int], int] = {}
        self.binlog_pos = 4
        self.gtid = 4_211_000
        self.lat, self.lon = Decimal("51.903212"), Decimal("3.871004")
        self.sog, self.cog = Decimal("12.4"), Decimal("231.0")
        self.rob = {1: Decimal("812.440"), 2: Decimal("655.120"), 3: Decimal("88.300"),
                    4: Decimal("41.950")}
        self._seed_rows()

    def _seed_rows(self) -> None:
        rng = self.rng
        self.state.rows = {name: {} for name in TABLES}
        self.state.next_id = {name: 1 for name in TABLES}
        self.state.rows["vessel_state"][1] = {
            "id": 1, "vessel_id": 9321483, "latitude": self.lat, "longitude": self.lon,
            "sog_kn": self.sog, "cog_deg": self.cog, "draught_m": Decimal("11.20"),
            "destination": "NLRTM", "eta": self._at(86400 * 2), "updated_at": self._ms()}
        for number, code in enumerate(("ME", "AE1", "AE2", "AE3"), start=1):
            self.state.rows["engine_readings"][number] = {
                "id": number, "engine_code": code,
                "running_hours": Decimal(rng.randrange(200_000, 900_000)).scaleb(-1),
                "load_pct": rng.randrange(40, 85), "rpm": rng.choice((96, 720, 900)),
                "exhaust_temp_c": Decimal(rng.randrange(3200, 3900)).scaleb(-1),
                "lube_oil_bar": Decimal(rng.randrange(380, 460)).scaleb(-2),
                "alarm_state": "NORMAL", "remarks": None, "updated_at": self._ms()}
        for number, (code, grade) in enumerate((("FO1P", "VLSFO"), ("FO2S", "VLSFO"),
                                                ("DO1", "MGO"), ("HFO3", "HFO")), start=1):
            rob = self.rob[number]
            self.state.rows["fuel_tanks"][number] = {
                "id": number, "tank_code": code, "grade": grade,
                "capacity_m3": Decimal("1250.00"), "rob_m3": (rob / Decimal("0.95")).quantize(
                    Decimal("0.01")), "rob_mt": rob, "temperature_c": Decimal("42.5"),
                "density": Decimal("0.9512"), "sounded_at": self._at(0),
                "sounded_by": "Søren Jørgensen"}
        for _ in range(60):
            self._new_job()
        for _ in range(24):
            self._new_crew()
        self.state.next_id["position_reports"] = 1_804_211
        self.state.next_id["fuel_log"] = 55_120
        self.state.next_id["noon_reports"] = 3_112

    # ------------------------------------------------------------------ values

    def _at(self, seconds: int) -> dt.datetime:
        return (self.now + dt.timedelta(seconds=seconds)).replace(microsecond=0)

    def _ms(self) -> dt.datetime:
        return self.now.replace(microsecond=self.now.microsecond // 1000 * 1000)

    def _person(self) -> str:
        return f"{self.rng.choice(_FIRST)} {self.rng.choice(_LAST)}"

    def _sync(self) -> dict[str, Value]:
        return {"_sync_revision": str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
                "_sync_origin": NODE_ID, "_sync_event_id": None, "_sync_updated_at": self.now}

    def _new_job(self) -> tuple[int, dict[str, Value]]:
        rng, number = self.rng, self.state.next_id["maintenance_jobs"]
        self.state.next_id["maintenance_jobs"] += 1
        row: dict[str, Value] = {
            "id": number, "job_code": f"PMS-{2025}-{number:05d}",
            "equipment": rng.choice(_EQUIPMENT),
            "title": f"{rng.choice(('Inspect', 'Overhaul', 'Test', 'Clean'))} "
                     f"{rng.choice(_EQUIPMENT)}",
            "status": "PLANNED", "priority": rng.randrange(1, 4),
            "due_date": (self.now + dt.timedelta(days=rng.randrange(1, 90))).date(),
            "completed_at": None, "assigned_to": None, "remarks": None, **self._sync()}
        self.state.rows["maintenance_jobs"][number] = row
        return number, row

    def _new_crew(self) -> tuple[int, dict[str, Value]]:
        rng, number = self.rng, self.state.next_id["crew_members"]
        self.state.next_id["crew_members"] += 1
        row: dict[str, Value] = {
            "id": number, "first_name": rng.choice(_FIRST), "last_name": rng.choice(_LAST),
            "rank": rng.choice(_RANKS), "nationality": rng.choice(("PL", "PH", "VN", "DK", "TR",
                                                                    "UA", "CN", "GR", "IN")),
            "status": "ONBOARD", "cabin": f"{rng.choice('ABCD')}{rng.randrange(1, 40):02d}",
            "embarked_on": (self.now - dt.timedelta(days=rng.randrange(1, 120))).date(),
            "disembark_due": (self.now + dt.timedelta(days=rng.randrange(10, 150))).date(),
            "updated_at": self._at(0), **self._sync()}
        self.state.rows["crew_members"][number] = row
        return number, row

    # ------------------------------------------------------------------ changes

    def changes(self, count: int) -> Iterator[Record]:
        kinds: list[tuple[float, Callable[[], Record]]] = [
            (0.16, self._position), (0.24, self._vessel_state), (0.22, self._engine),
            (0.10, self._tank), (0.07, self._fuel_log), (0.02, self._noon),
            (0.12, self._job), (0.07, self._crew)]
        weights = [weight for weight, _ in kinds]
        for _ in range(count):
            self.now += dt.timedelta(microseconds=int(self.rng.expovariate(1 / 6_000_000)) + 1)
            yield self.rng.choices(kinds, weights)[0][1]()

    def _update(self, table: str, number: int, changes: dict[str, Value]) -> Record:
        before = self.state.rows[table][number]
        after = {**before, **changes}
        if (DATABASE, table) in TWO_WAY_TABLES:
            after.update(self._sync())
        self.state.rows[table][number] = after
        return self._emit(table, EnvelopeOp.UPDATE, before, after)

    def _insert(self, table: str, row: dict[str, Value]) -> Record:
        self.state.rows[table][row["id"]] = row  # type: ignore[index]
        return self._emit(table, EnvelopeOp.CREATE, None, row)

    def _drift(self) -> None:
        rng = self.rng
        self.lat += Decimal(rng.randrange(-900, 200)).scaleb(-6)
        self.lon += Decimal(rng.randrange(-1400, 300)).scaleb(-6)
        self.sog = max(Decimal("0.0"), self.sog + Decimal(rng.randrange(-4, 5)).scaleb(-1))
        self.cog = (self.cog + Decimal(rng.randrange(-20, 21)).scaleb(-1)) % 360

    def _position(self) -> Record:
        self._drift()
        number = self.state.next_id["position_reports"]
        self.state.next_id["position_reports"] += 1
        return self._insert("position_reports", {
            "id": number, "vessel_id": 9321483, "reported_at": self._at(0),
            "latitude": self.lat, "longitude": self.lon, "sog_kn": self.sog,
            "cog_deg": self.cog, "heading_deg": int(self.cog) + self.rng.randrange(-3, 4),
            "nav_status": "UNDERWAY", "source": "GPS1"})

    def _vessel_state(self) -> Record:
        self._drift()
        changes: dict[str, Value] = {"latitude": self.lat, "longitude": self.lon,
                                     "updated_at": self._ms()}
        changes["sog_kn" if self.rng.random() < 0.6 else "cog_deg"] = (
            self.sog if self.rng.random() < 0.6 else self.cog)
        return self._update("vessel_state", 1, changes)

    def _engine(self) -> Record:
        rng = self.rng
        number = rng.randrange(1, 5)
        row = self.state.rows["engine_readings"][number]
        hours = row["running_hours"]
        assert isinstance(hours, Decimal)
        changes: dict[str, Value] = {"running_hours": hours + Decimal("0.1"),
                                     "load_pct": rng.randrange(40, 90), "updated_at": self._ms()}
        if rng.random() < 0.5:
            changes["exhaust_temp_c"] = Decimal(rng.randrange(3200, 3900)).scaleb(-1)
        if rng.random() < 0.02:
            changes["alarm_state"] = rng.choice(("WARNING", "NORMAL"))
            changes["remarks"] = rng.choice(_REMARKS)
        return self._update("engine_readings", number, changes)

    def _tank(self) -> Record:
        rng = self.rng
        number = rng.choice((1, 1, 2, 3, 4))
        self.rob[number] -= Decimal(rng.randrange(50, 900)).scaleb(-3)
        return self._update("fuel_tanks", number, {
            "rob_mt": self.rob[number],
            "rob_m3": (self.rob[number] / Decimal("0.95")).quantize(Decimal("0.01")),
            "temperature_c": Decimal(rng.randrange(380, 480)).scaleb(-1),
            "sounded_at": self._at(0)})

    def _fuel_log(self) -> Record:
        rng = self.rng
        number = self.state.next_id["fuel_log"]
        self.state.next_id["fuel_log"] += 1
        quantity = Decimal(rng.randrange(100, 9000)).scaleb(-3)
        return self._insert("fuel_log", {
            "id": number, "tank_id": rng.randrange(1, 5), "entry_at": self._at(0),
            "kind": rng.choices(("CONSUMPTION", "TRANSFER", "BUNKER", "SAMPLE"),
                                (80, 12, 2, 6))[0],
            "quantity_mt": quantity,
            "quantity_m3": (quantity / Decimal("0.95")).quantize(Decimal("0.01")),
            "density": Decimal(rng.randrange(9400, 9700)).scaleb(-4),
            "remarks": rng.choice(_REMARKS) if rng.random() < 0.3 else None,
            "logged_by": self._person()})

    def _noon(self) -> Record:
        rng = self.rng
        drafts = [n for n, row in self.state.rows["noon_reports"].items()
                  if row["status"] != "ACCEPTED"]
        if drafts and rng.random() < 0.6:
            number = drafts[-1]
            status = self.state.rows["noon_reports"][number]["status"]
            return self._update("noon_reports", number, {
                "status": "SUBMITTED" if status == "DRAFT" else "ACCEPTED",
                "submitted_by": self._person(), "updated_at": self._at(0)})
        number = self.state.next_id["noon_reports"]
        self.state.next_id["noon_reports"] += 1
        return self._insert("noon_reports", {
            "id": number, "voyage_no": "V2503W", "report_date": self.now.date(),
            "latitude": self.lat, "longitude": self.lon,
            "distance_nm": Decimal(rng.randrange(2400, 3400)).scaleb(-1),
            "avg_speed_kn": Decimal(rng.randrange(100, 145)).scaleb(-1),
            "me_fo_mt": Decimal(rng.randrange(18_000, 32_000)).scaleb(-3),
            "ae_fo_mt": Decimal(rng.randrange(1_500, 4_000)).scaleb(-3),
            "rob_fo_mt": self.rob[1] + self.rob[2], "wind_force": rng.randrange(1, 9),
            "sea_state": rng.randrange(1, 7),
            "remarks": " ".join(rng.sample(_REMARKS, rng.randrange(1, 4))),
            "status": "DRAFT", "submitted_by": None, "updated_at": self._at(0)})

    def _job(self) -> Record:
        rng = self.rng
        jobs = self.state.rows["maintenance_jobs"]
        if rng.random() < 0.05:
            number, row = self._new_job()
            return self._emit("maintenance_jobs", EnvelopeOp.CREATE, None, row)
        number = rng.choice(list(jobs))
        status = jobs[number]["status"]
        assert isinstance(status, str)
        following = _JOB_STATUS[min(_JOB_STATUS.index(status) + 1, len(_JOB_STATUS) - 1)]
        changes: dict[str, Value] = {"status": following if rng.random() < 0.8 else "POSTPONED"}
        if changes["status"] == "DONE":
            changes["completed_at"] = self._at(0)
        elif changes["status"] == "IN_PROGRESS":
            changes["assigned_to"] = self._person()
        else:
            changes["remarks"] = rng.choice(_REMARKS)
        return self._update("maintenance_jobs", number, changes)

    def _crew(self) -> Record:
        rng = self.rng
        crew = self.state.rows["crew_members"]
        if rng.random() < 0.1:
            number, row = self._new_crew()
            return self._emit("crew_members", EnvelopeOp.CREATE, None, row)
        number = rng.choice(list(crew))
        changes: dict[str, Value] = {"updated_at": self._at(0)}
        if rng.random() < 0.5:
            changes["cabin"] = f"{rng.choice('ABCD')}{rng.randrange(1, 40):02d}"
        else:
            changes["status"] = rng.choice(_CREW_STATUS)
            changes["disembark_due"] = (self.now + dt.timedelta(days=rng.randrange(10, 150))
                                        ).date()
        return self._update("crew_members", number, changes)

    # ------------------------------------------------------------------ records

    def _emit(self, table: str, op: EnvelopeOp, before: dict[str, Value] | None,
              after: dict[str, Value] | None) -> Record:
        definition = TABLES[table]
        record = self.writer.change(
            definition, op, before=before, after=after, source=self._source(),
            processed_at=self.now + dt.timedelta(milliseconds=self.rng.randint(20, 1500)))
        image = after if after is not None else before
        assert image is not None
        partition = zlib.crc32(str(image["id"]).encode()) % PARTITIONS
        key = (record.topic, partition)
        offset = self.offsets.setdefault(key, self.rng.randrange(10**5, 10**6))
        self.offsets[key] = offset + 1
        return Record(record.topic, partition, offset, record)

    def _source(self) -> SourceInfo:
        if self.rng.random() < 0.9:
            self.gtid += 1
            self.binlog_pos += self.rng.randint(250, 900)
        return SourceInfo(
            server_id=20042, file="mysql-bin.000412", pos=self.binlog_pos,
            ts_ms=int(self.now.timestamp()) * 1000, row=0,
            gtid=f"7c1d3a9e-0b52-11ef-9f1e-0242ac120004:{self.gtid}",
            thread=17 + self.gtid % 3)


def generate(count: int, seed: int = 20250302) -> list[Record]:
    """`count` changes of one ship, in the order they are captured."""
    return list(_Ship(seed).changes(count))
