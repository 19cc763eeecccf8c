//! Mutated capsules: no panic, no storage access outside the namespace.

use crate::initiator as ini;
use crate::target::*;
use crate::wire::sgl::SglDesc;
use crate::wire::{Cid, Nsid};

use super::sim::*;

/// Storage that fails the test if the core ever asks for bytes outside
/// the namespace.
struct Checked(MemNamespace);

impl Namespace for Checked {
    fn block_size(&self) -> u32 {
        self.0.block_size()
    }
    fn blocks(&self) -> u64 {
        self.0.blocks()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), NsError> {
        assert!(
            offset + buf.len() as u64 <= self.0.bytes().len() as u64,
            "read outside"
        );
        self.0.read(offset, buf)
    }
    fn write(&mut self, offset: u64, data: &[u8], fua: bool) -> Result<(), NsError> {
        assert!(
            offset + data.len() as u64 <= self.0.bytes().len() as u64,
            "write outside"
        );
        self.0.write(offset, data, fua)
    }
    fn flush(&mut self) -> Result<(), NsError> {
        Ok(())
    }
    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<(), NsError> {
        assert!(
            offset + len <= self.0.bytes().len() as u64,
            "zeroes outside"
        );
        self.0.write_zeroes(offset, len)
    }
    fn deallocate(&mut self, offset: u64, len: u64) -> Result<(), NsError> {
        assert!(
            offset + len <= self.0.bytes().len() as u64,
            "deallocate outside"
        );
        Ok(())
    }
}

/// Arbitrary capsules from mutated valid ones: no panic, and the storage
/// is never asked for bytes outside the namespace (the fuzz target runs
/// the same check on libFuzzer's inputs).
#[test]
fn no_panic_on_mutated_capsules() {
    let fresh = || {
        let mut cfg = config();
        cfg.subsystems[0].namespaces[0].storage = Box::new(Checked(MemNamespace::new(BLOCKS, 512)));
        let mut s = Sim::new(cfg);
        let (admin, io, cntlid) = s.io_ready(32);
        (s, admin, io, cntlid)
    };
    let seeds: Vec<Vec<u8>> = vec![
        ini::with_in_capsule_data(ini::write(Cid(1), Nsid(1), 3, 2, true, null()), &[9; 1024]),
        ini::read(
            Cid(2),
            Nsid(1),
            0,
            1,
            SglDesc::Keyed {
                addr: 0,
                len: 512,
                key: crate::wire::Rkey(9),
                invalidate: true,
            },
        )
        .to_vec(),
        ini::write(
            Cid(2),
            Nsid(1),
            60,
            4,
            false,
            SglDesc::Keyed {
                addr: 0,
                len: 2048,
                key: crate::wire::Rkey(9),
                invalidate: false,
            },
        )
        .to_vec(),
        ini::write_zeroes(Cid(3), Nsid(1), 62, 2).to_vec(),
        ini::identify(Cid(3), 1, Nsid(0), null()).to_vec(),
        ini::get_log_page(Cid(4), 2, Nsid(0), 512, 0, false, null()).to_vec(),
        ini::set_features(Cid(5), 7, 0).to_vec(),
        ini::async_event_request(Cid(6)).to_vec(),
    ];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut s, mut admin, mut io, mut cntlid) = fresh();
    let (mut answered, mut restarts) = (0u32, 0u32);
    for i in 0..20_000u32 {
        let mut c = seeds[(rnd() % seeds.len() as u64) as usize].clone();
        for _ in 0..(rnd() % 6) {
            let at = (rnd() % c.len() as u64) as usize;
            c[at] = rnd() as u8;
        }
        if rnd() % 16 == 0 {
            c.truncate((rnd() % 80) as usize);
        }
        let conn = if i % 4 == 0 { admin } else { io };
        s.t.on_capsule(conn, &c, s.now);
        while let Some(a) = s.t.poll_action() {
            match a {
                Action::ReadHost { conn, cid, len, .. } => {
                    assert!(len <= Limits::default().max_transfer());
                    s.t.on_host_data(conn, cid, &vec![0x5A; len as usize], s.now);
                }
                Action::WriteHost { data, .. } => {
                    assert!(data.len() as u32 <= Limits::default().max_transfer())
                }
                Action::Respond { .. } => answered += 1,
                Action::Disconnect { .. } => {}
            }
        }
        let live = Some(QueueState::Live { cntlid });
        if s.t.queue_state(io) != live || s.t.queue_state(admin) != live {
            (s, admin, io, cntlid) = fresh();
            restarts += 1;
        }
    }
    assert!(answered > 15_000, "{answered} answers");
    assert!(restarts < 5_000, "{restarts} restarts");
}
