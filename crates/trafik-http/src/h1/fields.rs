//! A head written out for the next hop, as the fields a fields-only step reads and edits
//! ([`Fields`]): the own engine runs such steps (JWT, local rate limits, header edits) on the
//! bytes it forwards, so their routes stay on the fast path. Pure: no I/O.

use std::ops::Range;

use http::{HeaderName, HeaderValue, Response};

use super::head::{CACHE_FIELDS, add_field};
use crate::http::body::ProxyBody;
use crate::http::filter::{Exchange, Fields, Filter};

/// A route's steps on the own engine's fast path, where its fields-only ones run on the heads
/// it forwards, and what they know of the exchange.
pub struct Steps<'s> {
    pub filters: &'s [Box<dyn Filter>],
    pub exchange: Exchange<'s>,
}

/// A step's own answer to a request, and how many of the route's steps ran before it.
pub type Refused = (Box<Response<ProxyBody>>, usize);

impl Steps<'_> {
    /// Runs the fields-only steps, in the route's order, on the request head in `head`,
    /// recording their edits in `edits`; a step's own answer stops them.
    pub fn on_request(&self, head: &mut Vec<u8>, edits: &mut Vec<Edit>) -> Option<Refused> {
        let mut fields = HeadFields::recording(head, edits);
        self.filters
            .iter()
            .enumerate()
            .filter(|(_, filter)| filter.fields_only())
            .find_map(|(index, filter)| {
                let answer = filter.on_request_fields(&mut fields, &self.exchange)?;
                Some((answer, index))
            })
    }

    /// Shows trafik's own answer to the first `ran` steps, last first, as the pipeline does.
    pub fn on_response(&self, answer: &mut Response<ProxyBody>, ran: usize) {
        crate::http::filter::answer_back(self.filters, ran, answer, &self.exchange);
    }

    /// Shows a relayed answer's head, in `head`, to the fields-only steps, last first.
    pub fn on_response_fields(&self, head: &mut Vec<u8>) {
        let mut fields = HeadFields::new(head);
        for filter in self.filters.iter().rev().filter(|f| f.fields_only()) {
            filter.on_response_fields(&mut fields, &self.exchange);
        }
    }
}

/// A request head's fields as an answer from the store or a file reads them: the parse told
/// whether any of the fields such an answer depends on came
/// ([`RequestHead::cache_fields`](super::head::RequestHead::cache_fields)); without one, asking
/// for those names needs no search.
pub struct AnswerFields<'a> {
    fields: HeadFields<'a>,
    cache_fields: bool,
}

impl<'a> AnswerFields<'a> {
    pub fn new(head: &'a mut Vec<u8>, cache_fields: bool) -> Self {
        AnswerFields {
            fields: HeadFields::new(head),
            cache_fields,
        }
    }

    fn absent(&self, name: &HeaderName) -> bool {
        !self.cache_fields && CACHE_FIELDS.contains(name)
    }
}

impl trafik_cache::FieldValues for AnswerFields<'_> {
    fn each_value<'a>(&'a self, name: &HeaderName, each: &mut dyn FnMut(&'a [u8])) {
        if !self.absent(name) {
            self.fields.each_value(name, each);
        }
    }
}

impl Fields for AnswerFields<'_> {
    fn get(&self, name: &HeaderName) -> Option<&[u8]> {
        match self.absent(name) {
            true => None,
            false => self.fields.get(name),
        }
    }

    fn remove(&mut self, name: &HeaderName) {
        self.fields.remove(name);
    }

    fn insert(&mut self, name: HeaderName, value: HeaderValue) {
        self.fields.insert(name, value);
    }
}

/// One edit a step made to a request head, kept so that a head written anew for a retry
/// gets it again.
pub enum Edit {
    Remove(HeaderName),
    Insert(HeaderName, HeaderValue),
}

/// A written head (its start line, field lines, blank line) seen as fields; with `edits`, every
/// change is recorded there too.
pub struct HeadFields<'a> {
    head: &'a mut Vec<u8>,
    edits: Option<&'a mut Vec<Edit>>,
}

impl<'a> HeadFields<'a> {
    /// An answer's head.
    pub fn new(head: &'a mut Vec<u8>) -> Self {
        HeadFields { head, edits: None }
    }

