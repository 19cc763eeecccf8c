//! Why a run of `roce udaddy` failed. The text the user sees is the
//! [`Display`](std::fmt::Display) of an [`UdaddyError`]; the error it
//! wraps, if any, is also its [`source`](std::error::Error::source).

use std::fmt;
use std::net::IpAddr;

use roce_verbs::{
    CmError, CqError, CreateError, ModifyQpError, OpenError, PostError, RegMrError, RegionError,
    WcStatus,
};

use crate::device::DeviceError;

/// A failure of `roce udaddy`.
#[derive(Debug)]
pub(crate) enum UdaddyError {
    /// The server was given no address (`-b`).
    NeedBind,
    /// `-S` does not fit one packet of the path MTU.
    SizeAboveMtu { size: u32, mtu: u32 },
    /// No route to the server: no source address for the client.
    NoRoute(IpAddr),
    /// A helper shared with the other commands refused (`ROCE_SHM`, no
    /// free loopback address).
    Device(DeviceError),
    /// The device could not be read or opened.
    Open(OpenError),
    /// Creating a CQ, the QP or an address handle was refused.
    Create(CreateError),
    /// Bringing the UD QP to RTS was refused.
    ModifyQp(ModifyQpError),
    /// Registering a buffer was refused.
    RegMr(RegMrError),
    /// A buffer's bytes could not be read.
    Region(RegionError),
    /// Polling a completion queue failed.
    Cq(CqError),
    /// A post was refused: which (`"post send"`, `"post recv"`), and why.
    Post(&'static str, PostError),
    /// The server could not listen on its rdma_cm port.
    Listen { port: u16, error: roce_verbs::Error },
    /// Waiting for a client's resolution request failed.
    Wait(CmError),
    /// Answering the client's resolution request failed.
    Accept(CmError),
    /// The client could not resolve the server's QP.
    Resolve {
        server: IpAddr,
        port: u16,
        error: CmError,
    },
    /// The server's Q_Key is not rdma_cm's (`expected`).
    Qkey { qkey: u32, expected: u32 },
    /// Not every send completed in time (or some in error).
    SendsIncomplete { completed: usize, sent: u32 },
    /// Not every datagram arrived in time.
    ReceivedTooFew { received: usize, expected: u32 },
    /// A receive completed in error.
    RecvCompletion(WcStatus),
    /// A datagram came without its GRH (no source address).
    NoGrh,
    /// A reply came from another address than the server's.
    ReplyFrom { src: IpAddr, server: IpAddr },
    /// None of the datagrams came from the client that resolved the
    /// server.
    NotFromClient { received: usize, client: IpAddr },
}

impl fmt::Display for UdaddyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use UdaddyError as E;
        match self {
            E::NeedBind => f.write_str("the server needs its RoCE address: -b ADDR"),
            E::SizeAboveMtu { size, mtu } => write!(
                f,
                "-S {size} is larger than the path MTU {mtu} (a UD message is one packet)"
            ),
            E::NoRoute(server) => write!(f, "no route to {server}"),
            E::Device(e) => write!(f, "{e}"),
            E::Open(e) => write!(f, "{e}"),
            E::Create(e) => write!(f, "{e}"),
            E::ModifyQp(e) => write!(f, "{e}"),
            E::RegMr(e) => write!(f, "{e}"),
            E::Region(e) => write!(f, "{e}"),
            E::Cq(e) => write!(f, "{e}"),
            E::Post(what, e) => write!(f, "{what}: {e}"),
            E::Listen { port, error } => write!(f, "listen on port {port}: {error}"),
            E::Wait(e) => write!(f, "waiting for a client: {e}"),
            E::Accept(e) => write!(f, "accept: {e}"),
            E::Resolve {
                server,
                port,
                error,
            } => write!(f, "resolve {server}:{port}: {error}"),
            E::Qkey { qkey, expected } => write!(
                f,
                "the server's Q_Key {qkey:#x} is not rdma_cm's {expected:#x}"
            ),
            E::SendsIncomplete { completed, sent } => {
                write!(f, "{completed} of {sent} sends completed")
            }
            E::ReceivedTooFew { received, expected } => {
                write!(f, "received {received} of {expected} datagrams")
            }
            E::RecvCompletion(status) => write!(f, "receive completion {status:?}"),
            E::NoGrh => f.write_str("a datagram without a GRH"),
            E::ReplyFrom { src, server } => write!(f, "a reply came from {src}, not {server}"),
            E::NotFromClient { received, client } => write!(
                f,
                "none of the {received} datagrams came from the client ({client})"
            ),
        }
    }
}

impl std::error::Error for UdaddyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        use UdaddyError as E;
        match self {
            E::Device(e) => Some(e),
            E::Open(e) => Some(e),
            E::Create(e) => Some(e),
            E::ModifyQp(e) => Some(e),
            E::RegMr(e) => Some(e),
            E::Region(e) => Some(e),
            E::Cq(e) => Some(e),
            E::Post(_, e) => Some(e),
            E::Listen { error, .. } => Some(error),
            E::Wait(e) | E::Accept(e) | E::Resolve { error: e, .. } => Some(e),
            _ => None,
        }
    }
}

wrap_errors!(
    UdaddyError:
    DeviceError => Device,
    OpenError => Open,
    CreateError => Create,
    ModifyQpError => ModifyQp,
    RegMrError => RegMr,
    RegionError => Region,
    CqError => Cq,
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts the user sees, as they were when these were strings.
    #[test]
    fn says_what_the_strings_said() {
        let e = UdaddyError::Qkey {
            qkey: 0x1111_1111,
            expected: 0x0123_4567,
        };
        assert_eq!(
            e.to_string(),
            "the server's Q_Key 0x11111111 is not rdma_cm's 0x1234567"
        );
        let e = UdaddyError::SizeAboveMtu {
            size: 2000,
            mtu: 1024,
        };
        assert_eq!(
            e.to_string(),
            "-S 2000 is larger than the path MTU 1024 (a UD message is one packet)"
        );
        let server: IpAddr = "10.0.0.1".parse().unwrap();
        let e = UdaddyError::Resolve {
            server,
            port: 7174,
            error: CmError::TimedOut,
        };
        assert_eq!(e.to_string(), "resolve 10.0.0.1:7174: timed out");
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(
            UdaddyError::RecvCompletion(WcStatus::LocLenErr).to_string(),
            "receive completion LocLenErr"
        );
        assert_eq!(
            UdaddyError::SendsIncomplete {
                completed: 3,
                sent: 10
            }
            .to_string(),
            "3 of 10 sends completed"
        );
    }
}
