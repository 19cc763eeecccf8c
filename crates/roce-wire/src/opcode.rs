//! The BTH opcode table (IBTA Vol 1 §9.2.1 table 35, Annex A17 for CNP).
//!
//! Opcode = transport base (bits 7:5) + operation (bits 4:0). Each opcode
//! fixes which extended headers follow the BTH, in which order, and how much
//! payload the packet may carry.

use core::fmt;

use crate::error::{Error, Result};

/// Transport service selected by the top three opcode bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Transport {
    /// Reliable Connected, base 0x00.
    Rc,
    /// Unreliable Connected, base 0x20.
    Uc,
    /// Unreliable Datagram, base 0x60.
    Ud,
    /// Congestion Notification Packet (RoCE v2 Annex A17), opcode 0x81.
    Cnp,
}

impl Transport {
    /// The opcode base of this transport.
    pub const fn base(self) -> u8 {
        match self {
            Transport::Rc => 0x00,
            Transport::Uc => 0x20,
            Transport::Ud => 0x60,
            Transport::Cnp => 0x80,
        }
    }

    /// "RC", "UC", "UD" or "CNP".
    pub const fn name(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Ud => "UD",
            Transport::Cnp => "CNP",
        }
    }
}

/// The operation part of an opcode (its low five bits; 0x01 for CNP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)] // the names are the spec's opcode names
pub enum Operation {
    SendFirst,
    SendMiddle,
    SendLast,
    SendLastImm,
    SendOnly,
    SendOnlyImm,
    WriteFirst,
    WriteMiddle,
    WriteLast,
    WriteLastImm,
    WriteOnly,
    WriteOnlyImm,
    ReadRequest,
    ReadResponseFirst,
    ReadResponseMiddle,
    ReadResponseLast,
    ReadResponseOnly,
    Acknowledge,
    AtomicAcknowledge,
    CompareSwap,
    FetchAdd,
    SendLastInv,
    SendOnlyInv,
    Flush,
    AtomicWrite,
    Cnp,
}

/// Which packet of a multi-packet message this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    /// First of several.
    First,
    /// Neither first nor last.
    Middle,
    /// Last of several.
    Last,
    /// The whole message in one packet.
    Only,
}

impl Position {
    /// True for FIRST and ONLY: the packet starts a message.
    pub const fn starts(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// True for LAST and ONLY: the packet ends a message.
    pub const fn ends(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// The kind of message an opcode belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MessageKind {
    /// SEND (with or without immediate / invalidate).
    Send,
    /// RDMA WRITE (with or without immediate).
    Write,
    /// RDMA READ request.
    ReadRequest,
    /// RDMA READ response.
    ReadResponse,
    /// ACKNOWLEDGE (ACK, NAK or RNR NAK).
    Ack,
    /// ATOMIC ACKNOWLEDGE.
    AtomicAck,
    /// COMPARE & SWAP.
    CompareSwap,
    /// FETCH & ADD.
    FetchAdd,
    /// FLUSH.
    Flush,
    /// ATOMIC WRITE.
    AtomicWrite,
    /// Congestion notification.
    Cnp,
}

impl MessageKind {
    /// Lowercase name used in summaries.
    pub const fn name(self) -> &'static str {
        match self {
            MessageKind::Send => "send",
            MessageKind::Write => "write",
            MessageKind::ReadRequest => "read",
            MessageKind::ReadResponse => "read-resp",
            MessageKind::Ack => "ack",
            MessageKind::AtomicAck => "atomic-ack",
            MessageKind::CompareSwap => "cmp-swap",
            MessageKind::FetchAdd => "fetch-add",
            MessageKind::Flush => "flush",
            MessageKind::AtomicWrite => "atomic-write",
            MessageKind::Cnp => "cnp",
        }
    }

    /// True for packets a requester sends (they consume PSNs of the send queue).
    pub const fn is_request(self) -> bool {
        !matches!(
            self,
            MessageKind::ReadResponse
                | MessageKind::Ack
                | MessageKind::AtomicAck
                | MessageKind::Cnp
        )
    }
}

/// The set of extended transport headers after the BTH.
///
/// They always appear in the order of the constants below (DETH, FETH, RETH,
/// AtomicETH, AETH, AtomicAckETH, ImmDt, IETH, then the CNP's reserved
/// bytes), which is the order of every opcode in the table.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Headers(u16);

impl Headers {
    /// Datagram Extended Transport Header (8 bytes).
    pub const DETH: Headers = Headers(1 << 0);
    /// Flush Extended Transport Header (4 bytes).
    pub const FETH: Headers = Headers(1 << 1);
    /// RDMA Extended Transport Header (16 bytes).
    pub const RETH: Headers = Headers(1 << 2);
    /// Atomic Extended Transport Header (28 bytes).
    pub const ATOMIC_ETH: Headers = Headers(1 << 3);
    /// ACK Extended Transport Header (4 bytes).
    pub const AETH: Headers = Headers(1 << 4);
    /// Atomic ACK Extended Transport Header (8 bytes).
    pub const ATOMIC_ACK_ETH: Headers = Headers(1 << 5);
    /// Immediate data (4 bytes).
    pub const IMM: Headers = Headers(1 << 6);
    /// Invalidate Extended Transport Header (4 bytes).
    pub const IETH: Headers = Headers(1 << 7);
    /// The 16 reserved bytes of a CNP.
    pub const CNP_RESERVED: Headers = Headers(1 << 8);
    /// No extended header.
    pub const NONE: Headers = Headers(0);

