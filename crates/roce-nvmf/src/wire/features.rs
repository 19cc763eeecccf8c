//! Feature identifiers and their value layouts (NVMe base 1.4 §5.21.1,
//! Figure 271).

/// Feature identifiers this crate handles.
pub mod fid {
    /// Volatile Write Cache (06h).
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    /// Number of Queues (07h).
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    /// Asynchronous Event Configuration (0Bh).
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0B;
    /// Keep Alive Timer (0Fh).
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
}

/// Set/Get Features CDW10: FID bits 7:0, SV (save) bit 31 for Set, SEL
/// bits 10:8 for Get.
pub fn cdw10_fid(cdw10: u32) -> u8 {
    cdw10 as u8
}

/// Set Features SV bit.
pub fn cdw10_save(cdw10: u32) -> bool {
    cdw10 & (1 << 31) != 0
}

/// Number of Queues value (CDW11 in, DW0 out; §5.21.1.7): NSQR/NSQA in
/// bits 15:0 and NCQR/NCQA in bits 31:16, both 0's based.
pub fn number_of_queues(nsq0: u16, ncq0: u16) -> u32 {
    nsq0 as u32 | (ncq0 as u32) << 16
}

/// The two halves of a Number of Queues value.
pub fn split_number_of_queues(v: u32) -> (u16, u16) {
    (v as u16, (v >> 16) as u16)
}

/// Asynchronous Event Configuration bit 8: Namespace Attribute Notices
/// (§5.21.1.11).
pub const AEC_NS_ATTR_NOTICES: u32 = 1 << 8;

/// Asynchronous event completion DW0 (NVMe base 1.4 Figure 146): event
/// type bits 2:0, event information bits 15:8, log page bits 23:16.
pub fn aer_dw0(event_type: u8, info: u8, log_page: u8) -> u32 {
    (event_type as u32 & 7) | (info as u32) << 8 | (log_page as u32) << 16
}

/// Asynchronous event type Notice (2h).
pub const AER_TYPE_NOTICE: u8 = 2;
/// Notice information Namespace Attribute Changed (00h).
pub const AER_NOTICE_NS_CHANGED: u8 = 0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts() {
        assert_eq!(number_of_queues(3, 5), 0x0005_0003);
        assert_eq!(split_number_of_queues(0x0005_0003), (3, 5));
        assert_eq!(
            aer_dw0(AER_TYPE_NOTICE, AER_NOTICE_NS_CHANGED, 4),
            0x0004_0002
        );
        assert!(cdw10_save(0x8000_0007));
        assert_eq!(cdw10_fid(0x8000_0007), 7);
    }
}
