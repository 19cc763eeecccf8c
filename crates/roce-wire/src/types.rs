//! Newtypes for the identifiers of the InfiniBand transport (IBTA Vol 1 §9.2).

use core::fmt;

/// Mask of a 24-bit field (PSN, QPN, MSN).
pub const MASK_24: u32 = 0x00ff_ffff;

/// A Packet Sequence Number: 24 bits, arithmetic modulo 2^24 (IBTA Vol 1 §9.7.1).
///
/// Ordering between two PSNs is only meaningful inside a window of half the
/// space (2^23), which is how both the requester and the responder compare
/// them; [`Psn::cmp_window`] and [`Psn::diff`] implement that rule.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// Number of distinct PSNs.
    pub const MODULUS: u32 = 1 << 24;

    /// A PSN from the low 24 bits of `v` (higher bits are discarded).
    pub const fn new(v: u32) -> Psn {
        Psn(v & MASK_24)
    }

    /// The 24-bit value.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    #[must_use]
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & MASK_24)
    }

    /// `self - n` modulo 2^24.
    #[must_use]
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & MASK_24)
    }

    /// The next PSN.
    #[must_use]
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// Signed distance `self - other` interpreted in the window
    /// `[-2^23, 2^23)`: positive when `self` is ahead of `other`.
    pub const fn diff(self, other: Psn) -> i32 {
        let d = self.0.wrapping_sub(other.0) & MASK_24;
        // Sign-extend from 24 bits.
        ((d << 8) as i32) >> 8
    }

    /// Compares `self` with `other` inside the half-space window.
    pub fn cmp_window(self, other: Psn) -> core::cmp::Ordering {
        self.diff(other).cmp(&0)
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({:#08x})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

macro_rules! id_newtype {
    ($(#[$m:meta])* $name:ident, $bits:expr, $width:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
        pub struct $name(u32);

        impl $name {
            /// A value from the low bits of `v` that the field holds.
            pub const fn new(v: u32) -> $name {
                $name(if $bits == 32 { v } else { v & ((1u32 << $bits) - 1) })
            }
            /// The raw value.
            pub const fn value(self) -> u32 {
                self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#0", $width, "x})"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!("{:#0", $width, "x}"), self.0)
            }
        }
    };
}

id_newtype!(
    /// A Queue Pair Number (24 bits). QP0 is the SMI, QP1 the GSI (CM MADs).
    Qpn, 24, 8
);
id_newtype!(
    /// A Message Sequence Number carried in the AETH (24 bits, IBTA Vol 1 §9.7.5.1.1).
    Msn, 24, 8
);
id_newtype!(
    /// A remote memory key, carried in RETH / AtomicETH / IETH.
    Rkey, 32, 10
);
id_newtype!(
    /// A local memory key, used in scatter/gather entries (never on the wire).
    Lkey, 32, 10
);
id_newtype!(
    /// A Queue Key, carried in the DETH of UD packets.
    Qkey, 32, 10
);

impl Qpn {
    /// The General Services Interface QP, target of CM MADs.
    pub const GSI: Qpn = Qpn(1);
}

impl Msn {
    /// `self + 1` modulo 2^24.
    #[must_use]
    pub const fn next(self) -> Msn {
        Msn(self.0.wrapping_add(1) & MASK_24)
    }
}

impl Qkey {
    /// Q_Key used by QP1 (GSI) for CM MADs.
    pub const GSI: Qkey = Qkey(0x8001_0000);
}

/// A Partition Key (BTH P_Key). RoCE peers use the default 0xFFFF.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Pkey(pub u16);

impl Pkey {
    /// The default full-membership partition key.
    pub const DEFAULT: Pkey = Pkey(0xffff);
}

impl Default for Pkey {
    fn default() -> Pkey {
        Pkey::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cmp::Ordering;

    #[test]
    fn psn_wraps_at_2_pow_24() {
        let p = Psn::new(0xff_fffe);
        assert_eq!(p.add(1).value(), 0xff_ffff);
        assert_eq!(p.add(2).value(), 0);
        assert_eq!(p.add(5).value(), 3);
        assert_eq!(Psn::new(2).sub(5).value(), 0xff_fffd);
        assert_eq!(Psn::new(0x1_000_005).value(), 5);
    }

    #[test]
    fn psn_window_compare_across_wrap() {
        let a = Psn::new(0xff_fff0);
        let b = Psn::new(0x10);
        assert_eq!(b.diff(a), 0x20);
        assert_eq!(a.diff(b), -0x20);
        assert_eq!(b.cmp_window(a), Ordering::Greater);
        assert_eq!(a.cmp_window(b), Ordering::Less);
        assert_eq!(a.cmp_window(a), Ordering::Equal);
        // Exactly half the space away counts as behind (window is [-2^23, 2^23)).
        assert_eq!(Psn::new(0x80_0000).diff(Psn::new(0)), -0x80_0000);
    }

    #[test]
    fn ids_mask_to_field_width() {
        assert_eq!(Qpn::new(0x1ff_ffff).value(), 0xff_ffff);
        assert_eq!(Msn::new(0xff_ffff).next().value(), 0);
        assert_eq!(Rkey::new(0xdead_beef).value(), 0xdead_beef);
        assert_eq!(format!("{}", Qpn::new(0x11)), "0x000011");
    }
}
