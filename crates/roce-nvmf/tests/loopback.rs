//! The driver end to end on an in-memory fabric: this crate's host
//! connects to this crate's target over roce-verbs (RDMA CM with the
//! NVMe-oF private data, capsules as SEND/RECV, data by RDMA READ and
//! WRITE), writes with keyed buffers and in-capsule data, reads back and
//! compares; the discovery controller lists the subsystem.
#![cfg(feature = "verbs")]

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use roce_nvmf::driver::{connect, nvme_status, serve, HostOptions};
use roce_nvmf::target::*;
use roce_nvmf::wire::log::{lid, parse_discovery_header, DiscoveryEntry};
use roce_nvmf::wire::status::Status;
use roce_nvmf::wire::{Cid, Nsid};
use roce_verbs::Context;

const SUBNQN: &str = "nqn.2026-01.test.loopback:sub";
const HOSTNQN: &str = "nqn.2026-01.test.loopback:host";
const PORT: u16 = 4420;

fn target() -> Target {
    let mut s = Subsystem::new(SUBNQN);
    s.allowed_hosts = Some(vec![HOSTNQN.into()]);
    s.namespaces.push(NamespaceEntry {
        nsid: Nsid(1),
        nguid: [7; 16],
        uuid: [8; 16],
        storage: Box::new(MemNamespace::new(256, 512)),
    });
    Target::new(TargetConfig {
        subsystems: vec![s],
        port: PortInfo::default(),
        limits: Limits::default(),
    })
}

