//! Why a run of `roce rping` failed. The text the user sees is the
//! [`Display`](std::fmt::Display) of an [`RpingError`]; the error it
//! wraps, if any, is also its [`source`](std::error::Error::source).
//!
//! Two of its variants ([`RpingError::WaitTimedOut`],
//! [`RpingError::Wait`]) come from [`super::first_to_connect`], which
//! `roce perf --perftest` uses too.

use std::fmt;
use std::net::IpAddr;

use roce_verbs::{
    CmError, CqError, CreateError, ModifyQpError, OpenError, PostError, RegMrError, RegionError,
    WcStatus,
};

use crate::device::DeviceError;

/// A failure of `roce rping`.
#[derive(Debug)]
pub(crate) enum RpingError {
    /// The server was given no address to serve on (`-a 0.0.0.0`
    /// without `--bind`).
    NeedAddress,
    /// No route to the server: no source address for the client.
    NoRoute(IpAddr),
    /// A helper shared with the other commands refused (`--faults`,
    /// `ROCE_SHM`, no free loopback address).
    Device(DeviceError),
    /// The device could not be opened.
    Open(OpenError),
    /// Creating the CQ or the QP was refused.
    Create(CreateError),
    /// Registering a buffer was refused.
    RegMr(RegMrError),
    /// Bringing the QP to INIT was refused.
    ModifyQp(ModifyQpError),
    /// A buffer's bytes could not be read or written.
    Region(RegionError),
    /// Polling the completion queue failed.
    Cq(CqError),
    /// A post was refused: which (`"post send"`, `"post recv"`, `"post
    /// read"`, `"post write"`), and why.
    Post(&'static str, PostError),
    /// The server could not listen on its rdma_cm port.
    Listen { port: u16, error: roce_verbs::Error },
    /// No client connected in time.
    WaitTimedOut,
    /// Waiting for a client failed.
    Wait(CmError),
    /// The server did not answer the connection request within `secs`.
    NoAnswer { addr: IpAddr, port: u16, secs: u64 },
    /// The connection request failed otherwise (refused, rejected).
    Connect {
        addr: IpAddr,
        port: u16,
        error: CmError,
    },
    /// The peer sent nothing for `secs` seconds and did not disconnect.
    PeerSilent { peer: &'static str, secs: u64 },
    /// A work completion in error.
    Completion { status: WcStatus, wr_id: u64 },
    /// The server disconnected in the middle of a ping.
    ServerDisconnected,
    /// `-V`: the echo of ping `ping` is not what was sent.
    Mismatch {
        ping: u64,
        sent: String,
        got: String,
    },
    /// The client's disconnect failed.
    Disconnect(CmError),
    /// The connection ended without the client's disconnect.
    NoDisconnect,
}

impl fmt::Display for RpingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use RpingError as E;
        match self {
            E::NeedAddress => f.write_str("give the RoCE device's address with -a or --bind"),
            E::NoRoute(server) => write!(f, "no route to {server}"),
            E::Device(e) => write!(f, "{e}"),
            E::Open(e) => write!(f, "{e}"),
            E::Create(e) => write!(f, "{e}"),
            E::RegMr(e) => write!(f, "{e}"),
            E::ModifyQp(e) => write!(f, "{e}"),
            E::Region(e) => write!(f, "{e}"),
            E::Cq(e) => write!(f, "{e}"),
            E::Post(what, e) => write!(f, "{what}: {e}"),
            E::Listen { port, error } => write!(f, "listen on port {port}: {error}"),
            E::WaitTimedOut => f.write_str("waiting for a client: timed out"),
            E::Wait(e) => write!(f, "waiting for a client: {e}"),
            E::NoAnswer { addr, port, secs } => write!(
                f,
                "connect to {addr}:{port}: no answer in {secs} s ({})",
                server_hint(*addr)
            ),
            E::Connect { addr, port, error } => write!(f, "connect to {addr}:{port}: {error}"),
            E::PeerSilent { peer, secs } => write!(
                f,
                "{peer} sent nothing for {secs} s and did not disconnect (killed, or unreachable): giving up"
            ),
            E::Completion { status, wr_id } => {
                write!(f, "completion error: {status:?} (wr_id {wr_id})")
            }
            E::ServerDisconnected => f.write_str("the server disconnected"),
            E::Mismatch { ping, sent, got } => write!(
                f,
                "data mismatch on ping {ping}: sent '{sent}', got '{got}'"
            ),
            E::Disconnect(e) => write!(f, "disconnect: {e}"),
            E::NoDisconnect => f.write_str("the connection broke without a disconnect"),
        }
    }
}

/// What a client that hears nothing from `addr` asks the user.
pub(super) fn server_hint(addr: IpAddr) -> String {
    format!("is a server running there: roce rping -s -a {addr}, or rping -s?")
}

impl std::error::Error for RpingError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        use RpingError as E;
        match self {
            E::Device(e) => Some(e),
            E::Open(e) => Some(e),
            E::Create(e) => Some(e),
            E::RegMr(e) => Some(e),
            E::ModifyQp(e) => Some(e),
            E::Region(e) => Some(e),
            E::Cq(e) => Some(e),
            E::Post(_, e) => Some(e),
            E::Listen { error, .. } => Some(error),
            E::Wait(e) | E::Connect { error: e, .. } | E::Disconnect(e) => Some(e),
            _ => None,
        }
    }
}

wrap_errors!(
    RpingError:
    DeviceError => Device,
    OpenError => Open,
    CreateError => Create,
    RegMrError => RegMr,
    ModifyQpError => ModifyQp,
    RegionError => Region,
    CqError => Cq,
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts the user sees, as they were when these were strings.
    #[test]
    fn says_what_the_strings_said() {
        let addr: IpAddr = "10.0.0.1".parse().unwrap();
        let e = RpingError::NoAnswer {
            addr,
            port: 7174,
            secs: 4,
        };
        assert_eq!(
            e.to_string(),
            "connect to 10.0.0.1:7174: no answer in 4 s (is a server running there: roce rping -s -a 10.0.0.1, or rping -s?)"
        );
        let e = RpingError::Connect {
            addr,
            port: 7174,
            error: CmError::TimedOut,
        };
        assert_eq!(e.to_string(), "connect to 10.0.0.1:7174: timed out");
        assert!(std::error::Error::source(&e).is_some());
        let e = RpingError::PeerSilent {
            peer: "the client",
            secs: 10,
        };
        assert_eq!(
            e.to_string(),
            "the client sent nothing for 10 s and did not disconnect (killed, or unreachable): giving up"
        );
        let e = RpingError::Completion {
            status: WcStatus::RetryExcErr,
            wr_id: 2,
        };
        assert_eq!(e.to_string(), "completion error: RetryExcErr (wr_id 2)");
        let e = RpingError::Post("post send", PostError::QueueFull);
        assert_eq!(
            e.to_string(),
            format!("post send: {}", PostError::QueueFull)
        );
        assert_eq!(
            RpingError::WaitTimedOut.to_string(),
            "waiting for a client: timed out"
        );
        let e = RpingError::Mismatch {
            ping: 3,
            sent: "a".into(),
            got: "b".into(),
        };
        assert_eq!(e.to_string(), "data mismatch on ping 3: sent 'a', got 'b'");
    }
}
