//! IEEE 802.3 MAC control frames: 802.3x PAUSE (Annex 31B) and 802.1Qbb
//! Priority-based Flow Control.
//!
//! Both go to 01:80:C2:00:00:01 with EtherType 0x8808. A pause quantum is
//! the time to send 512 bits at the link's rate.

use core::time::Duration;

use crate::error::{Error, Layer, Result};
use crate::ethernet::{ethertype, EthernetRepr, MacAddr};
use crate::field::{set_u16, u16_at};

/// MAC control opcode of 802.3x PAUSE.
pub const OPCODE_PAUSE: u16 = 0x0001;
/// MAC control opcode of 802.1Qbb PFC.
pub const OPCODE_PFC: u16 = 0x0101;
/// Minimum Ethernet frame length without FCS; MAC control frames are padded to it.
pub const MIN_FRAME_LEN: usize = 60;
/// Bit times per pause quantum.
pub const BITS_PER_QUANTUM: u64 = 512;

/// A MAC control frame's meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MacControl {
    /// 802.3x PAUSE: stop all traffic for `quanta` (0 = resume).
    Pause {
        /// Pause time in quanta.
        quanta: u16,
    },
    /// 802.1Qbb PFC: for each priority whose enable bit is set, pause it for
    /// its quanta (0 = resume, XON).
    Pfc {
        /// Class-enable vector: bit i enables `quanta[i]`.
        enable: u8,
        /// Pause time per priority.
        quanta: [u16; 8],
    },
}

impl MacControl {
    /// Payload length after the EtherType (before padding).
    pub const fn payload_len(&self) -> usize {
        match self {
            MacControl::Pause { .. } => 4,
            MacControl::Pfc { .. } => 20,
        }
    }

    /// Parses the bytes after the EtherType.
    pub fn parse(payload: &[u8]) -> Result<MacControl> {
        if payload.len() < 2 {
            return Err(Error::Truncated {
                layer: Layer::MacControl,
            });
        }
        match u16_at(payload, 0) {
            OPCODE_PAUSE => {
                if payload.len() < 4 {
                    return Err(Error::Truncated {
                        layer: Layer::MacControl,
                    });
                }
                Ok(MacControl::Pause {
                    quanta: u16_at(payload, 2),
                })
            }
            OPCODE_PFC => {
                if payload.len() < 20 {
                    return Err(Error::Truncated {
                        layer: Layer::MacControl,
                    });
                }
                let mut quanta = [0u16; 8];
                for (i, q) in quanta.iter_mut().enumerate() {
                    *q = u16_at(payload, 4 + 2 * i);
                }
                // Octet 2 of the class-enable vector is reserved.
                Ok(MacControl::Pfc {
                    enable: payload[3],
                    quanta,
                })
            }
            opcode => Err(Error::UnknownMacControl { opcode }),
        }
    }

    /// Writes the bytes after the EtherType into `buf`.
    pub fn emit_payload(&self, buf: &mut [u8]) -> Result<usize> {
        let n = self.payload_len();
        if buf.len() < n {
            return Err(Error::BufferTooSmall { needed: n });
        }
        match *self {
            MacControl::Pause { quanta } => {
                set_u16(buf, 0, OPCODE_PAUSE);
                set_u16(buf, 2, quanta);
            }
            MacControl::Pfc { enable, quanta } => {
                set_u16(buf, 0, OPCODE_PFC);
                buf[2] = 0;
                buf[3] = enable;
                for (i, q) in quanta.iter().enumerate() {
                    set_u16(buf, 4 + 2 * i, *q);
                }
            }
        }
        Ok(n)
    }

    /// Emits a whole frame from `src` to the MAC control address, padded to
    /// 60 bytes; returns its length.
    pub fn emit_frame(&self, src: MacAddr, buf: &mut [u8]) -> Result<usize> {
        if buf.len() < MIN_FRAME_LEN {
            return Err(Error::BufferTooSmall {
                needed: MIN_FRAME_LEN,
            });
        }
        let eth = EthernetRepr {
            dst: MacAddr::MAC_CONTROL,
            src,
            vlan: None,
            ethertype: ethertype::MAC_CONTROL,
        };
        eth.emit(buf)?;
        let n = eth.header_len() + self.emit_payload(&mut buf[eth.header_len()..])?;
        buf[n..MIN_FRAME_LEN].fill(0);
        Ok(MIN_FRAME_LEN)
    }

