#!/usr/bin/env python3
"""A diloco learner written in Python from docs/protocol.md alone.

It joins a diloco syncer over ZeroMQ (a DEALER socket), provides the layout and
the initial parameters when the syncer asks for them (a `state_wanted`
welcome), trains a small two-layer MLP on a seeded synthetic problem (Gaussian
blobs) with plain SGD in numpy, sends one fragment of Delta = base - theta
every H inner steps on the staggered schedule, adopts the merged updates (rebasing its own unsent work onto them, or
--adopt overwrite), sends
heartbeats (with its mean training loss since the previous one), and finally sends each fragment's unsent work and leaves.

Contributions travel in the codec the syncer's welcome names: f32, or
compressed as bf16, int8, fp8 or int4 (protocol.md, "Codecs"; with
--error-feedback what the codec rounds away is carried into the next send);
updates are decoded from whichever codec they carry.

Given every candidate of the syncer (--endpoint 'tcp://a:5555|tcp://b:5555':
a primary and its standbys) it follows protocol.md, "Failover": it probes
them, keeps the one that answers, drops messages of a replaced leader's
epoch, and leaves a leader that falls silent for whichever answers its join.

Dependencies: the standard library, pyzmq and numpy (Debian: python3-zmq,
python3-numpy). Prints progress to stderr and one JSON line to stdout.

Exit status: 0 success, 1 bad usage or missing dependency, 2 timeout,
3 protocol error (the syncer refused us, or sent something we cannot use),
4 a non-finite outer gradient (nothing was sent for it).
"""

import argparse
import json
import math
import struct
import sys
import time

try:
    import numpy as np
except ImportError as error:  # pragma: no cover - depends on the machine
    sys.stderr.write(
        "learner.py: needs pyzmq and numpy (Debian: apt-get install python3-zmq python3-numpy; "
        "this interpreter is %s): %s\n" % (sys.executable, error))
    sys.exit(1)
try:
    import zmq
except ImportError as error:  # pragma: no cover - depends on the machine
    # The codecs and the wire format (test_codecs.py) need numpy only; main() needs pyzmq.
    zmq = None
    ZMQ_IMPORT_ERROR = error


# ---------------------------------------------------------------------------
# Wire format (docs/protocol.md, "Header")

HEADER_SIZE = 144
MAGIC = b"DLCO"
VERSION = 1
# magic, version, kind, codec, status, flags, lock_step, reason,
# learner, incarnation, fragment, fragment_count, sync_period, overlap, block,
# sequence, answers, base_revision, revision, tokens, steps, element_count, layout,
# step_time_ns, transfer_ns, hold_ns, mixing, payload_crc, header_crc
HEADER_FORMAT = struct.Struct("<4sH6B7I8Q3qd2I")
assert HEADER_FORMAT.size == HEADER_SIZE
FIELDS = ("magic", "version", "kind", "codec", "status", "flags", "lock_step", "reason",
          "learner", "incarnation", "fragment", "fragment_count", "sync_period", "overlap", "block",
          "sequence", "answers", "base_revision", "revision", "tokens", "steps", "element_count", "layout",
          "step_time_ns", "transfer_ns", "hold_ns", "mixing", "payload_crc", "header_crc")

JOIN, WELCOME, CONTRIBUTION, UPDATE, HEARTBEAT, LEAVE, ACK, REJECT, LAYOUT, STATE, END = range(1, 12)
# heartbeat: the mean training loss since the previous heartbeat travels as the f64
# bits of the 8 bytes an update's hold_ns takes; all-zero bits mean "no loss", so
# a loss of exactly 0.0 travels as -0.0.
def loss_bits(loss):
    return struct.unpack("<q", struct.pack("<d", -0.0 if loss == 0.0 else loss))[0]


KIND_NAMES = {1: "join", 2: "welcome", 3: "contribution", 4: "update", 5: "heartbeat", 6: "leave",
              7: "ack", 8: "reject", 9: "layout", 10: "state", 11: "end"}
CODEC_NONE, CODEC_F32, CODEC_F64, CODEC_BYTES = 0, 1, 2, 3
CODEC_BF16, CODEC_INT8, CODEC_FP8, CODEC_INT4 = 4, 5, 6, 7  # compressed ("Codecs")
CODEC_DTYPE = {CODEC_F32: np.dtype("<f4"), CODEC_F64: np.dtype("<f8")}
CODEC_NAMES = {CODEC_NONE: "none", CODEC_F32: "fp32", CODEC_F64: "fp64", CODEC_BYTES: "bytes", CODEC_BF16: "bf16",
               CODEC_INT8: "int8", CODEC_FP8: "fp8", CODEC_INT4: "int4"}
BLOCK_CODECS = (CODEC_INT8, CODEC_FP8, CODEC_INT4)     # block-scaled: the header's `block` is their B
NUMBER_CODECS = (CODEC_F32, CODEC_F64, CODEC_BF16) + BLOCK_CODECS  # contribution and update payloads
ENCODABLE_CODECS = (CODEC_F32, CODEC_BF16) + BLOCK_CODECS         # this learner's model is f32
MAX_BLOCK = 65536
STATUS_MERGED, STATUS_RESYNC = 0, 1
FLAG_FINAL = 1 << 0          # contribution: final contribution before leaving
FLAG_STATE_WANTED = 1 << 1   # welcome: send your layout and state
REASONS = ("truncated", "bad_magic", "bad_version", "bad_checksum", "bad_header", "oversized",
           "unexpected_kind", "unknown_learner", "wrong_peer", "dead_incarnation", "unknown_incarnation",
           "layout_mismatch", "bad_fragment", "bad_size", "bad_codec", "no_work", "future_base", "stale",
           "duplicate", "non_finite", "too_many_learners", "peer_conflict", "unauthorized", "bad_counts",
           "quarantined", "over_budget")
MAX_PAYLOAD = 1 << 30  # the documented default limit, 1 GiB


def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC_TABLE = _crc32c_table()


