//! A message's header fields as the cache reads them, wherever they are held: an `http`
//! `HeaderMap`, or the head an HTTP/1 codec parsed, read in place without building a map.

use http::{HeaderMap, HeaderName};

/// The values of a message's header fields, by name.
pub trait FieldValues {
    /// Calls `each` with every value of the field `name`, in the order they came, without the
    /// whitespace around it.
    fn each_value<'a>(&'a self, name: &HeaderName, each: &mut dyn FnMut(&'a [u8]));
}

impl FieldValues for HeaderMap {
    fn each_value<'a>(&'a self, name: &HeaderName, each: &mut dyn FnMut(&'a [u8])) {
        for value in self.get_all(name) {
            each(value.as_bytes());
        }
    }
}

/// A value as text, when it is visible ASCII, spaces and tabs (what `HeaderValue::to_str`
/// accepts); the cache ignores other values, as it ignores unparsable ones.
pub fn visible(value: &[u8]) -> Option<&str> {
    value
        .iter()
        .all(|&byte| byte == b'\t' || (b' '..=b'~').contains(&byte))
        .then(|| std::str::from_utf8(value).ok())
        .flatten()
}