    /// All header kinds with their sizes, in wire order.
    pub const ORDER: [(Headers, usize, &'static str); 9] = [
        (Headers::DETH, 8, "DETH"),
        (Headers::FETH, 4, "FETH"),
        (Headers::RETH, 16, "RETH"),
        (Headers::ATOMIC_ETH, 28, "AtomicETH"),
        (Headers::AETH, 4, "AETH"),
        (Headers::ATOMIC_ACK_ETH, 8, "AtomicAckETH"),
        (Headers::IMM, 4, "ImmDt"),
        (Headers::IETH, 4, "IETH"),
        (Headers::CNP_RESERVED, 16, "CNP reserved"),
    ];

    /// Union of two sets.
    pub const fn with(self, other: Headers) -> Headers {
        Headers(self.0 | other.0)
    }

    /// True when every header of `other` is in `self`.
    pub const fn contains(self, other: Headers) -> bool {
        self.0 & other.0 == other.0
    }

    /// Total size in bytes.
    pub const fn len(self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < Headers::ORDER.len() {
            if self.contains(Headers::ORDER[i].0) {
                n += Headers::ORDER[i].1;
            }
            i += 1;
        }
        n
    }

    /// This set without the CNP's reserved block (which has no repr).
    pub(crate) const fn without_cnp_reserved(self) -> Headers {
        Headers(self.0 & !Headers::CNP_RESERVED.0)
    }

    /// True when no extended header follows the BTH.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Offset of header `h` from the end of the BTH, if present.
    pub const fn offset_of(self, h: Headers) -> Option<usize> {
        if !self.contains(h) {
            return None;
        }
        let mut n = 0;
        let mut i = 0;
        while i < Headers::ORDER.len() {
            if Headers::ORDER[i].0 .0 == h.0 {
                return Some(n);
            }
            if self.contains(Headers::ORDER[i].0) {
                n += Headers::ORDER[i].1;
            }
            i += 1;
        }
        None
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        let mut first = true;
        for (h, _, name) in Headers::ORDER {
            if self.contains(h) {
                if !first {
                    f.write_str(", ")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        f.write_str("]")
    }
}

/// How much payload a packet with a given opcode may carry, relative to the
/// path MTU (IBTA Vol 1 §9.7.3 length checks as rxe applies them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PayloadRule {
    /// No payload at all.
    None,
    /// Exactly one path MTU (FIRST and MIDDLE packets).
    Pmtu,
    /// 1 ..= PMTU bytes (LAST packets).
    Last,
    /// 0 ..= PMTU bytes (ONLY packets).
    UpToPmtu,
    /// Exactly this many bytes.
    Exactly(usize),
}

impl PayloadRule {
    /// Largest path MTU RoCE supports (IB MTU 4096).
    pub const MAX_PMTU: usize = 4096;

    /// Checks a payload length against the rule for a known path MTU.
    pub const fn allows(self, len: usize, pmtu: usize) -> bool {
        match self {
            PayloadRule::None => len == 0,
            PayloadRule::Pmtu => len == pmtu,
            PayloadRule::Last => len >= 1 && len <= pmtu,
            PayloadRule::UpToPmtu => len <= pmtu,
            PayloadRule::Exactly(n) => len == n,
        }
    }

    /// Checks what can be checked without knowing the path MTU (the largest
    /// one, 4096, is assumed). Path-MTU-exact checks belong to the responder.
    pub const fn allows_any_pmtu(self, len: usize) -> bool {
        match self {
            PayloadRule::None => len == 0,
            PayloadRule::Pmtu => len >= 256 && len <= Self::MAX_PMTU && len.is_power_of_two(),
            PayloadRule::Last => len >= 1 && len <= Self::MAX_PMTU,
            PayloadRule::UpToPmtu => len <= Self::MAX_PMTU,
            PayloadRule::Exactly(n) => len == n,
        }
    }
}

impl Operation {
    /// All operations, in opcode order.
    pub const ALL: [Operation; 26] = [
        Operation::SendFirst,
        Operation::SendMiddle,
        Operation::SendLast,
        Operation::SendLastImm,
        Operation::SendOnly,
        Operation::SendOnlyImm,
        Operation::WriteFirst,
        Operation::WriteMiddle,
        Operation::WriteLast,
        Operation::WriteLastImm,
        Operation::WriteOnly,
        Operation::WriteOnlyImm,
        Operation::ReadRequest,
        Operation::ReadResponseFirst,
        Operation::ReadResponseMiddle,
        Operation::ReadResponseLast,
        Operation::ReadResponseOnly,
        Operation::Acknowledge,
        Operation::AtomicAcknowledge,
        Operation::CompareSwap,
        Operation::FetchAdd,
        Operation::SendLastInv,
        Operation::SendOnlyInv,
        Operation::Flush,
        Operation::AtomicWrite,
        Operation::Cnp,
    ];

    /// The low five opcode bits.
    pub const fn code(self) -> u8 {
        use Operation::*;
        match self {
            SendFirst => 0x00,
            SendMiddle => 0x01,
            SendLast => 0x02,
            SendLastImm => 0x03,
            SendOnly => 0x04,
            SendOnlyImm => 0x05,
            WriteFirst => 0x06,
            WriteMiddle => 0x07,
            WriteLast => 0x08,
            WriteLastImm => 0x09,
            WriteOnly => 0x0a,
            WriteOnlyImm => 0x0b,
            ReadRequest => 0x0c,
            ReadResponseFirst => 0x0d,
            ReadResponseMiddle => 0x0e,
            ReadResponseLast => 0x0f,
            ReadResponseOnly => 0x10,
            Acknowledge => 0x11,
            AtomicAcknowledge => 0x12,
            CompareSwap => 0x13,
            FetchAdd => 0x14,
            SendLastInv => 0x16,
            SendOnlyInv => 0x17,
            Flush => 0x1c,
            AtomicWrite => 0x1d,
            Cnp => 0x01,
        }
    }

    /// The spec's name, e.g. `RDMA_WRITE_FIRST`.
    pub const fn name(self) -> &'static str {
        use Operation::*;
        match self {
            SendFirst => "SEND_FIRST",
            SendMiddle => "SEND_MIDDLE",
            SendLast => "SEND_LAST",
            SendLastImm => "SEND_LAST_WITH_IMMEDIATE",
            SendOnly => "SEND_ONLY",
            SendOnlyImm => "SEND_ONLY_WITH_IMMEDIATE",
            WriteFirst => "RDMA_WRITE_FIRST",
            WriteMiddle => "RDMA_WRITE_MIDDLE",
            WriteLast => "RDMA_WRITE_LAST",
            WriteLastImm => "RDMA_WRITE_LAST_WITH_IMMEDIATE",
            WriteOnly => "RDMA_WRITE_ONLY",
            WriteOnlyImm => "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
            ReadRequest => "RDMA_READ_REQUEST",
            ReadResponseFirst => "RDMA_READ_RESPONSE_FIRST",
            ReadResponseMiddle => "RDMA_READ_RESPONSE_MIDDLE",
            ReadResponseLast => "RDMA_READ_RESPONSE_LAST",
            ReadResponseOnly => "RDMA_READ_RESPONSE_ONLY",
            Acknowledge => "ACKNOWLEDGE",
            AtomicAcknowledge => "ATOMIC_ACKNOWLEDGE",
            CompareSwap => "COMPARE_SWAP",
            FetchAdd => "FETCH_ADD",
            SendLastInv => "SEND_LAST_WITH_INVALIDATE",
            SendOnlyInv => "SEND_ONLY_WITH_INVALIDATE",
            Flush => "FLUSH",
            AtomicWrite => "ATOMIC_WRITE",
            Cnp => "CNP",
        }
    }

    /// Extended headers after the BTH, for the RC/UC/CNP form of the
    /// operation (UD adds a DETH in front, see [`Opcode::headers`]).
    pub const fn headers(self) -> Headers {
        use Operation::*;
        match self {
            SendFirst | SendMiddle | SendLast | SendOnly | WriteMiddle | WriteLast
            | ReadResponseMiddle => Headers::NONE,
            SendLastImm | SendOnlyImm | WriteLastImm => Headers::IMM,
            WriteFirst | WriteOnly | ReadRequest | AtomicWrite => Headers::RETH,
            WriteOnlyImm => Headers::RETH.with(Headers::IMM),
            ReadResponseFirst | ReadResponseLast | ReadResponseOnly | Acknowledge => Headers::AETH,
            AtomicAcknowledge => Headers::AETH.with(Headers::ATOMIC_ACK_ETH),
            CompareSwap | FetchAdd => Headers::ATOMIC_ETH,
            SendLastInv | SendOnlyInv => Headers::IETH,
            Flush => Headers::FETH.with(Headers::RETH),
            Cnp => Headers::CNP_RESERVED,
        }
    }

    /// The payload rule.
    pub const fn payload(self) -> PayloadRule {
        use Operation::*;
        match self {
            SendFirst | SendMiddle | WriteFirst | WriteMiddle | ReadResponseFirst
            | ReadResponseMiddle => PayloadRule::Pmtu,
            SendLast | SendLastImm | SendLastInv | WriteLast | WriteLastImm | ReadResponseLast => {
                PayloadRule::Last
            }
            SendOnly | SendOnlyImm | SendOnlyInv | WriteOnly | WriteOnlyImm | ReadResponseOnly => {
                PayloadRule::UpToPmtu
            }
            ReadRequest | Acknowledge | AtomicAcknowledge | CompareSwap | FetchAdd | Flush
            | Cnp => PayloadRule::None,
            AtomicWrite => PayloadRule::Exactly(8),
        }
    }

    /// Position inside its message.
    pub const fn position(self) -> Position {
        use Operation::*;
        match self {
            SendFirst | WriteFirst | ReadResponseFirst => Position::First,
            SendMiddle | WriteMiddle | ReadResponseMiddle => Position::Middle,
            SendLast | SendLastImm | SendLastInv | WriteLast | WriteLastImm | ReadResponseLast => {
                Position::Last
            }
            _ => Position::Only,
        }
    }

    /// The message kind.
    pub const fn kind(self) -> MessageKind {
        use Operation::*;
        match self {
            SendFirst | SendMiddle | SendLast | SendLastImm | SendOnly | SendOnlyImm
            | SendLastInv | SendOnlyInv => MessageKind::Send,
            WriteFirst | WriteMiddle | WriteLast | WriteLastImm | WriteOnly | WriteOnlyImm => {
                MessageKind::Write
            }
            ReadRequest => MessageKind::ReadRequest,
            ReadResponseFirst | ReadResponseMiddle | ReadResponseLast | ReadResponseOnly => {
                MessageKind::ReadResponse
            }
            Acknowledge => MessageKind::Ack,
            AtomicAcknowledge => MessageKind::AtomicAck,
            CompareSwap => MessageKind::CompareSwap,
            FetchAdd => MessageKind::FetchAdd,
            Flush => MessageKind::Flush,
            AtomicWrite => MessageKind::AtomicWrite,
            Cnp => MessageKind::Cnp,
        }
    }

    /// True when a transport carries this operation: RC all but CNP, UC the
    /// SEND and WRITE families, UD only SEND_ONLY (± immediate).
    pub const fn allowed_on(self, t: Transport) -> bool {
        use Operation::*;
        match t {
            Transport::Rc => !matches!(self, Cnp),
            Transport::Uc => self.code() <= 0x0b && !matches!(self, Cnp),
            Transport::Ud => matches!(self, SendOnly | SendOnlyImm),
            Transport::Cnp => matches!(self, Cnp),
        }
    }
}

/// A valid RoCE v2 BTH opcode: a transport and an operation it carries.
///
/// Only values in the RC, UC, UD and CNP tables can be constructed, so every
/// `Opcode` has a known header set and payload rule.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode {
    transport: Transport,
    op: Operation,
}

impl Opcode {
    /// Combines a transport and an operation.
    pub const fn new(transport: Transport, op: Operation) -> Result<Opcode> {
        if op.allowed_on(transport) {
            Ok(Opcode { transport, op })
        } else {
            Err(Error::UnknownOpcode {
                opcode: transport.base() | op.code(),
            })
        }
    }

