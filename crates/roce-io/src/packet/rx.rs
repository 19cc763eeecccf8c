//! The receive half of [`PacketBackend`]: frames from the ring or
//! `recvmmsg`, stripped to RoCE datagrams, and MAC control frames.

use std::io;
use std::os::fd::AsFd;

use roce_wire::ethernet::{ethertype, EthernetFrame};
use roce_wire::{MacControl, ROCE_V2_PORT};

use super::{PacketBackend, MAC_CONTROL_QUEUE, RX_SLOT};
use crate::backend::{PacketBatch, RxMeta};
use crate::datagram;
use crate::sys::{self, RxInfo};

impl PacketBackend {
    pub(super) fn handle_frame(&mut self, frame: &[u8], info: &RxInfo, batch: &mut PacketBatch) {
        if info.truncated {
            self.stats.rx_dropped += 1;
            return;
        }
        if info.pkttype == Some(sys::PACKET_OUTGOING) {
            self.stats.rx_outgoing += 1;
            return;
        }
        let Ok(f) = EthernetFrame::new_checked(frame) else {
            self.stats.rx_dropped += 1;
            return;
        };
        let pcp = f
            .vlan()
            .map(|t| t.pcp)
            .or(info.vlan_tci.map(|tci| (tci >> 13) as u8));
        // RoCE from this device's VLAN only (an untagged or priority-tagged
        // frame, VID 0, when it has none): the tag in the frame, or the one
        // the kernel moved into the packet's metadata. MAC control (PFC)
        // is per link, whatever the VLAN.
        let vid = f
            .vlan()
            .map(|t| t.vid)
            .or(info.vlan_tci.map(|tci| tci & 0x0fff))
            .unwrap_or(0);
        let other_vlan = vid != self.cfg.vlan.unwrap_or(0);
        match f.ethertype() {
            ethertype::MAC_CONTROL => match MacControl::parse(f.payload()) {
                Ok(c) if self.mac_ctl.len() < MAC_CONTROL_QUEUE => {
                    self.stats.rx_mac_control += 1;
                    self.mac_ctl.push_back((f.src(), c));
                }
                _ => self.stats.rx_dropped += 1,
            },
            ethertype::IPV4 | ethertype::IPV6 if other_vlan => self.stats.rx_other_vlan += 1,
            ethertype::IPV4 | ethertype::IPV6 => {
                let p = f.payload();
                let len = match datagram::ip_header_len(p).map(|_| p[0] >> 4) {
                    Some(4) => usize::from(u16::from_be_bytes([p[2], p[3]])),
                    Some(6) => 40 + usize::from(u16::from_be_bytes([p[4], p[5]])),
                    _ => 0,
                };
                let hl = datagram::ip_header_len(p).unwrap_or(0);
                let roce = len > hl + 8
                    && len <= p.len()
                    && u16::from_be_bytes([p[hl + 2], p[hl + 3]]) == ROCE_V2_PORT;
                if !roce || !batch.push_with_meta(&p[..len], RxMeta::exact()) {
                    self.stats.rx_dropped += 1;
                    return;
                }
                self.stats.rx_datagrams += 1;
                self.stats.rx_bytes += len as u64;
                match pcp {
                    Some(p) => self.stats.rx_by_pcp[usize::from(p & 7)] += 1,
                    None => self.stats.rx_untagged += 1,
                }
            }
            _ => self.stats.rx_dropped += 1,
        }
    }

    pub(super) fn recv_frames(&mut self, batch: &mut PacketBatch) -> io::Result<usize> {
        batch.clear();
        if let Some(mut ring) = self.ring.take() {
            while !batch.is_full() {
                let Some(f) = ring.peek() else {
                    break;
                };
                self.handle_frame(f.data, &f.info, batch);
                ring.release();
            }
            self.ring = Some(ring);
            return Ok(batch.len());
        }
        for _ in 0..4 {
            if batch.is_full() {
                break;
            }
            let want = batch.capacity() - batch.len();
            let mut infos = std::mem::take(&mut self.rx_info);
            let n = sys::recvmmsg(
                self.sock.as_fd(),
                &mut self.mmsg,
                &mut self.rx_arena,
                RX_SLOT,
                want,
                &mut infos,
            )?;
            let arena = std::mem::take(&mut self.rx_arena);
            for (k, info) in infos.iter().enumerate() {
                let frame = &arena[k * RX_SLOT..k * RX_SLOT + info.len];
                self.handle_frame(frame, info, batch);
            }
            self.rx_arena = arena;
            self.rx_info = infos;
            if n == 0 {
                break;
            }
        }
        Ok(batch.len())
    }
}
