#!/usr/bin/env python3
"""Unit tests of learner.py's codecs and their use, against docs/protocol.md ("Header", "Codecs").

Reference values are written out by hand or computed here from the document's
formulas, never by the functions under test. Needs numpy (not pyzmq); run
under an interpreter without numpy, it re-runs itself under $DILOCO_PYTHON or
/usr/bin/python3. Runs in about a second.
"""

import os
import struct
import sys
import unittest
from fractions import Fraction

try:
    import numpy as np
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("DILOCO_TEST_REEXEC") is None:
        os.environ["DILOCO_TEST_REEXEC"] = "1"
        for candidate in (os.environ.get("DILOCO_PYTHON"), "/usr/bin/python3"):
            if candidate and os.path.exists(candidate) and os.path.realpath(candidate) != os.path.realpath(sys.executable):
                os.execv(candidate, [candidate] + sys.argv)
    sys.exit("test_codecs.py: needs numpy (Debian: python3-numpy), or $DILOCO_PYTHON naming a Python with it")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import learner as L  # noqa: E402

F32_MAX = float(np.finfo(np.float32).max)
BF16_MAX = float(struct.unpack("<f", struct.pack("<I", 0x7F7F0000))[0])  # 0x7F7F: (2 - 2^-7) * 2^127
U32 = 2.0 ** -24          # binary32 unit roundoff
HALF_SUBNORMAL = 2.0 ** -150


def f32_bits(value):
    return struct.unpack("<I", struct.pack("<f", value))[0]


