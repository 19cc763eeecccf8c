//! The RoCE v2 wire format (InfiniBand Architecture Specification Vol 1
//! chapter 9 and Annex A17 "RoCEv2").
//!
//! Each header has a checked view over a byte buffer (`new_checked` verifies
//! the length once, after which no accessor can panic) and a plain `Repr`
//! with `parse` and `emit`, in the manner of smoltcp. On top of them:
//!
//! * [`RocePacket`] parses a whole Ethernet frame or IP datagram and
//!   validates every layer, returning a precise [`Error`] for each way a
//!   packet can be malformed; [`RocePacket::check_icrc`] verifies the ICRC;
//! * [`FrameRepr::emit`] builds a complete frame into a caller's buffer
//!   without allocating (IP checksum, UDP length, pad, ICRC);
//! * [`Frame`] classifies captured frames (RoCE, PAUSE/PFC, other);
//! * [`opcode`] is the opcode table: per opcode its transport, headers in
//!   wire order and payload rule;
//! * [`icrc`] computes the invariant CRC for IPv4 and IPv6;
//! * [`pfc`] parses and emits 802.3x PAUSE and 802.1Qbb PFC frames;
//! * [`mad`] and [`cm`] are the QP1 management datagrams and the
//!   communication manager's messages (REQ/REP/RTU/REJ/MRA/DREQ/DREP/SIDR)
//!   with rdma_cm's IP private-data header.
//!
//! The crate is `no_std`, forbids `unsafe_code`, and never allocates. Enable the
//! default `std` feature for run-time CPU detection in the CRC.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

mod field;
mod view;

pub mod aeth;
pub mod bth;
pub mod cm;
pub mod crc32;
mod emit;
pub mod error;
pub mod ethernet;
pub mod ext;
mod frame;
pub mod icrc;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod mad;
mod meta;
pub mod opcode;
mod packet;
pub mod pfc;
pub mod types;
pub mod udp;

pub use aeth::{AethRepr, NakCode, Syndrome};
pub use bth::BthRepr;
pub use emit::FrameRepr;
pub use error::{Error, Layer, Result};
pub use ethernet::{EthernetRepr, MacAddr, VlanTag};
pub use ext::{AtomicEthRepr, DethRepr, ExtHeaders, FethRepr, RethRepr};
pub use frame::Frame;
pub use ip::{Ecn, IpRepr};
pub use ipv4::Ipv4Repr;
pub use ipv6::Ipv6Repr;
pub use meta::{RxMeta, Transmit};
pub use opcode::{Headers, MessageKind, Opcode, Operation, PayloadRule, Position, Transport};
pub use packet::RocePacket;
pub use pfc::MacControl;
pub use types::{Lkey, Msn, Pkey, Psn, Qkey, Qpn, Rkey};
pub use udp::{UdpChecksum, UdpRepr, ROCE_V2_PORT};
