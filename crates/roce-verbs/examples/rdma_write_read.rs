//! RDMA WRITE then READ over an in-memory fabric: two contexts (10.0.0.1
//! and 10.0.0.2); the server registers a region for remote access and
//! hands its address and rkey to the client (in process), the client
//! WRITEs 1 MiB into it, READs it back into another region and checks it,
//! then measures WRITE and READ bandwidth with several 1 MiB requests in
//! flight.
//!
//! ```text
//! cargo run --release -p roce-verbs --example rdma_write_read -- [--mib N] [--depth D]
//! ```

use std::time::{Duration, Instant};

use roce_verbs::*;

const MIB: usize = 1 << 20;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn wait(cq: &CompletionQueue, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let got = cq.poll_until(n, Duration::from_secs(30))?;
    if got.len() != n {
        return Err(format!("{} of {n} completions", got.len()).into());
    }
    if let Some(bad) = got.iter().find(|c| !c.is_success()) {
        return Err(format!("work request {} failed: {:?}", bad.wr_id(), bad.status()).into());
    }
    Ok(())
}

/// Posts `total` 1 MiB operations with up to `depth` in flight; returns the
/// elapsed time.
fn stream(
    qp: &QueuePair,
    cq: &CompletionQueue,
    op: SendOp,
    local: &MemoryRegion,
    total: usize,
    depth: usize,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let start = Instant::now();
    let (mut posted, mut done) = (0, 0);
    let mut out = Vec::new();
    while done < total {
        while posted < total && posted - done < depth {
            let wr = SendWr::new(posted as u64, op, [local.sge(0, MIB as u32)]);
            qp.post_send(wr)?;
            posted += 1;
        }
        out.clear();
        cq.poll(&mut out, depth)?;
        if let Some(bad) = out.iter().find(|c| !c.is_success()) {
            return Err(format!("work request {} failed: {:?}", bad.wr_id(), bad.status()).into());
        }
        done += out.len();
        if start.elapsed() > Duration::from_secs(60) {
            return Err("timed out".into());
        }
    }
    Ok(start.elapsed())
}

fn report(what: &str, bytes: usize, t: Duration) {
    let s = t.as_secs_f64();
    println!(
        "  {what:<5} {:>6} MiB in {:>8.3} ms: {:>8.1} MiB/s  {:>6.2} Gb/s",
        bytes / MIB,
        s * 1e3,
        bytes as f64 / MIB as f64 / s,
        bytes as f64 * 8.0 / s / 1e9
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let total = arg("--mib", 256).max(1);
    let depth = arg("--depth", 8).max(1);
    let fabric = roce_io::Fabric::new();
    let a = Context::open_fabric(&fabric, "10.0.0.1".parse()?)?;
    let b = Context::open_fabric(&fabric, "10.0.0.2".parse()?)?;
    let (pa, pb) = (a.alloc_pd(), b.alloc_pd());
    let (ca, cb) = (a.create_cq(256, None)?, b.create_cq(256, None)?);
    let qa = pa.create_qp(&QpInitAttr::new(QpType::Rc, &ca, &ca))?;
    let qb = pb.create_qp(&QpInitAttr::new(QpType::Rc, &cb, &cb))?;

    let data: Vec<u8> = (0..MIB).map(|i| (i * 131 + i / 4096) as u8).collect();
    let src = pa.reg_mr(data.clone(), Access::NONE)?;
    let back = pa.reg_mr(vec![0u8; MIB], Access::LOCAL_WRITE)?;
    let target = pb.reg_mr(
        vec![0u8; MIB],
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    )?;

    // Out-of-band exchange, in process: the server's QP and region.
    let client = qa.endpoint(Psn::new(1));
    let server = QpEndpoint {
        mr: Some(target.remote()),
        ..qb.endpoint(Psn::new(2))
    };
    let opts = ConnectOptions::default();
    qa.connect(client.psn, &server, &opts)?;
    qb.connect(server.psn, &client, &opts)?;
    let remote = server.mr.ok_or("no region advertised")?;

    println!(
        "rdma_write_read: 10.0.0.1 -> 10.0.0.2, path MTU {} B",
        qa.query()?.path_mtu
    );
    let t = Instant::now();
    qa.post_send(SendWr::write(1, [src.sge_all()], remote.at(0)))?;
    wait(&ca, 1)?;
    let tw = t.elapsed();
    if target.to_vec()? != data {
        return Err("the WRITE did not land intact".into());
    }
    let t = Instant::now();
    qa.post_send(SendWr::read(2, [back.sge_all()], remote.at(0)))?;
    wait(&ca, 1)?;
    let tr = t.elapsed();
    if back.to_vec()? != data {
        return Err("the READ did not return the data".into());
    }
    println!("  1 MiB WRITE and READ back: verified");
    report("WRITE", MIB, tw);
    report("READ", MIB, tr);

    println!("streaming {total} x 1 MiB, {depth} in flight:");
    let write = SendOp::Write {
        remote: remote.at(0),
    };
    let t = stream(&qa, &ca, write, &src, total, depth)?;
    report("WRITE", total * MIB, t);
    let read = SendOp::Read {
        remote: remote.at(0),
    };
    let t = stream(&qa, &ca, read, &back, total, depth)?;
    report("READ", total * MIB, t);
    if back.to_vec()? != data {
        return Err("streamed READs returned wrong data".into());
    }
    let c = qa.counters();
    println!(
        "  client QP: {} packets sent, {} received, {} retransmitted",
        c.tx_packets, c.rx_packets, c.retransmitted
    );
    Ok(())
}