    /// A request's head, its edits recorded in `edits`.
    pub fn recording(head: &'a mut Vec<u8>, edits: &'a mut Vec<Edit>) -> Self {
        HeadFields {
            head,
            edits: Some(edits),
        }
    }
}

/// Every value of a name, for the cache's key and `Cache-Control`: a hit is looked up on the
/// head as parsed, with no map built.
impl trafik_cache::FieldValues for HeadFields<'_> {
    fn each_value<'a>(&'a self, name: &HeaderName, each: &mut dyn FnMut(&'a [u8])) {
        let name = name.as_str().as_bytes();
        let head: &'a [u8] = self.head;
        for line in
            lines_from(head, fields_start(head)).filter(|line| named(&head[line.clone()], name))
        {
            each(value(head, line, name.len()));
        }
    }
}

impl Fields for HeadFields<'_> {
    fn get(&self, name: &HeaderName) -> Option<&[u8]> {
        let name = name.as_str().as_bytes();
        let line = lines_from(self.head, fields_start(self.head))
            .find(|line| named(&self.head[line.clone()], name))?;
        Some(value(self.head, line, name.len()))
    }

    fn remove(&mut self, name: &HeaderName) {
        remove(self.head, name);
        if let Some(edits) = self.edits.as_mut() {
            edits.push(Edit::Remove(name.clone()));
        }
    }

    fn insert(&mut self, name: HeaderName, value: HeaderValue) {
        insert(self.head, &name, &value);
        if let Some(edits) = self.edits.as_mut() {
            edits.push(Edit::Insert(name, value));
        }
    }

    fn insert_numbers(&mut self, numbers: &[(&HeaderName, u64)]) {
        if self.edits.is_some() {
            // A recorded edit keeps its value.
            return crate::http::filter::insert_as_values(self, numbers);
        }
        // One pass over the head takes every old line of the names out.
        remove_each(self.head, |line| {
            numbers
                .iter()
                .any(|(name, _)| named(line, name.as_str().as_bytes()))
        });
        for (name, number) in numbers {
            let mut digits = itoa::Buffer::new();
            let digits = digits.format(*number).as_bytes();
            add_field(self.head, name.as_str().as_bytes(), digits);
        }
    }
}

/// Makes the recorded `edits` again on a head written anew.
pub fn apply(head: &mut Vec<u8>, edits: &[Edit]) {
    for edit in edits {
        match edit {
            Edit::Remove(name) => remove(head, name),
            Edit::Insert(name, value) => insert(head, name, value),
        }
    }
}

fn remove(head: &mut Vec<u8>, name: &HeaderName) {
    let name = name.as_str().as_bytes();
    remove_each(head, |line| named(line, name));
}

/// Removes every field line (with its CRLF) that `unwanted` picks.
fn remove_each(head: &mut Vec<u8>, unwanted: impl Fn(&[u8]) -> bool) {
    let mut from = fields_start(head);
    loop {
        let found = lines_from(head, from).find(|line| unwanted(&head[line.clone()]));
        let Some(line) = found else { return };
        from = line.start;
        head.drain(line);
    }
}

fn insert(head: &mut Vec<u8>, name: &HeaderName, value: &HeaderValue) {
    remove(head, name);
    add_field(head, name.as_str().as_bytes(), value.as_bytes());
}

/// Where the field lines start: after the start line.
fn fields_start(head: &[u8]) -> usize {
    memchr::memchr(b'\n', head).map_or(head.len(), |end| end + 1)
}

/// The field lines of a written head from `at` (a line's start) on, each with its CRLF, up to
/// the blank line.
fn lines_from(head: &[u8], mut at: usize) -> impl Iterator<Item = Range<usize>> + '_ {
    std::iter::from_fn(move || {
        let end = at + memchr::memchr(b'\n', head.get(at..)?)? + 1;
        if end - at <= 2 {
            return None;
        }
        let line = at..end;
        at = end;
        Some(line)
    })
}

/// Whether `line` is a field named `name` (lowercase): the name, then its colon.
fn named(line: &[u8], name: &[u8]) -> bool {
    line.len() > name.len()
        && line[name.len()] == b':'
        && line[..name.len()].eq_ignore_ascii_case(name)
}

