//! `roce inspect`: decode and verify RoCE v2 traffic in capture files.
//!
//! Exit status: 0 when every RoCE packet parsed and its ICRC verified, 1
//! when any ICRC failed or a RoCE packet was malformed, 2 when a file could
//! not be read or was truncated (reported in one line on stderr).

mod error;
mod fixup;
mod nvmf;
mod render;
mod summary;

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use roce_capture::{CaptureReader, Payload};
use roce_wire::Frame;

use error::QpnError;
use fixup::Link;
use summary::Summary;

/// Options of `roce inspect`.
#[derive(clap::Args, Debug)]
pub(crate) struct InspectArgs {
    /// Capture files (pcap or pcapng; Ethernet, raw IP or Linux cooked).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Print only the per-QP summary table.
    #[arg(long)]
    summary: bool,
    /// One JSON object per packet, then the summary as one JSON object.
    #[arg(long)]
    json: bool,
    /// Show only packets to this QP (destination QP, or DETH source QP);
    /// hex with 0x or decimal.
    #[arg(long, value_name = "QPN", value_parser = parse_qpn)]
    qp: Option<u32>,
}

fn parse_qpn(s: &str) -> Result<u32, QpnError> {
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|_| QpnError::NotANumber(s.to_string()))?;
    if v > 0xff_ffff {
        return Err(QpnError::TooWide(s.to_string()));
    }
    Ok(v)
}

/// How inspecting one file ended.
enum FileOutcome {
    Clean,
    /// Not a capture at all (missing, a directory, not pcap/pcapng): no
    /// summary is printed for it.
    NotOpened,
    /// Read up to an error: the summary covers what came before.
    Unreadable,
}

/// Runs the command; returns the process exit status.
pub(crate) fn run(args: &InspectArgs) -> i32 {
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut worst = 0;
    for (i, path) in args.files.iter().enumerate() {
        if args.files.len() > 1 && !args.json {
            let sep = if i == 0 { "" } else { "\n" };
            if writeln!(out, "{sep}==> {} <==", path.display()).is_err() {
                return worst;
            }
        }
        let mut summary = Summary::default();
        let outcome = inspect_file(args, path, &mut summary, &mut out);
        let res = match outcome {
            Ok(FileOutcome::NotOpened) => {
                worst = 2;
                Ok(())
            }
            Ok(o) => {
                if let FileOutcome::Unreadable = o {
                    worst = 2;
                }
                write_summary(args, path, &summary, &mut out)
            }
            Err(e) => Err(e),
        };
        if let Err(e) = res {
            if e.kind() == io::ErrorKind::BrokenPipe {
                return worst;
            }
            eprintln!("roce inspect: writing output: {e}");
            return 2;
        }
        if worst == 0 && (summary.icrc_bad > 0 || summary.malformed > 0) {
            worst = 1;
        }
    }
    if out.flush().is_err() {
        return worst.max(2);
    }
    worst
}

fn write_summary(
    args: &InspectArgs,
    path: &std::path::Path,
    summary: &Summary,
    out: &mut impl Write,
) -> io::Result<()> {
    if args.json {
        let mut v = summary.to_json();
        v["summary"]["file"] = serde_json::json!(path.display().to_string());
        writeln!(out, "{v}")
    } else {
        summary.write_table(out)
    }
}

/// A file that could not be read (or read to its end): one line on
/// stderr and, with `--json`, an `{"error": ...}` object in the stream.
fn file_error(
    args: &InspectArgs,
    path: &std::path::Path,
    msg: &str,
    out: &mut impl Write,
) -> io::Result<()> {
    out.flush()?;
    eprintln!("roce inspect: {}: {msg}", path.display());
    if args.json {
        let v =
            serde_json::json!({"file": path.display().to_string(), "error": msg, "exit_status": 2});
        writeln!(out, "{v}")?;
    }
    Ok(())
}

