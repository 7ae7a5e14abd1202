//! The gatekeeper's rules (lesson 16): judge the request itself — its path, the shape of its
//! query and JSON body, its size, the form of its headers and token — before anything reaches
//! an application. Whether a record exists or who owns it needs the application's data and stays
//! there.

use jsonschema::Validator;
use regex::Regex;
use serde_json::{Map, Value};

/// One kind of check, as counted in `/status` and `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Check {
    Path,
    Header,
    Token,
    Query,
    Size,
    Body,
}

impl Check {
    pub const ALL: [Check; 6] = [
        Check::Path,
        Check::Header,
        Check::Token,
        Check::Query,
        Check::Size,
        Check::Body,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Check::Path => "path",
            Check::Header => "header",
            Check::Token => "token",
            Check::Query => "query",
            Check::Size => "size",
            Check::Body => "body",
        }
    }

    /// The status a refusal answers with: unknown path 404, a malformed token 401, a body over
    /// the limit 413, any other malformed input 400.
    pub fn status(self) -> u16 {
        match self {
            Check::Path => 404,
            Check::Token => 401,
            Check::Size => 413,
            Check::Header | Check::Query | Check::Body => 400,
        }
    }
}

/// Why the gate refused a request: the check and a one-line reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub check: Check,
    pub reason: String,
}

impl Refusal {
    fn new(check: Check, reason: impl Into<String>) -> Self {
        Refusal {
            check,
            reason: reason.into(),
        }
    }
}

/// A header whose value must match a pattern (and must be present).
pub struct HeaderRule {
    pub name: String,
    pub pattern: Regex,
}

/// A route's gate.
#[derive(Default)]
pub struct Rules {
    /// Paths let through, exactly; empty lets any path through.
    pub paths: Vec<String>,
    pub headers: Vec<HeaderRule>,
    /// The form of the bearer token in `Authorization` (not its signature: that is the auth
    /// stage's).
    pub token: Option<Regex>,
    /// Schema of the query string, read as an object of strings (the last of repeated names).
    pub query_schema: Option<Validator>,
    /// Schema of a JSON body, buffered up to the body limit.
    pub body_schema: Option<Validator>,
}

/// Compiles a JSON Schema, its numeric limits compared exactly (`decimal`); `$ref`s to other
/// documents are not fetched.
pub fn schema(document: &Value) -> Result<Validator, String> {
    crate::decimal::exact_limits(jsonschema::options())
        .build(document)
        .map_err(|e| format!("not a valid JSON Schema: {e}"))
}

/// Compiles a pattern the whole value must match.
pub fn pattern(text: &str) -> Result<Regex, String> {
    Regex::new(text).map_err(|e| format!("not a valid regular expression: {e}"))
}

impl Rules {
    pub fn check_path(&self, path: &str) -> Result<(), Refusal> {
        if self.paths.is_empty() || self.paths.iter().any(|p| p == path) {
            Ok(())
        } else {
            Err(Refusal::new(Check::Path, "unknown path"))
        }
    }

    /// `value(name)` gives a header's value (`None` when absent or not text).
    pub fn check_headers<'a>(
        &self,
        value: impl Fn(&str) -> Option<&'a str>,
    ) -> Result<(), Refusal> {
        for rule in &self.headers {
            match value(&rule.name) {
                Some(text) if rule.pattern.is_match(text) => {}
                Some(_) => {
                    return Err(Refusal::new(
                        Check::Header,
                        format!("malformed {}", rule.name),
                    ));
                }
                None => {
                    return Err(Refusal::new(
                        Check::Header,
                        format!("missing {}", rule.name),
                    ));
                }
            }
        }
        Ok(())
    }

    /// `authorization` is the header's value, if any.
    pub fn check_token(&self, authorization: Option<&str>) -> Result<(), Refusal> {
        let Some(pattern) = &self.token else {
            return Ok(());
        };
        let token = authorization.and_then(bearer);
        match token {
            Some(token) if pattern.is_match(token) => Ok(()),
            Some(_) => Err(Refusal::new(Check::Token, "malformed token")),
            None => Err(Refusal::new(Check::Token, "no bearer token")),
        }
    }

    pub fn check_query(&self, query: Option<&str>) -> Result<(), Refusal> {
        let Some(schema) = &self.query_schema else {
            return Ok(());
        };
        let mut object = Map::new();
        for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            object.insert(name.into_owned(), Value::String(value.into_owned()));
        }
        first_error(schema, &Value::Object(object), Check::Query)
    }

    /// Whether the body must be read before the gate can decide.
    pub fn reads_body(&self) -> bool {
        self.body_schema.is_some()
    }

    pub fn check_body(&self, body: &[u8]) -> Result<(), Refusal> {
        let Some(schema) = &self.body_schema else {
            return Ok(());
        };
        // Keys first: a document that names one twice is refused before it is read.
        match serde_json::from_slice::<NoKeyTwice>(body) {
            Ok(NoKeyTwice) => {}
            Err(error) if error.is_data() => {
                return Err(Refusal::new(Check::Body, "body names a key twice"));
            }
            Err(_) => return Err(Refusal::new(Check::Body, "body is not JSON")),
        }
        // Numbers keep the decimals written (serde_json's arbitrary_precision), so the schema's
        // limits are compared with them exactly, not with their nearest f64.
        let document = serde_json::from_slice::<Value>(body)
            .map_err(|_| Refusal::new(Check::Body, "body is not JSON"))?;
        first_error(schema, &document, Check::Body)
    }
}

