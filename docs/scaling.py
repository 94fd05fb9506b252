#!/usr/bin/env python3
"""Scaling on paper: the compute utilization of each training method across
datacenters, for 1B, 12B and 100B parameters at 1, 5 and 100 Gbit/s.

Compute utilization = compute time / (compute time + time blocked on
communication), the measure of the compute-utilization simulation of
Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512). The step time
comes from FLOPs (6 per parameter per token), the communication time from
the bytes each method moves over one datacenter's link. docs/scaling.md
states every formula and why each number below was chosen; this script
prints the tables of that page (`python3 docs/scaling.py`), exactly as they
appear there, between its "scaling.py output" markers.

Standard library only. Units: seconds, bytes, bits per second, FLOP.
"""

import math

# --- The deployment -------------------------------------------------------

M = 4                  # datacenters, one learner (one model replica) each
H = 100                # inner steps between two syncs of a parameter
P = 4                  # fragments (Streaming and Decoupled DiLoCo)
TAU = 5                # inner steps of overlap (the library's presets, bench/wan)
QUORUM = 2             # Decoupled DiLoCo quorum K (bench/wan's `decoupled`)
ROUNDS = M / QUORUM    # revisions of a fragment per period, each sent to every learner (at most M/K)

PEAK_FLOPS = 1e15      # FLOP/s per accelerator, dense bf16 (H100/H200 class: 989e12, rounded)
MFU = 0.40             # sustained share of the peak
FLOP_PER_PARAM_TOKEN = 6  # forward 2 + backward 4 (Kaplan et al. 2020; Hoffmann et al. 2022)
BACKWARD_SHARE = 4 / 6    # part of a step an all-reduce can hide behind (the backward pass)

# Model sizes: (name, parameters, accelerators per datacenter, tokens per step per datacenter)
MODELS = [
    ("1B", 1e9, 32, 1e6),
    ("12B", 12e9, 256, 2e6),
    ("100B", 100e9, 2048, 4e6),
]

LINKS_GBIT = [1, 5, 100]   # between datacenters, each direction, per datacenter
TARGET = 0.95              # for "bandwidth needed"

# --- Bytes on the wire, per parameter --------------------------------------

