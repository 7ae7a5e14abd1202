//! Paths rewritten on their way upstream (`strip_prefix`, `replace_prefix`, `rewrite`) and the
//! `Location` of a redirect, from a template. Pure: text in, text out.

/// One rewrite of a request's path (never its query), applied after the route matched.
#[derive(Clone, Debug)]
pub enum PathRewrite {
    /// `/api/takip` → `/takip`; `/api` → `/`. Only at a segment boundary.
    StripPrefix(String),
    /// `/api/takip` → `/v2/takip`, the prefix at a segment boundary.
    ReplacePrefix { from: String, to: String },
    /// The first match of `regex` replaced by `to`, where `$1` or `${name}` is a group.
    Regex { regex: regex::Regex, to: String },
}

impl PathRewrite {
    /// A `rewrite = { regex, to }`, its expression compiled.
    pub fn regex(pattern: &str, to: &str) -> Result<Self, String> {
        regex::Regex::new(pattern)
            .map(|regex| PathRewrite::Regex {
                regex,
                to: to.to_owned(),
            })
            .map_err(|error| {
                format!(
                    "not a regular expression: {}",
                    crate::route_match::last_line(&error)
                )
            })
    }

    /// The path after the rewrite; `None` when it leaves the path as it is.
    pub fn apply(&self, path: &str) -> Option<String> {
        let rewritten = match self {
            PathRewrite::StripPrefix(prefix) => after_prefix(path, prefix)?.to_owned(),
            PathRewrite::ReplacePrefix { from, to } => {
                let rest = after_prefix(path, from)?;
                let mut joined = to.trim_end_matches('/').to_owned();
                joined.push_str(rest);
                joined
            }
            PathRewrite::Regex { regex, to } => {
                if !regex.is_match(path) {
                    return None;
                }
                regex.replace(path, to.as_str()).into_owned()
            }
        };
        Some(match rewritten.starts_with('/') {
            true => rewritten,
            false => format!("/{rewritten}"),
        })
    }
}

impl std::fmt::Display for PathRewrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathRewrite::StripPrefix(prefix) => write!(f, "strip prefix {prefix}"),
            PathRewrite::ReplacePrefix { from, to } => write!(f, "replace prefix {from} with {to}"),
            PathRewrite::Regex { regex, to } => write!(f, "rewrite {} to {to}", regex.as_str()),
        }
    }
}

impl PartialEq for PathRewrite {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for PathRewrite {}

/// What follows `prefix` in `path` when `path` continues it at a segment boundary (`""` when
/// they are equal).
fn after_prefix<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let prefix = prefix.trim_end_matches('/');
    let rest = path.strip_prefix(prefix)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// A redirect's `to`: text with `{scheme}`, `{host}` (as the client wrote it, port included),
/// `{hostname}` (without the port), `{path}` and the route's path-template captures (`{no}`)
/// in braces, checked when the configuration is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedirectTemplate {
    text: String,
    pieces: Vec<Piece>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Scheme,
    Host,
    Hostname,
    Path,
    /// The capture at this position of the route's template.
    Capture(usize),
}

/// What a redirect's `Location` is written from.
pub struct Asked<'a> {
    pub scheme: &'a str,
    /// As the client wrote it, port included.
    pub host: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
    /// The route's captures, in the order of its template's names.
    pub captures: &'a [String],
}

