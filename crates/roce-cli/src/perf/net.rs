//! The TCP control connection's set-up: resolving, connecting,
//! accepting, and telling roce perf's exchange from perftest's.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use super::error::PerfError;
use crate::stop::Stop;

/// The control listener of `--loopback`, whose two ends are in this
/// process: on `first`:`port`, or, when that is taken, on the next
/// address of 127.0.0.0/8 where it is free (never one in `avoid`), as a
/// RoCE address moves ([`crate::device::open_moving`], the drop-in's
/// rule); when the port is taken on every address tried (a listener on
/// the wildcard address holds it), on a port the kernel picks on
/// `first`. Returns the listener and the line that says a move, if any.
pub(crate) fn listen_loopback(
    first: Ipv4Addr,
    port: u16,
    avoid: &[IpAddr],
) -> Result<(TcpListener, Option<String>), PerfError> {
    let taken = |e: &std::io::Error| e.kind() == std::io::ErrorKind::AddrInUse;
    let was = format!("{first}:{port} (TCP) is taken");
    match crate::device::open_moving(
        "perf",
        (IpAddr::V4(first), port),
        true,
        avoid,
        true,
        |at| TcpListener::bind((at, port)),
        taken,
    ) {
        Ok((l, at)) if at == IpAddr::V4(first) => Ok((l, None)),
        Ok((l, at)) => Ok((l, Some(format!("{was}; using {at}")))),
        Err(e) if taken(&e) => {
            let l = TcpListener::bind((first, 0))
                .map_err(|e| PerfError::Io(format!("cannot listen on {first}"), e))?;
            let at = l
                .local_addr()
                .map_err(|e| PerfError::Io("listen".into(), e))?;
            Ok((
                l,
                Some(format!("{was} on every loopback address; using {at}")),
            ))
        }
        Err(e) => Err(PerfError::Io(format!("cannot listen on {first}:{port}"), e)),
    }
}

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