def f32_from_bits(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def bound(codec, x, a):
    """The documented error bound of value x of a block with largest magnitude a (protocol.md, "Codecs")."""
    x, a = abs(float(x)), float(a)
    term = {L.CODEC_F32: 0.0, L.CODEC_BF16: x * 2.0 ** -8, L.CODEC_INT8: a / 254.0, L.CODEC_INT4: a / 14.0,
            L.CODEC_FP8: max(x * 2.0 ** -4, a / 448.0 * 2.0 ** -10)}[codec]
    # "Half the smallest subnormal": of the format the value is rounded to. bfloat16's is 2^-133
    # (binary32's exponent range, 7 fraction bits), so bf16 flushes |x| < 2^-134 to zero.
    half_subnormal = 2.0 ** -134 if codec == L.CODEC_BF16 else HALF_SUBNORMAL
    return term + 4 * U32 * a + half_subnormal


def expected_bytes(codec, n, block):
    """Payload bytes from the table: int8/fp8 4 + B per block, int4 4 + ceil(B/2), the last block shorter."""
    if codec == L.CODEC_F32:
        return 4 * n
    if codec == L.CODEC_BF16:
        return 2 * n
    total, start = 0, 0
    while start < n:
        b = min(block, n - start)
        total += 4 + (b if codec in (L.CODEC_INT8, L.CODEC_FP8) else (b + 1) // 2)
        start += b
    return total


def e4m3_reference(code):
    """OCP FP8 E4M3 v1.0 (bias 7, no infinities, S.1111.111 NaN), exactly, as a Fraction."""
    sign = -1 if code & 0x80 else 1
    exponent, mantissa = (code >> 3) & 0xF, code & 7
    if exponent == 0:
        return sign * Fraction(mantissa, 8) * Fraction(1, 2 ** 6)
    return sign * (1 + Fraction(mantissa, 8)) * Fraction(2) ** (exponent - 7)


ALL = (L.CODEC_F32, L.CODEC_BF16, L.CODEC_INT8, L.CODEC_FP8, L.CODEC_INT4)


def block_of(codec, block):
    return block if codec in L.BLOCK_CODECS else 0


class Sizes(unittest.TestCase):
    def test_documented_examples(self):
        # 1000 values, block 256: three full blocks and one of 232.
        self.assertEqual(L.codec_bytes(L.CODEC_INT8, 1000, 256), 3 * 260 + 236)
        self.assertEqual(L.codec_bytes(L.CODEC_FP8, 1000, 256), 3 * 260 + 236)
        self.assertEqual(L.codec_bytes(L.CODEC_INT4, 1000, 256), 3 * 132 + (4 + 116))
        self.assertEqual(L.codec_bytes(L.CODEC_BF16, 1000), 2000)
        self.assertEqual(L.codec_bytes(L.CODEC_F32, 1000), 4000)
        self.assertEqual(L.codec_bytes(L.CODEC_F64, 1000), 8000)
        # "1024/260 = 3.94x", "1024/132 = 7.76x": one full block of 256.
        self.assertEqual(L.codec_bytes(L.CODEC_INT8, 256, 256), 260)
        self.assertEqual(L.codec_bytes(L.CODEC_INT4, 256, 256), 132)
        # Odd blocks of int4: ceil(B/2) bytes each; block 3, 5 values: 4 + 2, then 4 + 1.
        self.assertEqual(L.codec_bytes(L.CODEC_INT4, 5, 3), 11)
        self.assertEqual(L.codec_bytes(L.CODEC_INT8, 1, 65536), 5)
        self.assertEqual(L.codec_bytes(L.CODEC_INT8, 7, 1), 35)

    def test_blocks_out_of_range_carry_nothing(self):
        for codec in L.BLOCK_CODECS:
            self.assertIsNone(L.codec_bytes(codec, 10, 0))
            self.assertIsNone(L.codec_bytes(codec, 10, 65537))
        self.assertIsNone(L.codec_bytes(L.CODEC_BYTES, 10))

    def test_encoded_sizes(self):
        rng = np.random.default_rng(1)
        for codec in ALL:
            for block in (1, 2, 3, 64, 255, 256):
                for n in (1, 2, 3, 63, 64, 65, 1000):
                    x = rng.normal(size=n).astype(np.float32)
                    payload = L.encode_values(x, codec, block_of(codec, block))
                    self.assertEqual(len(payload), expected_bytes(codec, n, block), (codec, block, n))


class RoundTrip(unittest.TestCase):
    def check(self, x, codec, block):
        x = np.asarray(x, dtype=np.float32)
        payload = L.encode_values(x, codec, block_of(codec, block))
        y = L.decode_values(payload, codec, len(x), block_of(codec, block))
        self.assertEqual(y.dtype, np.float32)
        self.assertEqual(len(y), len(x))
        self.assertTrue(np.all(np.isfinite(y)))
        span = block if codec in L.BLOCK_CODECS else 1
        for start in range(0, len(x), span):
            part = x[start:start + span]
            a = float(np.abs(part.astype(np.float64)).max())
            for i, value in enumerate(part):
                error = abs(float(y[start + i]) - float(value))
                self.assertLessEqual(error, bound(codec, value, a),
                                     "codec %d block %d value %r decoded %r (absmax %r)"
                                     % (codec, block, float(value), float(y[start + i]), a))
        # Decoding is a function of the bytes: the same bytes, the same bits.
        again = L.decode_values(payload, codec, len(x), block_of(codec, block))
        self.assertEqual(y.tobytes(), again.tobytes())
        return y

    def test_random(self):
        rng = np.random.default_rng(2)
        for codec in ALL:
            for block in (1, 3, 64, 256):
                self.check(rng.normal(0.0, 1e-3, size=700), codec, block)
                self.check(rng.standard_cauchy(size=300), codec, block)  # heavy tails: one value dominates a block

    def test_zero_blocks(self):
        for codec in ALL:
            y = self.check(np.zeros(300), codec, 64)
            self.assertTrue(np.all(y == 0))
        # An all-zero block has absmax 0 and zero codes.
        self.assertEqual(L.encode_values(np.zeros(3), L.CODEC_INT8, 256), b"\0" * 7)
        self.assertEqual(L.encode_values(np.zeros(3), L.CODEC_INT4, 256), b"\0" * 6)
        self.assertEqual(L.encode_values(np.zeros(3), L.CODEC_FP8, 256), b"\0" * 7)
        # One zero block between two others stays zero.
        x = np.concatenate([np.ones(4), np.zeros(4), -np.ones(4)])
        for codec in L.BLOCK_CODECS:
            np.testing.assert_array_equal(self.check(x, codec, 4), x)

    def test_huge(self):
        x = np.array([F32_MAX, -F32_MAX, 3e38, -1e38, 1.0, 0.0, BF16_MAX, 3.39e38], dtype=np.float32)
        for codec in ALL:
            for block in (1, 3, 8):
                self.check(x, codec, block)
        # bf16: finite values beyond the largest bfloat16 saturate to it, never to infinity.
        y = L.decode_values(L.encode_values(x[:2], L.CODEC_BF16), L.CODEC_BF16, 2)
        self.assertEqual(list(y), [BF16_MAX, -BF16_MAX])

    def test_all_equal(self):
        for value in (1.0, -2.5, 1e-30, 7e37):
            x = np.full(100, value, dtype=np.float32)
            for codec in ALL:
                y = self.check(x, codec, 32)
                if codec != L.CODEC_BF16:
                    # Every value is its block's absmax: q = +-127, +-7, or E4M3 448, decoded exactly.
                    np.testing.assert_array_equal(y, x)

    def test_tiny_and_subnormal(self):
        x = np.array([1e-45, -3e-45, 1e-40, 1e-38, 0.0, -1e-39], dtype=np.float32)
        for codec in ALL:
            for block in (1, 2, 6):
                self.check(x, codec, block)

    def test_full_scale_is_exact(self):
        # q = 127 decodes to absmax itself: 127/127 * absmax.
        x = np.array([0.3, -0.1, 0.05], dtype=np.float32)
        for codec in L.BLOCK_CODECS:
            y = L.decode_values(L.encode_values(x, codec, 3), codec, 3, 3)
            self.assertEqual(y[0], x[0])


class Ties(unittest.TestCase):
    def test_round_half_away(self):
        y = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999999999999994, 2.4999999999999996, 3.0, -0.0])
        np.testing.assert_array_equal(L.round_half_away(y), [1, 2, 3, -1, -2, -3, 0, 2, 3, 0])

    def test_bf16_ties_to_even(self):
        cases = {
            0x3F808000: 0x3F80,  # 1 + 2^-8: half way between 0x3F80 and 0x3F81, 0x3F80 even
            0x3F818000: 0x3F82,  # half way between 0x3F81 and 0x3F82: up to the even one
            0x3F808001: 0x3F81,  # just above half: up
            0x3F807FFF: 0x3F80,  # just below half: down
            0xBF808000: 0xBF80,  # negative ties too
            0xBF818000: 0xBF82,
            0x7F7FFFFF: 0x7F7F,  # the largest binary32 saturates to the largest bfloat16
            0x7F7F8000: 0x7F7F,  # a tie with infinity saturates too
            0xFF7FFFFF: 0xFF7F,
            0x00000001: 0x0000,  # the smallest subnormal rounds to zero
            0x00008000: 0x0000,  # a tie between 0 and the smallest bf16 subnormal: even, 0
            0x00018000: 0x0002,
            0x80000000: 0x8000,  # -0 keeps its sign
        }
        x = np.array([f32_from_bits(bits) for bits in cases], dtype=np.float32)
        payload = L.encode_values(x, L.CODEC_BF16)
        self.assertEqual(list(struct.unpack("<%dH" % len(cases), payload)), list(cases.values()))

    def test_int8_halves_away_from_zero(self):
        # absmax 127: x/absmax*127 = x, so these are exact halves.
        x = [127.0, 0.5, 1.5, 2.5, -0.5, -2.5, 126.5, -126.5, 0.25, -0.75]
        q = [127, 1, 2, 3, -1, -3, 127, -127, 0, -1]
        payload = L.encode_values(np.array(x, dtype=np.float32), L.CODEC_INT8, 256)
        self.assertEqual(payload, struct.pack("<f", 127.0) + struct.pack("<%db" % len(q), *q))

    def test_int4_halves_away_and_packing(self):
        # absmax 7: x/absmax*7 = x. q = 7, 1, 2, -3, 7; pairs (even index low nibble): 0x17, 0xD2, then 7
        # with a zero high nibble (the odd block's padding).
        x = np.array([7.0, 0.5, 1.5, -2.5, 6.5], dtype=np.float32)
        self.assertEqual(L.encode_values(x, L.CODEC_INT4, 5), struct.pack("<f", 7.0) + bytes([0x17, 0xD2, 0x07]))
        # Block 3 over the same values: [7, .5, 1.5] absmax 7, then [-2.5, 6.5] absmax 6.5.
        second = [round(Fraction(-2.5) / Fraction(6.5) * 7), 7]  # -2.69 -> -3 (no tie)
        self.assertEqual(second, [-3, 7])
        expected = (struct.pack("<f", 7.0) + bytes([0x17, 0x02]) + struct.pack("<f", 6.5) + bytes([0x7D]))
        self.assertEqual(L.encode_values(x, L.CODEC_INT4, 3), expected)

    def test_fp8_nearest_ties_to_even(self):
        # absmax 448: x/absmax*448 = x, and E4M3 codes are written out from the format.
        cases = [(448.0, 0x7E), (1.0, 0x38), (1.0625, 0x38), (1.1875, 0x3A), (1.0626, 0x39), (-1.0, 0xB8),
                 (2.0 ** -9, 0x01), (2.0 ** -10, 0x00), (3 * 2.0 ** -10, 0x02), (2.0 ** -6, 0x08),
                 (7 * 2.0 ** -9, 0x07), (15 * 2.0 ** -10, 0x08), (416.0, 0x7D), (384.0, 0x7C), (432.0, 0x7E), (0.0, 0x00)]
        x = np.array([value for value, _ in cases], dtype=np.float32)
        payload = L.encode_values(x, L.CODEC_FP8, 256)
        self.assertEqual(payload[:4], struct.pack("<f", 448.0))
        self.assertEqual(list(payload[4:]), [code for _, code in cases])

    def test_e4m3_table(self):
        for code in range(256):
            if code & 0x7F == 0x7F:
                self.assertTrue(np.isnan(L.E4M3[code]))
            else:
                self.assertEqual(Fraction(float(L.E4M3[code])), e4m3_reference(code), hex(code))
        self.assertEqual(e4m3_reference(0x7E), 448)


