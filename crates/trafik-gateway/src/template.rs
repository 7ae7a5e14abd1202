//! Path templates: `/takip/{no}/{part}` matches a request path segment by segment and captures
//! the named segments; `/{part}/{no}` or `/v1/durum?no={no}` writes an upstream path from them.

/// A template a request path is matched against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathTemplate {
    text: String,
    segments: Vec<Segment>,
    names: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Literal(String),
    /// The capture at this index of [`PathTemplate::names`].
    Capture(usize),
}

/// The values captured from one path, in the order of [`PathTemplate::names`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Captures(pub Vec<String>);

impl PathTemplate {
    /// Parses `/literal/{name}/...`; a capture takes a whole segment.
    pub fn parse(text: &str) -> Result<PathTemplate, String> {
        let Some(rest) = text.strip_prefix('/') else {
            return Err(format!(
                "expected a path starting with \"/\", found {text:?}"
            ));
        };
        let mut segments = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for segment in rest.split('/') {
            match capture_name(segment)? {
                Some(name) => {
                    if names.iter().any(|known| known == name) {
                        return Err(format!("{{{name}}} is captured twice"));
                    }
                    segments.push(Segment::Capture(names.len()));
                    names.push(name.to_owned());
                }
                None if segment.is_empty() && text != "/" => {
                    return Err(format!("{text:?} has an empty segment"));
                }
                // Requests are matched in normal form, where these never appear.
                None if segment == "." || segment == ".." => {
                    return Err(format!(
                        "{text:?} has a dot segment, which no request path has"
                    ));
                }
                None => segments.push(Segment::Literal(segment.to_owned())),
            }
        }
        Ok(PathTemplate {
            text: text.to_owned(),
            segments,
            names,
        })
    }

    /// As written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The capture names, in the order [`Captures`] holds their values.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The captures if `path` (normalized, without query) has the template's segments; a
    /// captured segment is never empty.
    pub fn matches(&self, path: &str) -> Option<Captures> {
        let mut values = vec![String::new(); self.names.len()];
        let mut parts = path.strip_prefix('/')?.split('/');
        for segment in &self.segments {
            let part = parts.next()?;
            match segment {
                Segment::Literal(literal) if literal == part => {}
                Segment::Literal(_) => return None,
                Segment::Capture(_) if part.is_empty() => return None,
                Segment::Capture(index) => values[*index] = part.to_owned(),
            }
        }
        parts.next().is_none().then_some(Captures(values))
    }

    /// How specific it is, for ordering routes: more segments first.
    pub fn len(&self) -> usize {
        self.segments.len()
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }
}

/// `{name}` → `Some(name)`; a literal → `None`; a brace that is not a whole capture is an error.
fn capture_name(segment: &str) -> Result<Option<&str>, String> {
    match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
        Some(name) if is_name(name) => Ok(Some(name)),
        Some(name) => Err(format!(
            "{{{name}}}: a capture name is letters, digits and _, starting with a letter"
        )),
        None if segment.contains(['{', '}']) => Err(format!(
            "{segment:?}: a capture takes a whole segment, such as {{no}}"
        )),
        None => Ok(None),
    }
}

fn is_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// An upstream path (with an optional query) written from captures: `/{part}/{no}`,
/// `/v1/durum?no={no}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamTemplate {
    text: String,
    pieces: Vec<Piece>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Capture(usize),
}

impl UpstreamTemplate {
    /// Parses `text` whose `{name}`s must be among `names` (the route's captures).
    pub fn parse(text: &str, names: &[String]) -> Result<UpstreamTemplate, String> {
        if !text.starts_with('/') {
            return Err(format!(
                "expected a path starting with \"/\", found {text:?}"
            ));
        }
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            let close = rest[open..]
                .find('}')
                .map(|c| open + c)
                .ok_or_else(|| format!("{text:?}: a {{ without its }}"))?;
            let name = &rest[open + 1..close];
            let index = names.iter().position(|n| n == name).ok_or_else(|| {
                format!(
                    "{{{name}}} is not captured by the route's path (its captures: {})",
                    listed(names)
                )
            })?;
            if open > 0 {
                pieces.push(Piece::Text(rest[..open].to_owned()));
            }
            pieces.push(Piece::Capture(index));
            rest = &rest[close + 1..];
        }
        if rest.contains('}') {
            return Err(format!("{text:?}: a }} without its {{"));
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_owned()));
        }
        let template = UpstreamTemplate {
            text: text.to_owned(),
            pieces,
        };
        let probe = Captures(vec!["x".to_owned(); names.len()]);
        http_path_is_valid(&template.render(&probe))
            .then_some(template)
            .ok_or_else(|| format!("{text:?} does not make a valid request path"))
    }

    /// As written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The path for these captures. Captures are path segments or checked list items
    /// ([`is_safe_value`]), so what is written stays one segment or one query value.
    pub fn render(&self, captures: &Captures) -> String {
        let mut path = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => path.push_str(text),
                Piece::Capture(index) => path.push_str(&captures.0[*index]),
            }
        }
        path
    }
}

