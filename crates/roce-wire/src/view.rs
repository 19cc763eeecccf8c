//! Boilerplate shared by the fixed-size header views.

/// Declares a checked view over a fixed-length header, smoltcp style: the
/// view wraps any `T: AsRef<[u8]>`, `new_checked` verifies the length once so
/// that no accessor can panic afterwards.
macro_rules! fixed_view {
    ($(#[$m:meta])* $name:ident, $len:expr, $layer:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Header length in bytes.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking its length; accessors may
            /// panic if it is shorter than [`Self::LEN`].
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps a buffer after checking that it holds the whole header.
            pub fn new_checked(buffer: T) -> $crate::error::Result<Self> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// Checks that the buffer holds the whole header.
            pub fn check_len(&self) -> $crate::error::Result<()> {
                if self.buffer.as_ref().len() < $len {
                    Err($crate::error::Error::Truncated { layer: $layer })
                } else {
                    Ok(())
                }
            }

            /// Returns the underlying buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

pub(crate) use fixed_view;