class Decoding(unittest.TestCase):
    def test_values(self):
        # int8: q/127 * absmax, one binary32 rounding.
        payload = struct.pack("<f", 2.0) + struct.pack("<4b", 127, -127, 0, 64)
        y = L.decode_values(payload, L.CODEC_INT8, 4, 256)
        expected = [2.0, -2.0, 0.0, float(np.float32(float(Fraction(64, 127) * 2)))]
        self.assertEqual(list(y), expected)
        # int4: q/7 * absmax; low nibble first.
        payload = struct.pack("<f", 3.5) + bytes([0x9F])  # low 0xF = -1, high 0x9 = -7
        self.assertEqual(list(L.decode_values(payload, L.CODEC_INT4, 2, 2)), [-0.5, -3.5])
        # fp8: e4m3(c)/448 * absmax.
        payload = struct.pack("<f", 448.0) + bytes([0x7E, 0xB8, 0x01])
        self.assertEqual(list(L.decode_values(payload, L.CODEC_FP8, 3, 3)), [448.0, -1.0, 2.0 ** -9])
        # bf16: the upper half of binary32.
        self.assertEqual(list(L.decode_values(struct.pack("<2H", 0x3F80, 0xC040), L.CODEC_BF16, 2)), [1.0, -3.0])

    def test_refuses_invalid_bytes(self):
        good = {codec: L.encode_values(np.linspace(-1, 1, 10), codec, block_of(codec, 4)) for codec in ALL}
        for codec, payload in good.items():
            block = block_of(codec, 4)
            L.decode_values(payload, codec, 10, block)
            for wrong in (payload[:-1], payload + b"\0", b""):
                with self.assertRaises(L.CodecError):
                    L.decode_values(wrong, codec, 10, block)
        for codec in L.BLOCK_CODECS:
            payload = good[codec]
            for scale in (float("nan"), float("inf"), -float("inf"), -1.0, -1e-45):
                with self.assertRaises(L.CodecError, msg="codec %d scale %r" % (codec, scale)):
                    L.decode_values(struct.pack("<f", scale) + payload[4:], codec, 10, 4)
            for block in (0, 65537):
                with self.assertRaises(L.CodecError):
                    L.decode_values(payload, codec, 10, block)
        # int8 -128; int4 -8 in either nibble; a non-zero padding nibble; E4M3 NaN, either sign.
        scale = struct.pack("<f", 1.0)
        bad = [(L.CODEC_INT8, scale + bytes([1, 0x80, 2]), 3, 3),
               (L.CODEC_INT4, scale + bytes([0x08, 0x11]), 4, 4),
               (L.CODEC_INT4, scale + bytes([0x81, 0x11]), 4, 4),
               (L.CODEC_INT4, scale + bytes([0x11, 0x11, 0x10]), 5, 5),          # odd block: high nibble
               (L.CODEC_INT4, scale + bytes([0x11, 0x10]) + scale + bytes([0x01]), 4, 3),  # full odd block
               (L.CODEC_INT4, scale + bytes([0x11, 0x01]) + scale + bytes([0x11]), 4, 3),  # short last block
               (L.CODEC_FP8, scale + bytes([0x38, 0x7F]), 2, 2),
               (L.CODEC_FP8, scale + bytes([0xFF, 0x38]), 2, 2),
               (L.CODEC_BF16, struct.pack("<2H", 0x3F80, 0x7F80), 2, 0),             # infinity
               (L.CODEC_BF16, struct.pack("<2H", 0xFFC0, 0x3F80), 2, 0),             # NaN
               (L.CODEC_F32, struct.pack("<2f", 1.0, float("nan")), 2, 0)]
        for codec, payload, count, block in bad:
            with self.assertRaises(L.CodecError, msg="codec %d payload %s" % (codec, payload.hex())):
                L.decode_values(payload, codec, count, block)
        # The same bytes with the padding and codes fixed are valid.
        self.assertEqual(list(L.decode_values(scale + bytes([0x11, 0x11, 0x01]), L.CODEC_INT4, 5, 5)),
                         [float(np.float32(1 / 7))] * 5)

    def test_refuses_non_finite_values(self):
        for codec in ALL:
            for value in (float("nan"), float("inf"), -float("inf")):
                x = np.array([1.0, value, 2.0], dtype=np.float32)
                with self.assertRaises(L.CodecError):
                    L.encode_values(x, codec, block_of(codec, 2))
        for codec in L.BLOCK_CODECS:
            for block in (0, 65537):
                with self.assertRaises(L.CodecError):
                    L.encode_values(np.ones(3), codec, block)
        with self.assertRaises(L.CodecError):
            L.encode_values(np.ones(3), L.CODEC_BYTES)


