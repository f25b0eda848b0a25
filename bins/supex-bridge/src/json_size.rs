//! How many bytes text takes once written as a JSON string, by serde_json's
//! rules: for replies capped in bytes (`read_file`, `console_log`), measured
//! before they are made. A control character takes six bytes (`\u0001`), so
//! raw bytes are no measure of a reply.

/// The bytes of `text` as a JSON string, quotes included.
pub fn json_string_len(text: &str) -> usize {
    2 + text.bytes().map(escaped_len).sum::<usize>()
}

/// The longest start of `text` (cut on a character boundary) that takes at
/// most `max` bytes inside a JSON string, quotes not counted; its length.
pub fn prefix_within(text: &str, max: usize) -> usize {
    let mut size = 0;
    let mut end = 0;
    for (i, byte) in text.bytes().enumerate() {
        size += escaped_len(byte);
        if size > max {
            break;
        }
        if text.is_char_boundary(i + 1) {
            end = i + 1;
        }
    }
    end
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

    #[test]
    fn a_prefix_within_a_size_ends_on_a_character_and_fits() {
        assert_eq!(prefix_within("abc", 10), 3);
        assert_eq!(prefix_within("abc", 2), 2);
        assert_eq!(prefix_within("\u{1}\u{1}a", 11), 1);
        assert_eq!(prefix_within("\u{1}\u{1}a", 13), 3);
        // "é" is two bytes, written as they are: not cut in half.
        assert_eq!(prefix_within("aé", 2), 1);
        assert_eq!(prefix_within("aé", 3), 3);
        for max in 0..40 {
            let text = "x\u{1}\"é🦀\n";
            let end = prefix_within(text, max);
            assert!(json_string_len(&text[..end]) - 2 <= max, "{max}");
            let next = (end + 1..=text.len()).find(|&i| text.is_char_boundary(i));
            assert!(next.is_none_or(|next| json_string_len(&text[..next]) - 2 > max), "{max}");
        }
    }
}
