#!/usr/bin/python3
"""An emulated wide-area network made of Linux network namespaces.

One namespace per site: a hub (the syncer's datacenter) and one leaf per
learner's datacenter, each leaf joined to the hub by its own veth pair. Every
link has a rate and a round-trip time, the same in both directions:

- rate: a token bucket (`tc qdisc ... tbf`) on the egress of each veth end,
  burst >= max(128 KiB, 1 ms of the rate), queue limit about one
  bandwidth-delay product (netem is not used: some kernels, such as the
  reference machine's, are built without it);
- delay: `diloco_wan_delay` (wan_delay.cpp) holds every packet arriving on a
  veth for RTT/2, fed by an iptables NFQUEUE rule in the raw table's
  PREROUTING chain of the receiving namespace;
- TCP: tcp_rmem/tcp_wmem raised to >= 4 BDP in every namespace, and no slow
  start after idle (as a WAN deployment would set it).

Everything this module creates carries the prefix `dlwan` (namespaces
`dlwan-<id>-<site>`, veths `dlw<id>h<i>`/`dlw<id>e<i>`, iptables rules with the
comment `dlwan-<id>`, the delay program `diloco_wan_delay` running inside them)
and is removed when the `network` context ends, also on SIGINT, SIGTERM and
SIGHUP; `wan.py cleanup` removes what a SIGKILLed run left.

    wan.py check --rate 100mbit --rtt 20ms      # one link: measured RTT and bandwidth vs requested (JSON)
    wan.py smoke                                # the CTest: a link, its RTT, nothing left afterwards
    wan.py exec --rate 30mbit --rtt 10ms --leaves 2 -- hub CMD... ';' l0 CMD...   # commands inside a network
    wan.py cleanup [--dry-run]                  # leftovers of any run, listed and removed

Needs root, `ip` (iproute2), `tc`, `iptables` and the delay program
(built by CMake when libnetfilter-queue is found, else compiled here).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "dlwan"        # namespaces, iptables comments
LINK_PREFIX = "dlw"     # interface names (15 characters at most)
DELAY_PROGRAM = "diloco_wan_delay"
HERE = Path(__file__).resolve().parent

# ---------------------------------------------------------------- helpers


def sh(*argv: str, check: bool = True, timeout: float = 30, capture: bool = True) -> str:
    """Runs argv (no shell), returns stdout; raises with stderr on failure."""
    r = subprocess.run(argv, capture_output=capture, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {(r.stderr or '').strip()}")
    return r.stdout or ""


def in_ns(ns: str, *argv: str, **kw) -> str:
    return sh("ip", "netns", "exec", ns, *argv, **kw)


_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}


def parse_rate(text: str) -> float:
    """'30mbit', '2.5gbit', '800kbit' -> bits per second."""
    m = re.fullmatch(r"([0-9.]+)\s*([kmg]?)bit", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"rate '{text}': want e.g. 30mbit, 1gbit")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_time(text: str) -> float:
    """'10ms', '250us', '0.04s' -> seconds."""
    m = re.fullmatch(r"([0-9.]+)\s*(us|ms|s)", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"time '{text}': want e.g. 10ms, 500us")
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]


def find_delay_program(explicit: str | None = None) -> str:
    """The delay program: given, built by CMake next to the usual build
    folders, or compiled here with pkg-config's flags for libnetfilter_queue."""
    if explicit:
        return explicit
    for build in (HERE.parent.parent / "build", Path.cwd() / "build", Path.cwd()):
        candidate = build / "bench" / "wan" / DELAY_PROGRAM
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"{PREFIX}-tools" / DELAY_PROGRAM
    source = HERE / "wan_delay.cpp"
    if out.is_file() and out.stat().st_mtime >= source.stat().st_mtime:
        return str(out)
    compiler = shutil.which("c++") or shutil.which("g++")
    if not compiler or not shutil.which("pkg-config"):
        raise RuntimeError("no delay program: build the target diloco_wan_delay (needs libnetfilter-queue-dev)")
    libs = sh("pkg-config", "--cflags", "--libs", "libnetfilter_queue").split()
    out.parent.mkdir(parents=True, exist_ok=True)
    sh(compiler, "-std=c++20", "-O2", "-o", str(out), str(source), *libs, timeout=300)
    return str(out)


