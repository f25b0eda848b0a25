//! How large a held message may be ([`Bounds`]), and which bound one is
//! past ([`Exceeded`]).

/// How large a held message may be: its text in bytes, and its elements.
///
/// Elements are what the tree formats work through one by one: segments,
/// and the field, repetition, component and subcomponent delimiters between
/// their parts (each adds one). The text alone costs memory in proportion
/// to its bytes; the element bound keeps what is done per element (a
/// `json`, `yaml` or `toml` tree of the message) bounded too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub max_bytes: usize,
    pub max_elements: usize,
}

impl Bounds {
    /// What offsets of four bytes can address, and no element bound.
    pub const NONE: Bounds = Bounds { max_bytes: u32::MAX as usize, max_elements: usize::MAX };

    /// Whether a message of `bytes` and `elements` is within the bounds.
    pub fn check(&self, bytes: usize, elements: usize) -> Result<(), Exceeded> {
        if bytes > self.max_bytes {
            return Err(Exceeded::Bytes { bytes, max: self.max_bytes });
        }
        if elements > self.max_elements {
            return Err(Exceeded::Elements { elements, max: self.max_elements });
        }
        Ok(())
    }
}

/// Which bound a message (or the message a patch would make) is past.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exceeded {
    Bytes { bytes: usize, max: usize },
    Elements { elements: usize, max: usize },
}