    /// Decodes an opcode byte: one look into a table made at compile time
    /// (every received packet's opcode is decoded, more than once).
    pub const fn from_u8(v: u8) -> Result<Opcode> {
        match DECODE[v as usize] {
            Some(op) => Ok(op),
            None => Err(Error::UnknownOpcode { opcode: v }),
        }
    }

    /// Decodes an opcode byte by searching the operations' table (what
    /// [`DECODE`] is made of).
    const fn search(v: u8) -> Option<Opcode> {
        let transport = match v & 0xe0 {
            0x00 => Transport::Rc,
            0x20 => Transport::Uc,
            0x60 => Transport::Ud,
            0x80 => Transport::Cnp,
            _ => return None,
        };
        let code = v & 0x1f;
        let mut i = 0;
        while i < Operation::ALL.len() {
            let op = Operation::ALL[i];
            if op.code() == code && op.allowed_on(transport) {
                return Some(Opcode { transport, op });
            }
            i += 1;
        }
        None
    }

    /// The opcode byte.
    pub const fn value(self) -> u8 {
        self.transport.base() | self.op.code()
    }

    /// The transport.
    pub const fn transport(self) -> Transport {
        self.transport
    }

    /// The operation.
    pub const fn operation(self) -> Operation {
        self.op
    }

