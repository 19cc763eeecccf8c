#!/usr/bin/env python3
"""Regenerate the container-format variants of testdata/captures/rc_send_64B.pcap.

Run once from anywhere (python3 >= 3.8, standard library only):

    python3 testdata/capture-formats/generate.py

Every output holds the same 30 packets (raw-IP forms: the 28 IP packets) with the
same timestamps, in another container or link-layer encapsulation, so that
roce-capture's tests can assert that every form yields the same IP datagrams.
If `editcap` (Wireshark) is installed, a pcapng written by Wireshark itself is
produced too. See README.md beside this script for the list of files.
"""

import os
import shutil
import struct
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "..", "captures", "rc_send_64B.pcap")
STEM = "rc_send_64B"
CLIENT_MAC = bytes.fromhex("525400770012")  # vmB, on whose bridge port tcpdump ran


def read_pcap(path):
    """Return [(ts_ns, frame)] of a little-endian microsecond pcap."""
    data = open(path, "rb").read()
    magic, _, _, _, _, _, network = struct.unpack_from("<IHHiIII", data, 0)
    assert magic == 0xA1B2C3D4 and network == 1, "expected LE us Ethernet pcap"
    off, packets = 24, []
    while off < len(data):
        sec, usec, caplen, origlen = struct.unpack_from("<IIII", data, off)
        assert caplen == origlen
        packets.append((sec * 10**9 + usec * 1000, data[off + 16 : off + 16 + caplen]))
        off += 16 + caplen
    return packets


def ethertype(frame):
    return struct.unpack_from(">H", frame, 12)[0]


def is_ip(frame):
    return ethertype(frame) in (0x0800, 0x86DD)


def pkt_type(frame):
    """Linux packet type: 1 broadcast, 4 outgoing (sent by the capturing host), 0 host."""
    if frame[0:6] == b"\xff" * 6:
        return 1
    return 4 if frame[6:12] == CLIENT_MAC else 0


def sll(frame):
    addr = frame[6:12] + b"\0\0"
    return struct.pack(">HHH8sH", pkt_type(frame), 1, 6, addr, ethertype(frame)) + frame[14:]


def sll2(frame):
    addr = frame[6:12] + b"\0\0"
    hdr = struct.pack(">HHIHBB8s", ethertype(frame), 0, 2, 1, pkt_type(frame), 6, addr)
    return hdr + frame[14:]


# ---------------------------------------------------------------- classic pcap


def pcap(packets, endian, nanos, linktype):
    """packets: [(ts_ns, data)]; endian '<' or '>'."""
    magic = 0xA1B23C4D if nanos else 0xA1B2C3D4
    out = [struct.pack(endian + "IHHiIII", magic, 2, 4, 0, 0, 262144, linktype)]
    for ts, data in packets:
        sec, ns = divmod(ts, 10**9)
        frac = ns if nanos else ns // 1000
        assert nanos or ns % 1000 == 0
        out.append(struct.pack(endian + "IIII", sec, frac, len(data), len(data)) + data)
    return b"".join(out)


# ---------------------------------------------------------------------- pcapng


def pad4(b):
    return b + b"\0" * (-len(b) % 4)


def block(e, btype, body):
    body = pad4(body)
    total = 12 + len(body)
    return struct.pack(e + "II", btype, total) + body + struct.pack(e + "I", total)


def options(e, opts):
    if not opts:
        return b""
    out = b"".join(struct.pack(e + "HH", c, len(v)) + pad4(v) for c, v in opts)
    return out + struct.pack(e + "HH", 0, 0)  # opt_endofopt


def shb(e, app):
    body = struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1)
    return block(e, 0x0A0D0D0A, body + options(e, [(4, app.encode())]))


def idb(e, linktype, tsresol=None, tsoffset=None, name=None, snaplen=262144):
    opts = []
    if name:
        opts.append((2, name.encode()))
    if tsresol is not None:
        opts.append((9, bytes([tsresol])))
    if tsoffset is not None:
        opts.append((14, struct.pack(e + "q", tsoffset)))
    body = struct.pack(e + "HHI", linktype, 0, snaplen) + options(e, opts)
    return block(e, 0x00000001, body)


