//! HTTP/2 on the wire, as the tests that write frames by hand (a backend's, a client's) spell
//! it (RFC 9113 §6, RFC 7541).

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY: u8 = 0x20;

pub const PROTOCOL_ERROR: u32 = 0x1;
pub const STREAM_CLOSED: u32 = 0x5;
pub const REFUSED_STREAM: u32 = 0x7;
pub const COMPRESSION_ERROR: u32 = 0x9;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// A frame as sent: its type, flags, stream and payload.
pub type Frame = (u8, u8, u32, Vec<u8>);

pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut bytes = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    bytes.extend([kind, flags]);
    bytes.extend(stream.to_be_bytes());
    bytes.extend(payload);
    bytes
}

/// `:status: 200`, the static table's entry 8 (RFC 7541 Appendix A).
pub const STATUS_200: u8 = 0x88;

/// A literal field without indexing, with a new name (RFC 7541 §6.2.2), neither Huffman-coded.
pub fn field(name: &str, value: &str) -> Vec<u8> {
    let mut bytes = vec![0x00, name.len() as u8];
    bytes.extend(name.as_bytes());
    bytes.push(value.len() as u8);
    bytes.extend(value.as_bytes());
    bytes
}
