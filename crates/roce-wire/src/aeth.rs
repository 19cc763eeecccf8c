//! ACK Extended Transport Header (IBTA Vol 1 §9.3.5, table 44 for the
//! syndrome, §9.7.5.2.8 for RNR timer codes, table 45 for credit codes).

use core::fmt;

use crate::error::{Layer, Result};
use crate::field::{set_u24, u24_at};
use crate::types::Msn;
use crate::view::fixed_view;

/// AETH length.
pub const HEADER_LEN: usize = 4;

/// Microseconds per RNR NAK timer code 0..=31 (IBTA table 45; code 0 is the
/// longest, 655.36 ms).
pub const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
    5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760,
    327_680, 491_520,
];

/// Messages granted per credit code 0..=30 (code 31 = "invalid": no
/// end-to-end flow control, what rxe always sends).
pub const CREDITS: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12_288, 16_384, 24_576, 32_768,
];

/// Credit code meaning "no credit information" (unlimited).
pub const CREDITS_INVALID: u8 = 0x1f;

/// Smallest RNR timer code whose wait is at least `us` microseconds
/// (code 0, the longest wait, if none of 1..=31 is long enough).
pub fn rnr_timer_code_at_least(us: u32) -> u8 {
    (1..32u8)
        .find(|&c| RNR_TIMER_US[c as usize] >= us)
        .unwrap_or(0)
}

/// NAK codes (syndrome 0x60 | code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NakCode {
    /// 0: PSN sequence error.
    PsnSequenceError,
    /// 1: invalid request.
    InvalidRequest,
    /// 2: remote access error.
    RemoteAccessError,
    /// 3: remote operational error.
    RemoteOperationalError,
    /// 4: invalid RD request.
    InvalidRdRequest,
    /// A reserved code (5..=31).
    Reserved(u8),
}

impl NakCode {
    /// From the low five syndrome bits.
    pub const fn from_code(c: u8) -> NakCode {
        match c & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }
    /// The five-bit code.
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1f,
        }
    }
    /// Short name: `psn-seq-err`, `inv-req`, `rem-access`, `rem-op`, `inv-rd-req`.
    pub const fn name(self) -> &'static str {
        match self {
            NakCode::PsnSequenceError => "psn-seq-err",
            NakCode::InvalidRequest => "inv-req",
            NakCode::RemoteAccessError => "rem-access",
            NakCode::RemoteOperationalError => "rem-op",
            NakCode::InvalidRdRequest => "inv-rd-req",
            NakCode::Reserved(_) => "reserved",
        }
    }
}

/// The AETH syndrome byte, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// 0b000_ccccc: ACK with a credit code.
    Ack {
        /// Credit code 0..=31 ([`CREDITS`], 31 = unlimited).
        credits: u8,
    },
    /// 0b001_ttttt: receiver not ready; retry after the timer.
    RnrNak {
        /// RNR timer code 0..=31 ([`RNR_TIMER_US`]).
        timer: u8,
    },
    /// 0b011_ccccc: NAK.
    Nak(NakCode),
    /// Bit 7 set or the reserved 0b010 class: kept verbatim.
    Reserved(u8),
}

impl Syndrome {
    /// Decodes a syndrome byte.
    pub const fn from_byte(b: u8) -> Syndrome {
        match b & 0xe0 {
            0x00 => Syndrome::Ack { credits: b & 0x1f },
            0x20 => Syndrome::RnrNak { timer: b & 0x1f },
            0x60 => Syndrome::Nak(NakCode::from_code(b)),
            _ => Syndrome::Reserved(b),
        }
    }
    /// Encodes the syndrome byte.
    pub const fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(c) => 0x60 | c.code(),
            Syndrome::Reserved(b) => b,
        }
    }
    /// An ACK advertising no credit limit (what rxe sends).
    pub const ACK_UNLIMITED: Syndrome = Syndrome::Ack {
        credits: CREDITS_INVALID,
    };
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Syndrome::Ack { credits } => match CREDITS.get(credits as usize) {
                Some(n) => write!(f, "ACK credits={n}"),
                None => f.write_str("ACK credits=unlimited"),
            },
            Syndrome::RnrNak { timer } => {
                let us = RNR_TIMER_US[(timer & 0x1f) as usize];
                write!(f, "RNR-NAK {us}us")
            }
            Syndrome::Nak(c) => match c {
                NakCode::Reserved(v) => write!(f, "NAK reserved-{v}"),
                c => write!(f, "NAK {}", c.name()),
            },
            Syndrome::Reserved(b) => write!(f, "syndrome-reserved-{b:#04x}"),
        }
    }
}

fixed_view!(
    /// A view of the AETH.
    AethHeader,
    HEADER_LEN,
    Layer::ExtHeaders
);

impl<T: AsRef<[u8]>> AethHeader<T> {
    /// Syndrome.
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from_byte(self.buffer.as_ref()[0])
    }
    /// Message sequence number.
    pub fn msn(&self) -> Msn {
        Msn::new(u24_at(self.buffer.as_ref(), 1))
    }
}

/// An AETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// Syndrome.
    pub syndrome: Syndrome,
    /// MSN of the last completed message.
    pub msn: Msn,
}

impl AethRepr {
    /// Parses an AETH.
    pub fn parse(buf: &[u8]) -> Result<AethRepr> {
        let h = AethHeader::new_checked(buf)?;
        Ok(AethRepr {
            syndrome: h.syndrome(),
            msn: h.msn(),
        })
    }
    /// Writes the AETH into the start of `buf` (which must hold 4 bytes).
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0] = self.syndrome.to_byte();
        set_u24(buf, 1, self.msn.value());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn syndrome_round_trip_and_text() {
        for b in 0..=255u8 {
            assert_eq!(Syndrome::from_byte(b).to_byte(), b);
        }
        assert_eq!(
            Syndrome::from_byte(0x1f).to_string(),
            "ACK credits=unlimited"
        );
        assert_eq!(Syndrome::from_byte(0x05).to_string(), "ACK credits=6");
        assert_eq!(Syndrome::from_byte(0x2c).to_string(), "RNR-NAK 640us");
        assert_eq!(Syndrome::from_byte(0x20).to_string(), "RNR-NAK 655360us");
        assert_eq!(Syndrome::from_byte(0x60).to_string(), "NAK psn-seq-err");
        assert_eq!(Syndrome::from_byte(0x62).to_string(), "NAK rem-access");
    }

    #[test]
    fn rnr_code_lookup() {
        assert_eq!(rnr_timer_code_at_least(10), 1);
        assert_eq!(rnr_timer_code_at_least(11), 2);
        assert_eq!(rnr_timer_code_at_least(640), 12);
        assert_eq!(rnr_timer_code_at_least(500_000), 0);
    }
}
