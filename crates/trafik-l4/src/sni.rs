//! The server name (SNI) a TLS client asks for, read from its ClientHello without decrypting
//! anything (RFC 8446 §4.1.2 and RFC 6066 §3), so a passthrough listener can route on it.
//!
//! The bytes come from anyone, so every length is checked against what is there before it is
//! used, the hello may not exceed [`MAX_CLIENT_HELLO`], and anything that is not a well-formed
//! ClientHello is refused: the caller closes the connection. The parser sees bytes only; the
//! caller reads them ([`read_client_hello`]) under a timeout.

use tokio::io::{AsyncRead, AsyncReadExt};

/// The longest ClientHello accepted. Real ones are a few hundred bytes to about 2 KiB (with
/// post-quantum key shares); the cap keeps what a client can make trafik buffer small.
pub const MAX_CLIENT_HELLO: usize = 16 * 1024;

/// TLS record content type `handshake`.
const HANDSHAKE_RECORD: u8 = 22;
/// Handshake message type `client_hello`.
const CLIENT_HELLO: u8 = 1;
/// Extension type `server_name`.
const SERVER_NAME_EXTENSION: u16 = 0;
/// Name type `host_name`, the only one defined.
const HOST_NAME: u8 = 0;
/// A TLS record's payload is at most 2^14 bytes (RFC 8446 §5.1).
const MAX_RECORD: usize = 16 * 1024;
const RECORD_HEADER: usize = 5;
/// Records one hello may span. A hello of at most [`MAX_CLIENT_HELLO`] bytes needs two; more are
/// allowed, but not so many that their headers make the buffer large.
const MAX_RECORDS: usize = 16;
const HANDSHAKE_HEADER: usize = 4;

/// What the bytes received so far hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Hello {
    /// A ClientHello has begun; more bytes are needed.
    Incomplete,
    /// A whole ClientHello, and the host name it asks for, in lower case (`None` when it names
    /// none).
    Complete(Option<String>),
}

/// Why a connection is not relayed.
#[derive(Debug, PartialEq, Eq)]
pub enum HelloError {
    /// The bytes are not a well-formed ClientHello of at most [`MAX_CLIENT_HELLO`] bytes; says
    /// which part is wrong.
    Malformed(&'static str),
    /// The client closed the connection (or it broke) before its hello was complete.
    Ended,
}

/// Reads from `stream` until a whole ClientHello has arrived. Returns every byte read, to be
/// relayed to the backend unchanged, and the host name.
///
/// # Cancel safety
///
/// Not cancel safe: bytes read are lost when the future is dropped, and so is the connection
/// (the caller's timeout closes it).
pub async fn read_client_hello<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> Result<(Vec<u8>, Option<String>), HelloError> {
    let mut received = Vec::with_capacity(2048);
    loop {
        match parse(&received)? {
            Hello::Complete(name) => return Ok((received, name)),
            Hello::Incomplete => {}
        }
        // `parse` refuses a hello over its cap or spread over too many records before it is
        // whole, so `received` stays bounded (about twice the cap).
        let read = stream
            .read_buf(&mut received)
            .await
            .map_err(|_| HelloError::Ended)?;
        if read == 0 {
            return Err(HelloError::Ended);
        }
    }
}

/// Parses the start of a TLS connection: as many handshake records as it takes to hold the
/// ClientHello. Cheap to call again with more bytes: until the hello is whole, only record and
/// handshake headers are read.
pub fn parse(received: &[u8]) -> Result<Hello, HelloError> {
    use HelloError::Malformed;
    let mut fragments: Vec<&[u8]> = Vec::new();
    let mut handshake_bytes = 0;
    let mut message_length = None;
    let mut rest = received;
    let length = loop {
        // The hello's length is known once its first four bytes are in.
        if let Some(length) = message_length
            && handshake_bytes >= HANDSHAKE_HEADER + length
        {
            break length;
        }
        let Some((header, after)) = rest.split_at_checked(RECORD_HEADER) else {
            return check_prefix(rest).map(|()| Hello::Incomplete);
        };
        check_record_header(header)?;
        let record_length = usize::from(u16::from_be_bytes([header[3], header[4]]));
        // The part of the record that is in: enough, even unfinished, to refuse a wrong hello
        // from its first bytes.
        let fragment = &after[..record_length.min(after.len())];
        fragments.push(fragment);
        if fragments.len() > MAX_RECORDS {
            return Err(Malformed("the ClientHello is split into too many records"));
        }
        handshake_bytes += fragment.len();
        if message_length.is_none() && handshake_bytes >= HANDSHAKE_HEADER {
            let head: Vec<u8> = fragments
                .iter()
                .flat_map(|f| f.iter())
                .take(4)
                .copied()
                .collect();
            if head[0] != CLIENT_HELLO {
                return Err(Malformed(
                    "the first handshake message is not a ClientHello",
                ));
            }
            let length =
                (usize::from(head[1]) << 16) | (usize::from(head[2]) << 8) | usize::from(head[3]);
            if length > MAX_CLIENT_HELLO {
                return Err(Malformed("the ClientHello is longer than trafik accepts"));
            }
            message_length = Some(length);
        }
        if fragment.len() < record_length {
            return Ok(Hello::Incomplete);
        }
        rest = &after[record_length..];
    };
    // In bounds: the loop ends only once the fragments hold the header and `length` bytes.
    let message: Vec<u8> = fragments.concat();
    server_name(&message[HANDSHAKE_HEADER..HANDSHAKE_HEADER + length]).map(Hello::Complete)
}

/// Refuses at once what cannot start a TLS connection, such as plain HTTP, before waiting for
/// a whole record header.
fn check_prefix(partial: &[u8]) -> Result<(), HelloError> {
    match partial {
        [] => Ok(()),
        [kind, ..] if *kind != HANDSHAKE_RECORD => {
            Err(HelloError::Malformed("not a TLS handshake record"))
        }
        [_, major, ..] if *major != 3 => Err(HelloError::Malformed("not a TLS record version")),
        _ => Ok(()),
    }
}

fn check_record_header(header: &[u8]) -> Result<(), HelloError> {
    check_prefix(header)?;
    let length = usize::from(u16::from_be_bytes([header[3], header[4]]));
    if length == 0 || length > MAX_RECORD {
        return Err(HelloError::Malformed(
            "a handshake record of impossible length",
        ));
    }
    Ok(())
}

/// The host name in a ClientHello's body (after the handshake header).
fn server_name(body: &[u8]) -> Result<Option<String>, HelloError> {
    use HelloError::Malformed;
    let mut hello = Reader(body);
    hello.take(2 + 32, "legacy_version and random")?;
    let session_id = hello.vector8("legacy_session_id")?;
    if session_id.len() > 32 {
        return Err(Malformed("legacy_session_id is longer than 32 bytes"));
    }
    let suites = hello.vector16("cipher_suites")?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err(Malformed("cipher_suites is empty or of odd length"));
    }
    if hello.vector8("legacy_compression_methods")?.is_empty() {
        return Err(Malformed("legacy_compression_methods is empty"));
    }
    // Before TLS 1.3, a hello may end here: no extensions, so no name.
    if hello.0.is_empty() {
        return Ok(None);
    }
    let mut extensions = Reader(hello.vector16("extensions")?);
    hello.finish("bytes after the ClientHello's extensions")?;
    let mut seen: Vec<u16> = Vec::new();
    let mut name = None;
    while !extensions.0.is_empty() {
        let kind = extensions.u16("an extension's type")?;
        let data = extensions.vector16("an extension")?;
        if seen.contains(&kind) {
            // RFC 8446 §4.2: no two extensions of one type.
            return Err(Malformed("an extension appears twice"));
        }
        seen.push(kind);
        if kind == SERVER_NAME_EXTENSION {
            name = host_name(data)?;
        }
    }
    Ok(name)
}

