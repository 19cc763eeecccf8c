//! QP states and the modify-QP transition table.
//!
//! A queue pair moves through the states of IBTA Vol 1 §10.3 (figure "QP/EE
//! state diagram"): RESET → INIT → RTR → RTS ⇄ SQD, SQE on a send-side error
//! of an unreliable QP, ERR on a fatal error. Every move made by software goes
//! through Modify QP (IBTA Vol 1 §11.2.4.2, `ibv_modify_qp(3)`), and for each
//! (from, to, QP type) the verb has a fixed set of attributes the caller must
//! supply and a fixed set it may supply; anything else is refused.
//!
//! [`TRANSITIONS`] declares that relation as data, one [`Transition`] row per
//! legal (from, to) pair, and [`check_modify`] is a lookup in it. The row
//! contents follow the Linux kernel's `qp_state_table`, the table behind
//! `ib_modify_qp_is_ok()` in `drivers/infiniband/core/verbs.c`, restricted to
//! the RC, UC and UD columns, with two deliberate differences that follow IBTA
//! instead:
//!
//! * RESET → ERR is legal (IBTA: any state may be moved to Error; the kernel
//!   core table lacks this row and rejects it);
//! * SQE → RTS is legal only for UC and UD (IBTA: the SQ Error state exists
//!   only for unreliable service; the kernel row is marked valid for every
//!   type with no attributes for RC).
//!
//! `CAP` (resize) and `RATE_LIMIT` appear in no row: the kernel core never
//! accepts them for RC, UC or UD (`RATE_LIMIT` is raw-packet only).

use core::fmt;
use core::ops::{BitAnd, BitOr, BitOrAssign};

/// QP transport service type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable Connected.
    Rc,
    /// Unreliable Connected.
    Uc,
    /// Unreliable Datagram.
    Ud,
}

impl QpType {
    /// Every type, in the column order of [`Transition::required`].
    pub const ALL: [QpType; 3] = [QpType::Rc, QpType::Uc, QpType::Ud];

    /// The short name: `"RC"`, `"UC"` or `"UD"`.
    pub const fn name(self) -> &'static str {
        match self {
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
        }
    }

    /// The column of this type in [`Transition::required`] and
    /// [`Transition::optional`] (0, 1 or 2).
    pub const fn index(self) -> usize {
        match self {
            QpType::Rc => 0,
            QpType::Uc => 1,
            QpType::Ud => 2,
        }
    }

    /// The `ibv_qp_type` value (`IBV_QPT_RC` = 2, `UC` = 3, `UD` = 4).
    pub const fn to_ibv(self) -> u32 {
        match self {
            QpType::Rc => 2,
            QpType::Uc => 3,
            QpType::Ud => 4,
        }
    }

    /// The type for an `ibv_qp_type` value, `None` for types not implemented.
    pub const fn from_ibv(value: u32) -> Option<Self> {
        match value {
            2 => Some(QpType::Rc),
            3 => Some(QpType::Uc),
            4 => Some(QpType::Ud),
            _ => None,
        }
    }

    const fn article(self) -> &'static str {
        match self {
            QpType::Rc => "an",
            QpType::Uc | QpType::Ud => "a",
        }
    }
}

impl fmt::Display for QpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// QP state (values as `ibv_qp_state`: RESET=0, INIT=1, RTR=2, RTS=3, SQD=4,
/// SQE=5, ERR=6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Reset: just created or reset; queues empty, nothing processed.
    Reset,
    /// Initialized: receives may be posted but are not processed.
    Init,
    /// Ready To Receive: the receive side runs.
    Rtr,
    /// Ready To Send: fully operational.
    Rts,
    /// Send Queue Drain: no new send WQEs are started.
    Sqd,
    /// Send Queue Error (UC/UD only): a send WQE completed in error.
    Sqe,
    /// Error: all outstanding and new WQEs are flushed.
    Err,
}

