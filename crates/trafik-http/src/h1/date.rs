//! The `Date` header the own engine adds to an answer that has none, as hyper's server does
//! (RFC 9110 §6.6.1): formatted once a second per worker thread, copied from then on, so it
//! costs no allocation.

use std::cell::Cell;
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// `Sun, 06 Nov 1994 08:49:37 GMT`: IMF-fixdate is always this long.
const LENGTH: usize = 29;

thread_local! {
    /// The second last formatted, and its text.
    static CACHED: Cell<(u64, [u8; LENGTH])> = const { Cell::new((u64::MAX, [0; LENGTH])) };
}

/// Today's date, as of this second.
pub(crate) fn now() -> [u8; LENGTH] {
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHED.with(|cached| {
        let (at, text) = cached.get();
        if at == second {
            return text;
        }
        let mut text = [0u8; LENGTH];
        let _ = write!(&mut text[..], "{}", httpdate::HttpDate::from(now));
        cached.set((second, text));
        text
    })
}

/// Adds `date` as the last field of `head`, a complete head ending in its blank line.
pub fn add(head: &mut Vec<u8>) {
    super::head::add_field(head, b"date", &now());
}

/// Writes the `date` field line.
pub fn field(out: &mut Vec<u8>) {
    super::head::write_field(out, b"date", &now());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_date_goes_last_and_parses_back() {
        let mut head = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec();
        add(&mut head);
        let text = String::from_utf8(head).unwrap();
        let (before, date) = text.split_once("date: ").unwrap();
        assert_eq!(before, "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n");
        let date = date.strip_suffix("\r\n\r\n").unwrap();
        let parsed = httpdate::parse_http_date(date).unwrap();
        let off = SystemTime::now().duration_since(parsed).unwrap_or_default();
        assert!(off.as_secs() < 5, "{date}");
    }
}