# docs/protocol.md "Codecs" and docs/compression.md, block 256 values.
BYTES = {
    "fp32": 4.0,
    "bf16": 2.0,
    "int8": (4 + 256) / 256,        # f32 scale + 256 codes: 1.016
    "int4": (4 + 256 // 2) / 256,   # f32 scale + 128 bytes: 0.516
}

# Payload share of a link's rate: TCP over a link whose rate counts Ethernet
# and IP headers delivered 13.39 of 14 and 95.64 of 100 Mbit/s of payload
# (bench/wan/README.md, the wan.py self-check). Every method gets it.
PAYLOAD_SHARE = 0.956

# --- The syncer's work, one CPU core ---------------------------------------

# Parameters per second on one thread (bench/codecs/README.md, -march=native,
# 2-vCPU VM): GB/s as counted divided by the bytes counted per parameter.
DECODE_ACC = {"fp32": 51.3e9 / 12, "bf16": 53.0e9 / 10, "int4": 36.1e9 / 8.516}
NESTEROV = 51.9e9 / 20     # the outer step: reads Θ, m, Δ, writes Θ, m
ENCODE_BF16 = 28.6e9 / 10  # encode/bf16, standing in for encoding an update


# --- Building blocks -------------------------------------------------------

def step_seconds(params, chips, tokens):
    """Compute time of one inner step in one datacenter."""
    return FLOP_PER_PARAM_TOKEN * params * tokens / (chips * PEAK_FLOPS * MFU)


def seconds_on_link(nbytes, gbit):
    """Time to move nbytes of payload in one direction of a link."""
    return nbytes * 8 / (gbit * 1e9 * PAYLOAD_SHARE)


def ring_allreduce_seconds(nbytes, gbit):
    """Ring all-reduce of nbytes among M datacenters: every link carries
    2(M-1)/M of them each way (reduce-scatter, then all-gather)."""
    return seconds_on_link(2 * (M - 1) / M * nbytes, gbit)


def syncer_round_seconds(params, contributions, up, down):
    """One core of the syncer closing one round over `params` parameters:
    decode-accumulate every contribution, one outer step, encode the update."""
    encode = 0.0 if down == "fp32" else params / ENCODE_BF16
    return contributions * params / DECODE_ACC[up] + params / NESTEROV + encode


def star_sync_seconds(params, up, down, gbit):
    """Synchronous round through the syncer (the library's DiLoCo): every
    learner uploads, the syncer merges, every learner downloads."""
    return (seconds_on_link(params * BYTES[up], gbit)
            + syncer_round_seconds(params, M, up, down)
            + seconds_on_link(params * BYTES[down], gbit))


# --- The methods: compute utilization in [0, 1] ----------------------------

def data_parallel(params, t, gbit):
    """All-reduce the bf16 gradients every step, hidden behind the backward pass."""
    comm = ring_allreduce_seconds(params * BYTES["bf16"], gbit)
    blocked = max(0.0, comm - BACKWARD_SHARE * t)
    return t / (t + blocked)


def diloco(params, t, gbit, codec="bf16"):
    """Every H steps, all-reduce the whole outer gradient, hidden behind the
    backward pass of the last inner step only."""
    comm = ring_allreduce_seconds(params * BYTES[codec], gbit)
    blocked = max(0.0, comm - BACKWARD_SHARE * t)
    return H * t / (H * t + blocked)


def streaming(params, t, gbit, codec="bf16"):
    """Every H/P steps, all-reduce one fragment, hidden behind a backward pass
    and the TAU steps after it."""
    comm = ring_allreduce_seconds(params / P * BYTES[codec], gbit)
    blocked = max(0.0, comm - (BACKWARD_SHARE + TAU) * t)
    return (H / P) * t / ((H / P) * t + blocked)


def diloco_syncer(params, t, gbit, codec="bf16"):
    """DiLoCo through the library's syncer: up, merge on one core, down. The
    learner sends after its step returns: nothing is hidden."""
    comm = star_sync_seconds(params, codec, codec, gbit)
    return H * t / (H * t + comm)


def streaming_syncer(params, t, gbit, up="bf16", down="bf16"):
    """Streaming DiLoCo through the library's syncer, one fragment at a time.
    Updates carry parameters, not gradients: they stay bf16 under int4."""
    comm = star_sync_seconds(params / P, up, down, gbit)
    blocked = max(0.0, comm - TAU * t)
    return (H / P) * t / ((H / P) * t + blocked)


def decoupled(params, t, gbit, up="bf16", down="bf16"):
    """Nobody waits. Per period of H steps a learner's link carries every
    fragment up once and ROUNDS revisions of every fragment down (full
    duplex: the busier direction counts), and the syncer's core does the
    work of all M learners. Below 1, this is the share of the planned
    outer rounds that get through (the rate the learners would have to
    slow to if H were held)."""
    period = H * t
    link = max(seconds_on_link(params * BYTES[up], gbit),
               seconds_on_link(ROUNDS * params * BYTES[down], gbit))
    syncer = ROUNDS * syncer_round_seconds(params, M / ROUNDS, up, down)
    return min(1.0, period / max(link, syncer))


METHODS = [
    ("Data parallel, bf16 gradients (ring)", data_parallel),
    ("DiLoCo H=100, bf16 (ring)", diloco),
    ("Streaming DiLoCo P=4 τ=5, bf16 (ring)", streaming),
    ("Streaming DiLoCo P=4 τ=5, int4 (ring)", lambda n, t, g: streaming(n, t, g, "int4")),
    ("DiLoCo H=100, bf16 (syncer, 1 core)", diloco_syncer),
    ("Streaming DiLoCo P=4 τ=5, bf16 (syncer, 1 core)", streaming_syncer),
    ("Streaming DiLoCo P=4 τ=5, int4 up / bf16 down (syncer, 1 core)",
     lambda n, t, g: streaming_syncer(n, t, g, "int4", "bf16")),
    ("Decoupled DiLoCo K=2, fp32 up / fp32 down", lambda n, t, g: decoupled(n, t, g, "fp32", "fp32")),
    ("Decoupled DiLoCo K=2, bf16 up / bf16 down", lambda n, t, g: decoupled(n, t, g, "bf16", "bf16")),
    ("Decoupled DiLoCo K=2, int4 up / bf16 down", lambda n, t, g: decoupled(n, t, g, "int4", "bf16")),
    ("Decoupled DiLoCo K=2, int4 up / int4 down (what-if)", lambda n, t, g: decoupled(n, t, g, "int4", "int4")),
]


# --- Output ------------------------------------------------------------------

def percent(u):
    """One decimal, rounded down, so that a blocked method never shows 100."""
    return "100" if u >= 1.0 else f"{math.floor(u * 1000) / 10:.1f}"


def significant(x):
    """Three significant digits (whole numbers from 100 up)."""
    return f"{x:,.0f}" if x >= 100 else f"{x:#.3g}"


def bandwidth_needed(method, params, t, target=TARGET):
    """Smallest link rate (Gbit/s) reaching `target`, by bisection on a log
    scale; None if no rate does (the syncer's core is the limit)."""
    lo, hi = 1e-4, 1e6
    if method(params, t, hi) < target:
        return None
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if method(params, t, mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def main():
    out = []
    out.append("**Per model size** (one datacenter; R = time to send the bf16 model "
               "over one link, at g·W, / step time):")
    out.append("")
    out.append("| model | accelerators | tokens per step | step time | bf16 model | "
               + " | ".join(f"R at {g} Gbit/s" for g in LINKS_GBIT) + " |")
    out.append("|---|--:|--:|--:|--:|" + "--:|" * len(LINKS_GBIT))
    for name, n, chips, tokens in MODELS:
        t = step_seconds(n, chips, tokens)
        model = n * BYTES["bf16"]
        rs = [seconds_on_link(model, g) / t for g in LINKS_GBIT]
        out.append(f"| {name} | {chips} | {tokens / 1e6:g}M | {t:.3f} s | {model / 1e9:g} GB | "
                   + " | ".join(significant(r) for r in rs) + " |")
    out.append("")

    out.append("**Compute utilization (%)**, M = 4 datacenters, link rate per datacenter "
               "and direction:")
    out.append("")
    header = ["method"] + [f"{name} @ {g} Gbit/s" for name, *_ in MODELS for g in LINKS_GBIT]
    out.append("| " + " | ".join(header) + " |")
    out.append("|---|" + "--:|" * (len(header) - 1))
    for label, method in METHODS:
        cells = []
        for name, n, chips, tokens in MODELS:
            t = step_seconds(n, chips, tokens)
            cells += [percent(method(n, t, g)) for g in LINKS_GBIT]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out.append("")

    out.append(f"**Link rate needed for ≥ {TARGET * 100:.0f} % utilization (Gbit/s)**:")
    out.append("")
    out.append("| method | " + " | ".join(name for name, *_ in MODELS) + " |")
    out.append("|---|" + "--:|" * len(MODELS))
    for label, method in METHODS:
        cells = []
        for name, n, chips, tokens in MODELS:
            w = bandwidth_needed(method, n, step_seconds(n, chips, tokens))
            cells.append("never (syncer core)" if w is None else significant(w))
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out.append("")

    out.append("**The syncer's core**, seconds of one core per round of the whole model "
               "(4 contributions decoded, one outer step, the update encoded), against a "
               "period of H steps:")
    out.append("")
    out.append("| model | bf16 round | int4 up, bf16 down | fp32 round | period H·t | "
               "Decoupled K=2 bf16: core busy |")
    out.append("|---|--:|--:|--:|--:|--:|")
    for name, n, chips, tokens in MODELS:
        t = step_seconds(n, chips, tokens)
        bf16 = syncer_round_seconds(n, M, "bf16", "bf16")
        int4 = syncer_round_seconds(n, M, "int4", "bf16")
        fp32 = syncer_round_seconds(n, M, "fp32", "fp32")
        busy = ROUNDS * syncer_round_seconds(n, M / ROUNDS, "bf16", "bf16") / (H * t)
        out.append(f"| {name} | {bf16:.1f} s | {int4:.1f} s | {fp32:.1f} s | {H * t:.1f} s | "
                   f"{busy * 100:.0f} % |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
