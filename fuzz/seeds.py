#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets from testdata/ and scenarios/.

Run from anywhere: `python3 fuzz/seeds.py`. Seeds are named by content
hash (as libFuzzer names its corpus files), so re-running adds nothing new;
`fuzz/run.sh` minimises the corpora afterwards. Only small files are used
(the corpora stay well under 2 MB).
"""
import hashlib
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def put(target, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def pcap_frames(path):
    """The Ethernet frames of a classic little-endian µs/ns pcap."""
    b = open(path, "rb").read()
    magic = struct.unpack("<I", b[:4])[0]
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        return []
    link = struct.unpack("<I", b[20:24])[0]
    if link != 1:
        return []
    off, out = 24, []
    while off + 16 <= len(b):
        incl = struct.unpack("<I", b[off + 8 : off + 12])[0]
        out.append(b[off + 16 : off + 16 + incl])
        off += 16 + incl
    return out


def tcp_streams(path):
    """Each direction's TCP payload, in order, of an Ethernet IPv4 pcap."""
    streams = {}
    for f in pcap_frames(path):
        if len(f) < 14 + 20 or f[12:14] != b"\x08\x00" or f[14 + 9] != 6:
            continue
        ip = f[14:]
        ihl = (ip[0] & 15) * 4
        total = struct.unpack(">H", ip[2:4])[0]
        tcp = ip[ihl:total]
        off = (tcp[12] >> 4) * 4
        key = struct.unpack(">HH", tcp[:4])
        streams.setdefault(key, bytearray()).extend(tcp[off:])
    return [bytes(b) for b in streams.values() if b]


def main():
    caps = os.path.join(ROOT, "testdata", "captures")
    fmts = os.path.join(ROOT, "testdata", "capture-formats")
    # capture: every container form, and the small captures whole.
    for d in (fmts, caps):
        for n in sorted(os.listdir(d)):
            p = os.path.join(d, n)
            if n.endswith((".pcap", ".pcapng")) and os.path.getsize(p) <= 16384:
                put("capture", open(p, "rb").read())
    frames_by_cap = {}
    for n in sorted(os.listdir(caps)):
        if n.endswith(".pcap") and os.path.getsize(os.path.join(caps, n)) <= 100_000:
            frames_by_cap[n] = pcap_frames(os.path.join(caps, n))
    # frame: one frame per (capture, opcode, length class), Ethernet and IP.
    seen = set()
    for n, frames in frames_by_cap.items():
        for f in frames:
            if len(f) < 14 + 20 + 8 + 12:
                continue
            ip = f[14:]
            ihl = (ip[0] & 15) * 4 if ip[0] >> 4 == 4 else 40
            bth = ip[ihl + 8 :]
            key = (bth[0] if bth else None, min(len(f), 1100) // 100)
            if key in seen:
                continue
            seen.add(key)
            put("frame", f[:2048])
            put("frame", ip[:2048])
    # core_rx: the first datagrams of each capture, 2-byte length prefixes.
    for n, frames in frames_by_cap.items():
        seq = b""
        for f in frames[:24]:
            d = f[14:][:1100]
            seq += struct.pack(">H", len(d)) + d
        put("core_rx", seq)
    # cm_mad: the MADs of the rdma_cm captures, as records for the side
    # they were sent to (the capture's first sender is the active side),
    # then one with a pump/answer/time script around them.
    for n in ("rdmacm_rping.pcap", "rdmacm_udaddy_sidr.pcap"):
        frames = frames_by_cap.get(n, [])
        first_src, seq = None, b""
        for f in frames:
            ip = f[14:]
            if len(ip) < 48 or ip[9] != 17:
                continue
            src = ip[12:16]
            dqp = int.from_bytes(ip[28 + 5 : 28 + 8], "big")
            if dqp != 1:
                continue
            first_src = first_src or src
            mad = ip[48 : 48 + 256]
            tag = 0 if src == first_src else 1
            seq += bytes([tag]) + struct.pack(">H", len(mad)) + mad
            put("cm_mad", bytes([tag]) + struct.pack(">H", len(mad)) + mad)
        put("cm_mad", seq)
    script = [
        (3, b""), (5, b"\x00"), (3, b""), (3, b""), (3, b""),
        (6, b"\x00"), (3, b""), (3, b""), (4, b"\x40\x00"), (3, b""),
        (6, b"\x02hi"), (3, b""), (5, b"\x01no"), (3, b""), (7, b"ud?"),
        (3, b""), (5, b"\x00"), (3, b""), (4, b"\xff\xff"), (3, b""),
    ]
    put("cm_mad", b"".join(bytes([t]) + struct.pack(">H", len(x)) + x for t, x in script))
    put("cm_mad", b"\x04\x00\x02\xff\xff" * 8)
    # scenario: the shipped scenarios.
    sc = os.path.join(ROOT, "scenarios")
    for n in sorted(os.listdir(sc)):
        if n.endswith(".toml"):
            put("scenario", open(os.path.join(sc, n), "rb").read())
    # pingpong_wire: address messages as the tools send them.
    msgs = [
        b"0000:000011:a1b2c3:00000000000000000000ffff0a4d000b\0",
        b"0000:0000c9:000000:00000000000000000000000000000000\0",
        b"ffff:ffffff:ffffff:fe800000000000000000000000000001\0",
    ]
    for m in msgs:
        put("pingpong_wire", m)
        put("pingpong_wire", m + m + b"done\0")
    put("pingpong_wire", b"\0" * 52 * 4 + b"done\0")
    # perf_control: roce perf's control connection as recorded, each
    # side's stream whole and each message alone.
    pc = os.path.join(ROOT, "testdata", "perf-control")
    for n in sorted(os.listdir(pc)):
        if n.endswith(".jsonl"):
            b = open(os.path.join(pc, n), "rb").read()
            put("perf_control", b)
            for line in b.splitlines(keepends=True):
                put("perf_control", line)
    put("perf_control", b'{"type":"stop"}\n')
    put("perf_control", b'{"message":"the client runs read-bw but this server runs write-bw","type":"error"}\n')
    # perftest_wire: each side of the TCP exchanges of perftest 4.5's
    # tools (testdata/perftest/*.pcap), and of the rdma_cm channel.
    pt = os.path.join(ROOT, "testdata", "perftest")
    for n in sorted(os.listdir(pt)):
        p = os.path.join(pt, n)
        if n.endswith(".pcap"):
            for b in tcp_streams(p):
                put("perftest_wire", b[:4096])
        elif n.endswith(".bin"):
            put("perftest_wire", open(p, "rb").read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