#[test]
fn host_writes_and_reads_back_through_the_target() {
    let fabric = roce_io::Fabric::new();
    let taddr: IpAddr = "10.0.0.1".parse().unwrap();
    let tctx = Context::open_fabric(&fabric, taddr).unwrap();
    let hctx = Context::open_fabric(&fabric, "10.0.0.2".parse().unwrap()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let stop = stop.clone();
        thread::spawn(move || serve(&tctx, PORT, target(), &stop))
    };
    // Bounded: every step below has a 5 s timeout; the server stops at the end.
    let run = || -> Result<(), String> {
        let opts = HostOptions::new(SUBNQN, HOSTNQN);
        let mut host = connect(&hctx, taddr, PORT, &opts).map_err(|e| format!("connect: {e}"))?;
        let id = host.identify().clone();
        assert_eq!(id.subnqn, SUBNQN);
        assert_eq!(id.icdoff, 0);
        let ns = host
            .identify_namespace(Nsid(1))
            .map_err(|e| e.to_string())?;
        assert_eq!((ns.nsze, ns.lbaf0_lbads), (256, 9));

        // 16 blocks through a keyed buffer (the target RDMA READs them).
        let big: Vec<u8> = (0..16 * 512).map(|i| (i * 31 + 7) as u8).collect();
        host.write(Nsid(1), 8, &big, 512, false)
            .map_err(|e| e.to_string())?;
        // 2 blocks in the capsule.
        let small: Vec<u8> = (0..1024).map(|i| (i * 3 + 1) as u8).collect();
        host.write(Nsid(1), 100, &small, 512, true)
            .map_err(|e| e.to_string())?;
        host.flush(Nsid(1)).map_err(|e| e.to_string())?;
        // Read both back (the target RDMA WRITEs them).
        assert_eq!(
            host.read(Nsid(1), 8, 16, 512).map_err(|e| e.to_string())?,
            big
        );
        assert_eq!(
            host.read(Nsid(1), 100, 2, 512).map_err(|e| e.to_string())?,
            small
        );
        // Past the end: the status the specification names.
        let e = host.read(Nsid(1), 255, 2, 512).unwrap_err();
        assert_eq!(nvme_status(&e), Some(Status::LBA_OUT_OF_RANGE));
        // Pipelined: a queue's depth of writes in flight at once, then
        // as many reads, each checked against what was written.
        let depth = host.io_depth();
        assert_eq!(depth, 32);
        let block =
            |i: u64| -> Vec<u8> { (0..512).map(|j| (i as usize * 7 + j * 13) as u8).collect() };
        for i in 0..depth as u64 {
            host.submit_write(Nsid(1), 128 + i, &block(i), 512, i % 2 == 0, i)
                .map_err(|e| e.to_string())?;
        }
        let mut done = Vec::new();
        let end = std::time::Instant::now() + Duration::from_secs(10);
        while done.len() < depth && std::time::Instant::now() < end {
            host.poll_io(&mut done, Duration::from_millis(50))
                .map_err(|e| e.to_string())?;
        }
        assert_eq!(done.len(), depth);
        assert!(done
            .iter()
            .all(|d| d.status == Status::SUCCESS && d.data.is_none()));
        for i in 0..depth as u64 {
            host.submit_read(Nsid(1), 128 + i, 1, 512, 1000 + i)
                .map_err(|e| e.to_string())?;
        }
        assert!(
            host.submit_read(Nsid(1), 0, 1, 512, 5000).is_err(),
            "more than the depth in flight"
        );
        done.clear();
        while done.len() < depth && std::time::Instant::now() < end {
            host.poll_io(&mut done, Duration::from_millis(50))
                .map_err(|e| e.to_string())?;
        }
        assert_eq!(done.len(), depth);
        for d in &done {
            assert_eq!(
                d.data.as_deref(),
                Some(&block(d.tag - 1000)[..]),
                "block {}",
                d.tag - 1000
            );
        }
        assert_eq!(host.io_in_flight(), 0);
        host.keep_alive().map_err(|e| e.to_string())?;
        host.disconnect().map_err(|e| e.to_string())?;

        // The discovery controller lists the subsystem.
        let mut d = connect(
            &hctx,
            taddr,
            PORT,
            &HostOptions::new(DISCOVERY_NQN, HOSTNQN),
        )
        .map_err(|e| format!("discovery connect: {e}"))?;
        let sqe = roce_nvmf::initiator::get_log_page(
            Cid(0),
            lid::DISCOVERY,
            Nsid(0),
            2048,
            0,
            false,
            roce_nvmf::wire::sgl::SglDesc::InCapsule { offset: 0, len: 0 },
        );
        let page = d.admin_data(sqe, 2048).map_err(|e| e.to_string())?;
        assert_eq!(parse_discovery_header(&page).unwrap().1, 1);
        assert_eq!(DiscoveryEntry::parse(&page[1024..]).unwrap().subnqn, SUBNQN);
        d.disconnect().map_err(|e| e.to_string())?;

        // Keep-alive: KATO 1 s; commands every 250 ms carry a Keep Alive
        // before them when half the KATO has passed, so the controller
        // lives beyond 1 s; idle for a whole period after the one its
        // last command fell in (traffic-based keep alive: at most two
        // KATOs), it is torn down. (With a KATO of 400 ms, a stall of the
        // test's thread for half a second on a loaded machine could end
        // the controller while the test still counted it alive.)
        let mut o = HostOptions::new(SUBNQN, HOSTNQN);
        o.kato_ms = 1000;
        o.timeout = Duration::from_secs(2);
        let mut h = connect(&hctx, taddr, PORT, &o).map_err(|e| format!("connect: {e}"))?;
        for _ in 0..6 {
            thread::sleep(Duration::from_millis(250));
            h.read(Nsid(1), 8, 1, 512)
                .map_err(|e| format!("read while alive: {e}"))?;
        }
        thread::sleep(Duration::from_millis(2800));
        assert!(
            h.read(Nsid(1), 8, 1, 512).is_err(),
            "the controller outlived its KATO"
        );
        drop(h);

        // Three I/O queues: commands spread by tag, all of them in flight.
        let mut o = HostOptions::new(SUBNQN, HOSTNQN);
        o.io_queues = 3;
        o.queue_depth = 8;
        let mut h = connect(&hctx, taddr, PORT, &o).map_err(|e| format!("connect: {e}"))?;
        assert_eq!((h.io_queues(), h.io_depth()), (3, 24));
        for t in 0..24u64 {
            h.submit_write(Nsid(1), 200 + t, &[t as u8; 512], 512, t % 2 == 1, t)
                .map_err(|e| e.to_string())?;
        }
        let mut done = Vec::new();
        let end = std::time::Instant::now() + Duration::from_secs(10);
        while done.len() < 24 && std::time::Instant::now() < end {
            h.poll_io(&mut done, Duration::from_millis(30))
                .map_err(|e| e.to_string())?;
        }
        assert_eq!(done.len(), 24);
        assert!(done.iter().all(|d| d.status == Status::SUCCESS));
        let back = h.read(Nsid(1), 200, 24, 512).map_err(|e| e.to_string())?;
        for t in 0..24usize {
            assert!(
                back[t * 512..(t + 1) * 512].iter().all(|&b| b == t as u8),
                "block {t}"
            );
        }
        h.disconnect().map_err(|e| e.to_string())?;

        // A host that is not allowed is refused with Connect Invalid Host.
        let e = connect(
            &hctx,
            taddr,
            PORT,
            &HostOptions::new(SUBNQN, "nqn.2026-01.test:intruder"),
        )
        .unwrap_err();
        assert_eq!(nvme_status(&e), Some(Status::CONNECT_INVALID_HOST));
        Ok(())
    };
    let r = run();
    stop.store(true, Ordering::Relaxed);
    let t = server.join().expect("server thread").expect("serve");
    r.unwrap();
    // The data is in the namespace: nothing else was written.
    let _ = t;
    thread::sleep(Duration::from_millis(10));
}