class Header(unittest.TestCase):
    def message(self, kind, codec, block, count, payload):
        header = L.encode({"kind": kind, "codec": codec, "block": block, "element_count": count,
                           "learner": 1, "incarnation": 1}, payload)
        return [header, payload] if payload else [header]

    def test_block_at_offset_36(self):
        raw = L.encode({"kind": L.CONTRIBUTION, "codec": L.CODEC_INT8, "block": 0x12345, "element_count": 1})
        self.assertEqual(struct.unpack_from("<I", raw, 36)[0], 0x12345)
        self.assertEqual(raw[7], L.CODEC_INT8)

    def test_compressed_messages_decode(self):
        x = np.linspace(-1, 1, 100)
        for codec in ALL:
            block = block_of(codec, 64)
            payload = L.encode_values(x, codec, block)
            for kind in (L.CONTRIBUTION, L.UPDATE):
                header, body = L.decode(self.message(kind, codec, block, 100, payload))
                self.assertEqual((header["codec"], header["block"], body), (codec, block, payload))
                with self.assertRaises(ValueError):  # a byte short of what the header implies
                    L.decode(self.message(kind, codec, block, 100, payload[:-1]))

    def test_refuses_bad_codec_or_block(self):
        payload = L.encode_values(np.ones(10), L.CODEC_INT8, 4)
        for codec, block, kind in ((8, 0, L.UPDATE), (L.CODEC_INT8, 0, L.UPDATE), (L.CODEC_INT4, 65537, L.UPDATE),
                                   (L.CODEC_BF16, 0, L.STATE), (L.CODEC_BYTES, 0, L.UPDATE)):
            with self.assertRaises(ValueError, msg="codec %d block %d kind %d" % (codec, block, kind)):
                L.decode(self.message(kind, codec, block, 10, payload))

    def test_epoch_at_offset_72_fenced_per_shard(self):
        raw = L.encode({"kind": L.UPDATE, "codec": L.CODEC_F32, "element_count": 0, "tokens": 0x0a0b0c0d0e0f1011})
        self.assertEqual(struct.unpack_from("<Q", raw, 72)[0], 0x0a0b0c0d0e0f1011)
        learner = bare_learner()
        # Before a welcome names S, a message's shard is unknown: not fenced.
        self.assertTrue(learner.admit_epoch({"kind": L.REJECT, "fragment": 0, "steps": 0, "tokens": 9}))
        self.assertEqual(learner.epochs, {})
        # Two syncer shards: shard 1 failed over (epoch 9), shard 0 did not (epoch 3).
        welcome = {"kind": L.WELCOME, "fragment": 1, "steps": 2, "tokens": 9}
        self.assertTrue(learner.admit_epoch(welcome))
        self.assertTrue(learner.admit_epoch(dict(welcome, fragment=0, tokens=3)))
        self.assertTrue(learner.admit_epoch({"kind": L.UPDATE, "fragment": 2, "steps": 0, "tokens": 3}))
        self.assertFalse(learner.admit_epoch({"kind": L.UPDATE, "fragment": 3, "steps": 0, "tokens": 3}))
        self.assertFalse(learner.admit_epoch({"kind": L.END, "fragment": 1, "steps": 0, "tokens": 8}))
        # An update of shard 1 waiting from epoch 9 goes when epoch 10 is heard; shard 0's stays.
        learner.pending = {1: [({"tokens": 9}, None)], 2: [({"tokens": 3}, None)]}
        self.assertTrue(learner.admit_epoch({"kind": L.ACK, "fragment": 1, "steps": 0, "tokens": 10}))
        self.assertEqual(learner.epochs, {0: 3, 1: 10})
        self.assertEqual(learner.pending, {1: [], 2: [({"tokens": 3}, None)]})
        self.assertEqual(learner.stats["stale_epochs"], 1)
        # A bootstrap's welcome (state_wanted, epoch 0) is read whatever the epochs.
        self.assertTrue(learner.admit_epoch({"kind": L.WELCOME, "flags": L.FLAG_STATE_WANTED, "fragment": 0,
                                             "steps": 0, "tokens": 0}))