# ---------------------------------------------------------------- the network


@dataclass
class link:
    """A leaf's link to the hub: rate in bit/s and round-trip time in s, the
    same both ways (0: not limited, not delayed)."""
    name: str
    rate_bps: float
    rtt_s: float

    @property
    def bdp_bytes(self) -> float:
        return self.rate_bps / 8 * self.rtt_s


@dataclass
class network:
    """Namespaces joined in a star: `hub` and one leaf per link. Use as a
    context manager; `popen` runs a command inside a site. `routed`: the hub
    forwards between leaves (each leaf's default route goes through it), and
    answers at `service_address` on every link."""
    links: list[link]
    delay_program: str | None = None
    routed: bool = False
    run_id: str = field(default_factory=lambda: secrets.token_hex(2))
    hub_name: str = "hub"
    _procs: list[tuple[str, subprocess.Popen]] = field(default_factory=list)
    _delays: list[subprocess.Popen] = field(default_factory=list)
    _namespaces: list[str] = field(default_factory=list)
    _old_handlers: dict = field(default_factory=dict)

    # names
    def ns(self, site: str) -> str:
        return f"{PREFIX}-{self.run_id}-{site}"

    def hub_ns(self) -> str:
        return self.ns(self.hub_name)

    def hub_if(self, i: int) -> str:
        return f"{LINK_PREFIX}{self.run_id}h{i}"

    def leaf_if(self, i: int) -> str:
        return f"{LINK_PREFIX}{self.run_id}e{i}"

    def hub_address(self, i: int | str) -> str:
        """The hub's address as seen from leaf i (or a template, with a
        placeholder such as diloco_chaos's "{id}" for i)."""
        return f"10.77.{i}.1"

    def leaf_address(self, i: int | str) -> str:
        return f"10.77.{i}.2"

    @property
    def service_address(self) -> str:
        """With `routed`: an address of the hub's own (on its loopback) that
        every leaf reaches, whichever link is down."""
        return "10.77.255.1"

    @property
    def tag(self) -> str:
        return f"{PREFIX}-{self.run_id}"

    # lifetime
    def __enter__(self) -> "network":
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, _raise_interrupt)
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc) -> None:
        # A second signal while tearing down must not stop the teardown.
        for sig in self._old_handlers:
            signal.signal(sig, signal.SIG_IGN)
        try:
            self.down()
        finally:
            for sig, handler in self._old_handlers.items():
                signal.signal(sig, handler)

    def up(self) -> None:
        program = find_delay_program(self.delay_program) if any(l.rtt_s > 0 for l in self.links) else ""
        if len(self.links) > 250:
            raise ValueError("at most 250 links")
        sites = [self.hub_name] + [l.name for l in self.links]
        for site in sites:
            name = self.ns(site)
            sh("ip", "netns", "add", name)
            self._namespaces.append(name)
            in_ns(name, "ip", "link", "set", "lo", "up")
        for i, l in enumerate(self.links):
            hub, leaf = self.hub_ns(), self.ns(l.name)
            # Both ends are created inside their namespaces: nothing ever
            # appears in the root namespace.
            sh("ip", "link", "add", self.hub_if(i), "netns", hub, "type", "veth",
               "peer", "name", self.leaf_if(i), "netns", leaf)
            for ns_, ifname, addr in ((hub, self.hub_if(i), self.hub_address(i)),
                                      (leaf, self.leaf_if(i), self.leaf_address(i))):
                in_ns(ns_, "ip", "addr", "add", f"{addr}/24", "dev", ifname)
                in_ns(ns_, "ip", "link", "set", ifname, "up")
                self._shape(ns_, ifname, l)
            if self.routed:
                in_ns(leaf, "ip", "route", "add", "default", "via", self.hub_address(i))
        if self.routed:
            in_ns(self.hub_ns(), "ip", "addr", "add", f"{self.service_address}/32", "dev", "lo")
            in_ns(self.hub_ns(), "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        for site in sites:
            bdp = max([l.bdp_bytes for l in self.links if site in (self.hub_name, l.name)] + [0])
            self._tune_tcp(self.ns(site), bdp)
        # Delay on ingress: hub side queue i for link i, leaf side queue 0.
        for i, l in enumerate(self.links):
            self._delay(program, self.hub_ns(), self.hub_if(i), i, l.rtt_s / 2)
            self._delay(program, self.ns(l.name), self.leaf_if(i), 0, l.rtt_s / 2)

    def _shape(self, ns_: str, ifname: str, l: link) -> None:
        if l.rate_bps <= 0:
            return
        burst = max(128 * 1024, int(l.rate_bps / 8 * 1e-3))
        limit = max(int(l.bdp_bytes), burst)
        in_ns(ns_, "tc", "qdisc", "replace", "dev", ifname, "root", "tbf",
              "rate", f"{int(l.rate_bps)}bit", "burst", str(burst), "limit", str(limit))

    def _tune_tcp(self, ns_: str, bdp: float) -> None:
        big = max(4 << 20, int(4 * bdp))
        in_ns(ns_, "sysctl", "-q", "-w",
              f"net.ipv4.tcp_rmem=4096 131072 {big}", f"net.ipv4.tcp_wmem=4096 65536 {big}",
              "net.ipv4.tcp_slow_start_after_idle=0")

    def _delay(self, program: str, ns_: str, ifname: str, queue: int, delay_s: float) -> None:
        if delay_s <= 0:
            return
        p = subprocess.Popen(["ip", "netns", "exec", ns_, *_realtime(), program, "--queue", str(queue),
                              "--delay-us", str(int(round(delay_s * 1e6)))],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        self._delays.append(p)
        ready, _, _ = select.select([p.stdout], [], [], 10)
        if not ready or p.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{DELAY_PROGRAM} in {ns_} did not start: {_drain(p)}")
        in_ns(ns_, "iptables", "-w", "5", "-t", "raw", "-A", "PREROUTING", "-i", ifname,
              "-m", "comment", "--comment", self.tag, "-j", "NFQUEUE", "--queue-num", str(queue))

    def popen(self, site: str, argv: list[str], **kw) -> subprocess.Popen:
        """Starts argv inside `site`'s namespace (its own session, so that a
        terminal's ^C reaches only this script, which then stops it)."""
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(site), *argv], start_new_session=True, **kw)
        self._procs.append((site, p))
        return p

    def run(self, site: str, argv: list[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.ns(site), *argv], timeout=timeout, **kw)

    def counters(self) -> dict:
        """Bytes and packets each veth end transmitted, by interface."""
        out = {}
        for i, l in enumerate(self.links):
            for ns_, ifname in ((self.hub_ns(), self.hub_if(i)), (self.ns(l.name), self.leaf_if(i))):
                stats = {}
                for what in ("tx_bytes", "tx_packets", "tx_dropped"):
                    stats[what] = int(in_ns(ns_, "cat", f"/sys/class/net/{ifname}/statistics/{what}").strip())
                q = in_ns(ns_, "tc", "-s", "qdisc", "show", "dev", ifname)
                m = re.search(r"dropped (\d+)", q)
                stats["qdisc_dropped"] = int(m.group(1)) if m else 0
                out[ifname] = stats
        return out

    def down(self) -> None:
        for _, p in self._procs:
            _stop(p)
        self._procs.clear()
        for p in self._delays:
            _stop(p)
        self._delays.clear()
        for name in reversed(self._namespaces):
            _remove_namespace(name)
        self._namespaces.clear()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _realtime() -> list[str]:
    """`chrt --fifo 1` where available: a packet due now must not wait for a
    CPU behind other work (on a busy 2-core machine that adds milliseconds);
    the program sleeps between packets, so it takes little CPU from others."""
    return ["chrt", "--fifo", "1"] if shutil.which("chrt") else []