impl QpState {
    /// Every state, in `ibv_qp_state` order.
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Err,
    ];

    /// The upper-case name used by the verbs: `"RESET"`, `"INIT"`, ...
    pub const fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        }
    }

    /// The state for an `ibv_qp_state` value, `None` if out of range.
    pub fn from_ibv(value: u32) -> Option<Self> {
        Self::ALL.get(usize::try_from(value).ok()?).copied()
    }

    /// The `ibv_qp_state` value.
    pub const fn to_ibv(self) -> u32 {
        self as u32
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Names of the 32 mask bits; bits `ibv_qp_attr_mask` does not define are
/// named after their position.
#[rustfmt::skip]
const BIT_NAMES: [&str; 32] = [
    "STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS",
    "PKEY_INDEX", "PORT", "QKEY", "AV",
    "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY",
    "RQ_PSN", "MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER",
    "SQ_PSN", "MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP",
    "DEST_QPN", "UNKNOWN_BIT_21", "UNKNOWN_BIT_22", "UNKNOWN_BIT_23",
    "UNKNOWN_BIT_24", "RATE_LIMIT", "UNKNOWN_BIT_26", "UNKNOWN_BIT_27",
    "UNKNOWN_BIT_28", "UNKNOWN_BIT_29", "UNKNOWN_BIT_30", "UNKNOWN_BIT_31",
];

/// Attribute mask: which fields of a modify request are set, with the
/// `ibv_qp_attr_mask` bit values.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QpAttrMask(pub u32);

impl QpAttrMask {
    /// `qp_state` is set: the request names a target state.
    pub const STATE: Self = Self(1 << 0);
    /// `cur_qp_state` is set: the caller asserts the current state.
    pub const CUR_STATE: Self = Self(1 << 1);
    /// `en_sqd_async_notify` is set (RTS → SQD).
    pub const EN_SQD_ASYNC_NOTIFY: Self = Self(1 << 2);
    /// `qp_access_flags` is set.
    pub const ACCESS_FLAGS: Self = Self(1 << 3);
    /// `pkey_index` is set.
    pub const PKEY_INDEX: Self = Self(1 << 4);
    /// `port_num` is set.
    pub const PORT: Self = Self(1 << 5);
    /// `qkey` is set.
    pub const QKEY: Self = Self(1 << 6);
    /// `ah_attr` (primary path address vector) is set.
    pub const AV: Self = Self(1 << 7);
    /// `path_mtu` is set.
    pub const PATH_MTU: Self = Self(1 << 8);
    /// `timeout` (local ACK timeout) is set.
    pub const TIMEOUT: Self = Self(1 << 9);
    /// `retry_cnt` is set.
    pub const RETRY_CNT: Self = Self(1 << 10);
    /// `rnr_retry` is set.
    pub const RNR_RETRY: Self = Self(1 << 11);
    /// `rq_psn` is set.
    pub const RQ_PSN: Self = Self(1 << 12);
    /// `max_rd_atomic` (outstanding reads/atomics as initiator) is set.
    pub const MAX_QP_RD_ATOMIC: Self = Self(1 << 13);
    /// `alt_ah_attr` and the other alternate-path fields are set.
    pub const ALT_PATH: Self = Self(1 << 14);
    /// `min_rnr_timer` is set.
    pub const MIN_RNR_TIMER: Self = Self(1 << 15);
    /// `sq_psn` is set.
    pub const SQ_PSN: Self = Self(1 << 16);
    /// `max_dest_rd_atomic` (reads/atomics accepted as responder) is set.
    pub const MAX_DEST_RD_ATOMIC: Self = Self(1 << 17);
    /// `path_mig_state` is set.
    pub const PATH_MIG_STATE: Self = Self(1 << 18);
    /// `cap` (queue resize) is set.
    pub const CAP: Self = Self(1 << 19);
    /// `dest_qp_num` is set.
    pub const DEST_QPN: Self = Self(1 << 20);
    /// `rate_limit` is set.
    pub const RATE_LIMIT: Self = Self(1 << 25);

    /// The mask with no bit set.
    pub const fn empty() -> Self {
        Self(0)
    }

    /// The raw `ibv_qp_attr_mask` bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The bits set in either mask.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// The bits set in `self` but not in `other`.
    pub const fn difference(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    /// The set bits, lowest first, each as a one-bit mask.
    pub const fn iter(self) -> Iter {
        Iter(self.0)
    }

    /// The names of the set bits, lowest first (`"STATE"`, `"PATH_MTU"`, ...).
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        self.iter().map(QpAttrMask::first_name)
    }

    /// The name of the lowest set bit; `"(empty)"` for the empty mask.
    const fn first_name(self) -> &'static str {
        if self.0 == 0 {
            return "(empty)";
        }
        // trailing_zeros of a non-zero u32 is below 32; BIT_NAMES has 32 entries.
        BIT_NAMES[self.0.trailing_zeros() as usize]
    }
}

/// Iterator over the set bits of a [`QpAttrMask`], lowest first.
#[derive(Clone, Debug)]
pub struct Iter(u32);

impl Iterator for Iter {
    type Item = QpAttrMask;

    fn next(&mut self) -> Option<QpAttrMask> {
        if self.0 == 0 {
            return None;
        }
        let lowest = self.0 & self.0.wrapping_neg();
        self.0 &= !lowest;
        Some(QpAttrMask(lowest))
    }
}

