//! Generates a large, realistic RoCE v2 capture for benchmarking `roce inspect`.
//!
//! ```text
//! cargo run --release -p roce-cli --example gen_capture -- OUT.pcap [PACKETS]
//! ```
//!
//! Writes `PACKETS` (default 1,000,000) Ethernet frames to a nanosecond pcap
//! file: eight RC QPs between four hosts doing RDMA WRITEs and SENDs (FIRST /
//! MIDDLE / LAST, path MTU 1024), RDMA READs with their responses, FETCH_ADDs
//! with ATOMIC_ACKNOWLEDGEs and coalesced ACKs. About one multi-packet message
//! in 150 loses a packet before the capture point: the responder NAKs the next
//! one (PSN sequence error) and the requester retransmits go-back-N. About one
//! data packet in 400 is ECN-CE marked and answered by a CNP; two of the QPs
//! are VLAN-tagged. Packets of different QPs interleave; each QP keeps its
//! order. Every frame comes from `roce_wire::FrameRepr::emit`, so every ICRC
//! is valid and `roce inspect` must exit 0. The output is deterministic (fixed
//! xorshift seed); timestamps advance at about 100 Gb/s with small gaps.

use std::collections::VecDeque;
use std::fs::File;
use std::io::BufWriter;
use std::net::Ipv4Addr;

use roce_capture::PcapWriter;
use roce_wire::{
    AethRepr, AtomicEthRepr, BthRepr, Ecn, EthernetRepr, ExtHeaders, FrameRepr, IpRepr, Ipv4Repr,
    MacAddr, Msn, NakCode, Opcode, Operation, Psn, Qpn, RethRepr, Rkey, Syndrome, Transport,
    UdpChecksum, UdpRepr, VlanTag, ROCE_V2_PORT,
};

const PMTU: usize = 1024;
const VLAN: VlanTag = VlanTag {
    pcp: 3,
    dei: false,
    vid: 100,
};

/// xorshift64*: deterministic and cheap.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// True with probability 1/n.
    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

/// One packet waiting on a QP's queue.
struct Pkt {
    /// Requester to responder (else the reverse direction).
    to_responder: bool,
    bth: BthRepr,
    ext: ExtHeaders,
    len: usize,
    ce: bool,
}

/// One RC connection: a requester QP on one host and a responder QP on another.
struct Conn {
    /// Requester and responder host numbers.
    hosts: [u8; 2],
    qps: (u32, u32),
    sport: u16,
    vlan: Option<VlanTag>,
    psn: Psn,
    msn: Msn,
    rkey: Rkey,
    va: u64,
    counter: u64,
    queue: VecDeque<Pkt>,
}

fn op(o: Operation) -> Opcode {
    Opcode::new(Transport::Rc, o).expect("RC opcode")
}

/// The `[first, middle, last, only]` entry for packet `i` of `n`.
fn position<T: Copy>(ops: [T; 4], i: usize, n: usize) -> T {
    match (i, n) {
        (_, 1) => ops[3],
        (0, _) => ops[0],
        _ if i == n - 1 => ops[2],
        _ => ops[1],
    }
}

/// Extended headers of just a RETH and/or an AETH.
fn ext(reth: Option<RethRepr>, aeth: Option<AethRepr>) -> ExtHeaders {
    ExtHeaders {
        reth,
        aeth,
        ..Default::default()
    }
}

fn with_aeth(syndrome: Syndrome, msn: Msn) -> ExtHeaders {
    ext(None, Some(AethRepr { syndrome, msn }))
}

impl Conn {
    /// Queues a packet; returns it for setting flags.
    fn push(&mut self, fwd: bool, o: Opcode, psn: Psn, ext: ExtHeaders, len: usize) -> &mut Pkt {
        let qp = if fwd { self.qps.1 } else { self.qps.0 };
        let bth = BthRepr::new(o, Qpn::new(qp), psn);
        let (to_responder, ce) = (fwd, false);
        self.queue.push_back(Pkt {
            to_responder,
            bth,
            ext,
            len,
            ce,
        });
        self.queue.back_mut().expect("just pushed")
    }