def crc32c(data):
    """CRC-32C (Castagnoli): reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in memoryview(data).cast("B"):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283, "CRC-32C self-test failed"


class ProtocolError(Exception):
    """The other side did something this client cannot work with."""


class Timeout(Exception):
    """A bounded wait ran out."""


class NonFinite(Exception):
    """An outer gradient is not finite: nothing is sent for it and the learner stops."""


def encode(fields, payload=b""):
    """Returns the header bytes for `fields` (a dict; missing fields are 0)."""
    values = dict.fromkeys(FIELDS, 0)
    values.update(fields)
    values["magic"] = MAGIC
    values["version"] = VERSION
    values["mixing"] = float(values["mixing"])
    values["payload_crc"] = crc32c(payload) if payload else 0
    values["header_crc"] = 0
    raw = bytearray(HEADER_FORMAT.pack(*(values[name] for name in FIELDS)))
    struct.pack_into("<I", raw, 140, crc32c(raw[:140]))
    return bytes(raw)


def payload_size(header):
    """The payload bytes a header implies ("Payload size", "Codecs"); None if its codec or block cannot carry one."""
    kind, codec = header["kind"], header["codec"]
    if kind in (CONTRIBUTION, UPDATE) and codec in NUMBER_CODECS:
        return codec_bytes(codec, header["element_count"], header["block"])
    if kind == STATE and codec in CODEC_DTYPE:
        return header["element_count"] * CODEC_DTYPE[codec].itemsize
    if kind == LAYOUT and codec == CODEC_BYTES:
        return header["element_count"]
    if kind in (CONTRIBUTION, UPDATE, STATE, LAYOUT):
        return None  # a payload kind with a codec it cannot use
    return 0


def decode(frames):
    """Decodes one message (a list of 1 or 2 frames). Raises ValueError on anything invalid."""
    if len(frames) not in (1, 2):
        raise ValueError("truncated: %d frames" % len(frames))
    raw = frames[0]
    if len(raw) != HEADER_SIZE:
        raise ValueError("truncated: header of %d bytes" % len(raw))
    header = dict(zip(FIELDS, HEADER_FORMAT.unpack(raw)))
    if header["magic"] != MAGIC:
        raise ValueError("bad_magic")
    if header["version"] != VERSION:
        raise ValueError("bad_version %d" % header["version"])
    if crc32c(raw[:140]) != header["header_crc"]:
        raise ValueError("bad_checksum (header)")
    if header["kind"] not in KIND_NAMES or header["codec"] > CODEC_INT4:
        raise ValueError("bad_header: kind %d codec %d" % (header["kind"], header["codec"]))
    size = payload_size(header)
    if size is None:
        raise ValueError("bad_header: a %s with codec %d and block %d"
                         % (KIND_NAMES[header["kind"]], header["codec"], header["block"]))
    if size > MAX_PAYLOAD:
        raise ValueError("oversized: %d bytes" % size)
    payload = frames[1] if len(frames) == 2 else b""
    if len(payload) != size:
        raise ValueError("truncated: payload of %d bytes, header implies %d" % (len(payload), size))
    if (crc32c(payload) if payload else 0) != header["payload_crc"]:
        raise ValueError("bad_checksum (payload)")
    return header, payload


CONTINUATION = struct.Struct("<4sIQ")   # magic, index, offset (docs/protocol.md, "Framing")
CONTINUATION_MAGIC = b"DLCC"


class Parts:
    """Reassembles a payload that arrives in parts: the header with the first
    part, then one continuation message per further part, each continuing
    exactly where the previous one ended (docs/protocol.md, "Framing")."""

    def __init__(self):
        self.pending = None  # [header frame, payload size, bytearray, next index]

    def take(self, frames):
        """Returns the frames of a whole message, or None while parts are missing.
        Raises ValueError for a part that does not belong."""
        if len(frames) == 2 and len(frames[0]) == CONTINUATION.size and frames[0][:4] == CONTINUATION_MAGIC:
            _, index, offset = CONTINUATION.unpack(frames[0])
            pending, self.pending = self.pending, None
            if pending is None:
                raise ValueError("truncated: a part of no message")
            header, size, data, expected = pending
            if index != expected or offset != len(data) or not frames[1] or len(data) + len(frames[1]) > size:
                raise ValueError("truncated: part %d at offset %d, expected part %d at %d of %d bytes"
                                 % (index, offset, expected, len(data), size))
            data += frames[1]
            if len(data) < size:
                self.pending = [header, size, data, expected + 1]
                return None
            return [header, bytes(data)]
        if self.pending is not None:
            self.pending = None
            log("dropped an unfinished message: a new one began")
        if len(frames) == 2 and len(frames[0]) == HEADER_SIZE:
            header = dict(zip(FIELDS, HEADER_FORMAT.unpack(frames[0])))
            size = payload_size(header) if header["kind"] in KIND_NAMES else None
            if size is not None and len(frames[1]) < size <= MAX_PAYLOAD and frames[1]:
                self.pending = [frames[0], size, bytearray(frames[1]), 1]
                return None
        return frames  # whole, or for decode() to refuse


# ---------------------------------------------------------------------------
# Codecs (docs/protocol.md, "Codecs"): how a fragment's values travel
#
#   fp32 (1)  n binary32                                  4n bytes
#   bf16 (4)  n bfloat16, nearest even, saturating         2n bytes
#   int8 (5)  per block of B: f32 absmax, B signed bytes   4 + B per block   q/127 * absmax
#   fp8  (6)  per block of B: f32 absmax, B E4M3 codes     4 + B per block   e4m3(c)/448 * absmax
#   int4 (7)  per block of B: f32 absmax, ceil(B/2) bytes  4 + ceil(B/2)     q/7 * absmax
#
# The last block may be shorter. Encoders take the learner's f32 values and refuse
# a non-finite one; decoders check the exact size, every absmax finite and >= 0
# and every code valid before they decode anything. The scaling is computed in
# binary64 and each decoded value rounded once to binary32.

class CodecError(ValueError):
    """Values that cannot be encoded (not finite), or bytes that are not a valid encoding."""


INT_LEVELS = {CODEC_INT8: 127, CODEC_INT4: 7}  # the largest code: q in [-L, L]
FP8_MAX = 448.0                                # the largest finite E4M3 value


def _e4m3_values():
    """The value of each of the 256 E4M3 codes (OCP FP8 v1.0: bias 7, no infinities); NaN for S.1111.111."""
    codes = np.arange(256)
    exponent, mantissa = (codes >> 3) & 0xF, (codes & 7).astype(np.float64)
    magnitude = np.where(exponent == 0, mantissa / 8.0 * 2.0 ** -6,                 # subnormal
                         (1.0 + mantissa / 8.0) * 2.0 ** (exponent.astype(np.float64) - 7))
    magnitude[(codes & 0x7F) == 0x7F] = np.nan
    return np.where(codes & 0x80, -magnitude, magnitude)


E4M3 = _e4m3_values()
E4M3_POSITIVE = E4M3[:0x7F]  # codes 0 ... 126, increasing: 0 ... 448
assert E4M3_POSITIVE[-1] == FP8_MAX and np.all(np.diff(E4M3_POSITIVE) > 0)


def _code_bytes(codec, values):
    """Bytes the codes of `values` values of one block take (without its absmax)."""
    return (values + 1) // 2 if codec == CODEC_INT4 else values


def codec_bytes(codec, count, block=0):
    """Payload bytes of `count` values in `codec` (block: B of int8, fp8, int4); None if unusable."""
    if codec in CODEC_DTYPE:
        return count * CODEC_DTYPE[codec].itemsize
    if codec == CODEC_BF16:
        return count * 2
    if codec in BLOCK_CODECS:
        if not 1 <= block <= MAX_BLOCK:
            return None
        full, rest = divmod(count, block)
        return full * (4 + _code_bytes(codec, block)) + (4 + _code_bytes(codec, rest) if rest else 0)
    return None


def round_half_away(y):
    """Rounds to the nearest integer, halves away from zero (np.round rounds halves to even)."""
    whole = np.trunc(y)
    return whole + np.where(np.abs(y - whole) >= 0.5, np.sign(y), 0.0)  # y - trunc(y) is exact


def bf16_bits(values):
    """The bfloat16 codes (uint16) of finite binary32 values: nearest, ties to even, saturating."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16                    # to nearest, ties to even
    overflow = (rounded & 0x7F80) == 0x7F80                                  # a finite value rounded to infinity
    rounded = np.where(overflow, (rounded & 0x8000) | 0x7F7F, rounded)      # saturates to the largest finite
    return rounded.astype(np.uint16)


