//! The examples run, with small counts, and say what they checked: an
//! example that no longer works fails CI instead of waiting for a reader.

use std::process::Command;
use std::time::Duration;

use roce_testkit::{example, run_bounded, text};

/// `rc_pingpong` runs 20,000 verified round trips, with the engine's ACK
/// deferral off (a NIC's behaviour) and on (the answer leaves before the
/// ACK, so completions come in either order).
#[test]
fn rc_pingpong_runs_20000_iterations() {
    for delay in ["0", "25"] {
        let mut c = Command::new(example("rc_pingpong"));
        c.args(["--iters", "20000", "--ack-delay-us", delay]);
        let o = run_bounded(c, Duration::from_secs(240));
        let (out, err) = text(&o);
        assert!(o.status.success(), "ack delay {delay} us: {out}{err}");
        assert!(
            out.contains("20000 iterations of 64-byte SENDs each way, data verified"),
            "{out}"
        );
        assert!(out.contains("client QP: "), "{out}");
    }
}

#[test]
fn rdma_write_read_verifies_its_data() {
    let mut c = Command::new(example("rdma_write_read"));
    c.args(["--mib", "4", "--depth", "2"]);
    let o = run_bounded(c, Duration::from_secs(120));
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("1 MiB WRITE and READ back: verified"), "{out}");
    assert!(out.contains("streaming 4 x 1 MiB, 2 in flight"), "{out}");
}