impl RedirectTemplate {
    /// `captures` are the names the route's path template captures.
    pub fn parse(text: &str, captures: &[&str]) -> Result<Self, String> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                pieces.push(Piece::Text(rest[..open].to_owned()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| format!("{text:?} opens a {{ it does not close"))?;
            let name = &rest[open + 1..open + close];
            pieces.push(match name {
                "scheme" => Piece::Scheme,
                "host" => Piece::Host,
                "hostname" => Piece::Hostname,
                "path" => Piece::Path,
                _ => match captures.iter().position(|c| *c == name) {
                    Some(index) => Piece::Capture(index),
                    None => {
                        let known = ["scheme", "host", "hostname", "path"]
                            .iter()
                            .chain(captures)
                            .copied()
                            .collect::<Vec<_>>()
                            .join("}, {");
                        return Err(format!(
                            "{text:?} names {{{name}}}, which is none of {{{known}}}"
                        ));
                    }
                },
            });
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_owned()));
        }
        Ok(RedirectTemplate {
            text: text.to_owned(),
            pieces,
        })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// The `Location` for a request; its query goes on when `keep_query` (after the
    /// template's own, if it has one).
    pub fn location(&self, asked: &Asked<'_>, keep_query: bool) -> String {
        let mut out = String::with_capacity(self.text.len() + asked.path.len() + 16);
        for piece in &self.pieces {
            out.push_str(match piece {
                Piece::Text(text) => text,
                Piece::Scheme => asked.scheme,
                Piece::Host => asked.host,
                Piece::Hostname => without_port(asked.host),
                Piece::Path => asked.path,
                Piece::Capture(index) => asked.captures.get(*index).map_or("", String::as_str),
            });
        }
        if let Some(query) = asked.query.filter(|q| keep_query && !q.is_empty()) {
            out.push(if out.contains('?') { '&' } else { '?' });
            out.push_str(query);
        }
        out
    }
}

/// A `Host` value without its port (`[::1]:80` → `[::1]`).
fn without_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(colon) if !host[colon..].contains(']') => &host[..colon],
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_go_at_segment_boundaries_and_regexes_use_groups() {
        let strip = PathRewrite::StripPrefix("/api".into());
        assert_eq!(strip.apply("/api/takip/1").as_deref(), Some("/takip/1"));
        assert_eq!(strip.apply("/api").as_deref(), Some("/"));
        assert_eq!(strip.apply("/apix"), None);
        let replace = PathRewrite::ReplacePrefix {
            from: "/api/".into(),
            to: "/v2".into(),
        };
        assert_eq!(replace.apply("/api/takip").as_deref(), Some("/v2/takip"));
        assert_eq!(replace.apply("/api").as_deref(), Some("/v2"));
        let regex = PathRewrite::Regex {
            regex: regex::Regex::new("^/eski/([^/]+)").unwrap(),
            to: "/yeni/$1/ozet".into(),
        };
        assert_eq!(
            regex.apply("/eski/TR-1").as_deref(),
            Some("/yeni/TR-1/ozet")
        );
        assert_eq!(regex.apply("/baska"), None);
    }

    #[test]
    fn a_location_takes_its_placeholders_and_keeps_or_drops_the_query() {
        let template = RedirectTemplate::parse("https://yeni.test/t/{no}{path}", &["no"]).unwrap();
        let asked = Asked {
            scheme: "http",
            host: "eski.test:8080",
            path: "/takip/TR-1",
            query: Some("a=1"),
            captures: &["TR-1".to_owned()],
        };
        assert_eq!(
            template.location(&asked, true),
            "https://yeni.test/t/TR-1/takip/TR-1?a=1"
        );
        assert_eq!(
            template.location(&asked, false),
            "https://yeni.test/t/TR-1/takip/TR-1"
        );
        let https = RedirectTemplate::parse("https://{hostname}{path}", &[]).unwrap();
        assert_eq!(
            https.location(&asked, false),
            "https://eski.test/takip/TR-1"
        );
        assert_eq!(without_port("[::1]:80"), "[::1]");
        assert_eq!(without_port("[::1]"), "[::1]");
        let with_query = RedirectTemplate::parse("{scheme}://{host}/x?k=1", &[]).unwrap();
        assert_eq!(
            with_query.location(&asked, true),
            "http://eski.test:8080/x?k=1&a=1"
        );
        assert!(RedirectTemplate::parse("/{yok}", &["no"]).is_err());
        assert!(RedirectTemplate::parse("/{path", &[]).is_err());
    }
}