    /// Packet `i` of an `n`-packet SEND or WRITE (`ops`) starting at `self.psn`.
    fn data(
        &mut self,
        ops: [Operation; 4],
        i: usize,
        n: usize,
        reth: Option<RethRepr>,
        last: usize,
    ) -> &mut Pkt {
        let ext = ext(reth.filter(|_| i == 0), None);
        let len = if i == n - 1 { last } else { PMTU };
        let psn = self.psn.add(i as u32);
        let p = self.push(true, op(position(ops, i, n)), psn, ext, len);
        p.bth.ack_req = i == n - 1 || i % 8 == 7;
        p
    }

    /// A SEND or RDMA WRITE of `n` packets, with loss / NAK / go-back-N, CE
    /// marks with CNPs, and ACKs for every packet that asked for one.
    fn data_message(&mut self, rng: &mut Rng, write: bool, n: usize, last: usize) {
        use Operation::*;
        let ops = if write {
            [WriteFirst, WriteMiddle, WriteLast, WriteOnly]
        } else {
            [SendFirst, SendMiddle, SendLast, SendOnly]
        };
        let dma_len = ((n - 1) * PMTU + last) as u32;
        let (va, rkey) = (self.va, self.rkey);
        let reth = write.then_some(RethRepr { va, rkey, dma_len });
        let lost = (n >= 3 && rng.one_in(150)).then(|| rng.below(n as u64 - 1) as usize);
        for i in 0..n {
            if lost == Some(i) {
                // Lost before the capture point: packet i + 1 arrives out of
                // sequence, the responder NAKs, the requester goes back to i.
                self.data(ops, i + 1, n, reth, last);
                let nak = with_aeth(Syndrome::Nak(NakCode::PsnSequenceError), self.msn);
                self.push(false, op(Acknowledge), self.psn.add(i as u32), nak, 0);
            }
            let ce = rng.one_in(400);
            let p = self.data(ops, i, n, reth, last);
            p.ce = ce;
            let (psn, ack_req) = (p.bth.psn, p.bth.ack_req);
            if ce {
                let p = self.push(false, Opcode::CNP, Psn::new(0), ExtHeaders::default(), 0);
                p.bth.becn = true;
            }
            if ack_req {
                if i == n - 1 {
                    self.msn = self.msn.next();
                }
                let ack = with_aeth(Syndrome::ACK_UNLIMITED, self.msn);
                self.push(false, op(Acknowledge), psn, ack, 0);
            }
        }
        self.psn = self.psn.add(n as u32);
        self.va = self.va.wrapping_add(((n * PMTU) as u64 + 4095) & !4095);
    }

    /// An RDMA READ of `n` response packets.
    fn read(&mut self, n: usize, last: usize) {
        use Operation::*;
        let dma_len = ((n - 1) * PMTU + last) as u32;
        let (va, rkey) = (self.va, self.rkey);
        let ext = ext(Some(RethRepr { va, rkey, dma_len }), None);
        let req = self.push(true, op(ReadRequest), self.psn, ext, 0);
        req.bth.ack_req = true;
        self.msn = self.msn.next();
        let ops = [
            ReadResponseFirst,
            ReadResponseMiddle,
            ReadResponseLast,
            ReadResponseOnly,
        ];
        for i in 0..n {
            let o = position(ops, i, n);
            let ext = match o {
                ReadResponseMiddle => ExtHeaders::default(),
                _ => with_aeth(Syndrome::ACK_UNLIMITED, self.msn),
            };
            let len = if i == n - 1 { last } else { PMTU };
            self.push(false, op(o), self.psn.add(i as u32), ext, len);
        }
        self.psn = self.psn.add(n as u32);
    }

    /// A FETCH_ADD and its ATOMIC_ACKNOWLEDGE.
    fn fetch_add(&mut self) {
        let (va, rkey) = (self.va & !7, self.rkey);
        let (swap_add, compare) = (1, 0);
        let ext = ExtHeaders {
            atomic: Some(AtomicEthRepr {
                va,
                rkey,
                swap_add,
                compare,
            }),
            ..Default::default()
        };
        let psn = self.psn;
        let req = self.push(true, op(Operation::FetchAdd), psn, ext, 0);
        req.bth.ack_req = true;
        self.msn = self.msn.next();
        let mut ext = with_aeth(Syndrome::ACK_UNLIMITED, self.msn);
        ext.atomic_ack = Some(self.counter);
        self.push(false, op(Operation::AtomicAcknowledge), psn, ext, 0);
        self.counter += 1;
        self.psn = psn.next();
    }