def _drain(p: subprocess.Popen) -> str:
    with contextlib.suppress(Exception):
        p.kill()
        return p.communicate(timeout=5)[1].strip()
    return "?"


def _stop(p: subprocess.Popen, grace: float = 3.0) -> None:
    """SIGTERM to the process's session, SIGKILL after `grace` seconds."""
    if p.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)
    with contextlib.suppress(Exception):
        p.communicate(timeout=1)


def _kill_pids(pids: list[int], grace: float = 3.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _remove_namespace(name: str) -> None:
    """Ends every process inside the namespace (by pid), then deletes it;
    its veths, qdiscs and iptables rules go with it."""
    pids = [int(p) for p in sh("ip", "netns", "pids", name, check=False).split()]
    _kill_pids(pids)
    sh("ip", "netns", "del", name, check=False)


# ---------------------------------------------------------------- leftovers


def leftovers() -> dict:
    """What any run of this module left: namespaces, processes in them,
    delay programs anywhere, interfaces and iptables rules in the root
    namespace with the prefix."""
    namespaces = [l.split()[0] for l in sh("ip", "netns", "list", check=False).splitlines()
                  if l.startswith(PREFIX + "-")]
    pids = {ns_: [int(p) for p in sh("ip", "netns", "pids", ns_, check=False).split()] for ns_ in namespaces}
    links = [m.group(1) for m in re.finditer(r"^\d+: (" + LINK_PREFIX + r"[0-9a-f]{4}[he]\d+)[@:]",
                                               sh("ip", "-o", "link", "show", check=False), re.M)]
    delays = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(d / "exe").endswith("/" + DELAY_PROGRAM):
                    delays.append(int(d.name))
    rules = []
    if shutil.which("iptables"):
        for table in ("raw", "mangle", "filter"):
            rules += [(table, r) for r in sh("iptables", "-w", "5", "-t", table, "-S", check=False).splitlines()
                      if PREFIX + "-" in r]
    qdiscs = [l for l in sh("tc", "qdisc", "show", check=False).splitlines()
              if re.search(r"dev " + LINK_PREFIX + r"[0-9a-f]{4}[he]\d+ ", l)]
    return {"namespaces": namespaces, "processes": pids, "delay_programs": delays, "links": links,
            "iptables_rules": [f"-t {t} {r}" for t, r in rules], "qdiscs": qdiscs}


def is_clean(found: dict) -> bool:
    return not any(found[k] for k in ("namespaces", "delay_programs", "links", "iptables_rules", "qdiscs"))


def left_behind(before: dict, after: dict) -> list[str]:
    """What `after` (leftovers()) holds that `before` did not: one line per
    kind (namespaces, delay programs, links, iptables rules, qdiscs)."""
    found = []
    for k in ("namespaces", "delay_programs", "links", "iptables_rules", "qdiscs"):
        new = [x for x in after[k] if x not in before[k]]
        if new:
            found.append(f"left behind: {k} {new}")
    return found


def cleanup(dry_run: bool = False) -> dict:
    found = leftovers()
    if dry_run:
        return found
    for ns_ in found["namespaces"]:
        _remove_namespace(ns_)
    _kill_pids(found["delay_programs"])
    for l in found["links"]:
        sh("ip", "link", "del", l, check=False)
    for r in found["iptables_rules"]:
        table, rule = r.split(" ", 2)[1], r.split(" ", 2)[2]
        if rule.startswith("-A "):
            sh("iptables", "-w", "5", "-t", table, "-D", *rule[3:].split(), check=False)
    return found


# ---------------------------------------------------------------- measurements


def ping_rtt(net: network, site: str, address: str, count: int = 20, interval: float = 0.05) -> dict:
    """Round-trip times from `site` to `address`, in ms (ping -U: the time
    in user space on both ends, no kernel timestamp shortcuts): min, median,
    max. The median, not the mean, is compared with the request: on a busy
    machine a few echoes wait for a CPU."""
    r = net.run(site, ["ping", "-n", "-U", "-c", str(count), "-i", str(interval), "-W", "2", address],
                capture_output=True, text=True, timeout=count * interval + 30)
    times = sorted(float(t) for t in re.findall(r"time=([0-9.]+) ms", r.stdout))
    if r.returncode != 0 or not times:
        raise RuntimeError(f"ping from {site} to {address} failed: {r.stdout}{r.stderr}")
    return {"min_ms": times[0], "median_ms": times[len(times) // 2], "max_ms": times[-1], "count": len(times)}


def throughput(net: network, sender: str, receiver: str, address: str, seconds: float) -> float:
    """Goodput of one TCP stream from `sender` to `address` (in `receiver`),
    bit/s of payload, measured at the receiver after the first RTTs (the
    first 20 % of the time)."""
    port = 5201
    sink = net.popen(receiver, [sys.executable, __file__, "_sink", address, str(port), str(seconds)],
                     stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # wait until it listens
            if net.run(receiver, ["ss", "-ltn", f"sport = :{port}"], capture_output=True,
                       text=True).stdout.count("LISTEN"):
                break
            time.sleep(0.05)
        src = net.run(sender, [sys.executable, __file__, "_source", address, str(port), str(seconds)],
                      capture_output=True, text=True, timeout=seconds + 30)
        out, _ = sink.communicate(timeout=seconds + 30)
        if src.returncode != 0 or sink.returncode != 0:
            raise RuntimeError(f"throughput test failed: {src.stderr}")
        return float(json.loads(out)["bps"])
    finally:
        _stop(sink)


def _sink(address: str, port: int, seconds: float) -> None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((address, port))
    s.listen(1)
    s.settimeout(15)
    c, _ = s.accept()
    c.settimeout(seconds + 15)
    buf = bytearray(1 << 20)
    total, marks = 0, []
    start = time.monotonic()
    while True:
        n = c.recv_into(buf)
        if n == 0:
            break
        total += n
        marks.append((time.monotonic() - start, total))
    # Steady state: from 20 % of the run to its end.
    t0 = 0.2 * marks[-1][0]
    first = next(m for m in marks if m[0] >= t0)
    bps = 8 * (marks[-1][1] - first[1]) / max(1e-9, marks[-1][0] - first[0])
    print(json.dumps({"bytes": total, "bps": bps}))


def _source(address: str, port: int, seconds: float) -> None:
    s = socket.create_connection((address, port), timeout=15)
    data = bytes(1 << 20)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    s.close()


def check_link(rate_bps: float, rtt_s: float, seconds: float, delay_program: str | None,
               rtt_tolerance: float = 0.15, rate_low: float = 0.85, rate_high: float = 1.02,
               bandwidth: bool = True) -> dict:
    """Builds hub <-> one leaf, measures RTT (ping) and goodput both ways and
    compares them with the request: RTT within max(1 ms, tolerance x RTT),
    goodput in [rate_low, rate_high] x rate (tbf counts Ethernet headers, so
    about 95 % is the ceiling)."""
    result = {"rate_mbit": rate_bps / 1e6, "rtt_ms": rtt_s * 1e3}
    with network([link("b", rate_bps, rtt_s)], delay_program=delay_program) as net:
        # Warm the path (ARP) so the first echo does not count the lookup.
        ping_rtt(net, "b", net.hub_address(0), count=2, interval=0.05)
        rtt = ping_rtt(net, "b", net.hub_address(0))
        # Never shorter than requested (less 3 %), and the median within
        # max(1 ms, tolerance x RTT) of it.
        rtt_ok = (rtt["min_ms"] >= 0.97 * rtt_s * 1e3 and
                  abs(rtt["median_ms"] - rtt_s * 1e3) <= max(1.0, rtt_tolerance * rtt_s * 1e3))
        result.update({"measured_rtt_ms": rtt, "rtt_ok": rtt_ok})
        ok = rtt_ok
        if bandwidth:
            up = throughput(net, "b", net.hub_name, net.hub_address(0), seconds)
            down = throughput(net, net.hub_name, "b", net.leaf_address(0), seconds)
            for name, bps in (("up", up), ("down", down)):
                fraction = bps / rate_bps
                good = rate_low <= fraction <= rate_high
                result[f"{name}_mbit"] = round(bps / 1e6, 3)
                result[f"{name}_fraction"] = round(fraction, 3)
                ok = ok and good
        result["ok"] = ok
    return result


def unavailable() -> str | None:
    """Why this machine cannot run the emulation (it needs root, ip, tc,
    iptables, ping and network namespaces), or None; for callers that skip
    rather than fail."""
    if os.geteuid() != 0:
        return "not root"
    for tool in ("ip", "tc", "iptables", "ping"):
        if not shutil.which(tool):
            return f"{tool} not found"
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns unavailable: {r.stderr.strip()}"
    return None


# ---------------------------------------------------------------- command line


def _smoke(args) -> int:
    """CTest: exit 77 to skip, 0 on success."""
    why = unavailable()
    if not why:
        try:
            args.delay_program = find_delay_program(args.delay_program)
        except (RuntimeError, subprocess.SubprocessError) as e:
            why = str(e)
    if why:
        print(f"SKIP: {why}")
        return 77
    before = leftovers()
    print("before:", json.dumps(before))
    failures = []
    result = check_link(parse_rate(args.rate), parse_time(args.rtt), args.seconds, args.delay_program,
                        bandwidth=args.seconds > 0)
    print(json.dumps(result))
    if not result["rtt_ok"]:
        failures.append(f"RTT {result['measured_rtt_ms']} ms, requested {result['rtt_ms']} ms")
    if args.seconds > 0 and not result["ok"]:
        failures.append("bandwidth out of range")
    after = leftovers()
    print("after: ", json.dumps(after))
    failures += left_behind(before, after)
    for f in failures:
        print("FAIL", f)
    print("ok" if not failures else "FAILED")
    return 1 if failures else 0


def _exec(args) -> int:
    """`exec ... -- SITE CMD... ; SITE CMD...`: runs each command in its
    site, waits for all of them (the first to fail ends the others)."""
    groups, cur = [], []
    for word in args.commands:
        if word == ";":
            if cur:
                groups.append(cur)
            cur = []
        else:
            cur.append(word)
    if cur:
        groups.append(cur)
    links = [link(f"l{i}", parse_rate(args.rate), parse_time(args.rtt)) for i in range(args.leaves)]
    with network(links, delay_program=args.delay_program) as net:
        print(json.dumps({"hub": net.hub_ns(), "leaves": [net.ns(l.name) for l in links],
                          "hub_addresses": [net.hub_address(i) for i in range(len(links))]}), flush=True)
        procs = [net.popen(g[0], g[1:]) for g in groups]
        status = 0
        deadline = time.monotonic() + args.timeout
        while procs and time.monotonic() < deadline:
            for p in list(procs):
                rc = p.poll()
                if rc is not None:
                    procs.remove(p)
                    status = status or rc
            if status:
                break
            time.sleep(0.1)
        if procs and not status:
            status = 124
        return status


def main(argv: list[str]) -> int:
    if argv[:1] == ["_sink"]:
        _sink(argv[1], int(argv[2]), float(argv[3]))
        return 0
    if argv[:1] == ["_source"]:
        _source(argv[1], int(argv[2]), float(argv[3]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delay-program", help=f"path of {DELAY_PROGRAM} (default: build/bench/wan/, else compiled)")
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="one link: measured RTT and goodput against the request, as JSON")
    c.add_argument("--rate", default="100mbit")
    c.add_argument("--rtt", default="20ms")
    c.add_argument("--seconds", type=float, default=5.0, help="per direction (0: RTT only)")
    s = sub.add_parser("smoke", help="the CTest: RTT of one link and no leftovers (exit 77: cannot run here)")
    s.add_argument("--rate", default="100mbit")
    s.add_argument("--rtt", default="20ms")
    s.add_argument("--seconds", type=float, default=0.0, help="also check goodput for this many seconds a way")
    e = sub.add_parser("exec", help="commands inside a network: -- SITE CMD... ';' SITE CMD...")
    e.add_argument("--rate", default="30mbit")
    e.add_argument("--rtt", default="10ms")
    e.add_argument("--leaves", type=int, default=1)
    e.add_argument("--timeout", type=float, default=600)
    e.add_argument("commands", nargs=argparse.REMAINDER)
    k = sub.add_parser("cleanup", help="find and remove what any run left behind")
    k.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    if args.command == "cleanup":
        found = cleanup(args.dry_run)
        print(json.dumps({"found": found, "removed": not args.dry_run, "clean_now": is_clean(leftovers())}))
        return 0
    why = unavailable()
    if args.command == "smoke":
        return _smoke(args)
    if why:
        print(f"wan.py: {why}", file=sys.stderr)
        return 2
    if args.command == "check":
        result = check_link(parse_rate(args.rate), parse_time(args.rtt), args.seconds, args.delay_program)
        print(json.dumps(result))
        return 0 if result["ok"] else 1
    if args.command == "exec":
        if args.commands[:1] == ["--"]:
            args.commands = args.commands[1:]
        return _exec(args)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt as e:
        print(f"wan.py: interrupted ({e}); network removed", file=sys.stderr)
        sys.exit(130)
