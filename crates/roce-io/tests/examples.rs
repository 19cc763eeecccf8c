//! The examples run, briefly, and print what they measured.

use std::process::Command;
use std::time::Duration;

use roce_testkit::{example, run_bounded, text, Guard};

#[test]
fn udp_blast_reports_both_modes() {
    let mut c = Command::new(example("udp_blast"));
    c.arg("0.2");
    let o = run_bounded(c, Duration::from_secs(60));
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("sendmmsg/recvmmsg"), "{out}");
    assert!(out.contains("GSO/GRO"), "{out}");
    assert!(out.contains("Gbit/s"), "{out}");
}

/// Echo and ping on two loopback ports, as the example's doc runs them
/// between namespaces.
#[test]
fn udp_pingpong_on_loopback() {
    let [pa, pb] = roce_testkit::free_ports();
    let (a, b) = (format!("127.0.0.1:{pa}"), format!("127.0.0.1:{pb}"));
    let mut echo = Command::new(example("udp_pingpong"));
    echo.args(["echo", &b, &a, "2000"]);
    let echo = Guard::spawn(echo);
    let mut ping = Command::new(example("udp_pingpong"));
    ping.args(["ping", &a, &b, "2000"]);
    let o = run_bounded(ping, Duration::from_secs(60));
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("half round trip: typical"), "{out}");
    assert!(echo.wait(Duration::from_secs(30)).status.success());
}