    /// Pause time of priority `prio` (for PAUSE, every priority), if the
    /// frame says anything about it.
    pub fn quanta_for(&self, prio: u8) -> Option<u16> {
        match *self {
            MacControl::Pause { quanta } => Some(quanta),
            MacControl::Pfc { enable, quanta } => {
                (prio < 8 && enable & (1 << prio) != 0).then(|| quanta[prio as usize])
            }
        }
    }
}

/// Pause time of `quanta` at `link_bps` bits per second, in picoseconds
/// (rounded up).
pub fn quanta_to_ps(quanta: u16, link_bps: u64) -> u64 {
    if link_bps == 0 {
        return u64::MAX;
    }
    let bits = quanta as u128 * BITS_PER_QUANTUM as u128;
    (bits * 1_000_000_000_000)
        .div_ceil(link_bps as u128)
        .min(u64::MAX as u128) as u64
}

/// Pause time of `quanta` at `link_bps` as a [`Duration`] (nanosecond
/// resolution, rounded up).
pub fn quanta_to_duration(quanta: u16, link_bps: u64) -> Duration {
    Duration::from_nanos(quanta_to_ps(quanta, link_bps).div_ceil(1000))
}

/// Fewest quanta that pause for at least `ps` picoseconds at `link_bps`,
/// saturating at 0xFFFF.
pub fn ps_to_quanta(ps: u64, link_bps: u64) -> u16 {
    let bits = (ps as u128 * link_bps as u128).div_ceil(1_000_000_000_000);
    bits.div_ceil(BITS_PER_QUANTUM as u128)
        .min(u16::MAX as u128) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pfc_frame_round_trip() {
        let pfc = MacControl::Pfc {
            enable: 0b0000_1000,
            quanta: [0, 0, 0, 0xffff, 0, 0, 0, 0],
        };
        let mut buf = [0xaau8; 64];
        let n = pfc
            .emit_frame(MacAddr([2, 0, 0, 0, 0, 9]), &mut buf)
            .unwrap();
        assert_eq!(n, 60);
        assert_eq!(&buf[..6], &[0x01, 0x80, 0xc2, 0, 0, 1]);
        assert_eq!(&buf[12..18], &[0x88, 0x08, 0x01, 0x01, 0x00, 0x08]);
        assert_eq!(&buf[24..26], &[0xff, 0xff]);
        assert!(buf[34..60].iter().all(|&b| b == 0));
        assert_eq!(MacControl::parse(&buf[14..60]), Ok(pfc));
        assert_eq!(pfc.quanta_for(3), Some(0xffff));
        assert_eq!(pfc.quanta_for(2), None);
    }

    #[test]
    fn pause_frame_round_trip() {
        let p = MacControl::Pause { quanta: 0x1234 };
        let mut buf = [0u8; 60];
        p.emit_frame(MacAddr::default(), &mut buf).unwrap();
        assert_eq!(MacControl::parse(&buf[14..]), Ok(p));
        assert_eq!(
            MacControl::parse(&[0x00, 0x02, 0, 0]),
            Err(Error::UnknownMacControl { opcode: 2 })
        );
        assert!(MacControl::parse(&buf[14..30]).is_ok());
        assert!(MacControl::parse(&[0x01, 0x01, 0, 0]).is_err());
    }

    #[test]
    fn quanta_durations() {
        // 1 quantum at 100 Gb/s = 512 bits / 1e11 = 5.12 ns.
        assert_eq!(quanta_to_ps(1, 100_000_000_000), 5_120);
        // 0xFFFF quanta at 10 Gb/s = 3.355 ms.
        assert_eq!(quanta_to_ps(0xffff, 10_000_000_000), 3_355_392_000);
        assert_eq!(
            quanta_to_duration(0xffff, 10_000_000_000),
            Duration::from_nanos(3_355_392)
        );
        assert_eq!(ps_to_quanta(5_120, 100_000_000_000), 1);
        assert_eq!(ps_to_quanta(5_121, 100_000_000_000), 2);
        assert_eq!(ps_to_quanta(u64::MAX, 400_000_000_000), 0xffff);
        // 400G: 1.28 ns per quantum.
        assert_eq!(quanta_to_ps(1000, 400_000_000_000), 1_280_000);
    }
}
