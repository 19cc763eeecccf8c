//! RC ping-pong over an in-memory fabric, in the spirit of
//! `ibv_rc_pingpong`: two contexts (10.0.0.1 and 10.0.0.2), a client and a
//! server thread; each iteration the client SENDs a message and the server
//! SENDs it back. The data is checked every time.
//!
//! ```text
//! cargo run --release -p roce-verbs --example rc_pingpong -- [--iters N] [--size BYTES] [--ack-delay-us US]
//! ```
//!
//! `--ack-delay-us` sets the engine's ACK deferral (`DeviceConfig::ack_delay`;
//! 0: off): how long an ACK may wait for the answer to leave first.

use std::time::{Duration, Instant};

use roce_verbs::*;

const WAIT: Duration = Duration::from_secs(10);

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn payload(iter: usize, size: usize) -> Vec<u8> {
    (0..size).map(|i| (i + iter * 7) as u8).collect()
}

/// Waits for one completion of `cq`, busy-polling (each empty poll drives
/// the context's progress on this thread).
fn wait_one(cq: &CompletionQueue) -> Result<Completion, Box<dyn std::error::Error>> {
    let start = Instant::now();
    for spins in 0u64.. {
        if let Some(c) = cq.poll_one()? {
            if !c.is_success() {
                return Err(format!("work request {} failed: {:?}", c.wr_id(), c.status()).into());
            }
            return Ok(c);
        }
        // Busy-poll, but let another thread have the core now and then:
        // on an oversubscribed machine the peer may be waiting for it.
        if spins % 64 == 63 {
            std::thread::yield_now();
            if start.elapsed() > WAIT {
                break;
            }
        }
    }
    Err("timed out waiting for a completion".into())
}

struct Side {
    cq: CompletionQueue,
    qp: QueuePair,
    tx: MemoryRegion,
    rx: MemoryRegion,
}

fn side(ctx: &Context, size: usize) -> Result<Side, Error> {
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(64, None)?;
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))?;
    let tx = pd.reg_mr(vec![0u8; size], Access::NONE)?;
    let rx = pd.reg_mr(vec![0u8; size], Access::LOCAL_WRITE)?;
    Ok(Side { cq, qp, tx, rx })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iters = arg("--iters", 20_000);
    let size = arg("--size", 64).clamp(1, 1 << 20);
    let ack_delay_us = arg("--ack-delay-us", 0) as u64;
    let config = |addr: &str| -> Result<DeviceConfig, Box<dyn std::error::Error>> {
        let mut c = DeviceConfig::new(addr.parse()?);
        c.ack_delay = AckDelay {
            max_delay: ack_delay_us * 1000,
            ..AckDelay::INTERACTIVE
        };
        Ok(c)
    };
    let fabric = roce_io::Fabric::new();
    let a = Context::open_fabric_with(&fabric, config("10.0.0.1")?, |ep| ep)?;
    let b = Context::open_fabric_with(&fabric, config("10.0.0.2")?, |ep| ep)?;
    let (client, server) = (side(&a, size)?, side(&b, size)?);

    // Out-of-band exchange, in process.
    let (ec, es) = (
        client.qp.endpoint(Psn::new(0x1000)),
        server.qp.endpoint(Psn::new(0x2000)),
    );
    let opts = ConnectOptions::default();
    client.qp.connect(ec.psn, &es, &opts)?;
    server.qp.connect(es.psn, &ec, &opts)?;
    let len = size as u32;
    server.qp.post_recv(RecvWr {
        wr_id: 0,
        sgl: vec![server.rx.sge(0, len)].into(),
    })?;
    client.qp.post_recv(RecvWr {
        wr_id: 0,
        sgl: vec![client.rx.sge(0, len)].into(),
    })?;

    // The server echoes every message. Its SEND's completion and the next
    // message's may come in either order (the ACK that completes the SEND
    // can follow the client's next message, as with a NIC that coalesces
    // ACKs): like ibv_rc_pingpong, it counts both kinds.
    let server_thread = std::thread::spawn(move || -> Result<(), String> {
        let s = server;
        let mut buf = vec![0u8; size];
        let (mut received, mut sends_done) = (0, 0);
        while received < iters || sends_done < received {
            let c = wait_one(&s.cq).map_err(|e| e.to_string())?;
            match c.opcode() {
                WcOpcode::Send => {
                    sends_done += 1;
                    continue;
                }
                WcOpcode::Recv if c.byte_len() == len && received < iters => {}
                _ => return Err(format!("server: unexpected completion {c:?}")),
            }
            s.rx.read(0, &mut buf).map_err(|e| e.to_string())?;
            if buf != payload(received, size) {
                return Err(format!("server: bad data in iteration {received}"));
            }
            received += 1;
            s.qp.post_recv(RecvWr {
                wr_id: 0,
                sgl: vec![s.rx.sge(0, len)].into(),
            })
            .map_err(|e| e.to_string())?;
            s.tx.write(0, &buf).map_err(|e| e.to_string())?;
            s.qp.post_send(SendWr::send(1, [s.tx.sge(0, len)]))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    });

    let c = client;
    let start = Instant::now();
    if let Err(e) = run_client(&c, iters, size) {
        // The server's own failure, if it had one, explains the client's.
        return match server_thread.join() {
            Ok(Err(server)) => Err(format!("{e}; {server}").into()),
            _ => Err(e),
        };
    }
    let elapsed = start.elapsed();
    server_thread
        .join()
        .map_err(|_| "server thread panicked")??;
    report(&c, iters, size, elapsed);
    Ok(())
}

/// The client's side: SEND, wait for the echo and the SEND's completion
/// (either order), check the echo.
fn run_client(c: &Side, iters: usize, size: usize) -> Result<(), Box<dyn std::error::Error>> {
    let len = size as u32;
    let mut buf = vec![0u8; size];
    for i in 0..iters {
        let data = payload(i, size);
        c.tx.write(0, &data)?;
        c.qp.post_send(SendWr::send(1, [c.tx.sge(0, len)]))?;
        // The SEND's completion and the echo, in either order.
        let mut got_echo = false;
        for _ in 0..2 {
            let done = wait_one(&c.cq)?;
            if done.opcode() == WcOpcode::Recv {
                got_echo = true;
            }
        }
        if !got_echo {
            return Err(format!("client: no echo in iteration {i}").into());
        }
        c.rx.read(0, &mut buf)?;
        if buf != data {
            return Err(format!("client: bad echo in iteration {i}").into());
        }
        c.qp.post_recv(RecvWr {
            wr_id: 0,
            sgl: vec![c.rx.sge(0, len)].into(),
        })?;
    }
    Ok(())
}

fn report(c: &Side, iters: usize, size: usize, elapsed: Duration) {
    let rtt_us = elapsed.as_secs_f64() * 1e6 / iters as f64;
    let rate = 2.0 * iters as f64 / elapsed.as_secs_f64();
    println!("rc_pingpong: {iters} iterations of {size}-byte SENDs each way, data verified");
    println!("  elapsed            {:.3} s", elapsed.as_secs_f64());
    println!("  average round trip {rtt_us:.2} µs");
    println!(
        "  message rate       {:.0} msg/s ({:.3} Mmsg/s)",
        rate,
        rate / 1e6
    );
    println!(
        "  client QP: {} packets sent, {} retransmitted",
        c.qp.counters().tx_packets,
        c.qp.counters().retransmitted
    );
}
