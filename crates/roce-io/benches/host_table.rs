//! What the host table's operations cost (docs/host.md, "Figures"):
//! `owner_of_qpn` hitting one of 10,000 QPNs (and `qpn_slot`, the map
//! alone), missing, and a claim plus a
//! release (the update lock, `flock`, twice).
//!
//! `cargo bench -p roce-io --bench host_table`

use std::hint::black_box;
use std::time::Instant;

use roce_io::HostTable;

fn per_op(n: u64, f: impl FnMut(u64)) -> f64 {
    let mut f = f;
    let t = Instant::now();
    for i in 0..n {
        f(i);
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let t = HostTable::attach_in(dir.path(), "127.0.0.1".parse().unwrap(), 4791, b"bench")
        .expect("attach");
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut qpns = Vec::new();
    while qpns.len() < 10_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let q = (x >> 20) as u32 & 0xff_ffff;
        if t.claim_qpn(q).is_ok() {
            qpns.push(q);
        }
    }
    let n = 2_000_000u64;
    let hit = per_op(n, |i| {
        let q = qpns[(i as usize * 7919) % qpns.len()];
        black_box(t.owner_of_qpn(black_box(q)));
    });
    let slot = per_op(n, |i| {
        let q = qpns[(i as usize * 7919) % qpns.len()];
        black_box(t.qpn_slot(black_box(q)));
    });
    let miss = per_op(n, |i| {
        black_box(t.owner_of_qpn(black_box(0x100_0000 - 1 - (i as u32 & 0xffff))));
    });
    let gen = per_op(n, |_| {
        black_box(t.generation());
    });
    let upd = per_op(20_000, |i| {
        let q = 0xff_0000 + (i as u32 & 0xfff);
        let _ = t.claim_qpn(q);
        let _ = t.release_qpn(q);
    });
    println!("host table, 10,000 QPNs held:");
    println!("  owner_of_qpn (hit):      {hit:8.1} ns");
    println!("  qpn_slot (hit):          {slot:8.1} ns");
    println!("  owner_of_qpn (miss):     {miss:8.1} ns");
    println!("  generation():            {gen:8.1} ns");
    println!("  claim_qpn + release_qpn: {upd:8.1} ns");
}
