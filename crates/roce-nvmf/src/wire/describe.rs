//! One-line descriptions of capsules and RDMA CM records for capture
//! decoders (`roce inspect`): the opcode's name and the fields that say
//! what a command does, or why the bytes are not a capsule.

use core::fmt::Write;

use super::cm::{CmAccept, CmReject, CmRequest, RejectStatus};
use super::cqe::{CqeRepr, CQE_LEN};
use super::fabrics::{fctype, ConnectCmd, PropertyCmd};
use super::sgl::SglDesc;
use super::sqe::{admin_opc, io_opc, Sqe};
use super::status::{Sct, Status};

/// The name of a command: admin opcodes on the admin queue (`admin`),
/// NVM I/O opcodes elsewhere, Fabrics commands by FCTYPE.
pub fn command_name(opcode: u8, fctype: u8, admin: bool) -> &'static str {
    if opcode == admin_opc::FABRICS {
        return match fctype {
            fctype::PROPERTY_SET => "Property Set",
            fctype::CONNECT => "Connect",
            fctype::PROPERTY_GET => "Property Get",
            fctype::AUTH_SEND => "Authentication Send",
            fctype::AUTH_RECEIVE => "Authentication Receive",
            _ => "Fabrics (unknown type)",
        };
    }
    match (admin, opcode) {
        (true, admin_opc::GET_LOG_PAGE) => "Get Log Page",
        (true, admin_opc::IDENTIFY) => "Identify",
        (true, admin_opc::ABORT) => "Abort",
        (true, admin_opc::SET_FEATURES) => "Set Features",
        (true, admin_opc::GET_FEATURES) => "Get Features",
        (true, admin_opc::ASYNC_EVENT_REQUEST) => "Asynchronous Event Request",
        (true, admin_opc::KEEP_ALIVE) => "Keep Alive",
        (false, io_opc::FLUSH) => "Flush",
        (false, io_opc::WRITE) => "Write",
        (false, io_opc::READ) => "Read",
        (false, io_opc::WRITE_ZEROES) => "Write Zeroes",
        (false, io_opc::DATASET_MANAGEMENT) => "Dataset Management",
        _ => "unknown opcode",
    }
}

/// A short name for a status (the codes this crate knows; others as
/// SCT/SC numbers).
pub fn status_name(s: Status) -> String {
    let known = [
        (Status::SUCCESS, "success"),
        (Status::INVALID_OPCODE, "Invalid Command Opcode"),
        (Status::INVALID_FIELD, "Invalid Field in Command"),
        (Status::CID_CONFLICT, "Command ID Conflict"),
        (Status::DATA_TRANSFER_ERROR, "Data Transfer Error"),
        (Status::INTERNAL_ERROR, "Internal Error"),
        (Status::ABORTED_SQ_DELETION, "Aborted due to SQ Deletion"),
        (Status::INVALID_NAMESPACE, "Invalid Namespace or Format"),
        (Status::COMMAND_SEQUENCE_ERROR, "Command Sequence Error"),
        (Status::DATA_SGL_LENGTH_INVALID, "Data SGL Length Invalid"),
        (
            Status::SGL_DESCRIPTOR_TYPE_INVALID,
            "SGL Descriptor Type Invalid",
        ),
        (Status::SGL_OFFSET_INVALID, "SGL Offset Invalid"),
        (Status::COMMAND_INTERRUPTED, "Command Interrupted"),
        (Status::LBA_OUT_OF_RANGE, "LBA Out of Range"),
        (Status::AER_LIMIT_EXCEEDED, "AER Limit Exceeded"),
        (Status::INVALID_LOG_PAGE, "Invalid Log Page"),
        (Status::FEATURE_NOT_SAVEABLE, "Feature Not Saveable"),
        (
            Status::CONNECT_INCOMPATIBLE_FORMAT,
            "Connect Incompatible Format",
        ),
        (Status::CONNECT_CONTROLLER_BUSY, "Connect Controller Busy"),
        (
            Status::CONNECT_INVALID_PARAMETERS,
            "Connect Invalid Parameters",
        ),
        (Status::CONNECT_INVALID_HOST, "Connect Invalid Host"),
    ];
    let base = Status {
        more: false,
        dnr: s.dnr && !s.is_success(),
        ..s
    };
    for (k, name) in known {
        if k.sct == base.sct && k.sc == base.sc {
            return name.to_owned();
        }
    }
    format!("sct={} sc={:#04x}", Sct::bits(s.sct), s.sc)
}

