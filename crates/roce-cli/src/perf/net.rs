//! The TCP control connection's set-up: resolving, connecting,
//! accepting, and telling roce perf's exchange from perftest's.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use super::error::PerfError;
use crate::stop::Stop;

/// Waits for a client, ending at `stop` (Ctrl-C: "interrupted before a
/// client came").
pub(crate) fn accept_interruptibly(
    listener: &TcpListener,
    stop: &Stop,
) -> Result<TcpStream, PerfError> {
    listener
        .set_nonblocking(true)
        .map_err(|e| PerfError::Io("listen".into(), e))?;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream
                    .set_nonblocking(false)
                    .map_err(|e| PerfError::Io("accept".into(), e))?;
                return Ok(stream);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if stop.requested() {
                    return Err(PerfError::Interrupted(
                        "interrupted before a client came".into(),
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(PerfError::Io("accept".into(), e)),
        }
    }
}

/// How long a connected peer may stay silent before its first message.
pub(crate) const FIRST_MESSAGE_WAIT: Duration = Duration::from_secs(10);

/// The first byte a client sends, without consuming it (waiting at most
/// [`FIRST_MESSAGE_WAIT`]): `{` opens roce perf's JSON hello, an ASCII
/// digit perftest's version string.
pub(crate) fn first_byte(stream: &TcpStream) -> Result<u8, PerfError> {
    let _ = stream.set_read_timeout(Some(FIRST_MESSAGE_WAIT));
    let mut b = [0u8; 1];
    let r = stream.peek(&mut b);
    let _ = stream.set_read_timeout(None);
    match r {
        Ok(1) => Ok(b[0]),
        Ok(_) => Err(PerfError::Protocol(
            "the client closed the connection without a word".into(),
        )),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(PerfError::Timeout(format!(
                "the client sent nothing for {} s",
                FIRST_MESSAGE_WAIT.as_secs()
            )))
        }
        Err(e) => Err(PerfError::Io("control connection".into(), e)),
    }
}

pub(crate) fn resolve(server: &str, port: u16) -> Result<SocketAddr, PerfError> {
    use std::net::ToSocketAddrs;
    (server, port)
        .to_socket_addrs()
        .map_err(|e| PerfError::Io(format!("unknown address '{server}'"), e))?
        .next()
        .ok_or(PerfError::Failed(format!("unknown address '{server}'")))
}

pub(crate) fn connect_tcp(addr: SocketAddr, bind: Option<IpAddr>) -> Result<TcpStream, PerfError> {
    let domain = socket2::Domain::for_address(addr);
    let sock = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))
        .map_err(|e| PerfError::Io("socket".into(), e))?;
    if let Some(b) = bind {
        sock.bind(&SocketAddr::new(b, 0).into())
            .map_err(|e| PerfError::Io(format!("cannot use local address {b}"), e))?;
    }
    sock.connect_timeout(&addr.into(), Duration::from_secs(5))
        .map_err(|e| PerfError::Io(format!("cannot reach {addr}"), e))?;
    Ok(sock.into())
}