/// The `host_name` entry of a `server_name` extension's data (RFC 6066 §3).
fn host_name(data: &[u8]) -> Result<Option<String>, HelloError> {
    use HelloError::Malformed;
    let mut extension = Reader(data);
    let mut list = Reader(extension.vector16("server_name_list")?);
    extension.finish("bytes after the server_name list")?;
    let mut found = None;
    while !list.0.is_empty() {
        let kind = list.u8("a server name's type")?;
        let name = list.vector16("a server name")?;
        if kind != HOST_NAME {
            continue;
        }
        if found.is_some() {
            return Err(Malformed("two host names"));
        }
        let valid = !name.is_empty()
            && name
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
        if !valid {
            return Err(Malformed(
                "a host name with characters DNS names do not have",
            ));
        }
        let text = String::from_utf8_lossy(name).to_ascii_lowercase();
        found = Some(text.trim_end_matches('.').to_owned());
    }
    Ok(found)
}

/// Reads a byte string front to back; every read checks the length first.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, length: usize, what: &'static str) -> Result<&'a [u8], HelloError> {
        let (taken, rest) = self
            .0
            .split_at_checked(length)
            .ok_or(HelloError::Malformed(what))?;
        self.0 = rest;
        Ok(taken)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, HelloError> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, HelloError> {
        let bytes = self.take(2, what)?;
        Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
    }

    /// A vector with a one-byte length in front.
    fn vector8(&mut self, what: &'static str) -> Result<&'a [u8], HelloError> {
        let length = self.u8(what)?;
        self.take(usize::from(length), what)
    }

    /// A vector with a two-byte length in front.
    fn vector16(&mut self, what: &'static str) -> Result<&'a [u8], HelloError> {
        let length = self.u16(what)?;
        self.take(usize::from(length), what)
    }

    /// Refuses bytes left over after the last field, saying so with `leftover`.
    fn finish(&self, leftover: &'static str) -> Result<(), HelloError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(HelloError::Malformed(leftover))
        }
    }
}

#[cfg(test)]
mod tests;