impl core::iter::FusedIterator for Iter {}

impl BitOr for QpAttrMask {
    type Output = Self;

    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

impl BitOrAssign for QpAttrMask {
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for QpAttrMask {
    type Output = Self;

    fn bitand(self, rhs: Self) -> Self {
        Self(self.0 & rhs.0)
    }
}

impl fmt::Display for QpAttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("(empty)");
        }
        for (i, name) in self.names().enumerate() {
            if i > 0 {
                f.write_str("|")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

impl fmt::Debug for QpAttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a modify is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModifyError {
    /// The table has no `from → to` row for this QP type.
    IllegalTransition {
        /// The QP type.
        qp_type: QpType,
        /// The current state.
        from: QpState,
        /// The requested state.
        to: QpState,
    },
    /// A required attribute is absent from the mask (the lowest such bit).
    MissingAttribute {
        /// The QP type.
        qp_type: QpType,
        /// The (from, to) pair being checked.
        transition: (QpState, QpState),
        /// The attribute's mask name, e.g. `"PATH_MTU"`.
        attr: &'static str,
    },
    /// The mask has an attribute this transition does not accept (the lowest
    /// such bit).
    UnexpectedAttribute {
        /// The QP type.
        qp_type: QpType,
        /// The (from, to) pair being checked.
        transition: (QpState, QpState),
        /// The attribute's mask name, e.g. `"QKEY"`.
        attr: &'static str,
    },
    /// `CUR_STATE` was given and differs from the QP's actual state.
    CurrentStateMismatch {
        /// The state the caller asserted.
        given: QpState,
        /// The QP's actual state.
        actual: QpState,
    },
    /// The mask is acceptable but the named attribute's value is out of range
    /// (checked by the caller, e.g. `"path_mtu"`, `"retry_cnt"`).
    InvalidValue(&'static str),
    /// SQD -> SQD before the send queue has drained.
    SqDraining,
}

impl fmt::Display for ModifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (qp_type, (from, to), verb, attr) = match *self {
            ModifyError::IllegalTransition { qp_type, from, to } => {
                let a = qp_type.article();
                return write!(
                    f,
                    "{from} -> {to} is not a legal transition for {a} {qp_type} QP"
                );
            }
            ModifyError::CurrentStateMismatch { given, actual } => {
                return write!(f, "CUR_STATE says {given} but the QP is in {actual}");
            }
            ModifyError::InvalidValue(field) => return write!(f, "invalid value for {field}"),
            ModifyError::SqDraining => {
                return write!(
                    f,
                    "the send queue is still draining: SQD -> SQD waits for the drain"
                );
            }
            ModifyError::MissingAttribute {
                qp_type,
                transition,
                attr,
            } => (qp_type, transition, "requires", attr),
            ModifyError::UnexpectedAttribute {
                qp_type,
                transition,
                attr,
            } => (qp_type, transition, "does not accept", attr),
        };
        let a = qp_type.article();
        write!(f, "{from} -> {to} on {a} {qp_type} QP {verb} {attr}")
    }
}

impl core::error::Error for ModifyError {}

/// One row of the declared table: a legal `from → to` move and, per QP type,
/// the attributes it requires and those it also accepts. `STATE` is in
/// neither set; it is always accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// Current state.
    pub from: QpState,
    /// Target state.
    pub to: QpState,
    /// Whether the row exists for each type, indexed by [`QpType::index`].
    pub valid_for: [bool; 3],
    /// Attributes that must be given, indexed by [`QpType::index`].
    pub required: [QpAttrMask; 3],
    /// Attributes that may be given, indexed by [`QpType::index`].
    pub optional: [QpAttrMask; 3],
}

impl Transition {
    /// Whether the row exists for `qp_type`.
    pub const fn is_valid_for(&self, qp_type: QpType) -> bool {
        self.valid_for[qp_type.index()]
    }

    /// The attributes `qp_type` must give.
    pub const fn required_for(&self, qp_type: QpType) -> QpAttrMask {
        self.required[qp_type.index()]
    }