fn sgl_text(out: &mut String, d: SglDesc) {
    let _ = match d {
        SglDesc::Keyed {
            addr,
            len,
            key,
            invalidate,
        } => write!(
            out,
            " sgl=keyed(addr={addr:#x} len={len} key={:#x}{})",
            key.0,
            if invalidate { " inv" } else { "" }
        ),
        SglDesc::InCapsule { offset, len } => write!(out, " sgl=incapsule(off={offset} len={len})"),
        SglDesc::Other { sgl_type, subtype } => write!(out, " sgl=type{sgl_type:x}/{subtype:x}"),
    };
}

/// Describes a command capsule received on a queue (`admin`: the admin
/// queue); `None` if shorter than an SQE.
pub fn command(capsule: &[u8], admin: bool) -> Option<String> {
    let s = Sqe::new_checked(capsule).ok()?;
    let mut out = String::new();
    let name = command_name(s.opcode(), s.fctype(), admin);
    let _ = write!(out, "{name} cid={}", s.cid().0);
    if s.opcode() == admin_opc::FABRICS {
        match s.fctype() {
            fctype::CONNECT => {
                let c = ConnectCmd::parse(&s);
                let _ = write!(out, " qid={} sqsize={} kato={}", c.qid.0, c.sqsize, c.kato);
            }
            fctype::PROPERTY_GET | fctype::PROPERTY_SET => {
                if let Ok(p) = PropertyCmd::parse(&s) {
                    let _ = write!(out, " ofst={:#x}", p.offset);
                    if s.fctype() == fctype::PROPERTY_SET {
                        let _ = write!(out, " value={:#x}", p.value);
                    }
                }
            }
            _ => {}
        }
    } else if admin {
        let _ = match s.opcode() {
            admin_opc::IDENTIFY => write!(out, " cns={} nsid={}", s.cdw(10) as u8, s.nsid().0),
            admin_opc::GET_LOG_PAGE => {
                let numd = (s.cdw(10) >> 16) | (s.cdw(11) & 0xFFFF) << 16;
                write!(
                    out,
                    " lid={:#04x} len={}",
                    s.cdw(10) as u8,
                    (numd as u64 + 1) * 4
                )
            }
            admin_opc::SET_FEATURES | admin_opc::GET_FEATURES => {
                write!(out, " fid={:#04x} cdw11={:#x}", s.cdw(10) as u8, s.cdw(11))
            }
            _ => Ok(()),
        };
    } else {
        let _ = write!(out, " nsid={}", s.nsid().0);
        if matches!(
            s.opcode(),
            io_opc::READ | io_opc::WRITE | io_opc::WRITE_ZEROES
        ) {
            let slba = s.cdw(10) as u64 | (s.cdw(11) as u64) << 32;
            let _ = write!(out, " slba={slba} nlb={}", (s.cdw(12) & 0xFFFF) + 1);
            if s.cdw(12) & (1 << 30) != 0 {
                out.push_str(" fua");
            }
        }
    }
    sgl_text(&mut out, s.sgl1());
    if !s.in_capsule_data().is_empty() {
        let _ = write!(out, " data={}", s.in_capsule_data().len());
    }
    Some(out)
}

