//! Why a run of `roce pingpong` failed. The text the user sees is the
//! [`Display`](std::fmt::Display) of a [`PingpongError`], the tools' own
//! wording where they have one ("Couldn't post send: ..."); the error it
//! wraps, if any, is also its [`source`](std::error::Error::source).
//!
//! Which exit status a failure gets is decided by where it happened (the
//! flags' check: 2; the run: 1), not by its text.

use std::fmt;
use std::io;
use std::net::IpAddr;

use roce_verbs::{
    CqError, CreateError, ModifyQpError, OpenError, PostError, RegMrError, RegionError, WcStatus,
};

use super::wire_error::WireError;
use crate::device::DeviceError;

/// Where the data of a message first differs from what was sent: the
/// byte's offset, what came back and what was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FirstDiff {
    pub(crate) offset: usize,
    pub(crate) got: u8,
    pub(crate) sent: u8,
}

/// A failure of `roce pingpong`.
#[derive(Debug)]
pub(crate) enum PingpongError {
    /// A numeric flag's value is not a number (its text).
    NotANumber(String),
    /// A numeric flag's value does not fit the flag (its text).
    OutOfRange(String),
    /// Flags refused: out of range, or not going together.
    Args(String),
    /// A helper shared with the other commands refused (`-g` past every
    /// GID table, `ROCE_SHM`, no free loopback address, the peer's QP
    /// away from its address).
    Device(DeviceError),
    /// The device could not be found, read or opened (roce-verbs' reason
    /// as it is: the UDP port taken, an address not of this host, a GID
    /// index past the device's table).
    Open(OpenError),
    /// The device on `at` could not be opened for another reason.
    OpenOn { at: IpAddr, error: OpenError },
    /// `-g` names no entry of the GID table of an address no interface
    /// lists (its table holds only itself).
    GidIndex { index: usize, addr: IpAddr },
    /// The server's name could not be resolved.
    Resolve { server: String, error: io::Error },
    /// No TCP connection to the server (`error`: the last attempt's).
    Connect {
        server: String,
        port: u16,
        error: Option<io::Error>,
    },
    /// The server could not listen on its TCP port.
    Listen { port: u16, error: io::Error },
    /// The server's `accept` failed.
    Accept(io::Error),
    /// A call on the TCP connection failed (its timeout, its addresses).
    Socket(io::Error),
    /// The tools' exchange over TCP failed.
    Wire(WireError),
    /// A verbs call failed that the tools have no words for (the PSN's
    /// randomness).
    Verbs(roce_verbs::Error),
    /// The memory region's bytes could not be read or written.
    Region(RegionError),
    /// Polling (or arming) the completion queue failed.
    Cq(CqError),
    /// `ibv_create_cq` refused.
    CreateCq(CreateError),
    /// `ibv_create_srq` refused.
    CreateSrq(CreateError),
    /// `ibv_create_qp` refused.
    CreateQp(CreateError),
    /// `ibv_create_ah` refused.
    CreateAh(CreateError),
    /// `ibv_reg_mr` refused.
    RegMr(RegMrError),
    /// RESET → INIT refused.
    ToInit(ModifyQpError),
    /// INIT → RTR → RTS of QP `qp` (its index) refused.
    ToRts { qp: usize, error: ModifyQpError },
    /// A receive could not be posted.
    PostRecv(PostError),
    /// A SEND could not be posted.
    PostSend(PostError),
    /// The receive queue could not be refilled (receives outstanding).
    Refill(u32),
    /// The peer's `-q` differs from this side's (srq): its QPs, ours.
    QpCount { peer: usize, mine: usize },
    /// The peer's address message names QPN 0.
    ZeroQpn,
    /// The two ends' GIDs are of different IP families
    /// ([`crate::device::family_mismatch`]'s sentence).
    FamilyMismatch(String),
    /// No completion for `secs` seconds: `peer` stopped answering.
    PeerSilent { secs: u64, peer: &'static str },
    /// A work completion in error.
    Completion { status: WcStatus, wr_id: u64 },
    /// A completion for a QP this side does not have.
    UnknownQpn(u32),
    /// A completion whose work request this side did not post.
    UnknownWrId(u64),
    /// `-c`: a message of the wrong length.
    Length { got: u32, qpn: u32, want: usize },
    /// `-c`: message `message` (from 1) on QP `qpn` holds other bytes than
    /// expected (where first, when this side knows what was sent).
    Data {
        message: u64,
        qpn: u32,
        diff: Option<FirstDiff>,
    },
}

impl fmt::Display for PingpongError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use PingpongError as E;
        match self {
            E::NotANumber(s) => write!(f, "'{s}' is not a number"),
            E::OutOfRange(s) => write!(f, "{s} is out of range"),
            E::Args(m) | E::FamilyMismatch(m) => f.write_str(m),
            E::Device(e) => write!(f, "{e}"),
            E::Open(e) => write!(f, "{e}"),
            E::OpenOn { at, error } => write!(f, "Couldn't open the device on {at}: {error}"),
            E::GidIndex { index, addr } => write!(
                f,
                "GID index {index} is not in the GID table of {addr} (an address no interface lists has one entry, 0)"
            ),
            E::Resolve { server, error } => write!(f, "{server}: {error}"),
            E::Connect {
                server,
                port,
                error,
            } => match error {
                Some(e) => write!(f, "Couldn't connect to {server}:{port} ({e})"),
                None => write!(f, "Couldn't connect to {server}:{port} (no address)"),
            },
            E::Listen { port, error } => write!(f, "Couldn't listen to port {port} ({error})"),
            E::Accept(e) => write!(f, "accept() failed: {e}"),
            E::Socket(e) => write!(f, "{e}"),
            E::Wire(e) => write!(f, "{e}"),
            E::Verbs(e) => write!(f, "{e}"),
            E::Region(e) => write!(f, "{e}"),
            E::Cq(e) => write!(f, "{e}"),
            E::CreateCq(e) => write!(f, "Couldn't create CQ: {e}"),
            E::CreateSrq(e) => write!(f, "Couldn't create SRQ: {e}"),
            E::CreateQp(e) => write!(f, "Couldn't create QP: {e}"),
            E::CreateAh(e) => write!(f, "Failed to create AH: {e}"),
            E::RegMr(e) => write!(f, "Couldn't register MR: {e}"),
            E::ToInit(e) => write!(f, "Failed to modify QP to INIT: {e}"),
            E::ToRts { qp, error } => write!(f, "Failed to modify QP[{qp}] to RTR/RTS: {error}"),
            E::PostRecv(e) => write!(f, "Couldn't post receive: {e}"),
            E::PostSend(e) => write!(f, "Couldn't post send: {e}"),
            E::Refill(outstanding) => write!(f, "Couldn't post receive ({outstanding})"),
            E::QpCount { peer, mine } => write!(
                f,
                "the peer has {peer} QPs and this side {mine} (run both with the same -q)"
            ),
            E::ZeroQpn => f.write_str("the peer sent QPN 0"),
            E::PeerSilent { secs, peer } => write!(
                f,
                "no completion for {secs} s: {peer} stopped answering (killed, or unreachable): giving up"
            ),
            // The tools print the work request's kind (its low byte).
            E::Completion { status, wr_id } => write!(
                f,
                "Failed status {} ({}) for wr_id {}",
                status.as_str(),
                *status as u32,
                wr_id & 0xff
            ),
            E::UnknownQpn(qpn) => write!(f, "Couldn't find QPN {qpn:06x}"),
            E::UnknownWrId(id) => write!(f, "Completion for unknown wr_id {id}"),
            E::Length { got, qpn, want } => write!(
                f,
                "received {got} bytes on QPN {qpn:06x}, expected {want}"
            ),
            E::Data { message, qpn, diff } => {
                write!(f, "invalid data in message {message} on QPN {qpn:06x}")?;
                match diff {
                    Some(d) => write!(
                        f,
                        " (byte {}: got 0x{:02x}, sent 0x{:02x})",
                        d.offset, d.got, d.sent
                    ),
                    None => Ok(()),
                }
            }
        }
    }
}