def bf16_values(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _blocks(flat, block, fill=0):
    """`flat` padded with `fill` to whole blocks, as rows of `block`."""
    rows = -(-len(flat) // block)
    padded = np.full(rows * block, fill, dtype=flat.dtype)
    padded[:len(flat)] = flat
    return padded.reshape(rows, block)


def encode_values(values, codec, block=0):
    """The payload of `values` (a 1-D array) in `codec`. Raises CodecError on a non-finite value."""
    x = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    if not np.all(np.isfinite(x)):
        bad = int(np.flatnonzero(~np.isfinite(x))[0])
        raise CodecError("value %d of %d is %r: nothing is encoded for a non-finite value" % (bad, len(x), float(x[bad])))
    if codec in CODEC_DTYPE:
        return x.astype(CODEC_DTYPE[codec]).tobytes()
    if codec == CODEC_BF16:
        return bf16_bits(x).astype("<u2").tobytes()
    if codec not in BLOCK_CODECS:
        raise CodecError("cannot encode codec %d" % codec)
    if not 1 <= block <= MAX_BLOCK:
        raise CodecError("block %d is not in [1, %d]" % (block, MAX_BLOCK))
    if len(x) == 0:
        return b""
    rows = _blocks(x, block)                                  # zeros pad the last block: its absmax is unchanged
    absmax = np.abs(rows).max(axis=1)                         # exact: the largest magnitude, binary32
    scale = np.where(absmax > 0, absmax, 1.0).astype(np.float64)[:, None]
    y = rows.astype(np.float64) / scale                       # in [-1, 1]; an all-zero block gives zeros
    if codec in INT_LEVELS:
        level = INT_LEVELS[codec]
        q = np.clip(round_half_away(y * level), -level, level).astype(np.int64)
        if codec == CODEC_INT8:
            codes = q.astype(np.int8).view(np.uint8)
        else:
            nibbles = (q & 0xF).astype(np.uint8)
            if block % 2:
                nibbles = np.concatenate([nibbles, np.zeros((len(nibbles), 1), np.uint8)], axis=1)
            codes = nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)  # even-indexed value in the low nibble
    else:
        magnitude = np.minimum(np.abs(y) * FP8_MAX, FP8_MAX)
        high = np.minimum(np.searchsorted(E4M3_POSITIVE, magnitude, side="left"), len(E4M3_POSITIVE) - 1)
        low = np.maximum(high - 1, 0)                          # E4M3_POSITIVE[low] <= magnitude <= [high]
        middle = (E4M3_POSITIVE[low] + E4M3_POSITIVE[high]) / 2.0
        take_high = (magnitude > middle) | ((magnitude == middle) & (high % 2 == 0))  # nearest, ties to even
        codes = (np.where(take_high, high, low) | np.where(y < 0, 0x80, 0)).astype(np.uint8)
    out = np.concatenate([absmax.astype("<f4").view(np.uint8).reshape(-1, 4), codes], axis=1).reshape(-1)
    return out[:codec_bytes(codec, len(x), block)].tobytes()  # the last block's padding codes dropped


def decode_values(payload, codec, count, block=0):
    """The binary32 values of a payload of `count` values in `codec`, validated first. Raises CodecError."""
    expected = codec_bytes(codec, count, block)
    if expected is None:
        raise CodecError("codec %d with block %d carries no values" % (codec, block))
    if len(payload) != expected:
        raise CodecError("%d bytes for %d values of codec %s (block %d): expected %d"
                         % (len(payload), count, CODEC_NAMES.get(codec, codec), block, expected))
    if codec in CODEC_DTYPE or codec == CODEC_BF16:
        if codec == CODEC_BF16:
            values = bf16_values(np.frombuffer(payload, dtype="<u2"))
        else:
            values = np.frombuffer(payload, dtype=CODEC_DTYPE[codec]).astype(np.float32)
        if not np.all(np.isfinite(values)):
            raise CodecError("a value is not finite")
        return values
    if count == 0:
        return np.zeros(0, dtype=np.float32)
    width = 4 + _code_bytes(codec, block)
    rows = _blocks(np.frombuffer(payload, dtype=np.uint8), width).copy()  # the last block padded with zero codes
    # Decoding is binary32 arithmetic, each operation rounded, in this order:
    # (code's unit) then times absmax (docs/protocol.md, "Codecs"), so that
    # every learner holds the same bits for the same bytes.
    absmax = rows[:, :4].copy().view("<f4").reshape(-1)
    if not np.all(np.isfinite(absmax)) or np.any(absmax < 0):
        raise CodecError("a block scale is negative or not finite: %r" % absmax[~(np.isfinite(absmax) & (absmax >= 0))][:3])
    codes = rows[:, 4:]
    if codec == CODEC_INT8:
        q = codes.view(np.int8)
        if np.any(q == -128):
            raise CodecError("an int8 code is -128")
        scaled = q.astype(np.float32) / np.float32(127)
    elif codec == CODEC_INT4:
        nibbles = np.empty((len(codes), 2 * codes.shape[1]), dtype=np.int64)
        nibbles[:, 0::2], nibbles[:, 1::2] = codes & 0xF, codes >> 4
        position = np.arange(nibbles.shape[1])
        used = (position[None, :] < block) & (np.arange(len(nibbles))[:, None] * block + position[None, :] < count)
        if np.any(nibbles[~used]):
            raise CodecError("an int4 padding nibble is not 0")  # an odd block's last high nibble
        if np.any(nibbles == 8):
            raise CodecError("an int4 code is -8")
        scaled = np.where(nibbles >= 8, nibbles - 16, nibbles)[:, :block].astype(np.float32) / np.float32(7)
    else:
        if np.any((codes & 0x7F) == 0x7F):
            raise CodecError("an E4M3 code is NaN")
        scaled = E4M3[codes].astype(np.float32) / np.float32(FP8_MAX)  # E4M3 values are exact in binary32
    return (scaled * absmax[:, None]).reshape(-1)[:count]


# ---------------------------------------------------------------------------
# Layout, fingerprint, fragment plan (docs/protocol.md)

FNV_OFFSET = 14695981039346656037
FNV_PRIME = 1099511628211


def fingerprint(tensors):
    """64-bit FNV-1a over name bytes, a zero byte, the count as u64 LE, the role as u8, per tensor."""
    h = FNV_OFFSET
    for name, count, role in tensors:
        for byte in name.encode("utf-8") + b"\0" + struct.pack("<QB", count, role):
            h = ((h ^ byte) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def layout_description(tensors):
    out = bytearray()
    for name, count, role in tensors:
        encoded = name.encode("utf-8")
        assert 1 <= len(encoded) <= 1024 and count >= 1 and role in (0, 1)
        out += struct.pack("<H", len(encoded)) + encoded + struct.pack("<QB", count, role)
    return bytes(out)


def fragment_plan(tensors, fragments):
    """Returns, per fragment, the sorted flat indices of its elements."""
    counts = [count for _, count, _ in tensors]
    total = sum(counts)
    t = -(-total // fragments)
    limit = t + t // 8
    starts = [sum(counts[:i]) for i in range(len(counts))]
    # 1. pieces of T elements from each tensor's start; largest first, ties by flat offset.
    queue = []
    for index, (start, count) in enumerate(zip(starts, counts)):
        for begin in range(0, count, t):
            queue.append((min(t, count - begin), start + begin, index))
    order = lambda piece: (-piece[0], piece[1])
    queue.sort(key=order)
    # 2. the first piece goes to the lightest fragment (ties: lowest index).
    slices = [[] for _ in range(fragments)]  # [flat offset, size, tensor], in order of addition
    sizes = [0] * fragments
    while queue:
        size, offset, tensor = queue.pop(0)
        lightest = min(range(fragments), key=lambda i: (sizes[i], i))
        if sizes[lightest] + size <= limit:
            slices[lightest].append([offset, size, tensor])
            sizes[lightest] += size
        else:
            take = t - sizes[lightest]
            slices[lightest].append([offset, take, tensor])
            sizes[lightest] += take
            queue.append((size - take, offset + take, tensor))
            queue.sort(key=order)
    # 3. empty fragments take half of the heaviest fragment's largest slice.
    for empty in range(fragments):
        if sizes[empty]:
            continue
        heaviest = max(range(fragments), key=lambda i: (sizes[i], -i))
        largest = max(range(len(slices[heaviest])), key=lambda j: (slices[heaviest][j][1], -j))
        piece = slices[heaviest][largest]
        moved = piece[1] // 2
        piece[1] -= moved
        sizes[heaviest] -= moved
        slices[empty].append([piece[0] + piece[1], moved, piece[2]])
        sizes[empty] += moved
    # 4. by flat offset, touching slices of one tensor joined.
    plan = []
    for fragment in slices:
        merged = []
        for offset, size, tensor in sorted(fragment):
            if merged and merged[-1][2] == tensor and merged[-1][0] + merged[-1][1] == offset:
                merged[-1][1] += size
            elif size:
                merged.append([offset, size, tensor])
        plan.append(np.concatenate([np.arange(o, o + s, dtype=np.int64) for o, s, _ in merged])
                    if merged else np.zeros(0, dtype=np.int64))
    return plan


# ---------------------------------------------------------------------------
# The model: a two-layer MLP on Gaussian blobs, plain SGD

class Problem:
    """Seeded synthetic classification: each class is a mixture of two Gaussian blobs."""

    def __init__(self, seed, dims=8, classes=4):
        rng = np.random.default_rng(seed)
        self.dims, self.classes = dims, classes
        self.centers = rng.normal(0.0, 1.6, size=(classes * 2, dims))
        self.test_x, self.test_y = self.sample(np.random.default_rng(seed + 7919), 2000)

    def sample(self, rng, n):
        cluster = rng.integers(0, len(self.centers), size=n)
        x = self.centers[cluster] + rng.normal(0.0, 1.0, size=(n, self.dims))
        return x.astype(np.float32), (cluster % self.classes).astype(np.int64)


class Mlp:
    def __init__(self, dims, hidden, classes, seed):
        self.shapes = [("fc1.weight", (hidden, dims)), ("fc1.bias", (hidden,)),
                       ("fc2.weight", (classes, hidden)), ("fc2.bias", (classes,))]
        self.tensors = [(name, int(np.prod(shape)), 0) for name, shape in self.shapes]
        self.theta = np.zeros(sum(count for _, count, _ in self.tensors), dtype=np.float32)
        rng = np.random.default_rng(seed)
        w1, _, w2, _ = self.views(self.theta)
        w1[...] = rng.normal(0.0, 1.0 / math.sqrt(dims), size=w1.shape)
        w2[...] = rng.normal(0.0, 1.0 / math.sqrt(hidden), size=w2.shape)

    def views(self, flat):
        out, offset = [], 0
        for _, shape in self.shapes:
            count = int(np.prod(shape))
            out.append(flat[offset:offset + count].reshape(shape))
            offset += count
        return out

    def forward(self, x, flat=None):
        w1, b1, w2, b2 = self.views(self.theta if flat is None else flat)
        h = np.maximum(x @ w1.T + b1, 0.0)
        return h, h @ w2.T + b2

    def loss_and_grad(self, x, y):
        w1, b1, w2, b2 = self.views(self.theta)
        h, logits = self.forward(x)
        logits = logits - logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        loss = float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean())
        d = p
        d[np.arange(len(y)), y] -= 1.0
        d /= len(y)
        grad = np.zeros_like(self.theta)
        g1, gb1, g2, gb2 = self.views(grad)
        g2[...] = d.T @ h
        gb2[...] = d.sum(axis=0)
        dh = (d @ w2) * (h > 0)
        g1[...] = dh.T @ x
        gb1[...] = dh.sum(axis=0)
        return loss, grad

    def evaluate(self, x, y, flat=None):
        _, logits = self.forward(x, flat)
        logits = logits - logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        loss = float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean())
        return loss, float((logits.argmax(axis=1) == y).mean())


# ---------------------------------------------------------------------------
# The learner

def log(message):
    sys.stderr.write("[learner %s] %s\n" % (log.name, message))
    sys.stderr.flush()


log.name = "?"


class Connection:
    """The connection to the syncer among its candidates (docs/protocol.md,
    "Failover"): `endpoints` holds one endpoint, or the primary and its
    standbys. With one, a DEALER connected to it, as ever. With several, the
    learner probes: each message goes to every candidate until one answers;
    that one leads, and the others are closed with what they still held. A
    leader that stays silent for `silence_s` once a join, contribution or
    leave went out is taken for lost: probing starts again (`lost`; the
    learner joins every candidate then, and the leader's welcome answers),
    and finding a leader after that counts a reconnection."""

    def __init__(self, context, endpoints, send_timeout_s, silence_s=3.0):
        self.context, self.endpoints = context, endpoints
        self.send_timeout_s, self.silence_s = send_timeout_s, silence_s
        self.sockets = {}            # endpoint -> DEALER; only the leader's once one answered
        self.leader = None           # the endpoint that answered
        self.awaiting_since = None   # when a message needing an answer went out unanswered, or None
        self.reconnections = 0       # leaders found again after a silence
        self.lost = False            # probing again after a silence
        self.poller = None
        self.probe()

    def socket(self, endpoint):
        socket = self.context.socket(zmq.DEALER)
        # No routing id: the syncer's ROUTER gives every connection its own (protocol.md, Framing).
        socket.setsockopt(zmq.MAXMSGSIZE, MAX_PAYLOAD + HEADER_SIZE)
        socket.setsockopt(zmq.SNDTIMEO, int(self.send_timeout_s * 1000))  # a send never blocks unbounded
        socket.connect(endpoint)
        return socket

    def probe(self):
        self.close_all(0)
        self.sockets = {endpoint: self.socket(endpoint) for endpoint in self.endpoints}
        self.leader = self.endpoints[0] if len(self.endpoints) == 1 else None
        self.poller = zmq.Poller()
        for socket in self.sockets.values():
            self.poller.register(socket, zmq.POLLIN)

    def where(self):
        return self.leader or "|".join(self.endpoints)

    def send(self, frames, needs_answer):
        """Sends to the leader, or while probing to every candidate; raises zmq.Again past the send timeout."""
        for socket in self.sockets.values():
            socket.send_multipart(frames)
        if needs_answer and self.awaiting_since is None:
            self.awaiting_since = time.monotonic()

    def receive(self, timeout_ms):
        """The messages (frame lists) that arrived within timeout_ms, at least those already queued."""
        out = []
        for socket, _ in self.poller.poll(timeout_ms):
            endpoint = next((e for e, s in self.sockets.items() if s is socket), None)
            while endpoint in self.sockets:  # None, or a candidate closed as another one answered: skipped
                try:
                    out.append(socket.recv_multipart(zmq.NOBLOCK))
                except zmq.Again:
                    break
                if self.leader is None:
                    self.lead(endpoint)
        if out:
            self.awaiting_since = None
        elif (len(self.endpoints) > 1 and self.leader is not None and self.awaiting_since is not None
              and time.monotonic() - self.awaiting_since > self.silence_s):
            log("the syncer at %s fell silent for %gs: probing %s" % (self.leader, self.silence_s,
                                                                      "|".join(self.endpoints)))
            self.awaiting_since = None
            self.lost = True
            self.probe()
        return out

    def lead(self, endpoint):
        for other in [e for e in self.sockets if e != endpoint]:
            socket = self.sockets.pop(other)
            self.poller.unregister(socket)
            socket.setsockopt(zmq.LINGER, 0)
            socket.close()
        self.leader = endpoint
        if self.lost:
            self.lost = False
            self.reconnections += 1
        if len(self.endpoints) > 1:
            log("the syncer at %s answers" % endpoint)

    def close_all(self, linger_ms):
        for socket in self.sockets.values():
            socket.setsockopt(zmq.LINGER, linger_ms)
            socket.close()
        self.sockets = {}


class Learner:
    def __init__(self, args, model):
        self.args = args
        self.model = model
        self.learner_id, self.incarnation = args.learner_id, args.incarnation
        self.fingerprint = fingerprint(model.tensors)
        self.total = len(model.theta)
        self.context = zmq.Context()
        self.connection = Connection(self.context, args.endpoint.split("|"), args.timeout, args.silence)
        self.reconnections = 0           # the connection's reconnections this learner has caught up with
        self.probe_joined_at = 0.0       # the last join sent while probing after a silence
        self.parts = Parts()
        self.sequence = 0
        self.step = 0
        self.tokens_total = 0
        self.step_time_ns = 0
        self.transfer_ns = 0
        self.last_heartbeat = 0.0
        self.loss_sum = 0.0              # training losses since the last heartbeat, which sends their mean
        self.loss_steps = 0
        self.welcomed = False
        self.last_refusal = None  # the reason of the latest refusal of who this learner is
        self.ended = False  # the syncer said the run is over (an `end` message)
        self.leave_sequence = None  # the leave's sequence, once sent
        self.leave_answered = False
        self.config = None
        self.plan = None
        self.codec = None                # the codec of our contributions: the welcome's (or, from an
                                         # older syncer's welcome with codec 0, that of its updates)
        self.block = 0                   # values per scaled block of that codec (int8, fp8, int4)
        self.residual = {}               # fragment -> error feedback residual e_p (--error-feedback)
        self.base = {}                   # fragment -> Theta_p (float32 array)
        self.base_revision = {}          # fragment -> revision of the base
        self.counters = {}               # fragment -> [tokens, steps] not yet sent
        self.last_send_step = {}         # fragment -> the step of its latest contribution
        self.last_sent_base = {}         # fragment -> base revision of the last contribution
        self.outstanding = {}            # sequence -> {fragment, step, sent_at, final}
        self.pending = {}                # fragment -> [update header, values] in arrival order
        self.state_sent_at = None
        self.epochs = {}                 # syncer shard -> the newest leadership epoch heard from it
        self.shards = 1                  # syncer shards, as the last welcome said
        self.knows_shards = False        # a welcome has said S: every syncer message's shard is known
        self.stats = {"contributions": 0, "final_contributions": 0, "acks": 0, "rejects": 0,
                      "reject_reasons": {}, "updates_received": 0, "updates_adopted": 0,
                      "updates_ignored": 0, "ignored_messages": 0, "stale_epochs": 0, "joins": 0, "heartbeats": 0,
                      "reconnections": 0,
                      "state_sent": False, "skipped_sends": 0, "invalid_updates": 0,
                      # Payload bytes, to check against the syncer's payload_bytes_received/sent.
                      "contribution_bytes": 0, "update_bytes": 0, "bootstrap_bytes": 0,
                      "contributions_by_fragment": {}, "updates_by_fragment": {}, "update_codecs": {}}

    # -- sending -------------------------------------------------------------
    def send(self, kind, payload=b"", **fields):
        self.sequence += 1
        fields.update(kind=kind, learner=self.learner_id, incarnation=self.incarnation, sequence=self.sequence)
        header = encode(fields, payload)
        try:
            self.connection.send([header, payload] if payload else [header],
                                 needs_answer=kind in (JOIN, CONTRIBUTION, LEAVE))
        except zmq.Again:
            raise Timeout("could not send a %s to %s within %gs" % (KIND_NAMES[kind], self.connection.where(),
                                                                    self.args.timeout))
        if self.args.verbose:
            log("-> %s seq %d %s" % (KIND_NAMES[kind], self.sequence,
                                     {k: v for k, v in fields.items() if k not in ("kind", "learner", "incarnation", "sequence")}))
        return self.sequence

    def send_join(self):
        self.stats["joins"] += 1
        self.send(JOIN, layout=self.fingerprint, element_count=self.total)

    def heartbeat(self, force=False):
        now = time.monotonic()
        if self.welcomed and (force or now - self.last_heartbeat >= 1.0):
            self.last_heartbeat = now
            self.stats["heartbeats"] += 1
            fields = {}
            if self.loss_steps:
                fields["hold_ns"] = loss_bits(self.loss_sum / self.loss_steps)
                self.loss_sum, self.loss_steps = 0.0, 0
            self.send(HEARTBEAT, tokens=self.tokens_total, steps=self.step,
                      step_time_ns=self.step_time_ns, transfer_ns=self.transfer_ns, **fields)

    # -- receiving -----------------------------------------------------------
    def receive(self, wait_s):
        """Handles the messages that arrive within wait_s seconds (at least those already queued)."""
        deadline = time.monotonic() + wait_s
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            for message in self.connection.receive(int(remaining * 1000)):
                try:
                    frames = self.parts.take(message)
                except ValueError as error:
                    self.stats["ignored_messages"] += 1
                    log("ignored a part: %s" % error)
                    continue
                if frames is not None:
                    self.handle(frames)
            if self.connection.lost and self.welcomed and time.monotonic() - self.probe_joined_at >= 1.0:
                # Probing after a silence: join every candidate (again each second); the leader welcomes us.
                self.probe_joined_at = time.monotonic()
                self.send_join()
            if self.connection.reconnections > self.reconnections:
                self.rejoined()
            if time.monotonic() >= deadline:
                return

    def rejoined(self):
        """A leader found after a silence has answered our join (docs/protocol.md, "Failover"). A
        contribution the old leader acknowledged is in the new one's state or in an open round of it (its
        standby held it before the ack left): a state of its fragment newer than its base answers it (see
        adopt), else the round's update will; one never acknowledged is given up, and its fragment may be
        sent again against the same base."""
        self.reconnections = self.connection.reconnections
        self.stats["reconnections"] += 1
        for sequence, entry in list(self.outstanding.items()):
            if entry["acked"]:
                entry["chased"] = True
            else:
                del self.outstanding[sequence]
                self.last_sent_base.pop(entry["fragment"], None)

    # A syncer's messages carry its leadership epoch where a learner's carry
    # tokens (docs/protocol.md, "Epochs"): one stamped with an older epoch than
    # its shard has been heard with comes from a replaced syncer and is dropped,
    # and so are the updates of that shard still waiting from it once a newer
    # epoch is heard. Not fenced, their shard unknown: a bootstrap's welcome
    # (state_wanted) and anything before the first welcome that names S.
    def shard_of(self, header):
        if header["kind"] == WELCOME:
            return header["fragment"] if header["steps"] > 1 else 0
        return header["fragment"] % self.shards if self.shards > 1 else 0

    def admit_epoch(self, header):
        welcome = header["kind"] == WELCOME and not header.get("flags", 0) & FLAG_STATE_WANTED
        if header["kind"] == WELCOME and not welcome:
            return True
        if not welcome and not self.knows_shards:
            return True
        shard = self.shard_of(header)
        newest = self.epochs.get(shard, 0)
        if header["tokens"] < newest:
            return False
        self.epochs[shard] = header["tokens"]
        if welcome:
            self.shards = max(1, min(header["steps"], 1 << 16))
            self.knows_shards = True
        if header["tokens"] > newest:
            for p in list(self.pending):
                if (p % self.shards if self.shards > 1 else 0) == shard:
                    stale = [u for u in self.pending[p] if u[0]["tokens"] < header["tokens"]]
                    self.stats["stale_epochs"] += len(stale)
                    self.pending[p] = [u for u in self.pending[p] if u[0]["tokens"] >= header["tokens"]]
        return True

    def handle(self, frames):
        try:
            header, payload = decode(frames)
        except ValueError as error:
            self.stats["ignored_messages"] += 1
            log("ignored an undecodable message: %s" % error)
            return
        kind = header["kind"]
        if self.args.verbose:
            log("<- %s %s" % (KIND_NAMES[kind], {k: v for k, v in header.items() if v and k not in
                                                ("magic", "version", "kind", "payload_crc", "header_crc")}))
        if header["learner"] != self.learner_id or header["incarnation"] != self.incarnation:
            self.stats["ignored_messages"] += 1
            log("ignored a %s for learner %d incarnation %d" % (KIND_NAMES[kind], header["learner"], header["incarnation"]))
            return
        if not self.admit_epoch(header):
            self.stats["stale_epochs"] += 1
            log("dropped a %s of epoch %d: shard %d has been heard with epoch %d" %
                (KIND_NAMES[kind], header["tokens"], self.shard_of(header), self.epochs[self.shard_of(header)]))
            return
        if kind == WELCOME:
            self.on_welcome(header)
        elif kind == UPDATE:
            self.on_update(header, payload)
        elif kind == ACK:
            self.on_ack(header)
        elif kind == REJECT:
            self.on_reject(header)
        elif kind == END:
            if not self.ended:
                log("the syncer ended the run")
            self.ended = True
        else:
            self.stats["ignored_messages"] += 1
            log("ignored an unexpected %s" % KIND_NAMES[kind])

    def on_welcome(self, header):
        if header["flags"] & FLAG_STATE_WANTED:
            # Also once welcomed: a new leader that started without a
            # checkpoint asks for the current model (docs/protocol.md, "Failover").
            now = time.monotonic()
            # Answer each request once; repeat only if the syncer asks again much later.
            if self.state_sent_at is not None and now - self.state_sent_at < 5.0:
                return
            fragments = header["fragment_count"]
            if fragments < 1:
                raise ProtocolError("state_wanted welcome with P = 0")
            if header["codec"] not in (CODEC_NONE, CODEC_F32):
                raise ProtocolError("bad_config: the syncer wants the initial state in codec %s, this learner's "
                                    "model is f32" % CODEC_NAMES.get(header["codec"], header["codec"]))
            log("the syncer has no model: sending the layout and our %d parameters as %d fragments"
                % (self.total, fragments))
            plan = fragment_plan(self.model.tensors, fragments)
            description = layout_description(self.model.tensors)
            self.send(LAYOUT, description, codec=CODEC_BYTES, element_count=len(description), layout=self.fingerprint)
            self.stats["bootstrap_bytes"] += len(description)
            for p, indices in enumerate(plan):
                values = self.model.theta[indices].astype(CODEC_DTYPE[CODEC_F32])
                self.send(STATE, values.tobytes(), codec=CODEC_F32, fragment=p, element_count=len(indices))
                self.stats["bootstrap_bytes"] += values.nbytes
            self.state_sent_at = now
            self.stats["state_sent"] = True
            self.send_join()
            return
        if header["layout"] != self.fingerprint or header["element_count"] != self.total:
            raise ProtocolError("layout mismatch: the syncer serves layout %016x with %d parameters, "
                                "ours is %016x with %d" % (header["layout"], header["element_count"],
                                                          self.fingerprint, self.total))
        # The codec (and block) our contributions are to use ("Codecs", Negotiation): our own full
        # precision (f32) or a compressed one; 0 from an older syncer: the codec of its updates.
        codec = header["codec"]
        block = header["block"] if codec in BLOCK_CODECS else 0
        config = {"P": header["fragment_count"], "H": header["sync_period"], "tau": header["overlap"],
                  "alpha": header["mixing"], "lock_step": bool(header["lock_step"]),
                  "codec": CODEC_NAMES.get(codec, str(codec)), "block": block}
        if self.config is not None:
            if config != self.config:
                raise ProtocolError("a second welcome with another configuration: %s vs %s" % (config, self.config))
            return
        if codec != CODEC_NONE and codec not in ENCODABLE_CODECS:
            raise ProtocolError("bad_config: the welcome asks for contributions in codec %s, which this learner "
                                "cannot encode (its model is f32; it encodes %s)"
                                % (config["codec"], ", ".join(CODEC_NAMES[c] for c in ENCODABLE_CODECS)))
        if codec in BLOCK_CODECS and not 1 <= block <= MAX_BLOCK:
            raise ProtocolError("bad_config: the welcome asks for %s in blocks of %d values, not in [1, %d]"
                                % (config["codec"], block, MAX_BLOCK))
        if config["P"] < 1 or config["H"] < 1 or config["tau"] >= config["H"] or not 0.0 <= config["alpha"] < 1.0:
            raise ProtocolError("unusable configuration %s" % config)
        self.config = config
        if codec != CODEC_NONE:
            self.codec, self.block = codec, block
        self.plan = fragment_plan(self.model.tensors, config["P"])
        self.welcomed = True
        log("welcomed: P=%(P)d H=%(H)d tau=%(tau)d alpha=%(alpha)g lock_step=%(lock_step)s "
            "contributions in %(codec)s (block %(block)d)" % config)

    def on_update(self, header, payload):
        self.stats["updates_received"] += 1
        p, codec = header["fragment"], header["codec"]
        if self.plan is None or p >= len(self.plan) or header["element_count"] != len(self.plan[p]) \
                or codec not in NUMBER_CODECS:
            self.stats["updates_ignored"] += 1
            log("ignored an update for fragment %d with %d elements, codec %d"
                % (p, header["element_count"], codec))
            return
        # Decoded (and validated: exact size, block scales finite and >= 0, valid codes) before
        # anything else; the decoded values are what the learner adopts and keeps as its base.
        try:
            values = decode_values(payload, codec, header["element_count"], header["block"])
        except CodecError as error:
            self.stats["invalid_updates"] += 1
            self.stats["ignored_messages"] += 1
            log("ignored an invalid update of fragment %d (revision %d, codec %s): %s"
                % (p, header["revision"], CODEC_NAMES[codec], error))
            return
        self.stats["update_bytes"] += len(payload)
        counts = self.stats["updates_by_fragment"]
        counts[p] = counts.get(p, 0) + 1
        name = CODEC_NAMES[codec] + ("/%d" % header["block"] if codec in BLOCK_CODECS else "")  # e.g. "int8/64"
        self.stats["update_codecs"][name] = self.stats["update_codecs"].get(name, 0) + 1
        if self.codec is None:
            # An older syncer (welcome codec 0): contributions in the codec of its updates,
            # at full precision (f32 for any other).
            self.codec = codec if codec in CODEC_DTYPE else CODEC_F32
        answered = self.outstanding.get(header["answers"]) if header["answers"] else None
        if answered is not None and answered["fragment"] == p:
            # Transfer time: send-to-answer minus the time the syncer held the contribution.
            elapsed = int((time.monotonic() - answered["sent_at"]) * 1e9) - header["hold_ns"]
            self.transfer_ns = max(0, elapsed) if not self.transfer_ns else int(0.8 * self.transfer_ns + 0.2 * max(0, elapsed))
        self.pending.setdefault(p, []).append((header, values))

    def on_ack(self, header):
        if header["answers"] == self.leave_sequence:
            self.leave_answered = True
            return
        self.stats["acks"] += 1
        entry = self.outstanding.get(header["answers"])
        if entry is None:
            log("ack for an unknown message %d" % header["answers"])
            return
        entry["acked"] = True

    def on_reject(self, header):
        if header["answers"] == self.leave_sequence:
            self.leave_answered = True  # refused (e.g. already gone): read all the same
            return
        reason = REASONS[header["reason"]] if header["reason"] < len(REASONS) else "reason %d" % header["reason"]
        if reason in ("unknown_learner", "wrong_peer", "dead_incarnation", "peer_conflict", "quarantined",
                      "too_many_learners", "unexpected_kind", "unknown_incarnation"):
            # A refusal of who this learner is (protocol.md, "Validation"):
            # act as the table there says.
            self.stats["notices"] = self.stats.get("notices", 0) + 1
            self.last_refusal = reason
            log("message %d refused: %s" % (header["answers"], reason))
            if reason in ("unknown_learner", "wrong_peer") and self.welcomed:
                self.send_join()  # forgotten, or our connection changed
            elif reason == "dead_incarnation" and not self.welcomed and header["revision"] >= self.incarnation:
                self.incarnation = header["revision"] + 1  # a restart that did not know its incarnation
                log("taking incarnation %d" % self.incarnation)
                self.send_join()
            elif reason in ("dead_incarnation", "quarantined"):
                raise SystemExit("learner %d: %s by the syncer; stopping" % (self.learner_id, reason))
            # too_many_learners: the join is retried until a place frees;
            # unexpected_kind, unknown_incarnation: counted, nothing to do.
            return
        self.stats["rejects"] += 1
        self.stats["reject_reasons"][reason] = self.stats["reject_reasons"].get(reason, 0) + 1
        self.outstanding.pop(header["answers"], None)
        log("contribution %d (fragment %d, base %d) rejected: %s"
            % (header["answers"], header["fragment"], header["base_revision"], reason))

    # -- adopting updates --------------------------------------------------------
    def adopt_ready(self, at_end=False):
        """At a step boundary: adopts every pending update whose hold (tau steps after its send) is over."""
        for p, queue in list(self.pending.items()):
            keep = []
            for header, values in queue:
                answered = self.outstanding.get(header["answers"]) if header["answers"] else None
                if answered is not None and answered["fragment"] != p:
                    answered = None
                if answered is not None and not at_end and self.step < answered["step"] + self.config["tau"]:
                    keep.append((header, values))
                    continue
                if (answered is None and self.rebases() and not at_end and p in self.last_send_step
                        and self.step < self.last_send_step[p] + self.config["tau"]):
                    keep.append((header, values))  # rebase: a foreign revision waits like the answer
                    continue
                if answered is not None:
                    del self.outstanding[header["answers"]]
                self.adopt(p, header, values)
            self.pending[p] = keep

    def adopt(self, p, header, values):
        revision = header["revision"]
        # After a failover: a revision newer than the base of a contribution the old leader acknowledged
        # holds it (the new leader merged it, or merged its round into this one), adopted or not.
        for sequence, entry in list(self.outstanding.items()):
            if entry["chased"] and entry["fragment"] == p and entry["base"] < revision:
                del self.outstanding[sequence]
        if p in self.base_revision and revision <= self.base_revision[p]:
            self.stats["updates_ignored"] += 1
            return
        indices = self.plan[p]
        alpha = self.config["alpha"]
        if p in self.base and self.rebases():
            # Rebase: the local progress since the base moves onto the new
            # revision; the work not yet sent stays counted.
            self.model.theta[indices] += (1.0 - alpha) * (values - self.base[p])
        else:
            if p in self.base and header["status"] == STATUS_MERGED:
                self.model.theta[indices] = alpha * self.model.theta[indices] + (1.0 - alpha) * values
            else:
                self.model.theta[indices] = values
            self.counters[p] = [0, 0]  # overwrite (and the first state): the work since the last send is gone
        self.base[p] = values.copy()
        self.base_revision[p] = revision
        self.stats["updates_adopted"] += 1

    def rebases(self):
        """The rebase rule: asked for, and the run is not lock-step (which always overwrites)."""
        return self.args.adopt == "rebase" and not (self.config or {}).get("lock_step", False)

    def answer_pending(self, sequence):
        """Whether the update answering contribution `sequence` has arrived (or it was rejected)."""
        entry = self.outstanding.get(sequence)
        return entry is None or any(h["answers"] == sequence for h, _ in self.pending.get(entry["fragment"], []))

    # -- phases ----------------------------------------------------------------
    def join(self):
        deadline = time.monotonic() + self.args.timeout
        last_join = 0.0
        while not self.welcomed or len(self.base) < self.config["P"]:
            now = time.monotonic()
            if now >= deadline:
                hint = ""
                if self.last_refusal and not self.welcomed:
                    hint = "; the syncer refused our join: %s" % self.last_refusal
                elif self.stats["state_sent"] and not self.welcomed:
                    hint = ("; the syncer asked for our layout and state but did not accept them (it does not answer "
                            "refusals of a layout or state: its counters say which check failed)")
                elif not self.welcomed:
                    hint = "; is a syncer listening there, and does it accept this layout?"
                raise Timeout("no welcome and initial state from %s within %gs (welcomed: %s, fragments: %d)%s"
                              % (self.connection.where(), self.args.timeout, self.welcomed, len(self.base), hint))
            if now - last_join >= 1.0:  # join, and repeat every second until welcomed with every fragment
                last_join = now
                self.send_join()
            self.receive(0.1)
            if self.welcomed:
                self.adopt_ready()
                self.heartbeat()

    def contribute(self, p, final=False):
        indices = self.plan[p]
        delta = self.base[p] - self.model.theta[indices]
        codec = self.codec or CODEC_F32
        block = self.block if codec in BLOCK_CODECS else 0
        if self.args.error_feedback and p in self.residual:
            delta = delta + self.residual[p]  # what the codec rounded away from the previous sends of p
        if not np.all(np.isfinite(delta)):
            # Never sent: a NaN or an infinity would poison (or get refused by) the syncer.
            bad = int(np.count_nonzero(~np.isfinite(delta)))
            raise NonFinite("the outer gradient of fragment %d has %d non-finite values of %d (step %d, base "
                            "revision %d): nothing sent; stopping" % (p, bad, len(delta), self.step,
                                                                      self.base_revision[p]))
        payload = encode_values(delta, codec, block)
        if self.args.error_feedback:
            # e_p = (delta_p + e_p) - decode(code): sent later rather than lost.
            self.residual[p] = delta - decode_values(payload, codec, len(indices), block)
        tokens, steps = self.counters[p]
        sequence = self.send(CONTRIBUTION, payload, codec=codec, block=block,
                             flags=FLAG_FINAL if final else 0, fragment=p, base_revision=self.base_revision[p],
                             revision=self.step, tokens=tokens, steps=steps, element_count=len(indices),
                             step_time_ns=self.step_time_ns, transfer_ns=self.transfer_ns)
        self.stats["contribution_bytes"] += len(payload)
        counts = self.stats["contributions_by_fragment"]
        counts[p] = counts.get(p, 0) + 1
        self.outstanding[sequence] = {"fragment": p, "step": self.step, "sent_at": time.monotonic(),
                                      "final": final, "acked": False, "sequence": sequence,
                                      "base": self.base_revision[p], "chased": False}
        self.last_sent_base[p] = self.base_revision[p]
        self.last_send_step[p] = self.step
        if self.rebases():
            # What was sent leaves the account: the base moves to theta_p, the counters restart.
            self.base[p] = self.model.theta[indices].astype(self.base[p].dtype)
            self.counters[p] = [0, 0]
        self.stats["contributions"] += 1
        if final:
            self.stats["final_contributions"] += 1
        return sequence

    def wait_until(self, condition, what):
        deadline = time.monotonic() + self.args.timeout
        while not condition() and not self.ended:
            if time.monotonic() >= deadline:
                raise Timeout("timed out after %gs waiting for %s" % (self.args.timeout, what))
            self.receive(0.05)
            self.heartbeat()

    def train(self, problem, rng):
        config = self.config
        P, H, tau = config["P"], config["H"], config["tau"]
        offsets = [p * H // P for p in range(P)]
        for p in range(P):
            self.counters.setdefault(p, [0, 0])
        losses = []
        for _ in range(self.args.steps):
            if self.ended:
                break
            started = time.monotonic()
            x, y = problem.sample(rng, self.args.batch)
            loss, grad = self.model.loss_and_grad(x, y)
            self.model.theta -= self.args.lr * grad
            losses.append(loss)
            self.loss_sum += loss
            self.loss_steps += 1
            if self.args.step_ms > 0:
                time.sleep(self.args.step_ms / 1000.0)
            self.step += 1
            self.tokens_total += len(y)
            for p in range(P):
                self.counters[p][0] += len(y)
                self.counters[p][1] += 1
            elapsed = int((time.monotonic() - started) * 1e9)
            self.step_time_ns = elapsed if not self.step_time_ns else int(0.9 * self.step_time_ns + 0.1 * elapsed)
            # Step boundary: handle what arrived, send what is due, adopt what may be adopted.
            self.receive(0)
            s = self.step
            for p in range(P):
                if s >= offsets[p] and (s - offsets[p]) % H == 0:
                    # Never a second contribution against the same base revision (it would be a duplicate).
                    if self.last_sent_base.get(p) == self.base_revision[p]:
                        self.stats["skipped_sends"] += 1
                    else:
                        self.contribute(p)
            self.adopt_ready()
            if config["lock_step"]:
                # Synchronous mode: wait for the answer of every send tau steps old.
                for sequence, entry in list(self.outstanding.items()):
                    if not entry["final"] and s >= entry["step"] + tau:
                        self.wait_until(lambda: self.answer_pending(sequence),
                                        "the update answering contribution %d (fragment %d)"
                                        % (sequence, entry["fragment"]))
                        self.adopt_ready()
            self.heartbeat()
            if self.args.progress and self.step % self.args.progress == 0:
                log("step %d loss %.4f (mean of the last %d) revisions %s"
                    % (self.step, float(np.mean(losses[-self.args.progress:])), self.args.progress,
                       [self.base_revision[p] for p in range(P)]))
        return losses

    def finish(self):
        if self.ended:
            return  # the syncer takes nothing more
        P = self.config["P"]
        # Wait for the answers of the contributions still in flight, then adopt them, so that
        # each fragment's base is fresh and its unsent work can go out against it.
        self.wait_until(lambda: all(self.answer_pending(sequence) for sequence in self.outstanding),
                        "the updates answering the contributions in flight")
        self.adopt_ready(at_end=True)
        finals = []
        for p in range(P):
            if self.counters[p][1] == 0:
                continue  # nothing unsent: the base already holds all our work on p
            if self.last_sent_base.get(p) == self.base_revision[p]:
                log("fragment %d: unsent work of %d steps but its last contribution is unanswered; dropped"
                    % (p, self.counters[p][1]))
                continue
            finals.append(self.contribute(p, final=True))
        self.wait_until(lambda: all(s not in self.outstanding or self.outstanding[s]["acked"] for s in finals),
                        "the answers to the final contributions")
        self.heartbeat(force=True)
        # The connection stays open until the leave is answered: closed at
        # once, it might lose what it still carried (protocol.md, Session).
        self.leave_sequence = self.send(LEAVE)
        try:
            self.wait_until(lambda: self.leave_answered, "the answer to the leave")
        except Timeout as error:
            log("warning: %s; closing anyway" % error)

    def close(self, linger_ms):
        """Closes the connection, giving queued messages (the leave) up to linger_ms to go out."""
        self.connection.close_all(linger_ms)
        self.context.term()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", default="tcp://127.0.0.1:5555",
                        help="the syncer's ZeroMQ endpoint, or every candidate's ('tcp://a:5555|tcp://b:5555': the "
                             "primary and its standbys)")
    parser.add_argument("--silence", type=float, default=3.0,
                        help="with several candidates: a leader silent this long once a join, contribution or leave "
                             "went out is taken for lost, and the candidates are probed again (seconds)")
    parser.add_argument("--learner-id", type=int, default=0, help="this learner's id (u32)")
    parser.add_argument("--incarnation", type=int, default=1, help="this learner's incarnation (u32)")
    parser.add_argument("--steps", type=int, default=200, help="inner steps to train")
    parser.add_argument("--seed", type=int, default=1, help="seed of the problem and of the initial model")
    parser.add_argument("--timeout", type=float, default=30.0, help="bound of every wait, seconds")
    parser.add_argument("--batch", type=int, default=32, help="examples per inner step")
    parser.add_argument("--lr", type=float, default=0.1, help="inner SGD learning rate")
    parser.add_argument("--hidden", type=int, default=16, help="hidden units")
    parser.add_argument("--step-ms", type=float, default=10.0, help="extra time per inner step (simulated compute), ms")
    parser.add_argument("--progress", type=int, default=0, help="log every N steps (0: never)")
    parser.add_argument("--evaluate", metavar="FILE",
                        help="only evaluate the raw little-endian f32 parameters in FILE (diloco_syncer --save) and exit")
    parser.add_argument("--adopt", choices=("rebase", "overwrite"), default="rebase",
                        help="adoption rule (protocol.md, Session step 5): rebase keeps every step (rebase)")
    parser.add_argument("--error-feedback", action="store_true",
                        help="carry what the contribution codec rounds away into the fragment's next send")
    parser.add_argument("--verbose", action="store_true", help="log every message")
    args = parser.parse_args()
    if not (0 <= args.learner_id < 2**32 and 0 <= args.incarnation < 2**32) or args.steps < 1 or args.timeout <= 0:
        parser.error("learner id and incarnation must be u32, steps >= 1, timeout > 0")
    log.name = str(args.learner_id)

    problem = Problem(args.seed)
    model = Mlp(problem.dims, args.hidden, problem.classes, seed=args.seed * 1000 + args.learner_id)
    if args.evaluate:
        flat = np.fromfile(args.evaluate, dtype="<f4")
        if len(flat) != len(model.theta):
            sys.stderr.write("learner.py: %s holds %d parameters, the model has %d\n"
                             % (args.evaluate, len(flat), len(model.theta)))
            return 3
        loss, accuracy = model.evaluate(problem.test_x, problem.test_y, flat.astype(np.float32))
        print(json.dumps({"file": args.evaluate, "loss": round(loss, 4), "accuracy": round(accuracy, 4)}))
        return 0
    if zmq is None:
        sys.stderr.write("learner.py: needs pyzmq (Debian: apt-get install python3-zmq; this interpreter is %s): %s\n"
                         % (sys.executable, ZMQ_IMPORT_ERROR))
        return 1

    initial_loss, initial_accuracy = model.evaluate(problem.test_x, problem.test_y)
    learner = Learner(args, model)
    status = 0
    result = {"learner": args.learner_id, "incarnation": args.incarnation, "layout": "%016x" % learner.fingerprint,
              "parameters": learner.total, "initial_loss": round(initial_loss, 4),
              "initial_accuracy": round(initial_accuracy, 4), "joined_loss": None, "joined_accuracy": None,
              "initial_revisions": None}
    try:
        learner.join()
        joined_loss, joined_accuracy = model.evaluate(problem.test_x, problem.test_y)
        result.update(joined_loss=round(joined_loss, 4), joined_accuracy=round(joined_accuracy, 4),
                      initial_revisions=[learner.base_revision[p] for p in range(learner.config["P"])])
        log("joined; the global model: loss %.4f accuracy %.3f (own initial: loss %.4f accuracy %.3f)"
            % (joined_loss, joined_accuracy, initial_loss, initial_accuracy))
        learner.train(problem, np.random.default_rng(args.seed * 7777 + args.learner_id * 31 + args.incarnation))
        learner.finish()
    except Timeout as error:
        log("error: %s" % error)
        status = 2
    except ProtocolError as error:
        log("protocol error: %s" % error)
        status = 3
    except NonFinite as error:
        log("error: %s" % error)
        status = 4
    finally:
        learner.close(2000 if status == 0 else 0)
    final_loss, final_accuracy = model.evaluate(problem.test_x, problem.test_y)
    stats = learner.stats
    result.update(config=learner.config, steps=learner.step, tokens=learner.tokens_total,
                  contributions=stats["contributions"], final_contributions=stats["final_contributions"],
                  acks=stats["acks"], rejects=stats["rejects"], reject_reasons=stats["reject_reasons"],
                  updates_received=stats["updates_received"], updates_adopted=stats["updates_adopted"],
                  updates_ignored=stats["updates_ignored"], ignored_messages=stats["ignored_messages"],
                  skipped_sends=stats["skipped_sends"], joins=stats["joins"], heartbeats=stats["heartbeats"],
                  reconnections=stats["reconnections"],
                  provided_state=stats["state_sent"], invalid_updates=stats["invalid_updates"],
                  error_feedback=args.error_feedback,
                  fragment_sizes=[len(indices) for indices in learner.plan] if learner.plan else None,
                  contribution_bytes=stats["contribution_bytes"], update_bytes=stats["update_bytes"],
                  bootstrap_bytes=stats["bootstrap_bytes"],
                  contributions_by_fragment={str(p): n for p, n in sorted(stats["contributions_by_fragment"].items())},
                  updates_by_fragment={str(p): n for p, n in sorted(stats["updates_by_fragment"].items())},
                  update_codecs=stats["update_codecs"],
                  final_revisions=[learner.base_revision.get(p) for p in range(learner.config["P"])] if learner.config else None,
                  final_loss=round(final_loss, 4), final_accuracy=round(final_accuracy, 4), status=status)
    # A refusal of a contribution for any reason other than staleness means this client got the protocol wrong.
    if status == 0 and any(reason != "stale" for reason in stats["reject_reasons"]):
        log("protocol error: contributions were rejected: %s" % stats["reject_reasons"])
        status = result["status"] = 3
    print(json.dumps(result), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
