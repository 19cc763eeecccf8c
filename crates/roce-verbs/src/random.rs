//! The operating system's randomness, for what an attacker must not guess
//! (issue 18): every device this crate opens gets its CSPRNG seed from
//! `getrandom` (unless the caller passed a seed of its own, as the
//! simulator and the seeded tests do), and applications draw their
//! connections' starting PSNs here.

use roce_core::Psn;

use crate::Error;

/// 32 bytes from the operating system's CSPRNG (`getrandom(2)`).
pub fn os_seed() -> Result<[u8; 32], Error> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|_| Error::NoRandomness)?;
    Ok(seed)
}

/// A random 64-bit value from the operating system.
pub fn random_u64() -> Result<u64, Error> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|_| Error::NoRandomness)?;
    Ok(u64::from_le_bytes(b))
}

/// A random starting PSN (24 bits) from the operating system, for an
/// application that connects its QPs itself (IBTA Vol 1 §9.7.1 leaves
/// the choice to the requester; a predictable one helps a blind attacker).
pub fn random_psn() -> Result<Psn, Error> {
    Ok(Psn::new(random_u64()? as u32 & 0xff_ffff))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_differ() {
        assert_ne!(os_seed().unwrap(), os_seed().unwrap());
        assert!(random_psn().unwrap().value() <= 0xff_ffff);
    }
}