impl std::error::Error for PingpongError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        use PingpongError as E;
        match self {
            E::Device(e) => Some(e),
            E::Open(e) | E::OpenOn { error: e, .. } => Some(e),
            E::Resolve { error, .. } | E::Listen { error, .. } => Some(error),
            E::Connect { error, .. } => error.as_ref().map(|e| e as _),
            E::Accept(e) | E::Socket(e) => Some(e),
            E::Wire(e) => Some(e),
            E::Verbs(e) => Some(e),
            E::Region(e) => Some(e),
            E::Cq(e) => Some(e),
            E::CreateCq(e) | E::CreateSrq(e) | E::CreateQp(e) | E::CreateAh(e) => Some(e),
            E::RegMr(e) => Some(e),
            E::ToInit(e) | E::ToRts { error: e, .. } => Some(e),
            E::PostRecv(e) | E::PostSend(e) => Some(e),
            _ => None,
        }
    }
}

wrap_errors!(
    PingpongError:
    DeviceError => Device,
    OpenError => Open,
    WireError => Wire,
    roce_verbs::Error => Verbs,
    RegionError => Region,
    CqError => Cq,
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts the user sees, as they were when these were strings.
    #[test]
    fn says_what_the_strings_said() {
        let e = PingpongError::Completion {
            status: WcStatus::RetryExcErr,
            wr_id: 0x0302,
        };
        assert_eq!(
            e.to_string(),
            format!(
                "Failed status {} ({}) for wr_id 2",
                WcStatus::RetryExcErr.as_str(),
                WcStatus::RetryExcErr as u32
            )
        );
        let e = PingpongError::Data {
            message: 3,
            qpn: 0x11,
            diff: Some(FirstDiff {
                offset: 5,
                got: 0x7b,
                sent: 0x01,
            }),
        };
        assert_eq!(
            e.to_string(),
            "invalid data in message 3 on QPN 000011 (byte 5: got 0x7b, sent 0x01)"
        );
        let e = PingpongError::Data {
            message: 1,
            qpn: 0x11,
            diff: None,
        };
        assert_eq!(e.to_string(), "invalid data in message 1 on QPN 000011");
        let e = PingpongError::Connect {
            server: "h".into(),
            port: 18515,
            error: None,
        };
        assert_eq!(e.to_string(), "Couldn't connect to h:18515 (no address)");
        let e = PingpongError::PeerSilent {
            secs: 10,
            peer: "the server",
        };
        assert_eq!(
            e.to_string(),
            "no completion for 10 s: the server stopped answering (killed, or unreachable): giving up"
        );
        let e = PingpongError::PostSend(PostError::QueueFull);
        assert_eq!(
            e.to_string(),
            format!("Couldn't post send: {}", PostError::QueueFull)
        );
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(
            PingpongError::NotANumber("x".into()).to_string(),
            "'x' is not a number"
        );
        assert_eq!(
            PingpongError::OutOfRange("300".into()).to_string(),
            "300 is out of range"
        );
    }
}
