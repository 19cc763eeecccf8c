//! The completion status field (NVMe base 1.4 §4.6.1, Figure 125–128) and
//! the codes this crate answers with.

/// Status Code Type (NVMe base 1.4 Figure 126).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sct {
    /// Generic command status (0h).
    Generic,
    /// Command specific status (1h).
    CommandSpecific,
    /// Media and data integrity errors (2h).
    Media,
    /// Path related status (3h).
    Path,
    /// Any other value (reserved or vendor specific), kept as read.
    Other(u8),
}

impl Sct {
    /// The 3-bit field value.
    pub fn bits(self) -> u8 {
        match self {
            Sct::Generic => 0,
            Sct::CommandSpecific => 1,
            Sct::Media => 2,
            Sct::Path => 3,
            Sct::Other(v) => v & 7,
        }
    }

    /// The type for a 3-bit field value.
    pub fn from_bits(v: u8) -> Sct {
        match v & 7 {
            0 => Sct::Generic,
            1 => Sct::CommandSpecific,
            2 => Sct::Media,
            3 => Sct::Path,
            o => Sct::Other(o),
        }
    }
}

/// A completion status: type, code, More and Do Not Retry
/// (NVMe base 1.4 Figure 125; the phase tag is not part of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Status Code Type.
    pub sct: Sct,
    /// Status Code.
    pub sc: u8,
    /// More: more status in the Error Information log page.
    pub more: bool,
    /// Do Not Retry.
    pub dnr: bool,
}

impl Status {
    const fn generic(sc: u8) -> Status {
        Status {
            sct: Sct::Generic,
            sc,
            more: false,
            dnr: true,
        }
    }

    const fn specific(sc: u8) -> Status {
        Status {
            sct: Sct::CommandSpecific,
            sc,
            more: false,
            dnr: true,
        }
    }

    /// Successful Completion (00h/00h).
    pub const SUCCESS: Status = Status {
        sct: Sct::Generic,
        sc: 0,
        more: false,
        dnr: false,
    };
    /// Invalid Command Opcode (00h/01h).
    pub const INVALID_OPCODE: Status = Status::generic(0x01);
    /// Invalid Field in Command (00h/02h).
    pub const INVALID_FIELD: Status = Status::generic(0x02);
    /// Command ID Conflict (00h/03h).
    pub const CID_CONFLICT: Status = Status::generic(0x03);
    /// Data Transfer Error (00h/04h).
    pub const DATA_TRANSFER_ERROR: Status = Status::generic(0x04);
    /// Internal Error (00h/06h).
    pub const INTERNAL_ERROR: Status = Status::generic(0x06);
    /// Command Aborted due to SQ Deletion (00h/08h).
    pub const ABORTED_SQ_DELETION: Status = Status::generic(0x08);
    /// Invalid Namespace or Format (00h/0Bh).
    pub const INVALID_NAMESPACE: Status = Status::generic(0x0B);
    /// Command Sequence Error (00h/0Ch).
    pub const COMMAND_SEQUENCE_ERROR: Status = Status::generic(0x0C);
    /// Invalid Number of SGL Descriptors (00h/0Eh).
    pub const INVALID_SGL_COUNT: Status = Status::generic(0x0E);
    /// Data SGL Length Invalid (00h/0Fh).
    pub const DATA_SGL_LENGTH_INVALID: Status = Status::generic(0x0F);
    /// SGL Descriptor Type Invalid (00h/11h).
    pub const SGL_DESCRIPTOR_TYPE_INVALID: Status = Status::generic(0x11);
    /// SGL Offset Invalid (00h/16h).
    pub const SGL_OFFSET_INVALID: Status = Status::generic(0x16);
    /// Keep Alive Timer Expired (00h/19h).
    pub const KEEP_ALIVE_EXPIRED: Status = Status::generic(0x19);
    /// Command Interrupted (00h/21h): resources ran short, the host may
    /// retry (DNR clear).
    pub const COMMAND_INTERRUPTED: Status = Status {
        sct: Sct::Generic,
        sc: 0x21,
        more: false,
        dnr: false,
    };
    /// LBA Out of Range (00h/80h, NVM command set).
    pub const LBA_OUT_OF_RANGE: Status = Status::generic(0x80);
    /// Invalid Queue Identifier (01h/01h).
    pub const INVALID_QUEUE_ID: Status = Status::specific(0x01);
    /// Invalid Queue Size (01h/02h).
    pub const INVALID_QUEUE_SIZE: Status = Status::specific(0x02);
    /// Asynchronous Event Request Limit Exceeded (01h/05h).
    pub const AER_LIMIT_EXCEEDED: Status = Status::specific(0x05);
    /// Invalid Log Page (01h/09h).
    pub const INVALID_LOG_PAGE: Status = Status::specific(0x09);
    /// Feature Identifier Not Saveable (01h/0Dh).
    pub const FEATURE_NOT_SAVEABLE: Status = Status::specific(0x0D);
    /// Connect Incompatible Format (01h/80h, NVMe-oF 1.1 Figure 24).
    pub const CONNECT_INCOMPATIBLE_FORMAT: Status = Status::specific(0x80);
    /// Connect Controller Busy (01h/81h).
    pub const CONNECT_CONTROLLER_BUSY: Status = Status::specific(0x81);
    /// Connect Invalid Parameters (01h/82h).
    pub const CONNECT_INVALID_PARAMETERS: Status = Status::specific(0x82);
    /// Connect Invalid Host (01h/84h).
    pub const CONNECT_INVALID_HOST: Status = Status::specific(0x84);

    /// Whether this is Successful Completion.
    pub fn is_success(self) -> bool {
        self.sct == Sct::Generic && self.sc == 0
    }

    /// The 16-bit CQE status field (CQE bytes 14–15) with phase tag `phase`.
    pub fn to_field(self, phase: bool) -> u16 {
        (phase as u16)
            | (self.sc as u16) << 1
            | (self.sct.bits() as u16) << 9
            | (self.more as u16) << 14
            | (self.dnr as u16) << 15
    }

    /// The status in a 16-bit CQE status field (the phase tag is ignored).
    pub fn from_field(f: u16) -> Status {
        Status {
            sc: (f >> 1) as u8,
            sct: Sct::from_bits((f >> 9) as u8),
            more: f & (1 << 14) != 0,
            dnr: f & (1 << 15) != 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_layout() {
        // SC in bits 8:1, SCT in 11:9, M bit 14, DNR bit 15.
        assert_eq!(Status::SUCCESS.to_field(false), 0);
        assert_eq!(Status::SUCCESS.to_field(true), 1);
        assert_eq!(Status::LBA_OUT_OF_RANGE.to_field(false), 0x8000 | 0x80 << 1);
        assert_eq!(
            Status::CONNECT_INVALID_HOST.to_field(false),
            0x8000 | 1 << 9 | 0x84 << 1
        );
        let s = Status::from_field(0x8000 | 1 << 9 | 0x82 << 1 | 1);
        assert_eq!(s, Status::CONNECT_INVALID_PARAMETERS);
    }
}