class FakeArgs:
    adopt = "rebase"
    error_feedback = False
    timeout = 1.0
    verbose = False


def bare_learner(codec=None, block=0, error_feedback=False, fragments=2):
    """A Learner without a socket: what contribute(), on_welcome() and on_update() use, sends recorded."""
    learner = L.Learner.__new__(L.Learner)
    learner.args = FakeArgs()
    learner.args.error_feedback = error_feedback
    learner.model = L.Mlp(8, 16, 4, seed=3)
    learner.fingerprint = L.fingerprint(learner.model.tensors)
    learner.total = len(learner.model.theta)
    learner.learner_id, learner.incarnation = 1, 1
    learner.config, learner.welcomed, learner.plan = None, False, None
    learner.codec, learner.block, learner.residual = codec, block, {}
    learner.step, learner.step_time_ns, learner.transfer_ns = 5, 0, 0
    learner.outstanding, learner.pending, learner.last_sent_base, learner.last_send_step = {}, {}, {}, {}
    learner.stats = {"contributions": 0, "final_contributions": 0, "updates_received": 0, "updates_ignored": 0,
                     "ignored_messages": 0, "invalid_updates": 0, "contribution_bytes": 0, "update_bytes": 0,
                     "contributions_by_fragment": {}, "updates_by_fragment": {}, "update_codecs": {},
                     "stale_epochs": 0}
    learner.sent = []
    learner.epochs, learner.shards, learner.knows_shards = {}, 1, False

    def send(kind, payload=b"", **fields):
        learner.sent.append((kind, payload, fields))
        return len(learner.sent)
    learner.send = send
    learner.plan = L.fragment_plan(learner.model.tensors, fragments)
    learner.base = {p: learner.model.theta[indices].copy() for p, indices in enumerate(learner.plan)}
    learner.base_revision = {p: 0 for p in range(fragments)}
    learner.counters = {p: [32, 1] for p in range(fragments)}
    return learner