    /// The attributes `qp_type` may also give.
    pub const fn optional_for(&self, qp_type: QpType) -> QpAttrMask {
        self.optional[qp_type.index()]
    }
}

/// Union of a list of masks, usable in constants.
const fn m(list: &[QpAttrMask]) -> QpAttrMask {
    let mut bits = 0;
    let mut i = 0;
    while i < list.len() {
        bits |= list[i].0;
        i += 1;
    }
    QpAttrMask(bits)
}

/// A row for every type with per-type required and optional sets.
const fn row(
    from: QpState,
    to: QpState,
    required: [QpAttrMask; 3],
    optional: [QpAttrMask; 3],
) -> Transition {
    Transition {
        from,
        to,
        valid_for: [true; 3],
        required,
        optional,
    }
}

/// A row for every type that takes nothing but `STATE`.
const fn bare(from: QpState, to: QpState) -> Transition {
    row(from, to, [QpAttrMask::empty(); 3], [QpAttrMask::empty(); 3])
}

/// The named attribute sets the table is built from (kernel `qp_state_table`).
#[rustfmt::skip]
mod sets {
    use super::{m, QpAttrMask as A};

    pub(super) const NONE: A = A::empty();
    pub(super) const INIT_RC_UC: A = m(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS]);
    pub(super) const INIT_UD: A = m(&[A::PKEY_INDEX, A::PORT, A::QKEY]);
    pub(super) const RTR_UC: A = m(&[A::AV, A::PATH_MTU, A::DEST_QPN, A::RQ_PSN]);
    pub(super) const RTR_RC: A = m(&[RTR_UC, A::MAX_DEST_RD_ATOMIC, A::MIN_RNR_TIMER]);
    pub(super) const RTR_OPT_RC_UC: A = m(&[A::ALT_PATH, A::ACCESS_FLAGS, A::PKEY_INDEX]);
    pub(super) const RTR_OPT_UD: A = m(&[A::PKEY_INDEX, A::QKEY]);
    pub(super) const SQ_PSN: A = A::SQ_PSN;
    pub(super) const RTS_RC: A = m(&[
        A::SQ_PSN, A::TIMEOUT, A::RETRY_CNT, A::RNR_RETRY, A::MAX_QP_RD_ATOMIC,
    ]);
    /// Optional on RTR -> RTS, RTS -> RTS and SQD -> RTS.
    pub(super) const TO_RTS_OPT_UC: A = m(&[
        A::CUR_STATE, A::ALT_PATH, A::ACCESS_FLAGS, A::PATH_MIG_STATE,
    ]);
    pub(super) const TO_RTS_OPT_RC: A = m(&[TO_RTS_OPT_UC, A::MIN_RNR_TIMER]);
    pub(super) const TO_RTS_OPT_UD: A = m(&[A::CUR_STATE, A::QKEY]);
    pub(super) const TO_RTS_OPT: [A; 3] = [TO_RTS_OPT_RC, TO_RTS_OPT_UC, TO_RTS_OPT_UD];
    pub(super) const SQD_ASYNC: A = A::EN_SQD_ASYNC_NOTIFY;
    pub(super) const SQD_OPT_UC: A = m(&[
        A::AV, A::ALT_PATH, A::ACCESS_FLAGS, A::PKEY_INDEX, A::PATH_MIG_STATE,
    ]);
    pub(super) const SQD_OPT_RC: A = m(&[
        SQD_OPT_UC, A::PORT, A::TIMEOUT, A::RETRY_CNT, A::RNR_RETRY,
        A::MAX_QP_RD_ATOMIC, A::MAX_DEST_RD_ATOMIC, A::MIN_RNR_TIMER,
    ]);
    pub(super) const SQD_OPT_UD: A = m(&[A::PKEY_INDEX, A::QKEY]);
    pub(super) const SQE_OPT_UC: A = m(&[A::CUR_STATE, A::ACCESS_FLAGS]);
}