    /// The operation's spec name (without the transport).
    pub const fn name(self) -> &'static str {
        self.op.name()
    }

    /// Extended headers that follow the BTH, in wire order.
    pub const fn headers(self) -> Headers {
        match self.transport {
            Transport::Ud => Headers::DETH.with(self.op.headers()),
            _ => self.op.headers(),
        }
    }

    /// Payload rule.
    pub const fn payload(self) -> PayloadRule {
        self.op.payload()
    }

    /// Position inside a message.
    pub const fn position(self) -> Position {
        self.op.position()
    }

    /// Message kind.
    pub const fn kind(self) -> MessageKind {
        self.op.kind()
    }

    /// Every valid opcode, in numeric order.
    pub fn all() -> impl Iterator<Item = Opcode> {
        (0u8..=0xff).filter_map(|v| Opcode::from_u8(v).ok())
    }

    /// RC SEND_ONLY.
    pub const RC_SEND_ONLY: Opcode = Opcode {
        transport: Transport::Rc,
        op: Operation::SendOnly,
    };
    /// RC ACKNOWLEDGE.
    pub const RC_ACK: Opcode = Opcode {
        transport: Transport::Rc,
        op: Operation::Acknowledge,
    };
    /// RC RDMA_WRITE_ONLY.
    pub const RC_WRITE_ONLY: Opcode = Opcode {
        transport: Transport::Rc,
        op: Operation::WriteOnly,
    };
    /// UD SEND_ONLY.
    pub const UD_SEND_ONLY: Opcode = Opcode {
        transport: Transport::Ud,
        op: Operation::SendOnly,
    };
    /// CNP (0x81).
    pub const CNP: Opcode = Opcode {
        transport: Transport::Cnp,
        op: Operation::Cnp,
    };
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} ({:#04x})",
            self.transport.name(),
            self.op.name(),
            self.value()
        )
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.transport == Transport::Cnp {
            f.write_str("CNP")
        } else {
            write!(f, "{} {}", self.transport.name(), self.op.name())
        }
    }
}