/// Describes a response capsule; `None` if it is not 16 bytes.
pub fn response(b: &[u8]) -> Option<String> {
    if b.len() != CQE_LEN {
        return None;
    }
    let c = CqeRepr::parse(b).ok()?;
    let mut out = format!(
        "response cid={} sqhd={} {}",
        c.cid.0,
        c.sqhd,
        status_name(c.status)
    );
    if c.dw0 != 0 || c.dw1 != 0 {
        let _ = write!(out, " dw0={:#x}", c.dw0);
        if c.dw1 != 0 {
            let _ = write!(out, " dw1={:#x}", c.dw1);
        }
    }
    Some(out)
}

/// Describes RDMA CM request private data.
pub fn cm_request(pd: &[u8]) -> String {
    match CmRequest::parse(pd) {
        Ok(r) => format!(
            "CM request qid={} hrqsize={} hsqsize={}",
            r.qid.0, r.hrqsize, r.hsqsize
        ),
        Err(e) => format!("CM request unparsed ({e:?})"),
    }
}

/// Describes RDMA CM accept private data.
pub fn cm_accept(pd: &[u8]) -> String {
    match CmAccept::parse(pd) {
        Ok(a) => format!("CM accept crqsize={}", a.crqsize),
        Err(_) => "CM accept unparsed".to_owned(),
    }
}

/// Describes RDMA CM reject private data.
pub fn cm_reject(pd: &[u8]) -> String {
    match CmReject::parse(pd)
        .ok()
        .and_then(|r| RejectStatus::from_code(r.status))
    {
        Some(s) => format!("CM reject {s:?}"),
        None => "CM reject (no NVMe-oF status)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::initiator as ini;
    use crate::wire::{Cid, Nsid, Qid, Rkey};

    #[test]
    fn commands_and_responses() {
        let sgl = SglDesc::Keyed {
            addr: 0x1000,
            len: 4096,
            key: Rkey(0x12),
            invalidate: true,
        };
        let r = ini::read(Cid(7), Nsid(1), 100, 8, sgl);
        assert_eq!(
            command(&r, false).unwrap(),
            "Read cid=7 nsid=1 slba=100 nlb=8 sgl=keyed(addr=0x1000 len=4096 key=0x12 inv)"
        );
        let w = ini::with_in_capsule_data(ini::write(Cid(1), Nsid(1), 0, 1, true, sgl), &[0; 512]);
        assert_eq!(
            command(&w, false).unwrap(),
            "Write cid=1 nsid=1 slba=0 nlb=1 fua sgl=incapsule(off=0 len=512) data=512"
        );
        let c = ini::connect(Cid(0), Qid(0), 31, 5000, sgl);
        assert!(command(&c, true)
            .unwrap()
            .starts_with("Connect cid=0 qid=0 sqsize=31 kato=5000"));
        let i = ini::identify(Cid(2), 1, Nsid(0), sgl);
        assert!(command(&i, true)
            .unwrap()
            .starts_with("Identify cid=2 cns=1 nsid=0"));
        assert_eq!(command(&r[..63], false), None);
        let cqe = CqeRepr {
            sqhd: 3,
            ..CqeRepr::new(Cid(7), Status::LBA_OUT_OF_RANGE)
        }
        .to_bytes();
        assert_eq!(
            response(&cqe).unwrap(),
            "response cid=7 sqhd=3 LBA Out of Range"
        );
        let ok = CqeRepr {
            dw0: 1,
            ..CqeRepr::new(Cid(0), Status::SUCCESS)
        }
        .to_bytes();
        assert_eq!(
            response(&ok).unwrap(),
            "response cid=0 sqhd=0 success dw0=0x1"
        );
        assert_eq!(response(&ok[..15]), None);
        assert_eq!(
            cm_request(&ini::cm_request(Qid(1), 128)),
            "CM request qid=1 hrqsize=128 hsqsize=127"
        );
        assert_eq!(cm_reject(&[0, 0, 6]), "CM reject NoResources");
    }
}