/// Whether a value taken from a query (a list item) may stand in a path: unreserved characters
/// and percent escapes only, and no dot segment.
pub fn is_safe_value(value: &str) -> bool {
    !value.is_empty()
        && value != "."
        && value != ".."
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b))
}

fn http_path_is_valid(path: &str) -> bool {
    path.bytes().all(|b| b.is_ascii_graphic() && b != b'#')
}

fn listed(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names
            .iter()
            .map(|n| format!("{{{n}}}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The items of a list query parameter (`?no=A,B,C` → `A`, `B`, `C`), in request order, or
/// the first that cannot stand in a path.
pub fn list_items<'q>(query: Option<&'q str>, name: &str) -> Result<Vec<&'q str>, &'q str> {
    let Some(query) = query else {
        return Ok(Vec::new());
    };
    let mut items = Vec::new();
    for pair in query.split('&') {
        if let Some((key, value)) = pair.split_once('=')
            && key == name
        {
            for item in value.split(',').filter(|item| !item.is_empty()) {
                if !is_safe_value(item) {
                    return Err(item);
                }
                items.push(item);
            }
        }
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_whole_segments_and_capture_them() {
        let template = PathTemplate::parse("/takip/{no}/{part}").unwrap();
        assert_eq!(template.names(), ["no", "part"]);
        assert_eq!(
            template.matches("/takip/TR-4821/ucret"),
            Some(Captures(vec!["TR-4821".into(), "ucret".into()]))
        );
        assert_eq!(template.matches("/takip/TR-4821"), None);
        assert_eq!(template.matches("/takip/TR-4821/ucret/x"), None);
        assert_eq!(template.matches("/takip//ucret"), None);
        assert_eq!(template.matches("/takipx/TR-1/ucret"), None);
        assert_eq!(template.matches(""), None);
        let root = PathTemplate::parse("/").unwrap();
        assert!(root.matches("/").is_some());
        assert!(root.matches("/a").is_none());
    }

    #[test]
    fn bad_templates_say_why() {
        for bad in [
            "takip",
            "/takip/{no",
            "/a/{1x}",
            "/a/x{no}",
            "/{no}/{no}",
            "/a//b",
            "/a/../b",
        ] {
            assert!(PathTemplate::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn upstream_paths_are_written_from_captures() {
        let names = ["no".to_owned(), "part".to_owned()];
        let captures = Captures(vec!["TR-4821".into(), "durum".into()]);
        let path = UpstreamTemplate::parse("/{part}/{no}", &names).unwrap();
        assert_eq!(path.render(&captures), "/durum/TR-4821");
        let query = UpstreamTemplate::parse("/v1/durum?no={no}", &names).unwrap();
        assert_eq!(query.render(&captures), "/v1/durum?no=TR-4821");
        let error = UpstreamTemplate::parse("/x/{nope}", &names).unwrap_err();
        assert!(error.contains("{no}, {part}"), "{error}");
        assert!(UpstreamTemplate::parse("/x/{no", &names).is_err());
        assert!(UpstreamTemplate::parse("x/{no}", &names).is_err());
        assert!(UpstreamTemplate::parse("/a b", &names).is_err());
    }

    #[test]
    fn list_items_keep_request_order_and_refuse_what_could_escape_a_segment() {
        assert_eq!(
            list_items(Some("x=1&no=B,A,,C"), "no"),
            Ok(vec!["B", "A", "C"])
        );
        assert_eq!(list_items(None, "no"), Ok(vec![]));
        assert_eq!(list_items(Some("no=A,../admin"), "no"), Err("../admin"));
        assert_eq!(list_items(Some("no=.."), "no"), Err(".."));
        assert_eq!(list_items(Some("no=a?b"), "no"), Err("a?b"));
    }
}