def welcome(learner, codec, block):
    return {"kind": L.WELCOME, "flags": 0, "codec": codec, "block": block, "layout": learner.fingerprint,
            "element_count": learner.total, "fragment_count": 2, "sync_period": 10, "overlap": 2, "mixing": 0.0,
            "lock_step": 0}


class LearnerUse(unittest.TestCase):
    def setUp(self):
        L.log.name = "test"
        self._stderr, sys.stderr = sys.stderr, open(os.devnull, "w")  # the learner logs what it refuses

    def tearDown(self):
        sys.stderr.close()
        sys.stderr = self._stderr

    def test_welcome_codec_negotiation(self):
        for codec, block in ((L.CODEC_F32, 0), (L.CODEC_BF16, 0), (L.CODEC_INT8, 64), (L.CODEC_FP8, 1),
                             (L.CODEC_INT4, 65536)):
            learner = bare_learner()
            learner.on_welcome(welcome(learner, codec, block))
            self.assertEqual((learner.codec, learner.block), (codec, block))
        learner = bare_learner()
        learner.on_welcome(welcome(learner, L.CODEC_NONE, 0))  # an older syncer: the codec of its updates
        self.assertIsNone(learner.codec)
        for codec, block in ((L.CODEC_F64, 0), (L.CODEC_BYTES, 0), (8, 0), (L.CODEC_INT8, 0),
                             (L.CODEC_INT4, 65537)):
            learner = bare_learner()
            with self.assertRaises(L.ProtocolError, msg="codec %d block %d" % (codec, block)) as refused:
                learner.on_welcome(welcome(learner, codec, block))
            self.assertIn("bad_config", str(refused.exception))

    def test_contributions_in_the_welcome_codec(self):
        learner = bare_learner(L.CODEC_INT8, 64)
        learner.model.theta += np.float32(0.01)
        learner.contribute(0)
        kind, payload, fields = learner.sent[-1]
        n = len(learner.plan[0])
        self.assertEqual((kind, fields["codec"], fields["block"], fields["element_count"]),
                         (L.CONTRIBUTION, L.CODEC_INT8, 64, n))
        self.assertEqual(len(payload), expected_bytes(L.CODEC_INT8, n, 64))
        np.testing.assert_allclose(L.decode_values(payload, L.CODEC_INT8, n, 64), -0.01, rtol=0, atol=0.01 / 254 + 1e-9)

    def test_non_finite_gradient_is_never_sent(self):
        for codec, block in ((L.CODEC_F32, 0), (L.CODEC_INT8, 64), (L.CODEC_BF16, 0)):
            learner = bare_learner(codec, block)
            learner.model.theta[learner.plan[1][3]] = np.nan
            learner.contribute(0)  # fragment 0 is fine
            with self.assertRaises(L.NonFinite):
                learner.contribute(1)
            self.assertEqual(len(learner.sent), 1)
            self.assertEqual(learner.stats["contributions"], 1)

    def test_rebase_keeps_the_work_since_the_send(self):
        # protocol.md, Session step 5: a send sets base <- theta; an update then takes
        # theta <- theta + (Theta - base), base <- Theta; the next contribution is the work since the send.
        learner = bare_learner()
        learner.config = {"alpha": 0.0, "lock_step": False, "tau": 0}
        learner.stats["updates_adopted"] = 0
        indices = learner.plan[0]
        learner.model.theta[indices] = learner.base[0] - np.float32(0.25)  # 0.25 of work, sent
        learner.contribute(0)
        sent_theta = learner.model.theta[indices].copy()
        np.testing.assert_array_equal(learner.base[0], sent_theta)
        learner.model.theta[indices] -= np.float32(0.125)  # 0.125 more, not sent
        foreign = sent_theta + np.float32(1.0)  # another learner's round moved the fragment by +1
        learner.adopt(0, {"revision": 1, "status": L.STATUS_MERGED}, foreign)
        np.testing.assert_allclose(learner.model.theta[indices], foreign - 0.125, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(learner.base[0], foreign)
        learner.contribute(0)
        _, payload, _ = learner.sent[-1]
        np.testing.assert_allclose(L.decode_values(payload, L.CODEC_F32, len(indices), 0), 0.125, rtol=0, atol=1e-6)
        # The overwrite rule drops that work instead.
        learner.args = FakeArgs()
        learner.args.adopt = "overwrite"
        learner.model.theta[indices] -= np.float32(0.5)
        learner.adopt(0, {"revision": 2, "status": L.STATUS_MERGED}, foreign + np.float32(1.0))
        np.testing.assert_array_equal(learner.model.theta[indices], foreign + np.float32(1.0))

    def test_a_failover_keeps_only_acknowledged_contributions_until_a_newer_state(self):
        # protocol.md, "Failover": after a leader is left and another answers, a contribution the old leader
        # never acknowledged is given up (its fragment may be sent again against the same base); one it
        # acknowledged stays awaited until the new leader sends its fragment at a revision newer than the
        # contribution's base (merged there), adopted or not.
        learner = bare_learner()
        learner.config = {"alpha": 0.0, "lock_step": False, "tau": 0}
        learner.stats.update(updates_adopted=0, acks=0, reconnections=0)
        learner.leave_sequence = None
        learner.model.theta += np.float32(0.01)
        acked, unacked = learner.contribute(0), learner.contribute(1)
        learner.on_ack({"answers": acked})

        class Moved:
            reconnections = 1
        learner.connection, learner.reconnections = Moved(), 0
        learner.rejoined()
        self.assertEqual(sorted(learner.outstanding), [acked])
        self.assertNotIn(1, learner.last_sent_base)
        self.assertEqual(learner.stats["reconnections"], 1)
        same = learner.base[0].copy()
        learner.adopt(0, {"revision": 0, "status": L.STATUS_RESYNC}, same)  # the contribution's base: still open
        self.assertEqual(sorted(learner.outstanding), [acked])
        learner.adopt(1, {"revision": 1, "status": L.STATUS_RESYNC}, learner.base[1].copy())  # another fragment
        self.assertEqual(sorted(learner.outstanding), [acked])
        learner.base_revision[0] = 3  # adopted meanwhile: the newer state below is not adopted, and answers all the same
        learner.adopt(0, {"revision": 2, "status": L.STATUS_RESYNC}, same)
        self.assertEqual(learner.outstanding, {})

    def test_error_feedback(self):
        # e_p = (delta_p + e_p) - decode(code): after k sends, the decoded contributions plus the
        # residual add up to the sum of the outer gradients.
        rng = np.random.default_rng(4)
        for codec, block in ((L.CODEC_INT4, 16), (L.CODEC_INT8, 64), (L.CODEC_BF16, 0)):
            learner = bare_learner(codec, block, error_feedback=True)
            n = len(learner.plan[0])
            total_delta = np.zeros(n)
            total_sent = np.zeros(n)
            for _ in range(5):
                step = rng.normal(0.0, 1e-2, size=n).astype(np.float32)
                learner.model.theta[learner.plan[0]] = learner.base[0] - step  # delta = step
                total_delta += step
                learner.contribute(0)
                _, payload, fields = learner.sent[-1]
                total_sent += L.decode_values(payload, codec, n, fields["block"])
            residual = learner.residual[0].astype(np.float64)
            np.testing.assert_allclose(total_sent + residual, total_delta, rtol=0, atol=1e-6)
            self.assertGreater(np.abs(residual).max(), 0)  # the codec did round something away
        # Without the flag there is no residual.
        learner = bare_learner(L.CODEC_INT4, 16)
        learner.model.theta += np.float32(0.3)
        learner.contribute(0)
        self.assertEqual(learner.residual, {})

    def test_updates_decoded_and_invalid_ones_ignored(self):
        learner = bare_learner()
        learner.on_welcome(welcome(learner, L.CODEC_INT8, 64))
        n = len(learner.plan[0])
        theta = np.linspace(-1, 1, n).astype(np.float32)
        payload = L.encode_values(theta, L.CODEC_BF16)
        header = {"kind": L.UPDATE, "fragment": 0, "codec": L.CODEC_BF16, "block": 0, "element_count": n,
                  "revision": 1, "status": L.STATUS_MERGED, "answers": 0, "hold_ns": 0}
        learner.on_update(header, payload)
        (_, values), = learner.pending[0]
        np.testing.assert_array_equal(values, L.decode_values(payload, L.CODEC_BF16, n))
        self.assertEqual(learner.stats["update_bytes"], 2 * n)
        # An update whose bytes are invalid (int8 -128) is ignored and counted, not adopted.
        codes = L.encode_values(theta, L.CODEC_INT8, 64)
        broken = codes[:4] + b"\x80" + codes[5:]
        learner.on_update(dict(header, codec=L.CODEC_INT8, block=64, revision=2), broken)
        self.assertEqual(len(learner.pending[0]), 1)
        self.assertEqual((learner.stats["invalid_updates"], learner.stats["ignored_messages"]), (1, 1))


class Parts(unittest.TestCase):
    """docs/protocol.md, "Framing": a payload in parts, each continuation a 16-byte
    frame b"DLCC", u32 index, u64 offset, built here by hand."""

    def update(self, payload):
        return L.encode({"kind": L.UPDATE, "codec": L.CODEC_BF16, "element_count": len(payload) // 2}, payload)

    @staticmethod
    def continuation(index, offset):
        return b"DLCC" + struct.pack("<IQ", index, offset)

    def test_parts_reassemble_into_the_message(self):
        payload = bytes(range(200)) * 5
        header = self.update(payload)
        parts = L.Parts()
        self.assertIsNone(parts.take([header, payload[:300]]))
        self.assertIsNone(parts.take([self.continuation(1, 300), payload[300:600]]))
        whole = parts.take([self.continuation(2, 600), payload[600:]])
        self.assertEqual(whole, [header, payload])
        decoded_header, decoded = L.decode(whole)
        self.assertEqual(decoded, payload)
        self.assertEqual(decoded_header["element_count"], 500)

    def test_a_part_out_of_place_or_of_no_message_is_refused(self):
        payload = bytes(1000)
        header = self.update(payload)
        for index, offset, data in ((2, 300, payload[300:600]),     # a part skipped
                                    (1, 299, payload[299:600]),     # at the wrong offset
                                    (1, 300, bytes(701)),           # past the end
                                    (1, 300, b"")):                 # empty
            parts = L.Parts()
            parts.take([header, payload[:300]])
            with self.assertRaises(ValueError):
                parts.take([self.continuation(index, offset), data])
            with self.assertRaises(ValueError):  # nothing is pending any more
                parts.take([self.continuation(1, 300), payload[300:]])

    def test_whole_messages_pass_through(self):
        payload = bytes(64)
        whole = [self.update(payload), payload]
        self.assertEqual(L.Parts().take(whole), whole)
        self.assertEqual(L.Parts().take([whole[0]]), [whole[0]])  # for decode() to refuse


if __name__ == "__main__":
    unittest.main(verbosity=1)
