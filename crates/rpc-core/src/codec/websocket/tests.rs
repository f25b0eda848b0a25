//! The WebSocket transports over in-memory pipes, both kinds side by side.

use std::task::{Context, Poll, Waker};

use futures_util::{SinkExt, StreamExt};
use tokio::io::DuplexStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::protocol::frame::FrameHeader;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data as OpData, OpCode};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::server::{Direct, unmasked, unmasked_text};
use super::{config, server_transport, transport};
use crate::codec::{Frame, Outbound, Transport};
use crate::message::Kind;

type Client = WebSocketStream<DuplexStream>;

/// A server transport of each kind (driven directly, and through
/// tokio-tungstenite) with a client on the other end of a pipe of
/// `pipe` bytes each way.
async fn pairs(max_message: usize, pipe: usize) -> [(&'static str, Transport, Client); 2] {
    let (a, b) = tokio::io::duplex(pipe);
    let direct = server_transport(a, max_message);
    let direct_client = WebSocketStream::from_raw_socket(b, Role::Client, None).await;
    let (a, b) = tokio::io::duplex(pipe);
    let split = WebSocketStream::from_raw_socket(a, Role::Server, Some(config(max_message))).await;
    let split_client = WebSocketStream::from_raw_socket(b, Role::Client, None).await;
    [("direct", direct, direct_client), ("tokio-tungstenite", transport(split), split_client)]
}

#[tokio::test]
async fn text_frames_are_messages_and_replies_are_text() {
    for (kind, mut t, mut client) in pairs(1024, 1 << 16).await {
        client.send(Message::text(r#"{"a":1}"#)).await.unwrap();
        assert_eq!(t.reader.next().await.unwrap().unwrap(), Frame::Text(r#"{"a":1}"#.into()), "{kind}");
        t.writer.send(Outbound::message(Kind::Response, r#"{"b":2}"#)).await.unwrap();
        assert_eq!(client.next().await.unwrap().unwrap(), Message::text(r#"{"b":2}"#), "{kind}");
    }
}

#[tokio::test]
async fn binary_frames_are_unsupported_with_1003() {
    for (kind, mut t, mut client) in pairs(1024, 1 << 16).await {
        client.send(Message::binary(vec![1, 2, 3])).await.unwrap();
        let frame = t.reader.next().await.unwrap().unwrap();
        assert!(matches!(frame, Frame::Unsupported { close_code: 1003, .. }), "{kind}: {frame:?}");
        assert!(t.reader.next().await.is_none(), "{kind}");
    }
}

#[tokio::test]
async fn oversized_messages_are_unsupported_with_1009() {
    for (kind, mut t, mut client) in pairs(1024, 1 << 16).await {
        client.send(Message::text("x".repeat(4096))).await.unwrap();
        let frame = t.reader.next().await.unwrap().unwrap();
        assert!(matches!(frame, Frame::Unsupported { close_code: 1009, .. }), "{kind}: {frame:?}");
    }
}

#[tokio::test]
async fn invalid_utf8_is_unsupported_with_1007() {
    for (kind, mut t, mut client) in pairs(1024, 1 << 16).await {
        let frame = tokio_tungstenite::tungstenite::protocol::frame::Frame::message(
            vec![b'"', 0xff, b'"'],
            tokio_tungstenite::tungstenite::protocol::frame::coding::OpCode::Data(
                tokio_tungstenite::tungstenite::protocol::frame::coding::Data::Text,
            ),
            true,
        );
        client.send(Message::Frame(frame)).await.unwrap();
        let frame = t.reader.next().await.unwrap().unwrap();
        assert!(matches!(frame, Frame::Unsupported { close_code: 1007, .. }), "{kind}: {frame:?}");
    }
}

#[tokio::test]
async fn pings_are_answered_even_when_the_write_side_is_full() {
    // A pipe of 64 bytes: the pongs for 200 pings cannot be written while
    // the client is not reading, so answering blocks, and the reader must
    // be woken to go on when the client reads again. tungstenite answers
    // the latest ping it has read (RFC 6455 allows skipping older ones):
    // the pongs come in order and the last ping is answered.
    for (kind, t, client) in pairs(1024, 64).await {
        let (mut client_sink, mut client_stream) = client.split();
        let mut reader = t.reader;
        let server = tokio::spawn(async move {
            let (mut alive, mut texts) = (0, 0);
            while let Some(frame) = reader.next().await {
                match frame {
                    Ok(Frame::Alive) => alive += 1,
                    Ok(Frame::Text(_)) => texts += 1,
                    other => panic!("{other:?}"),
                }
            }
            (alive, texts)
        });
        let pinger = tokio::spawn(async move {
            for n in 0..200u32 {
                client_sink.send(Message::Ping(n.to_be_bytes().to_vec().into())).await.unwrap();
            }
            client_sink.send(Message::text("done")).await.unwrap();
            client_sink
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let mut last = None;
        while last != Some(199) {
            let message = tokio::time::timeout(std::time::Duration::from_secs(5), client_stream.next())
                .await
                .unwrap_or_else(|_| panic!("{kind}: the last pong was {last:?}"));
            let Message::Pong(payload) = message.unwrap().unwrap() else { panic!("{kind}: not a pong") };
            let n = u32::from_be_bytes(payload[..].try_into().unwrap());
            assert!(last.is_none_or(|last| n > last), "{kind}: pong {n} after {last:?}");
            last = Some(n);
        }
        let mut client = pinger.await.unwrap().reunite(client_stream).unwrap();
        client.close(None).await.unwrap();
        assert_eq!(server.await.unwrap(), (200, 1), "{kind}");
        drop(t.writer);
    }
}

#[tokio::test]
async fn a_reply_larger_than_the_pipe_is_written_in_full() {
    for (kind, mut t, mut client) in pairs(1 << 20, 1024).await {
        let big = format!(r#"{{"b":"{}"}}"#, "y".repeat(300_000));
        let expected = big.clone();
        let reading = tokio::spawn(async move { client.next().await.unwrap().unwrap() });
        let limit = std::time::Duration::from_secs(5);
        let sent = tokio::time::timeout(limit, t.writer.send(Outbound::message(Kind::Response, big))).await;
        sent.unwrap_or_else(|_| panic!("{kind}: the writer was never woken")).unwrap();
        assert_eq!(tokio::time::timeout(limit, reading).await.unwrap().unwrap(), Message::text(expected), "{kind}");
    }
}

#[tokio::test]
async fn a_close_from_the_client_ends_the_input_and_is_answered() {
    for (kind, mut t, mut client) in pairs(1024, 1 << 16).await {
        client.close(None).await.unwrap();
        assert!(t.reader.next().await.is_none(), "{kind}");
        // tungstenite queued the answering close; the writer flushes it.
        let _ = t.writer.close().await;
        let answer = tokio::time::timeout(std::time::Duration::from_secs(5), client.next()).await.unwrap();
        assert!(matches!(answer, Some(Ok(Message::Close(_)))), "{kind}: {answer:?}");
    }
}

#[tokio::test]
async fn on_demand_reads_big_messages_and_holds_no_buffer_when_idle() {
    let (a, b) = tokio::io::duplex(1 << 16);
    let mut server = Direct::new(a, 4 << 20);
    let mut client = WebSocketStream::from_raw_socket(b, Role::Client, None).await;
    let big = "x".repeat(3 << 20);
    let writer = tokio::spawn(async move {
        client.send(Message::text(big)).await.unwrap();
        client.send(Message::text("small")).await.unwrap();
        client
    });
    let Message::Text(text) = server.next().await.unwrap().unwrap() else { panic!() };
    assert_eq!(text.len(), 3 << 20);
    assert!(text.bytes().all(|b| b == b'x'));
    assert_eq!(server.next().await.unwrap().unwrap(), Message::text("small"));
    let mut client = writer.await.unwrap();
    // The next read finds nothing and gives the buffer back.
    assert!(futures_util::FutureExt::now_or_never(server.next()).is_none());
    assert!(!server.shared.state.lock().io.holds_buffer());
    // ...and a later message is read as before.
    client.send(Message::text(r#"{"a":1}"#)).await.unwrap();
    assert_eq!(server.next().await.unwrap().unwrap(), Message::text(r#"{"a":1}"#));
    // Over the limit: refused from its header.
    tokio::spawn(async move { client.send(Message::text("x".repeat(5 << 20))).await });
    assert!(matches!(server.next().await.unwrap(), Err(WsError::Capacity(_))));
}

/// A client's frame as it is on the wire: masked, unless `mask` is `None`.
fn client_frame(opcode: OpCode, fin: bool, rsv1: bool, mask: Option<[u8; 4]>, payload: &[u8]) -> Vec<u8> {
    let header = FrameHeader { is_final: fin, rsv1, rsv2: false, rsv3: false, opcode, mask };
    let mut wire = Vec::new();
    header.format(payload.len() as u64, &mut wire).unwrap();
    match mask {
        Some(mask) => wire.extend(unmasked(payload, mask)),
        None => wire.extend_from_slice(payload),
    }
    wire
}

fn text(payload: &str) -> Vec<u8> {
    client_frame(OpCode::Data(OpData::Text), true, false, Some([1, 0x80, 0x33, 0xfe]), payload.as_bytes())
}

fn frame(opcode: OpCode, fin: bool, payload: &[u8]) -> Vec<u8> {
    client_frame(opcode, fin, false, Some([9, 8, 7, 6]), payload)
}

#[test]
fn unmasking_takes_the_mask_off_every_byte() {
    let mask = [0x12, 0x34, 0x56, 0x78];
    for len in 0..13 {
        let payload: Vec<u8> = (0..len as u8).collect();
        let expected: Vec<u8> = payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]).collect();
        assert_eq!(unmasked(&payload, mask), expected, "{len} bytes");
    }
}

/// A text payload unmasked is its text exactly when it is UTF-8, wherever
/// a byte past ASCII falls: in a word of eight, in the rest, or nowhere.
#[test]
fn unmasked_text_is_the_text_exactly_when_it_is_utf8() {
    let mask = [0x81, 0x00, 0x7f, 0xff];
    for len in 0..24 {
        let ascii: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
        let mut payloads = vec![ascii.clone()];
        for at in 0..len {
            for odd in [&[0xc3, 0xa9][..], &[0xff], &[0xc3, 0x28], &[0x80], &[0x7f]] {
                let mut payload = ascii.clone();
                payload.splice(at..at + 1, odd.iter().copied());
                payloads.push(payload);
            }
        }
        for payload in payloads {
            let masked = unmasked(&payload, mask);
            let expected = String::from_utf8(payload.clone()).ok();
            assert_eq!(unmasked_text(&masked, mask), expected, "{payload:?}");
        }
    }
}

/// Whole text frames are taken from the input without tungstenite, and
/// what is taken is exactly the frame.
#[test]
fn whole_text_frames_are_taken_as_they_are() {
    let input = [text(r#"{"a":1}"#), text("é"), text(&"x".repeat(200))].concat();
    let direct = Direct::new(std::io::Cursor::new(input), 1024);
    let mut state = direct.shared.state.lock();
    let mut cx = Context::from_waker(Waker::noop());
    // The first goes through tungstenite (nothing was read yet), which
    // is handed that frame and no more.
    assert_eq!(state.poll_read(&mut cx).map(Result::unwrap), Poll::Ready(Message::text(r#"{"a":1}"#)));
    let rest = state.io.unread().len();
    assert_eq!(rest, text("é").len() + text(&"x".repeat(200)).len());
    assert_eq!(state.whole_text(), Some("é".into()));
    assert_eq!(state.io.unread().len(), rest - text("é").len());
    assert_eq!(state.whole_text(), Some("x".repeat(200).into()));
    assert!(state.io.unread().is_empty());
}

/// Every kind of frame, alone and mixed with whole text frames, cut into
/// reads of every size: the server transport reads what tokio-tungstenite
/// does (the same check as the `websocket` fuzz target's).
#[test]
fn the_server_transport_reads_what_tungstenite_reads() {
    let (text_op, continue_op) = (OpCode::Data(OpData::Text), OpCode::Data(OpData::Continue));
    let ping = OpCode::Control(tokio_tungstenite::tungstenite::protocol::frame::coding::Control::Ping);
    let close = OpCode::Control(tokio_tungstenite::tungstenite::protocol::frame::coding::Control::Close);
    let binary = OpCode::Data(OpData::Binary);
    let inputs: Vec<Vec<u8>> = vec![
        [text("a"), text(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), frame(ping, true, b"p"), text("b")].concat(),
        [text("a"), frame(text_op, false, b"ab"), frame(ping, true, b""), frame(continue_op, true, b"cd"), text("x")]
            .concat(),
        [text("a"), frame(text_op, false, b"ab"), text("not a continuation")].concat(),
        [text("a"), frame(text_op, false, b"ab"), frame(ping, true, b""), text("not a continuation")].concat(),
        [text("a"), frame(continue_op, true, b"no start"), text("b")].concat(),
        [text("a"), client_frame(text_op, true, false, None, b"unmasked")].concat(),
        [text("a"), client_frame(text_op, true, false, None, b"unmasked"), b"zzzz".to_vec()].concat(),
        [text("a"), client_frame(text_op, true, true, Some([1, 2, 3, 4]), b"rsv1")].concat(),
        [text("a"), frame(text_op, true, b"\"\xff\""), text("b")].concat(),
        [
            text("a"),
            frame(text_op, false, "é".as_bytes()[..1].as_ref()),
            frame(continue_op, true, &"é".as_bytes()[1..]),
        ]
        .concat(),
        [text("a"), text(&"x".repeat(300)), text("b")].concat(),
        [text("a"), text(&"y".repeat(250)), text(&"z".repeat(126))].concat(),
        [text("a"), frame(binary, true, b"bin"), text("b")].concat(),
        [text("a"), frame(OpCode::Data(OpData::Reserved(3)), true, b"r"), text("b")].concat(),
        [text("a"), frame(ping, true, &[b'p'; 126]), text("b")].concat(),
        [text("a"), frame(close, true, &[3, 232]), text("after the close")].concat(),
        [text("a"), text("b")[..5].to_vec()].concat(),
    ];
    for (n, input) in inputs.iter().enumerate() {
        for read_size in (1..=20).chain([63, 64, 4096]) {
            let frames = crate::fuzzing::websocket_both_ways(input, read_size);
            assert_eq!(frames.first(), Some(&Ok(Frame::Text("a".into()))), "input {n}, reads of {read_size}");
        }
    }
}

/// Messages of every length class (7, 16 and 64-bit), owned and
/// borrowed, arrive whole and in order, and a close sent after them
/// arrives after them.
#[tokio::test]
async fn replies_of_every_size_arrive_in_order_before_the_close() {
    let sizes = [0, 1, 125, 126, 65_535, 65_536, 200_000, 3];
    for (kind, t, mut client) in pairs(1 << 20, 4096).await {
        let mut writer = t.writer;
        let sending = tokio::spawn(async move {
            for (n, size) in sizes.into_iter().enumerate() {
                let json = format!("\"{}\"", char::from(b'a' + n as u8).to_string().repeat(size));
                if n % 2 == 0 {
                    writer.send(Outbound::message(Kind::Response, json)).await.unwrap();
                } else {
                    std::future::poll_fn(|cx| writer.as_mut().poll_ready(cx)).await.unwrap();
                    writer.as_mut().start_send_json(Kind::Response, json.as_bytes()).unwrap();
                }
            }
            writer.send(Outbound::Close { code: 4001, reason: "done".into() }).await.unwrap();
            writer
        });
        for (n, size) in sizes.into_iter().enumerate() {
            let expected = format!("\"{}\"", char::from(b'a' + n as u8).to_string().repeat(size));
            let message = tokio::time::timeout(std::time::Duration::from_secs(5), client.next()).await;
            assert_eq!(message.unwrap().unwrap().unwrap(), Message::text(expected), "{kind}: message {n}");
        }
        let Message::Close(Some(frame)) = client.next().await.unwrap().unwrap() else { panic!("{kind}: no close") };
        assert_eq!(u16::from(frame.code), 4001, "{kind}");
        drop(sending.await.unwrap());
    }
}

#[tokio::test]
async fn close_carries_the_code() {
    for (kind, mut t, mut client) in pairs(1024, 1 << 16).await {
        t.writer.send(Outbound::Close { code: 4001, reason: "replaced".into() }).await.unwrap();
        let Message::Close(Some(frame)) = client.next().await.unwrap().unwrap() else { panic!("{kind}") };
        assert_eq!(u16::from(frame.code), 4001, "{kind}");
        assert_eq!(frame.reason.as_str(), "replaced", "{kind}");
    }
}

/// A socket that takes at most `piece` bytes a write and counts them.
struct Pieces {
    piece: usize,
    taken: usize,
}

impl tokio::io::AsyncWrite for Pieces {
    fn poll_write(mut self: std::pin::Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let n = buf.len().min(self.piece);
        self.taken += n;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A large frame written a socket-sized piece at a time costs its size, not
/// its size for each piece: 48 MiB in 16 KiB pieces moved the rest of the
/// buffer 3 072 times (about 75 GB), and now moves nothing.
#[test]
fn a_large_frame_written_in_small_pieces_is_not_moved_for_each() {
    const MESSAGE: usize = 48 << 20;
    let mut io = super::ReadOnDemand::new(Pieces { piece: 16 * 1024, taken: 0 });
    io.queue_text(&vec![b'x'; MESSAGE]);
    let started = std::time::Instant::now();
    let mut cx = Context::from_waker(Waker::noop());
    assert!(io.poll_write_queued(&mut cx).is_ready());
    let took = started.elapsed();
    assert!(io.queued() == 0 && (MESSAGE..MESSAGE + 16).contains(&io.socket().taken));
    assert!(took < std::time::Duration::from_secs(2), "48 MiB in 16 KiB pieces took {took:?}");
}