fn inspect_file(
    args: &InspectArgs,
    path: &std::path::Path,
    summary: &mut Summary,
    out: &mut impl Write,
) -> io::Result<FileOutcome> {
    // The file itself first, for a plain message (the reader's speaks of
    // records and offsets).
    match std::fs::metadata(path) {
        Err(e) => {
            file_error(args, path, &e.to_string(), out)?;
            return Ok(FileOutcome::NotOpened);
        }
        Ok(m) if m.is_dir() => {
            file_error(args, path, "is a directory", out)?;
            return Ok(FileOutcome::NotOpened);
        }
        Ok(m) if m.len() == 0 => {
            let msg = "is empty (0 bytes, not even a pcap header): was the capture stopped before it wrote anything?";
            file_error(args, path, msg, out)?;
            return Ok(FileOutcome::NotOpened);
        }
        Ok(_) => {}
    }
    let mut reader = match CaptureReader::open(path) {
        Ok(r) => r,
        Err(e) => {
            file_error(args, path, &e.to_string(), out)?;
            return Ok(FileOutcome::NotOpened);
        }
    };
    let mut first_ts = None;
    // With --qp: packets that matched, and the QPs of those that did not.
    let mut matched = 0u64;
    let mut other_qps = std::collections::BTreeSet::new();
    let mut line = String::with_capacity(256);
    let mut nvmf = nvmf::Tracker::default();
    let print = !args.summary;
    while let Some(next) = reader.next_packet() {
        let pkt = match next {
            Ok(p) => p,
            Err(e) => {
                file_error(args, path, &e.to_string(), out)?;
                return Ok(FileOutcome::Unreadable);
            }
        };
        let first = *first_ts.get_or_insert(pkt.ts_ns);
        let time = render::rel_time(pkt.ts_ns, first);
        if (pkt.data.len() as u64) < u64::from(pkt.orig_len) {
            // Cut at the capture's snap length: its lengths disagree and
            // its ICRC is gone, so it cannot be checked (not malformed).
            summary.truncated += 1;
            if print && args.qp.is_none() {
                if args.json {
                    let v = serde_json::json!({"n": pkt.index, "time": time,
                        "kind": "truncated", "captured": pkt.data.len(), "length": pkt.orig_len});
                    writeln!(out, "{v}")?;
                } else {
                    writeln!(
                        out,
                        "{} {time:.6} TRUNCATED by the capture: {} of {} bytes",
                        pkt.index,
                        pkt.data.len(),
                        pkt.orig_len
                    )?;
                }
            }
            continue;
        }
        let (link, bytes) = match pkt.payload() {
            Ok(Payload::Ethernet(b)) => (Link::Ethernet, b),
            Ok(Payload::Ip(b)) => (Link::Ip, b),
            Ok(Payload::Cooked { protocol, data }) => (Link::Cooked(protocol), data),
            Ok(Payload::Unsupported(_)) | Err(_) => {
                summary.other += 1;
                continue;
            }
        };
        // What loopback captures hold (fixup): an unfinished UDP checksum,
        // ignored as Wireshark does, and GSO batches, split.
        let mut owned: Vec<Vec<u8>> = Vec::new();
        if fixup::bad_udp_checksum(&fixup::parse(link, bytes)) {
            if let Some(v) = fixup::without_udp_checksum(link, bytes) {
                summary.udp_checksum_ignored += 1;
                owned.push(v);
            }
        }
        let cur: &[u8] = owned.last().map_or(bytes, Vec::as_slice);
        let segments = match fixup::parse(link, cur) {
            // A batch parses as one packet with a bad ICRC, or as one
            // that cannot carry so much payload.
            Ok(Frame::Roce(p)) if p.computed_icrc() != p.icrc => fixup::split_gso(link, cur),
            Err(_) => fixup::split_gso(link, cur),
            _ => None,
        };
        if let Some(segs) = segments {
            summary.gso_batches += 1;
            summary.gso_packets += segs.len() as u64;
            if print && args.qp.is_none() {
                if args.json {
                    let v = serde_json::json!({"n": pkt.index, "time": time, "kind": "gso_batch",
                        "bytes": cur.len(), "packets": segs.len()});
                    writeln!(out, "{v}")?;
                } else {
                    writeln!(
                        out,
                        "{} {time:.6} GSO batch of {} bytes: {} RoCE packets (split; every ICRC valid)",
                        pkt.index,
                        cur.len(),
                        segs.len()
                    )?;
                }
            }
            owned = segs;
        }
        let frames: Vec<&[u8]> = if owned.is_empty() {
            vec![bytes]
        } else {
            owned.iter().map(Vec::as_slice).collect()
        };
        for f in frames {
            match fixup::parse(link, f) {
                Ok(Frame::Roce(p)) => {
                    if let Some(q) = args.qp {
                        let src_qp = p.ext.deth.map(|d| d.src_qp.value());
                        if p.bth.dest_qp.value() != q && src_qp != Some(q) {
                            other_qps.insert(p.bth.dest_qp.value());
                            continue;
                        }
                        matched += 1;
                    }
                    let expected = p.computed_icrc();
                    let retx = summary.add(&p, expected == p.icrc);
                    let nvmf_text = nvmf.observe(&p).or_else(|| nvmf.capsule(&p));
                    if print {
                        if args.json {
                            let mut v = render::roce_json(pkt.index, time, &p, expected, retx);
                            if let (Some(d), Some(m)) = (&nvmf_text, v.as_object_mut()) {
                                m.insert("nvmf".into(), serde_json::json!(d));
                            }
                            writeln!(out, "{v}")?;
                        } else {
                            line.clear();
                            render::roce_line(&mut line, pkt.index, time, &p, expected, retx);
                            if let Some(d) = &nvmf_text {
                                line.push_str(" NVMe-oF ");
                                line.push_str(d);
                            }
                            line.push('\n');
                            out.write_all(line.as_bytes())?;
                        }
                    }
                }
                Ok(Frame::MacControl { eth, ctrl }) => {
                    summary.mac_control += 1;
                    if print && args.qp.is_none() {
                        let src = eth.map(|e| e.src);
                        if args.json {
                            writeln!(
                                out,
                                "{}",
                                render::mac_control_json(pkt.index, time, src, &ctrl)
                            )?;
                        } else {
                            line.clear();
                            render::mac_control_line(&mut line, pkt.index, time, src, &ctrl);
                            line.push('\n');
                            out.write_all(line.as_bytes())?;
                        }
                    }
                }
                Ok(Frame::Other) => summary.other += 1,
                Err(e) => {
                    summary.malformed += 1;
                    if print && args.qp.is_none() {
                        if args.json {
                            let v = serde_json::json!({"n": pkt.index, "time": time,
                            "kind": "malformed", "error": e.to_string()});
                            writeln!(out, "{v}")?;
                        } else {
                            writeln!(out, "{} {time:.6} MALFORMED {e}", pkt.index)?;
                        }
                    }
                }
            }
        }
    }
    if let (Some(q), 0) = (args.qp, matched) {
        let qps: Vec<String> = other_qps.iter().map(|q| format!("{q:#x}")).collect();
        eprintln!(
            "roce inspect: {}: no RoCE packet is to or from QP {q:#x} ({q}); the capture's destination QPs: {}",
            path.display(),
            if qps.is_empty() { "none".to_string() } else { qps.join(", ") }
        );
    }
    Ok(FileOutcome::Clean)
}