/// A JSON document whose objects name each key once. serde_json keeps the last of a repeated
/// key, an application behind the gate may keep the first: it would then act on a value the
/// schema never judged. Only the keys are looked at; the document is read again as a `Value`.
struct NoKeyTwice;

impl<'de> serde::Deserialize<'de> for NoKeyTwice {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NoKeyTwice)
    }
}

impl<'de> serde::de::Visitor<'de> for NoKeyTwice {
    type Value = NoKeyTwice;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut items: A) -> Result<Self, A::Error> {
        while items.next_element::<NoKeyTwice>()?.is_some() {}
        Ok(self)
    }

    /// An object; with arbitrary_precision serde_json also hands a number over as a map of
    /// one entry, which names no key twice either.
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut entries: A) -> Result<Self, A::Error> {
        let mut keys = std::collections::HashSet::new();
        while let Some(key) = entries.next_key::<String>()? {
            if !keys.insert(key) {
                return Err(serde::de::Error::custom("a key named twice"));
            }
            entries.next_value::<NoKeyTwice>()?;
        }
        Ok(self)
    }
}

/// The token of `Bearer TOKEN` (the scheme case-insensitively, RFC 7235).
pub fn bearer(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

fn first_error(schema: &Validator, document: &Value, check: Check) -> Result<(), Refusal> {
    match schema.iter_errors(document).next() {
        None => Ok(()),
        Some(error) => {
            let at = error.instance_path().to_string();
            let place = if at.is_empty() {
                String::new()
            } else {
                format!(" at {at}")
            };
            let message = error.to_string();
            let line = message.lines().next().unwrap_or("invalid");
            Err(Refusal::new(
                check,
                format!("{}{place}: {line}", check.name()),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Lesson 16's gate: `/takip` only, `takipNo` required and `^TR-\d{4}$`, the token's form.
    fn takip() -> Rules {
        Rules {
            paths: vec!["/takip".into()],
            token: Some(pattern(r"^b\.M\d+\.imza$").unwrap()),
            body_schema: Some(
                schema(&json!({
                    "type": "object",
                    "required": ["takipNo"],
                    "properties": {"takipNo": {"type": "string", "pattern": "^TR-\\d{4}$"}}
                }))
                .unwrap(),
            ),
            ..Rules::default()
        }
    }

    #[test]
    fn the_lessons_gate_refuses_each_kind_it_can_judge() {
        let gate = takip();
        assert!(gate.check_path("/takip").is_ok());
        assert_eq!(gate.check_path("/yok").unwrap_err().check.status(), 404);
        assert!(gate.check_token(Some("Bearer b.M7.imza")).is_ok());
        assert_eq!(
            gate.check_token(Some("Bearer bozuk")).unwrap_err().check,
            Check::Token
        );
        assert_eq!(
            gate.check_token(None).unwrap_err().reason,
            "no bearer token"
        );
        assert!(gate.check_body(br#"{"takipNo":"TR-4821"}"#).is_ok());
        // The record's existence is the application's to judge: TR-0001 has the right form.
        assert!(gate.check_body(br#"{"takipNo":"TR-0001"}"#).is_ok());
        let missing = gate.check_body(br#"{"not":"x"}"#).unwrap_err();
        assert_eq!((missing.check, missing.check.status()), (Check::Body, 400));
        assert!(missing.reason.contains("takipNo"), "{}", missing.reason);
        assert_eq!(
            gate.check_body(b"{").unwrap_err().reason,
            "body is not JSON"
        );
    }

    #[test]
    fn a_body_that_names_a_key_twice_is_refused_at_any_depth() {
        let gate = takip();
        for body in [
            &br#"{"takipNo":"bozuk","takipNo":"TR-4821"}"#[..],
            br#"{"takipNo":"TR-4821","\u0074akipNo":"bozuk"}"#,
            br#"{"takipNo":"TR-4821","x":[{"a":1,"a":2}]}"#,
        ] {
            let refusal = gate.check_body(body).unwrap_err();
            assert_eq!(
                (refusal.check, refusal.reason.as_str()),
                (Check::Body, "body names a key twice")
            );
        }
        let nested = br#"{"takipNo":"TR-4821","x":[1,2.5,null,true,{"a":{"a":"b"}}]}"#;
        assert!(gate.check_body(nested).is_ok());
    }

    /// Probe finding (issue 23): `100.0000000000000000001` passed `maximum = 100`, read as the
    /// f64 100.0. Numbers are compared as the decimals they are written as.
    #[test]
    fn numbers_are_compared_as_the_decimals_written() {
        let limits = |schema_limits: Value| Rules {
            body_schema: Some(schema(&json!({"properties": {"n": schema_limits}})).unwrap()),
            ..Rules::default()
        };
        let at_most = limits(json!({"maximum": 100}));
        for over in [
            "100.0000000000000000001",
            "1.000000000000000000001e2",
            "1e400",
        ] {
            let body = format!(r#"{{"n":{over}}}"#);
            let refusal = at_most.check_body(body.as_bytes()).unwrap_err();
            assert_eq!(refusal.check, Check::Body, "{over}");
        }
        for within in ["100", "100.0", "99.99999999999999999999", "1e2", "-1e400"] {
            let body = format!(r#"{{"n":{within}}}"#);
            assert!(at_most.check_body(body.as_bytes()).is_ok(), "{within}");
        }
        let below = limits(json!({"exclusiveMaximum": 100, "exclusiveMinimum": 0.1}));
        for within in ["99.99999999999999999999", "0.10000000000000000001"] {
            let body = format!(r#"{{"n":{within}}}"#);
            assert!(below.check_body(body.as_bytes()).is_ok(), "{within}");
        }
        for outside in [
            "100",
            "100.0000000000000000001",
            "0.1",
            "0.09999999999999999999",
        ] {
            let body = format!(r#"{{"n":{outside}}}"#);
            assert!(below.check_body(body.as_bytes()).is_err(), "{outside}");
        }
        let refusal = at_most
            .check_body(br#"{"n":100.0000000000000000001}"#)
            .unwrap_err();
        assert_eq!(
            refusal.reason,
            "body at /n: 100.0000000000000000001 is greater than the maximum of 100"
        );
        // Draft 4's boolean exclusiveMaximum makes its maximum exclusive.
        let draft4 = Rules {
            body_schema: Some(
                schema(&json!({
                    "$schema": "http://json-schema.org/draft-04/schema#",
                    "properties": {"n": {"maximum": 100, "exclusiveMaximum": true}}
                }))
                .unwrap(),
            ),
            ..Rules::default()
        };
        assert!(
            draft4
                .check_body(br#"{"n":99.99999999999999999999}"#)
                .is_ok()
        );
        assert!(draft4.check_body(br#"{"n":100}"#).is_err());
        let at_least = limits(json!({"minimum": 0}));
        assert!(
            at_least
                .check_body(br#"{"n":-0.0000000000000000000001}"#)
                .is_err()
        );
        assert!(at_least.check_body(br#"{"n":-1e-400}"#).is_err());
    }

    #[test]
    fn queries_and_headers_are_checked_by_pattern_and_schema() {
        let gate = Rules {
            headers: vec![HeaderRule {
                name: "x-istemci".into(),
                pattern: pattern("^[a-z]+$").unwrap(),
            }],
            query_schema: Some(
                schema(
                    &json!({"properties": {"no": {"pattern": "^TR-\\d{4}$"}}, "required": ["no"]}),
                )
                .unwrap(),
            ),
            ..Rules::default()
        };
        assert!(gate.check_query(Some("no=TR-4821&x=1")).is_ok());
        assert!(gate.check_query(Some("no=TR%2D4821")).is_ok());
        assert_eq!(
            gate.check_query(Some("no=9")).unwrap_err().check,
            Check::Query
        );
        assert!(gate.check_query(None).is_err());
        assert!(gate.check_headers(|_| Some("mobil")).is_ok());
        assert_eq!(
            gate.check_headers(|_| Some("Mobil!")).unwrap_err().reason,
            "malformed x-istemci"
        );
        assert_eq!(
            gate.check_headers(|_| None).unwrap_err().reason,
            "missing x-istemci"
        );
    }

    #[test]
    fn bearer_tokens_are_read_case_insensitively() {
        assert_eq!(bearer("bearer abc"), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
    }
}
