//! `roce devinfo` on this host's loopback interface (no privileges
//! needed); interfaces with known MTUs are checked in `perf_netns.rs`.

use std::process::{Command, Output};

use serde_json::Value;

fn devinfo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce"))
        .arg("devinfo")
        .args(args)
        .output()
        .expect("run roce")
}

fn json(args: &[&str]) -> Value {
    let o = devinfo(args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON")
}

#[test]
fn loopback_when_named() {
    let v = json(&["--json", "-d", "lo"]);
    let d = &v["devices"][0];
    assert_eq!(d["name"], "lo");
    assert_eq!(d["loopback"], true);
    assert!(d["ifindex"].as_u64().unwrap() > 0);
    assert_eq!(d["active_mtu"], 4096, "{d}");
    assert_eq!(d["max_mtu"], 4096);
    assert_eq!(d["link_layer"], "Ethernet");
    assert_eq!(
        d["node_guid"], "0200:00ff:fe00:0000",
        "EUI-64 of 00:00:00:00:00:00"
    );
    let gids = d["gids"].as_array().unwrap();
    assert_eq!(gids[0]["gid"], "::ffff:127.0.0.1", "{d}");
    assert_eq!(gids[0]["index"], 0);
    assert_eq!(gids[0]["type"], "RoCE v2");
    let caps = &d["caps"];
    assert_eq!(caps["max_sge"], 16);
    assert_eq!(caps["max_inline_data"], 4096);
    assert_eq!(caps["max_qp_rd_atom"], 128);
    assert_eq!(caps["atomic_cap"], "ATOMIC_HCA");
    assert_eq!(caps["transports"], serde_json::json!(["RC", "UC", "UD"]));
    assert_eq!(caps["udp_sport_range"], serde_json::json!([0xc000, 0xffff]));
    // The code chosen for this CPU, consistent with what it is.
    let cpu = &caps["cpu"];
    let emulated = cpu["emulated"].as_bool().expect("cpu.emulated");
    if emulated {
        assert_eq!(cpu["icrc"], "table", "{cpu}");
        assert_eq!(cpu["copy_piece"], 1024, "{cpu}");
    } else {
        assert_eq!(cpu["icrc"], "crc32fast", "{cpu}");
        assert!(cpu["copy_piece"].is_null(), "{cpu}");
    }
}

/// Loopback is listed by default, as the drop-in library lists it: the
/// device every one-host example uses.
#[test]
fn loopback_is_listed_by_default() {
    let v = json(&["--json"]);
    let devs = v["devices"].as_array().unwrap();
    assert!(devs.iter().any(|d| d["name"] == "lo"), "{v}");
    assert!(devs.iter().all(|d| d["state"] == "PORT_ACTIVE"), "{v}");
}

#[test]
fn text_in_the_manner_of_ibv_devinfo() {
    let o = devinfo(&["-d", "lo"]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    assert!(t.starts_with("hca_id:\troce_lo\n"), "{t}");
    assert!(t.contains("\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"), "{t}");
    assert!(t.contains("\t\t\tactive_mtu:\t\t4096 (5)\n"), "{t}");
    assert!(
        t.contains("\t\t\tGID[  0]:\t\t::ffff:127.0.0.1, RoCE v2\n"),
        "{t}"
    );
    assert!(!t.contains("max_qp:"), "capabilities only with -v: {t}");
    let o = devinfo(&["-d", "lo", "-v"]);
    let t = String::from_utf8_lossy(&o.stdout);
    for line in [
        "\tmax_qp:\t\t\t\t16777214\n",
        "\tmax_sge:\t\t\t16\n",
        "\tmax_inline_data:\t\t4096\n",
        "\tatomic_cap:\t\t\tATOMIC_HCA (1)\n",
        "\ttransports:\t\t\tRC UC UD\n",
    ] {
        assert!(t.contains(line), "{line:?} in {t}");
    }
    // The code chosen for this CPU, one line, whichever CPU this is.
    let cpu = t
        .lines()
        .find(|l| l.starts_with("\tcpu:\t\t\t\t"))
        .unwrap_or_else(|| panic!("no cpu line in {t}"));
    assert!(
        cpu.ends_with(
            "real: ICRC by crc32fast (carry-less multiply where the CPU has it), whole copies"
        ) || cpu.ends_with(
            "emulated (QEMU TCG): table-driven ICRC, payload copies in 1024-byte pieces"
        ),
        "{cpu}"
    );
}

#[test]
fn unknown_interface_is_a_one_line_error() {
    let o = devinfo(&["-d", "no-such-if0"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(err.trim(), "roce devinfo: no interface no-such-if0");
}

/// The names the other tools' errors point at work here: `-l` lists the
/// devices (as `ibv_devinfo -l`; "roce devinfo -l lists them"), and `-d`
/// takes a device's name (`roce_lo`) as well as its interface's.
#[test]
fn list_and_device_names() {
    let o = devinfo(&["-l"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut lines = out.lines();
    let n: usize = lines
        .next()
        .and_then(|l| l.strip_suffix(" HCAs found:"))
        .and_then(|n| n.parse().ok())
        .expect(&out);
    let names: Vec<&str> = lines.map(str::trim).collect();
    assert_eq!(names.len(), n, "{out}");
    assert!(names.contains(&"roce_lo"), "{out}");
    let v = json(&["--json", "-d", "roce_lo"]);
    assert_eq!(v["devices"][0]["name"], "lo");
}

/// What ibv_devinfo shows and devinfo lacked: link speed and width,
/// max_cq, max_ah, gid_tbl_len (the number of GID lines).
#[test]
fn speed_width_cq_ah_and_gid_table_length() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["devinfo", "-d", "lo", "-v"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for k in [
        "max_cq:",
        "max_ah:",
        "active_width:\t\t1X (1)",
        "active_speed:",
    ] {
        assert!(out.contains(k), "{k}: {out}");
    }
    let gids = out
        .lines()
        .filter(|l| l.trim_start().starts_with("GID["))
        .count();
    assert!(gids > 0, "{out}");
    assert!(out.contains(&format!("gid_tbl_len:\t\t{gids}\n")), "{out}");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["devinfo", "-d", "lo", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let d = &v["devices"][0];
    assert_eq!(d["gid_tbl_len"], gids, "{d}");
    // Null where the kernel reports no speed (lo), else a number.
    let speed = d.get("link_speed_mbps");
    assert!(
        speed.is_some_and(|s| s.is_null() || s.as_u64().is_some()),
        "{d}"
    );
    assert_eq!(d["active_width"], "1X");
    assert!(d["caps"]["max_cq"].as_u64().is_some() && d["caps"]["max_ah"].as_u64().is_some());
}

/// ibv_devinfo's `-i PORT`: port 1 is the one there is; another is an
/// error that says so.
#[test]
fn port_flag_as_ibv_devinfo() {
    let o = devinfo(&["-d", "roce_lo", "-i", "1"]);
    assert!(o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("hca_id:"),
        "{o:?}"
    );
    let o = devinfo(&["-i", "2"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("no port 2: a device of this stack has one port, number 1"),
        "{o:?}"
    );
}
