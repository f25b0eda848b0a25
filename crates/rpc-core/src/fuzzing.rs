//! Entry points for the fuzz targets in `fuzz/`, kept here so that a plain test
//! can run them too (see the tests below): the targets must never panic.

use bytes::BytesMut;
use tokio_util::codec::Decoder;

use crate::codec::{ContentLengthCodec, Frame, NdjsonCodec};
use crate::message::{self, Parsed};

/// Splits `data` at a point chosen by its first byte, decodes both parts, and
/// parses every message that comes out.
fn decode_all<D: Decoder<Item = Frame, Error = std::io::Error>>(mut decoder: D, data: &[u8]) {
    let split = data.first().map_or(0, |&b| b as usize % (data.len() + 1));
    let mut buf = BytesMut::new();
    for part in [&data[..split], &data[split..]] {
        buf.extend_from_slice(part);
        while let Ok(Some(frame)) = decoder.decode(&mut buf) {
            if let Frame::Message(bytes) = frame {
                parse(&bytes);
            }
        }
    }
    while let Ok(Some(frame)) = decoder.decode_eof(&mut buf) {
        if let Frame::Message(bytes) = frame {
            parse(&bytes);
        }
    }
}

pub fn ndjson(data: &[u8]) {
    decode_all(NdjsonCodec::new(256), data);
}

pub fn content_length(data: &[u8]) {
    decode_all(ContentLengthCodec::new(256), data);
}

/// Parses a message and serialises whatever reply it would get.
pub fn parse(data: &[u8]) {
    match message::parse(data, 16) {
        Parsed::Rejected(error) => drop(message::response_err(&message::Id::Null, &error)),
        Parsed::Single(Err(invalid)) => drop(message::response_err(&invalid.id, &invalid.error)),
        Parsed::Single(Ok(_)) => {}
        Parsed::Batch(items) => {
            for item in items {
                if let Err(invalid) = item {
                    drop(message::response_err(&invalid.id, &invalid.error));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::codec::test_support::random_chunks;

    /// A cheap stand-in for the fuzzer in every test run: mutated JSON-RPC-ish
    /// inputs through every entry point.
    #[test]
    fn fuzz_entry_points_survive_mutated_inputs() {
        let seeds: [&[u8]; 6] = [
            br#"{"jsonrpc":"2.0","method":"m","params":[1,{"a":"\u00e9"}],"id":1e5}"#,
            b"Content-Length: 30\r\nContent-Type: x; charset=utf-8\r\n\r\n{\"jsonrpc\":\"2.0\",\"method\":\"m\"}",
            b"[{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"result\":null},1,[],{}]\n\r\n{",
            b"content-length: 99999999999999999999\r\n\r\n",
            b"\xff\xfe\x00{\"id\":[",
            br#"{"jsonrpc":"2.0","error":{"code":1.5,"message":[]},"id":-0}"#,
        ];
        let mut n = 0u64;
        for seed in seeds {
            for round in 0..300 {
                let mut data = seed.to_vec();
                for (i, r) in random_chunks(round * 31 + n, 4, 256).into_iter().enumerate() {
                    if data.is_empty() {
                        break;
                    }
                    let at = (r * 7 + i) % data.len();
                    match r % 3 {
                        0 => data[at] = r as u8,
                        1 => data.insert(at, b"{}[]\":,\\\n0"[r % 10]),
                        _ => drop(data.remove(at)),
                    }
                }
                super::ndjson(&data);
                super::content_length(&data);
                super::parse(&data);
                n += 1;
            }
        }
    }
}
