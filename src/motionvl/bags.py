"""rosbag2 bags without rosbag2: recording and reading with the pure-Python `rosbags` package.

ROS-free: the recorder node (`motionvl.ros.recorder_node`) hands this module the exact CDR wire
bytes of each message (from `raw=True` subscriptions; `rclpy.serialization.serialize_message`
appends junk bytes to some messages, which rosbags rejects), and analysis code reads bags back
with `read_bag` without rclpy.

Bags are rosbag2 directories (metadata.yaml + one storage file), format version 9 (Kilted), with
message definitions from rosbags' Kilted typestore plus MotionVL's own (msg/*.msg, and the FeedbackMessage of
each action/*.action, what its feedback topic carries), so `ros2 bag info/play`, Foxglove and rosbags
decode them.

Storage and crash safety (rosbags 0.11.9, checked in its source):
  mcap     rosbags keeps the current MCAP chunk in memory and writes it out when it passes 1 MiB;
           the chunk index, statistics and footer are written only by `close()`.
           `compression="zstd"` compresses each chunk (MCAP's own chunk compression, which
           `ros2 bag` and other MCAP readers understand).
  sqlite3  rosbags writes every message in one transaction committed by `close()`;
           no compression.
`BagRecorder.flush()` (called by `write` every `flush_period_s`, and by the recorder node's timer)
ends the pending MCAP chunk and fsyncs the file, or commits the sqlite3 transaction, so a crash
loses at most the last `flush_period_s` of messages. A crashed bag has no metadata.yaml (and an
MCAP file has no summary or footer): `recover_bag` rewrites what was flushed into a complete bag.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path

from rosbags.highlevel import AnyReader
from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime
from rosbags.rosbag2 import Writer, WriterError
from rosbags.rosbag2.enums import CompressionFormat, CompressionMode, StoragePlugin
from rosbags.rosbag2.storage_mcap import McapWriter
from rosbags.rosbag2.storage_sqlite3 import Sqlite3Writer
from rosbags.typesys import Stores, get_typestore

STORAGES = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
COMPRESSIONS = ("none", "zstd")
BAG_VERSION = 9  # rosbag2 metadata version of Kilted (QoS as a list of dicts)
_MCAP_MAGIC = b"\x89MCAP0\r\n"


class BagError(Exception):
    """A bag cannot be created, written, read or recovered (the message says why)."""


def typestore():
    """rosbags' typestore of the ROS 2 Kilted message types and MotionVL's own (msg/*.msg, action/*.action), so a
    bag stores their definitions (what `ros2 bag` and Foxglove decode them with)."""
    store = get_typestore(Stores.ROS2_KILTED)
    store.register(motionvl_types())
    return store


@functools.lru_cache(maxsize=1)
def motionvl_types() -> dict:
    """rosbags type definitions of motionvl/msg/* from their .msg files and of motionvl/action/<Name>_FeedbackMessage
    (what an action's feedback topic carries) from the .action files (source tree or share/motionvl)."""
    from rosbags.typesys import get_types_from_msg

    from motionvl.robot import package_root

    types: dict = {}
    for path in sorted((package_root() / "msg").glob("*.msg")):
        types.update(get_types_from_msg(path.read_text(), f"motionvl/msg/{path.stem}"))
    for path in sorted((package_root() / "action").glob("*.action")):
        feedback = path.read_text().split("\n---\n")[2]
        # rosbags writes a nested type's definition only for a pkg/msg/ name: the feedback goes in as
        # motionvl/msg/<Name>_Feedback (the definition text names it motionvl/<Name>_Feedback, as ROS 2's
        # message definitions name nested types; the bytes are the same)
        types.update(get_types_from_msg(feedback, f"motionvl/msg/{path.stem}_Feedback"))
        types.update(get_types_from_msg(f"unique_identifier_msgs/UUID goal_id\nmotionvl/msg/{path.stem}_Feedback "
                                        "feedback", f"motionvl/action/{path.stem}_FeedbackMessage"))
    return types


def qos(reliable: bool = True, transient_local: bool = False, depth: int = 10) -> Qos:
    """A rosbags QoS record (the `offered_qos_profiles` a bag stores per topic; used by `ros2 bag play`)."""
    zero = QosTime(0, 0)
    return Qos(history=QosHistory.KEEP_LAST, depth=int(depth),
               reliability=QosReliability.RELIABLE if reliable else QosReliability.BEST_EFFORT,
               durability=QosDurability.TRANSIENT_LOCAL if transient_local else QosDurability.VOLATILE,
               deadline=zero, lifespan=zero, liveliness=QosLiveliness.AUTOMATIC,
               liveliness_lease_duration=zero, avoid_ros_namespace_conventions=False)


def new_bag_path(output_dir: str | Path, name: str = "", prefix: str = "motionvl") -> Path:
    """Where a new bag goes: `output_dir/name`, or `output_dir/<prefix>_<YYYYmmdd_HHMMSS>` for an
    empty name (with `_2`, `_3`, ... appended if that exists). A named bag that exists is an error:
    bags are never overwritten."""
    output_dir = Path(output_dir)
    if name:
        if Path(name).name != name or name in (".", ".."):
            raise BagError(f"bag name must be a plain directory name, got {name!r}")
        path = output_dir / name
        if path.exists():
            raise BagError(f"bag {path} exists already; not overwriting it (choose another bag_name, "
                           "or leave it empty for a timestamped one)")
        return path
    stem = f"{prefix}_{datetime.now().strftime('%Y%m%d_%H%M%S')}"
    path, n = output_dir / stem, 1
    while path.exists():
        n += 1
        path = output_dir / f"{stem}_{n}"
    return path


class BagRecorder:
    """Writes a rosbag2 bag from raw CDR messages; safe to call from several threads.

        bag = BagRecorder("runs/bags/run1", storage="mcap")
        bag.add_topic("/joint_states", "sensor_msgs/msg/JointState", [qos()])
        bag.write("/joint_states", stamp_ns, cdr_bytes)
        bag.close()

    The directory must not exist (see `new_bag_path`). `write` after `close` is ignored (returns
    False): late DDS callbacks may race a stop.
    """

    def __init__(self, path: str | Path, storage: str = "mcap", compression: str = "none",
                 flush_period_s: float = 1.0):
        if storage not in STORAGES:
            raise BagError(f"storage must be one of {sorted(STORAGES)}, got {storage!r}")
        if compression not in COMPRESSIONS:
            raise BagError(f"compression must be one of {COMPRESSIONS}, got {compression!r}")
        if compression != "none" and storage != "mcap":
            raise BagError("compression is only available with mcap storage (chunk compression)")
        self.path = Path(path)
        if self.path.exists():
            raise BagError(f"bag {self.path} exists already; not overwriting it")
        self.storage = storage
        self.flush_period_s = float(flush_period_s)
        self.types = typestore()
        self._lock = threading.Lock()
        self._connections: dict = {}  # topic -> rosbags Connection
        self.counts: dict[str, int] = {}
        self._closed = False
        self._last_flush = time.monotonic()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = Writer(self.path, version=BAG_VERSION, storage_plugin=STORAGES[storage])
        if compression == "zstd":
            self._writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        try:
            self._writer.open()
        except WriterError as exc:
            raise BagError(str(exc)) from exc
        storage_writer = self._writer.storage
        if isinstance(storage_writer, Sqlite3Writer):
            # rosbags' connection is bound to the creating thread; ours serializes access with a lock,
            # so reopen it usable from DDS callback threads (the schema is already committed)
            storage_writer.conn.close()
            storage_writer.conn = sqlite3.connect(f"file:{storage_writer.path}", uri=True, check_same_thread=False)
            storage_writer.cursor = storage_writer.conn.cursor()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def topics(self) -> dict[str, str]:
        """topic -> message type of every added topic."""
        with self._lock:
            return {t: c.msgtype for t, c in self._connections.items()}

    def has_type(self, msgtype: str) -> bool:
        """Whether the Kilted typestore knows `msgtype` ("pkg/msg/Type"), which add_topic needs."""
        return msgtype in self.types.fielddefs

    def add_topic(self, topic: str, msgtype: str, offered_qos: Sequence[Qos] = ()) -> None:
        """Register a topic. Adding it again with the same type does nothing; another type is an error."""
        with self._lock:
            self._check_open()
            known = self._connections.get(topic)
            if known is not None:
                if known.msgtype != msgtype:
                    raise BagError(f"topic {topic} is recorded as {known.msgtype}, not {msgtype}")
                return
            if not self.has_type(msgtype):
                raise BagError(f"message type {msgtype} of {topic} is not in the ROS 2 Kilted typestore "
                               "(custom types are not supported)")
            self._connections[topic] = self._writer.add_connection(
                topic, msgtype, typestore=self.types, offered_qos_profiles=list(offered_qos))
            self.counts[topic] = 0

    def write(self, topic: str, timestamp_ns: int, data: bytes | memoryview) -> bool:
        """Append one message (exact CDR bytes, with the 4-byte encapsulation header) received at
        `timestamp_ns`. False if the bag is closed."""
        with self._lock:
            if self._closed:
                return False
            connection = self._connections.get(topic)
            if connection is None:
                raise BagError(f"topic {topic} was not added to the bag")
            self._writer.write(connection, int(timestamp_ns), data)
            self.counts[topic] += 1
            if self.flush_period_s > 0 and time.monotonic() - self._last_flush >= self.flush_period_s:
                self._flush_locked()
            return True

    def flush(self) -> None:
        """Put everything written so far on disk (see the module docstring)."""
        with self._lock:
            if not self._closed:
                self._flush_locked()

    def _flush_locked(self) -> None:
        # relies on rosbags' storage writers (pinned version): McapWriter keeps the pending chunk in
        # `chunk.bio` and writes it with `close_chunk()`; Sqlite3Writer has one open transaction.
        storage = self._writer.storage
        if isinstance(storage, McapWriter):
            if storage.chunk.bio.tell():
                storage.close_chunk()
            storage.bio.flush()
            os.fsync(storage.bio.fileno())
        elif isinstance(storage, Sqlite3Writer):
            storage.conn.commit()
        self._last_flush = time.monotonic()

    def close(self) -> None:
        """Finish the bag (index, metadata.yaml). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._writer.close()
            except Exception as exc:
                raise BagError(f"closing bag {self.path}: {exc}") from exc

    def _check_open(self) -> None:
        if self._closed:
            raise BagError(f"bag {self.path} is closed")

    def __enter__(self) -> BagRecorder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_bag(path: str | Path, topics: Sequence[str] | None = None,
             raw: bool = False) -> Iterator[tuple[str, str, int, object]]:
    """Yield `(topic, msgtype, timestamp_ns, message)` of a bag in time order.

    `path` is a bag directory (or one .mcap/.db3 storage file). Messages are rosbags dataclasses
    deserialized with the types the bag embeds (the Kilted store where it embeds none); `raw=True`
    yields the stored CDR bytes instead. `topics` limits the topics read.
    """
    path = Path(path)
    if not path.exists():
        raise BagError(f"no bag at {path}")
    if path.is_dir() and not (path / "metadata.yaml").exists():
        raise BagError(f"{path} has no metadata.yaml: the recording did not finish; try recover_bag({str(path)!r})")
    with AnyReader([path], default_typestore=typestore()) as reader:
        connections = [c for c in reader.connections if topics is None or c.topic in topics]
        if not connections:
            return
        for connection, timestamp, data in reader.messages(connections=connections):
            yield (connection.topic, connection.msgtype, timestamp,
                   bytes(data) if raw else reader.deserialize(data, connection.msgtype))


def recover_bag(path: str | Path, out: str | Path | None = None) -> Path:
    """Rewrite an unfinished bag (a crashed recording: no metadata.yaml) into a complete one.

    Keeps every message that reached the disk (flushed MCAP chunks, committed sqlite3
    transactions). Writes `out` (default `<path>_recovered`) and leaves `path` as it was.
    """
    path = Path(path)
    out = Path(out) if out is not None else path.with_name(path.name + "_recovered")
    mcaps, dbs = sorted(path.glob("*.mcap")), sorted(path.glob("*.db3"))
    if len(mcaps) + len(dbs) != 1:
        raise BagError(f"{path}: expected one .mcap or .db3 storage file, found {len(mcaps) + len(dbs)}")
    if out.exists():
        raise BagError(f"{out} exists already; not overwriting it")
    scratch = out.with_name(out.name + ".scratch")
    scratch.mkdir(parents=True)
    try:
        if mcaps:
            storage, source = "mcap", scratch / "data.mcap"
            source.write_bytes(_mcap_with_footer(mcaps[0].read_bytes()))
        else:
            storage, source = "sqlite3", scratch / "data.db3"
            source.write_bytes(dbs[0].read_bytes())
            journal = dbs[0].with_name(dbs[0].name + "-journal")
            if journal.exists():  # a hot journal: let sqlite roll the open transaction back
                Path(str(source) + "-journal").write_bytes(journal.read_bytes())
            conn = sqlite3.connect(source)
            conn.execute("SELECT count(*) FROM messages").fetchone()
            conn.close()
        with AnyReader([source], default_typestore=typestore()) as reader:
            writer = Writer(out, version=BAG_VERSION, storage_plugin=STORAGES[storage])
            with writer:
                conns = {}
                for c in reader.connections:
                    conns[c.id] = writer.add_connection(c.topic, c.msgtype, typestore=reader.typestore,
                                                        offered_qos_profiles=c.ext.offered_qos_profiles)
                for c, timestamp, data in reader.messages():
                    writer.write(conns[c.id], timestamp, data)
    except BagError:
        raise
    except Exception as exc:
        raise BagError(f"cannot recover {path}: {exc}") from exc
    finally:
        for f in scratch.iterdir():
            f.unlink()
        scratch.rmdir()
    return out


def _mcap_with_footer(data: bytes) -> bytes:
    """The complete records of an unfinished MCAP file, closed with DataEnd and a Footer without
    summary (readers then scan the data section)."""
    if not data.startswith(_MCAP_MAGIC):
        raise BagError("not an MCAP file (bad magic)")
    pos = end = len(_MCAP_MAGIC)
    while pos + 9 <= len(data):
        op = data[pos]
        length = int.from_bytes(data[pos + 1:pos + 9], "little")
        if op in (0x0F, 0x02) or pos + 9 + length > len(data):  # DataEnd / Footer, or cut off
            break
        pos += 9 + length
        end = pos
    data_end = b"\x0f" + (4).to_bytes(8, "little") + (0).to_bytes(4, "little")
    footer = b"\x02" + (20).to_bytes(8, "little") + bytes(20)
    return data[:end] + data_end + footer + _MCAP_MAGIC