/// The value of the field `line` whose name is `name_length` bytes long, without the
/// whitespace around it.
fn value(head: &[u8], line: Range<usize>, name_length: usize) -> &[u8] {
    let value = &head[line.start + name_length + 1..line.end];
    value.trim_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &[u8] = b"GET /a HTTP/1.1\r\nhost: x\r\nX-User: forged\r\nauthorization:  Bearer t \r\nx-user: again\r\n\r\n";

    #[test]
    fn fields_are_found_by_name_whatever_its_case_and_read_without_surrounding_space() {
        let mut head = HEAD.to_vec();
        let fields = HeadFields::new(&mut head);
        let user = HeaderName::from_static("x-user");
        assert_eq!(fields.get(&user), Some(&b"forged"[..]));
        assert_eq!(
            fields.get(&http::header::AUTHORIZATION),
            Some(&b"Bearer t"[..])
        );
        assert_eq!(fields.get(&HeaderName::from_static("accept")), None);
    }

    #[test]
    fn every_value_of_a_name_comes_in_order() {
        use trafik_cache::FieldValues;
        let mut head = HEAD.to_vec();
        let fields = HeadFields::new(&mut head);
        let mut users = Vec::new();
        fields.each_value(&HeaderName::from_static("x-user"), &mut |v| users.push(v));
        assert_eq!(users, [&b"forged"[..], &b"again"[..]]);
    }

    #[test]
    fn removing_a_name_removes_every_line_of_it_and_inserting_replaces_them() {
        let mut head = HEAD.to_vec();
        let user = HeaderName::from_static("x-user");
        HeadFields::new(&mut head).insert(user.clone(), HeaderValue::from_static("M7"));
        assert_eq!(
            head,
            b"GET /a HTTP/1.1\r\nhost: x\r\nauthorization:  Bearer t \r\nx-user: M7\r\n\r\n"
        );
        HeadFields::new(&mut head).remove(&http::header::AUTHORIZATION);
        assert_eq!(head, b"GET /a HTTP/1.1\r\nhost: x\r\nx-user: M7\r\n\r\n");
    }

    #[test]
    fn recorded_edits_made_again_give_the_same_head() {
        let (mut edited, mut edits) = (HEAD.to_vec(), Vec::new());
        let mut fields = HeadFields::recording(&mut edited, &mut edits);
        fields.remove(&HeaderName::from_static("x-user"));
        fields.insert(
            HeaderName::from_static("x-claim"),
            HeaderValue::from_static("sub"),
        );
        fields.remove(&http::header::AUTHORIZATION);
        let mut again = HEAD.to_vec();
        apply(&mut again, &edits);
        assert_eq!(again, edited);
        assert_eq!(again, b"GET /a HTTP/1.1\r\nhost: x\r\nx-claim: sub\r\n\r\n");
    }

    #[test]
    fn numbers_replace_every_line_of_their_names_and_are_recorded_on_a_request() {
        let limit = HeaderName::from_static("ratelimit-limit");
        let mut head =
            b"HTTP/1.1 200 OK\r\nRateLimit-Limit: 9\r\nx: y\r\nratelimit-limit: 8\r\n\r\n".to_vec();
        let reset = HeaderName::from_static("ratelimit-reset");
        HeadFields::new(&mut head).insert_numbers(&[(&limit, 100_000_000), (&reset, 1)]);
        assert_eq!(
            head,
            b"HTTP/1.1 200 OK\r\nx: y\r\nratelimit-limit: 100000000\r\nratelimit-reset: 1\r\n\r\n"
        );
        let (mut edited, mut edits) = (HEAD.to_vec(), Vec::new());
        HeadFields::recording(&mut edited, &mut edits).insert_numbers(&[(&limit, 7)]);
        let mut again = HEAD.to_vec();
        apply(&mut again, &edits);
        assert_eq!(again, edited);
        assert!(edited.ends_with(b"\r\nratelimit-limit: 7\r\n\r\n"));
    }

    #[test]
    fn an_answer_without_fields_gets_one_before_its_blank_line() {
        let mut head = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        let limit = HeaderName::from_static("ratelimit-limit");
        HeadFields::new(&mut head).insert(limit.clone(), HeaderValue::from(5));
        assert_eq!(head, b"HTTP/1.1 200 OK\r\nratelimit-limit: 5\r\n\r\n");
        assert_eq!(HeadFields::new(&mut head).get(&limit), Some(&b"5"[..]));
    }
}