/// The declared modify-QP transition table (IBTA Vol 1 §10.3 and §11.2.4.2;
/// kernel `qp_state_table`), sorted by (from, to) in `ibv_qp_state` order
/// with at most one row per pair. Pairs not listed are illegal.
#[rustfmt::skip]
pub const TRANSITIONS: &[Transition] = {
    use sets::*;
    // Local so that `Err` does not shadow `Result::Err` in the rest of the file.
    use QpState::{Err, Init, Reset, Rtr, Rts, Sqd, Sqe};
    &[
        // (from, to, required [RC, UC, UD], optional [RC, UC, UD])
        bare(Reset, Reset),
        row( Reset, Init,  [INIT_RC_UC, INIT_RC_UC, INIT_UD], [NONE; 3]),
        // IBTA allows any state -> ERR; the kernel core table lacks this row.
        bare(Reset, Err),
        bare(Init,  Reset),
        row( Init,  Init,  [NONE; 3], [INIT_RC_UC, INIT_RC_UC, INIT_UD]),
        row( Init,  Rtr,   [RTR_RC, RTR_UC, NONE], [RTR_OPT_RC_UC, RTR_OPT_RC_UC, RTR_OPT_UD]),
        bare(Init,  Err),
        bare(Rtr,   Reset),
        row( Rtr,   Rts,   [RTS_RC, SQ_PSN, SQ_PSN], TO_RTS_OPT),
        bare(Rtr,   Err),
        bare(Rts,   Reset),
        row( Rts,   Rts,   [NONE; 3], TO_RTS_OPT),
        row( Rts,   Sqd,   [NONE; 3], [SQD_ASYNC; 3]),
        bare(Rts,   Err),
        bare(Sqd,   Reset),
        row( Sqd,   Rts,   [NONE; 3], TO_RTS_OPT),
        row( Sqd,   Sqd,   [NONE; 3], [SQD_OPT_RC, SQD_OPT_UC, SQD_OPT_UD]),
        bare(Sqd,   Err),
        bare(Sqe,   Reset),
        // The SQ Error state exists only for unreliable service (not RC).
        Transition {
            valid_for: [false, true, true],
            ..row(Sqe, Rts, [NONE; 3], [NONE, SQE_OPT_UC, TO_RTS_OPT_UD])
        },
        bare(Sqe,   Err),
        bare(Err,   Reset),
        bare(Err,   Err),
    ]
};

/// The row for `from → to` if it exists for `qp_type`.
pub fn transition(qp_type: QpType, from: QpState, to: QpState) -> Option<&'static Transition> {
    TRANSITIONS
        .iter()
        .find(|t| t.from == from && t.to == to && t.is_valid_for(qp_type))
}

impl QpAttrMask {
    /// The least mask a `from → to` modify of a `qp_type` QP must carry:
    /// `STATE` plus the row's required attributes (IBTA Vol 1 §11.2.4.2),
    /// read from [`TRANSITIONS`] so that callers bringing a QP up do not
    /// spell the sets out again. Where no row exists it is `STATE` alone,
    /// which `modify_qp` refuses as an illegal transition.
    pub fn required(qp_type: QpType, from: QpState, to: QpState) -> Self {
        transition(qp_type, from, to).map_or(Self::STATE, |t| Self::STATE | t.required_for(qp_type))
    }
}

/// Checks a modify request: `mask` is the attribute mask the caller passed
/// and `next` the requested state (`qp_state`). If `mask` lacks `STATE` the
/// target is `current` (an attribute-only modify, allowed where the table has
/// a `current → current` row: RESET, INIT, RTS, SQD, ERR).
///
/// A `CUR_STATE` bit is taken to assert `current`; use
/// [`check_modify_with_cur_state`] to check the caller's `cur_qp_state`.
pub fn check_modify(
    qp_type: QpType,
    current: QpState,
    mask: QpAttrMask,
    next: QpState,
) -> Result<(), ModifyError> {
    check_modify_with_cur_state(qp_type, current, mask, next, current)
}

/// As [`check_modify`], with the caller's `cur_qp_state`: if `mask` has
/// `CUR_STATE` and `cur_qp_state` differs from `current`, the request is
/// refused with [`ModifyError::CurrentStateMismatch`] before anything else.
///
/// Then, in order: the row must exist ([`ModifyError::IllegalTransition`]),
/// every required attribute must be given, and no attribute outside
/// `required | optional | STATE` may be (each reporting the lowest bit).
pub fn check_modify_with_cur_state(
    qp_type: QpType,
    current: QpState,
    mask: QpAttrMask,
    next: QpState,
    cur_qp_state: QpState,
) -> Result<(), ModifyError> {
    if mask.contains(QpAttrMask::CUR_STATE) && cur_qp_state != current {
        return Err(ModifyError::CurrentStateMismatch {
            given: cur_qp_state,
            actual: current,
        });
    }
    let to = if mask.contains(QpAttrMask::STATE) {
        next
    } else {
        current
    };
    let row = transition(qp_type, current, to).ok_or(ModifyError::IllegalTransition {
        qp_type,
        from: current,
        to,
    })?;
    let required = row.required_for(qp_type);
    if let Some(bit) = required.difference(mask).iter().next() {
        return Err(ModifyError::MissingAttribute {
            qp_type,
            transition: (current, to),
            attr: bit.first_name(),
        });
    }
    let allowed = required | row.optional_for(qp_type) | QpAttrMask::STATE;
    if let Some(bit) = mask.difference(allowed).iter().next() {
        return Err(ModifyError::UnexpectedAttribute {
            qp_type,
            transition: (current, to),
            attr: bit.first_name(),
        });
    }
    Ok(())
}
