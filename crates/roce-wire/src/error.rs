//! The ways a frame can be malformed.

use core::fmt;

use crate::opcode::Opcode;

/// The layer a length problem was found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layer {
    /// Ethernet II header.
    Ethernet,
    /// 802.1Q tag.
    Vlan,
    /// IPv4 header.
    Ipv4,
    /// IPv6 header.
    Ipv6,
    /// UDP header.
    Udp,
    /// Base Transport Header.
    Bth,
    /// The extended transport headers that the opcode requires.
    ExtHeaders,
    /// The invariant CRC at the end of the packet.
    Icrc,
    /// A MAC control (PAUSE / PFC) frame.
    MacControl,
    /// A management datagram (QP1 payload).
    Mad,
}

impl Layer {
    /// Short lowercase name used in messages.
    pub const fn name(self) -> &'static str {
        match self {
            Layer::Ethernet => "ethernet",
            Layer::Vlan => "802.1q",
            Layer::Ipv4 => "ipv4",
            Layer::Ipv6 => "ipv6",
            Layer::Udp => "udp",
            Layer::Bth => "bth",
            Layer::ExtHeaders => "extended headers",
            Layer::Icrc => "icrc",
            Layer::MacControl => "mac control",
            Layer::Mad => "mad",
        }
    }
}

/// Why a frame could not be parsed or failed validation.
///
/// The first group of variants means "not RoCE v2 at all" (the frame is some
/// other traffic); [`Error::is_not_roce`] tells them apart from malformed
/// RoCE packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The EtherType is neither IPv4 nor IPv6 (nor 802.1Q in front of one).
    NotIp {
        /// The EtherType found.
        ethertype: u16,
    },
    /// The IP payload is not UDP.
    NotUdp {
        /// The IP protocol / IPv6 next header found.
        protocol: u8,
    },
    /// UDP, but the destination port is not 4791.
    NotRocePort {
        /// The destination port found.
        port: u16,
    },
    /// The buffer ends before the header of `layer` does.
    Truncated {
        /// Where it ended.
        layer: Layer,
    },
    /// IP version nibble is not the one of the EtherType (or neither 4 nor 6).
    BadIpVersion {
        /// The version found.
        version: u8,
    },
    /// IPv4 header with options (IHL other than 5); RoCE v2 never sends them.
    Ipv4Options {
        /// The IHL found (in 32-bit words).
        ihl: u8,
    },
    /// An IP length field disagrees with the header or the buffer.
    BadIpLength,
    /// The IPv4 header checksum does not verify.
    BadIpChecksum,
    /// A fragment of an IPv4 datagram (RoCE v2 is never fragmented).
    Fragmented,
    /// The UDP length field disagrees with the IP payload.
    BadUdpLength,
    /// A non-zero UDP checksum that does not verify.
    BadUdpChecksum,
    /// BTH Transport Header Version other than 0.
    BadTver {
        /// The version found.
        tver: u8,
    },
    /// An opcode outside the RC, UC, UD and CNP tables.
    UnknownOpcode {
        /// The opcode byte.
        opcode: u8,
    },
    /// The bytes after the headers are not a multiple of 4, or PadCnt is
    /// larger than the payload it pads.
    BadPadding {
        /// The BTH PadCnt.
        pad: u8,
        /// Payload plus pad bytes found between the headers and the ICRC.
        available: usize,
    },
    /// The payload length breaks the opcode's rule (none allowed, LAST
    /// empty, ATOMIC_WRITE not 8 bytes, more than the largest path MTU).
    BadPayloadLength {
        /// The opcode.
        opcode: Opcode,
        /// The payload length found (without pad).
        len: usize,
    },
    /// The invariant CRC does not match.
    BadIcrc {
        /// The ICRC computed over the packet.
        expected: u32,
        /// The ICRC found on the wire.
        found: u32,
    },
    /// A MAC control frame with an opcode other than PAUSE or PFC.
    UnknownMacControl {
        /// The MAC control opcode.
        opcode: u16,
    },
    /// The caller's buffer is too small for what is being emitted.
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
    },
    /// A field value cannot be represented on the wire.
    InvalidField(&'static str),
    /// A MAD of a class (or class version) other than CM version 2.
    NotCmMad {
        /// `MgmtClass`.
        class: u8,
        /// `ClassVersion`.
        version: u8,
    },
    /// A CM MAD with an attribute ID this crate does not know.
    UnknownCmAttribute {
        /// The attribute ID.
        attr_id: u16,
    },
}

impl Error {
    /// True for frames that are simply some other traffic, not malformed RoCE.
    pub const fn is_not_roce(&self) -> bool {
        matches!(
            self,
            Error::NotIp { .. } | Error::NotUdp { .. } | Error::NotRocePort { .. }
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::NotIp { ethertype } => write!(f, "not IP (ethertype {ethertype:#06x})"),
            Error::NotUdp { protocol } => write!(f, "not UDP (ip protocol {protocol})"),
            Error::NotRocePort { port } => write!(f, "UDP destination port {port} is not 4791"),
            Error::Truncated { layer } => write!(f, "truncated {} header", layer.name()),
            Error::BadIpVersion { version } => write!(f, "bad IP version {version}"),
            Error::Ipv4Options { ihl } => write!(f, "IPv4 options present (ihl {ihl})"),
            Error::BadIpLength => f.write_str("IP length disagrees with the frame"),
            Error::BadIpChecksum => f.write_str("bad IPv4 header checksum"),
            Error::Fragmented => f.write_str("fragmented IPv4 datagram"),
            Error::BadUdpLength => f.write_str("UDP length disagrees with the IP payload"),
            Error::BadUdpChecksum => f.write_str("bad UDP checksum"),
            Error::BadTver { tver } => write!(f, "BTH TVer {tver} (must be 0)"),
            Error::UnknownOpcode { opcode } => write!(f, "unknown BTH opcode {opcode:#04x}"),
            Error::BadPadding { pad, available } => {
                write!(f, "PadCnt {pad} does not fit {available} payload bytes")
            }
            Error::BadPayloadLength { opcode, len } => {
                write!(f, "{} cannot carry {len} payload bytes", opcode.name())
            }
            Error::BadIcrc { expected, found } => {
                write!(f, "ICRC {found:08x}, expected {expected:08x}")
            }
            Error::UnknownMacControl { opcode } => {
                write!(f, "unknown MAC control opcode {opcode:#06x}")
            }
            Error::BufferTooSmall { needed } => {
                write!(f, "buffer too small ({needed} bytes needed)")
            }
            Error::InvalidField(what) => write!(f, "invalid field: {what}"),
            Error::NotCmMad { class, version } => {
                write!(
                    f,
                    "MAD class {class:#04x} version {version} is not CM version 2"
                )
            }
            Error::UnknownCmAttribute { attr_id } => {
                write!(f, "unknown CM attribute {attr_id:#06x}")
            }
        }
    }
}

impl core::error::Error for Error {}

/// Result with this crate's [`Error`].
pub type Result<T> = core::result::Result<T, Error>;