/// Every opcode byte's decoding ([`Opcode::from_u8`]), made at compile
/// time by searching the operations' table.
const DECODE: [Option<Opcode>; 256] = {
    let mut t = [None; 256];
    let mut v = 0;
    while v < 256 {
        t[v] = Opcode::search(v as u8);
        v += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_protocol_reference() {
        // (value, headers, payload) straight from the spec's table.
        let rows: &[(u8, Headers, PayloadRule)] = &[
            (0x00, Headers::NONE, PayloadRule::Pmtu),
            (0x03, Headers::IMM, PayloadRule::Last),
            (0x06, Headers::RETH, PayloadRule::Pmtu),
            (
                0x0b,
                Headers::RETH.with(Headers::IMM),
                PayloadRule::UpToPmtu,
            ),
            (0x0c, Headers::RETH, PayloadRule::None),
            (0x0d, Headers::AETH, PayloadRule::Pmtu),
            (0x0e, Headers::NONE, PayloadRule::Pmtu),
            (0x11, Headers::AETH, PayloadRule::None),
            (
                0x12,
                Headers::AETH.with(Headers::ATOMIC_ACK_ETH),
                PayloadRule::None,
            ),
            (0x13, Headers::ATOMIC_ETH, PayloadRule::None),
            (0x17, Headers::IETH, PayloadRule::UpToPmtu),
            (0x1c, Headers::FETH.with(Headers::RETH), PayloadRule::None),
            (0x1d, Headers::RETH, PayloadRule::Exactly(8)),
            (0x24, Headers::NONE, PayloadRule::UpToPmtu),
            (
                0x2b,
                Headers::RETH.with(Headers::IMM),
                PayloadRule::UpToPmtu,
            ),
            (0x64, Headers::DETH, PayloadRule::UpToPmtu),
            (
                0x65,
                Headers::DETH.with(Headers::IMM),
                PayloadRule::UpToPmtu,
            ),
            (0x81, Headers::CNP_RESERVED, PayloadRule::None),
        ];
        for &(v, h, p) in rows {
            let op = Opcode::from_u8(v).unwrap();
            assert_eq!(op.value(), v);
            assert_eq!(op.headers(), h, "{op:?}");
            assert_eq!(op.payload(), p, "{op:?}");
        }
    }

    #[test]
    fn only_listed_opcodes_exist() {
        // RC 25 operations, UC 12, UD 2, CNP 1.
        assert_eq!(Opcode::all().count(), 25 + 12 + 2 + 1);
        for bad in [
            0x15, 0x18, 0x1b, 0x1e, 0x2c, 0x31, 0x40, 0x60, 0x66, 0x80, 0x82, 0xc0, 0xff,
        ] {
            assert_eq!(
                Opcode::from_u8(bad),
                Err(Error::UnknownOpcode { opcode: bad })
            );
        }
        for op in Opcode::all() {
            assert_eq!(Opcode::from_u8(op.value()), Ok(op));
            assert_eq!(Opcode::new(op.transport(), op.operation()), Ok(op));
        }
    }

    #[test]
    fn every_byte_decodes_to_itself_or_is_refused() {
        // The compile-time table against the search it is made of, byte
        // by byte: an opcode decoded says the byte it came from.
        let mut known = 0;
        for v in 0..=0xffu8 {
            match Opcode::from_u8(v) {
                Ok(op) => {
                    assert_eq!(op.value(), v);
                    assert_eq!(Opcode::search(v), Some(op));
                    known += 1;
                }
                Err(e) => {
                    assert_eq!(e, Error::UnknownOpcode { opcode: v });
                    assert_eq!(Opcode::search(v), None);
                }
            }
        }
        assert_eq!(known, 40);
    }

    #[test]
    fn header_offsets_follow_wire_order() {
        let h = Headers::DETH.with(Headers::IMM);
        assert_eq!(h.len(), 12);
        assert_eq!(h.offset_of(Headers::DETH), Some(0));
        assert_eq!(h.offset_of(Headers::IMM), Some(8));
        let f = Headers::FETH.with(Headers::RETH);
        assert_eq!(f.offset_of(Headers::RETH), Some(4));
        let a = Headers::AETH.with(Headers::ATOMIC_ACK_ETH);
        assert_eq!(a.offset_of(Headers::ATOMIC_ACK_ETH), Some(4));
        assert_eq!(a.offset_of(Headers::RETH), None);
    }

    #[test]
    fn payload_rules_against_pmtu() {
        assert!(PayloadRule::Pmtu.allows(1024, 1024));
        assert!(!PayloadRule::Pmtu.allows(1023, 1024));
        assert!(!PayloadRule::Last.allows(0, 1024));
        assert!(PayloadRule::Last.allows(1024, 1024));
        assert!(!PayloadRule::Last.allows(1025, 1024));
        assert!(PayloadRule::UpToPmtu.allows(0, 256));
        assert!(!PayloadRule::None.allows(1, 4096));
    }
}