    /// Queues the next message of this QP.
    fn refill(&mut self, rng: &mut Rng) {
        let short = rng.one_in(4);
        let last = if short {
            1 + rng.below(PMTU as u64) as usize
        } else {
            PMTU
        };
        let n = 1 + rng.below(16) as usize;
        match rng.below(100) {
            0..=44 => self.data_message(rng, true, n, last),
            45..=69 => self.data_message(rng, false, n.div_ceil(4), last),
            70..=84 => self.read(n.div_ceil(2), last),
            _ => self.fetch_add(),
        }
    }
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let out = args.next().unwrap_or_else(|| {
        eprintln!("usage: gen_capture OUT.pcap [PACKETS]");
        std::process::exit(2)
    });
    let total: u64 = args
        .next()
        .map_or(1_000_000, |s| s.parse().expect("PACKETS must be a number"));

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // Requester and responder hosts (10.0.0.x) of each QP, as hex digits.
    let pairs: [u8; 8] = [0x12, 0x21, 0x34, 0x43, 0x13, 0x24, 0x31, 0x42];
    let mut conns: Vec<Conn> = pairs
        .iter()
        .enumerate()
        .map(|(i, &p)| Conn {
            hosts: [p >> 4, p & 15],
            qps: (0x11 + 2 * i as u32, 0x12 + 2 * i as u32),
            sport: 0xc000 | rng.below(0x4000) as u16,
            vlan: (i >= 6).then_some(VLAN),
            psn: Psn::new(rng.next() as u32),
            msn: Msn::new(0),
            rkey: Rkey::new(0x1000 + i as u32),
            va: 0x7f00_0000_0000 + ((i as u64) << 32),
            counter: rng.next(),
            queue: VecDeque::new(),
        })
        .collect();
    // Payload bytes: windows of one random pool.
    let pool: Vec<u8> = (0..2 * PMTU + 4096).map(|_| rng.next() as u8).collect();

    let mut w = PcapWriter::new(BufWriter::with_capacity(1 << 20, File::create(&out)?))?;
    let mut buf = [0u8; 2048];
    let mut ident = [0u16; 5];
    let mut ts: u64 = 1_700_000_000_000_000_000;
    let mut bytes = 0u64;
    for _ in 0..total {
        let c = &mut conns[rng.below(pairs.len() as u64) as usize];
        if c.queue.is_empty() {
            c.refill(&mut rng);
        }
        let p = c.queue.pop_front().expect("refilled");
        let (from, to) = (
            c.hosts[!p.to_responder as usize],
            c.hosts[p.to_responder as usize],
        );
        let cnp = p.bth.opcode == Opcode::CNP;
        ident[from as usize] = ident[from as usize].wrapping_add(1);
        let off = (p.bth.psn.value() as usize * 61) & 4095;
        let frame = FrameRepr {
            eth: Some(EthernetRepr {
                dst: MacAddr([2, 0, 0, 0, 0, to]),
                src: MacAddr([2, 0, 0, 0, 0, from]),
                vlan: c.vlan,
                ethertype: 0,
            }),
            ip: IpRepr::V4(Ipv4Repr {
                src: Ipv4Addr::new(10, 0, 0, from),
                dst: Ipv4Addr::new(10, 0, 0, to),
                dscp: if cnp { 48 } else { 26 },
                ecn: match (cnp, p.ce) {
                    (true, _) => Ecn::NotEct,
                    (_, true) => Ecn::Ce,
                    _ => Ecn::Ect0,
                },
                ident: ident[from as usize],
                dont_frag: true,
                ttl: 64,
                payload_len: 0,
            }),
            udp: UdpRepr {
                src_port: c.sport,
                dst_port: ROCE_V2_PORT,
                checksum: UdpChecksum::Zero,
            },
            bth: p.bth,
            ext: p.ext,
            payload: &pool[off..off + p.len],
        };
        let n = frame.emit(&mut buf).expect("emit");
        w.write_packet(ts, &buf[..n])?;
        bytes += n as u64;
        // 100 Gb/s: 0.08 ns per bit, plus preamble and IFG; then a small gap.
        ts += (n as u64 + 20) * 8 / 100 + rng.below(64);
    }
    w.into_inner()?;
    println!("gen_capture: wrote {total} packets, {bytes} frame bytes, to {out}");
    Ok(())
}
