//! How many bytes text takes once written as a JSON string, by serde_json's
//! rules: for replies capped in bytes (`read_file`, `console_log`), measured
//! before they are made. A control character takes six bytes (`\u0001`), so
//! raw bytes are no measure of a reply.

/// The bytes of `text` as a JSON string, quotes included.
pub fn json_string_len(text: &str) -> usize {
    2 + text.bytes().map(escaped_len).sum::<usize>()
}

/// The bytes one byte of UTF-8 text takes inside a JSON string.
pub fn escaped_len(byte: u8) -> usize {
    match byte {
        b'"' | b'\\' | b'\x08' | b'\x0c' | b'\n' | b'\r' | b'\t' => 2,
        0..=0x1f => 6,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_measure_is_what_serde_json_writes() {
        let every_ascii: String = (0u8..=0x7f).map(char::from).collect();
        for text in ["", "plain", "quote \" and \\ back", "\u{1}\u{1f}\t\n\r\u{8}\u{c}", "é ü 漢 🦀", &every_ascii]
        {
            assert_eq!(json_string_len(text), serde_json::to_string(text).unwrap().len(), "{text:?}");
        }
    }
}