def epb(e, if_id, units, data, flags=None):
    body = struct.pack(e + "IIIII", if_id, units >> 32, units & 0xFFFFFFFF, len(data), len(data))
    opts = [(2, struct.pack(e + "I", flags))] if flags is not None else []
    return block(e, 0x00000006, body + pad4(data) + options(e, opts))


def spb(e, data):
    return block(e, 0x00000003, struct.pack(e + "I", len(data)) + pad4(data))


def nrb(e):
    rec = struct.pack(e + "HH", 1, 4 + 9) + bytes([10, 77, 0, 11]) + b"vmA.lab\0\0"
    return block(e, 0x00000004, pad4(rec) + struct.pack(e + "HH", 0, 0))


def isb(e, if_id, units):
    body = struct.pack(e + "III", if_id, units >> 32, units & 0xFFFFFFFF)
    return block(e, 0x00000005, body + options(e, [(4, struct.pack(e + "Q", 30))]))


def dsb(e):
    secret = b"CLIENT_RANDOM 00 00\n"
    return block(e, 0x0000000A, struct.pack(e + "II", 0x544C534B, len(secret)) + secret)


def ng_simple(packets, e, tsresol, tsoffset=0):
    """One section, one Ethernet interface, skip-blocks sprinkled in."""
    scale = {9: 1, 6: 1000}[tsresol]
    out = [shb(e, "roce-capture generate.py"), idb(e, 1, tsresol, tsoffset or None, "tap1"), nrb(e)]
    for i, (ts, frame) in enumerate(packets):
        units = (ts - tsoffset * 10**9) // scale
        out.append(epb(e, 0, units, frame, flags=1 if i % 2 == 0 else None))
        if i == 10:
            out.append(dsb(e))
    out.append(isb(e, 0, (packets[-1][0] - tsoffset * 10**9) // scale))
    return b"".join(out)


def ng_multi(packets):
    """Two sections (LE then BE), two interfaces each, four link types."""
    half = len(packets) // 2
    out = [shb("<", "section 1"), idb("<", 1, 9, name="eth"), idb("<", 101, 6, name="raw"), nrb("<")]
    for ts, frame in packets[:half]:
        if is_ip(frame):
            out.append(epb("<", 1, ts // 1000, frame[14:]))
        else:
            out.append(epb("<", 0, ts, frame))
    out.append(isb("<", 1, packets[half - 1][0] // 1000))
    out += [shb(">", "section 2"), idb(">", 276, 9, name="sll2"), idb(">", 113, 6, name="sll")]
    for i, (ts, frame) in enumerate(packets[half:]):
        if i % 2 == 0:
            out.append(epb(">", 0, ts, sll2(frame)))
        else:
            out.append(epb(">", 1, ts // 1000, sll(frame)))
        if i == 3:
            out.append(dsb(">"))
    return b"".join(out)


def ng_spb(packets):
    out = [shb("<", "simple packets"), idb("<", 1, snaplen=0)]
    out += [spb("<", frame) for _, frame in packets]
    return b"".join(out)


def main():
    packets = read_pcap(SOURCE)
    ip_only = [(ts, f[14:]) for ts, f in packets if is_ip(f)]
    files = {
        "le-ns.pcap": pcap(packets, "<", True, 1),
        "be-us.pcap": pcap(packets, ">", False, 1),
        "be-ns.pcap": pcap(packets, ">", True, 1),
        "raw.pcap": pcap(ip_only, "<", False, 101),
        "sll.pcap": pcap([(ts, sll(f)) for ts, f in packets], "<", False, 113),
        "sll2.pcap": pcap([(ts, sll2(f)) for ts, f in packets], ">", True, 276),
        "le.pcapng": ng_simple(packets, "<", 9),
        "be.pcapng": ng_simple(packets, ">", 6, tsoffset=1_795_982_000),
        "multi.pcapng": ng_multi(packets),
        "spb.pcapng": ng_spb(packets),
    }
    for suffix, data in files.items():
        with open(os.path.join(HERE, f"{STEM}.{suffix}"), "wb") as f:
            f.write(data)
    if shutil.which("editcap"):
        out = os.path.join(HERE, f"{STEM}.editcap.pcapng")
        subprocess.run(["editcap", "-F", "pcapng", SOURCE, out], check=True)
    else:
        print("editcap not found: keeping the existing .editcap.pcapng")


if __name__ == "__main__":
    main()
