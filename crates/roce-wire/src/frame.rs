//! Classifying captured frames: RoCE v2, MAC control, or other traffic.

use crate::error::{Error, Result};
use crate::ethernet::{ethertype, EthernetFrame, EthernetRepr};
use crate::packet::RocePacket;
use crate::pfc::MacControl;

/// What a frame turned out to be.
// A short-lived stack value in a crate without an allocator: boxing the RoCE
// variant would cost an allocation per packet to save a few hundred bytes.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A structurally valid RoCE v2 packet (its ICRC not yet checked).
    Roce(RocePacket<'a>),
    /// A PAUSE or PFC frame.
    MacControl {
        /// The Ethernet header, when known.
        eth: Option<EthernetRepr>,
        /// The decoded frame.
        ctrl: MacControl,
    },
    /// Anything else (ARP, TCP, other UDP ports, ...).
    Other,
}

impl<'a> Frame<'a> {
    /// Classifies an Ethernet frame. Malformed RoCE or MAC control frames
    /// are errors; traffic that is not RoCE at all is [`Frame::Other`].
    pub fn parse_ethernet(bytes: &'a [u8]) -> Result<Frame<'a>> {
        let f = EthernetFrame::new_checked(bytes)?;
        if f.ethertype() == ethertype::MAC_CONTROL {
            let ctrl = MacControl::parse(f.payload())?;
            return Ok(Frame::MacControl {
                eth: Some(EthernetRepr::parse(&f)),
                ctrl,
            });
        }
        not_roce_is_other(RocePacket::parse_ethernet(bytes))
    }

    /// Classifies an IP datagram.
    pub fn parse_ip(bytes: &'a [u8]) -> Result<Frame<'a>> {
        not_roce_is_other(RocePacket::parse_ip(bytes))
    }

    /// Classifies the payload of a frame whose EtherType is known from
    /// elsewhere (Linux cooked captures).
    pub fn parse_with_ethertype(ethertype: u16, bytes: &'a [u8]) -> Result<Frame<'a>> {
        match ethertype {
            ethertype::IPV4 | ethertype::IPV6 => Frame::parse_ip(bytes),
            ethertype::MAC_CONTROL => Ok(Frame::MacControl {
                eth: None,
                ctrl: MacControl::parse(bytes)?,
            }),
            _ => Ok(Frame::Other),
        }
    }
}

fn not_roce_is_other(r: Result<RocePacket<'_>>) -> Result<Frame<'_>> {
    match r {
        Ok(p) => Ok(Frame::Roce(p)),
        Err(e) if e.is_not_roce() => Ok(Frame::Other),
        Err(Error::BadIpVersion { .. }) => Ok(Frame::Other),
        Err(e) => Err(e),
    }
}
