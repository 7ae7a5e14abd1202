//! What a route asks of a request beyond its host, path and method: header, query and cookie
//! values, the client's address; and the address rules (`allow`, `deny`) that refuse a client.
//! Pure: the engines hand over what they read through [`Asked`].

use std::net::IpAddr;

pub use ipnet::IpNet;

/// A request as a route's conditions read it, whichever engine parsed it.
pub trait Asked {
    /// The values of header field `name` (lowercase), in the order they came.
    fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]>;
    fn query(&self) -> Option<&str>;
    /// The value of cookie `name`, if the request carries it.
    fn cookie(&self, name: &str) -> Option<&str>;
    /// The client's address: the socket's peer, or the forwarded one under `trust_forwarded`.
    fn client(&self) -> IpAddr;
}

/// How a header, query parameter or cookie must look, written as one string:
/// `"beta"` equal to it, `"beta*"` starting with it, `"~^be.a$"` matching the regular
/// expression (unanchored unless it anchors itself), `"*"` present with any value, `"!"` absent.
/// `"=…"` takes the rest literally (`"=*"` is a value of one star).
#[derive(Clone, Debug)]
pub enum ValueMatch {
    Exact(String),
    Prefix(String),
    Regex(regex::bytes::Regex),
    Present,
    Absent,
}

impl ValueMatch {
    pub fn parse(text: &str) -> Result<Self, String> {
        Ok(match text {
            "*" => ValueMatch::Present,
            "!" => ValueMatch::Absent,
            _ if text.starts_with('=') => ValueMatch::Exact(text[1..].to_owned()),
            _ if text.starts_with('~') => regex::bytes::Regex::new(&text[1..])
                .map(ValueMatch::Regex)
                .map_err(|error| {
                    format!(
                        "{:?} is not a regular expression: {}",
                        &text[1..],
                        last_line(&error)
                    )
                })?,
            _ if text.ends_with('*') => ValueMatch::Prefix(text[..text.len() - 1].to_owned()),
            _ => ValueMatch::Exact(text.to_owned()),
        })
    }

    /// Whether the values a request carries under one name satisfy it: one of them matching
    /// is enough.
    pub fn matches<V: AsRef<[u8]>>(&self, values: impl IntoIterator<Item = V>) -> bool {
        let mut values = values.into_iter();
        match self {
            ValueMatch::Present => values.next().is_some(),
            ValueMatch::Absent => values.next().is_none(),
            ValueMatch::Exact(want) => values.any(|v| v.as_ref() == want.as_bytes()),
            ValueMatch::Prefix(want) => values.any(|v| v.as_ref().starts_with(want.as_bytes())),
            ValueMatch::Regex(regex) => values.any(|v| regex.is_match(v.as_ref())),
        }
    }

    /// A value that satisfies it, for example requests (`trafik plan`); `None` for absence,
    /// or a regular expression, whose matching values are not written down.
    pub fn example(&self) -> Option<&str> {
        match self {
            ValueMatch::Exact(value) | ValueMatch::Prefix(value) => Some(value),
            ValueMatch::Present => Some("1"),
            ValueMatch::Regex(_) | ValueMatch::Absent => None,
        }
    }
}

impl std::fmt::Display for ValueMatch {
    /// The form it is written in.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueMatch::Exact(value) if value.starts_with(['~', '=']) || value.ends_with('*') => {
                write!(f, "={value}")
            }
            ValueMatch::Exact(value) if value == "!" => f.write_str("=!"),
            ValueMatch::Exact(value) => f.write_str(value),
            ValueMatch::Prefix(value) => write!(f, "{value}*"),
            ValueMatch::Regex(regex) => write!(f, "~{}", regex.as_str()),
            ValueMatch::Present => f.write_str("*"),
            ValueMatch::Absent => f.write_str("!"),
        }
    }
}

impl PartialEq for ValueMatch {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

/// Everything a route asks besides host, path and method; all must hold. Empty asks nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Conditions {
    /// Header names in lowercase.
    pub headers: Vec<(String, ValueMatch)>,
    /// Query parameters, compared after percent-decoding.
    pub query: Vec<(String, ValueMatch)>,
    pub cookies: Vec<(String, ValueMatch)>,
    /// The client's address is in one of them; empty takes any.
    pub clients: Vec<IpNet>,
}

impl Conditions {
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty()
            && self.query.is_empty()
            && self.cookies.is_empty()
            && self.clients.is_empty()
    }

    pub fn matches(&self, request: &impl Asked) -> bool {
        self.headers
            .iter()
            .all(|(name, want)| want.matches(request.header_values(name)))
            && self.query.iter().all(|(name, want)| {
                let pairs = form_urlencoded::parse(request.query().unwrap_or("").as_bytes());
                want.matches(
                    pairs
                        .filter(|(key, _)| key == name)
                        .map(|(_, value)| value.into_owned()),
                )
            })
            && self
                .cookies
                .iter()
                .all(|(name, want)| want.matches(request.cookie(name)))
            && (self.clients.is_empty() || within(&self.clients, request.client()))
    }

    /// Whether every request these conditions take is also taken by `earlier`'s: each of its
    /// conditions is one of these, and its client networks hold all of these ones. What
    /// `trafik check` reads a shadowed route by; conditions it cannot compare (two different
    /// regular expressions) count as not covered.
    pub fn covered_by(&self, earlier: &Conditions) -> bool {
        let all_here = |theirs: &[(String, ValueMatch)], ours: &[(String, ValueMatch)]| {
            theirs.iter().all(|condition| ours.contains(condition))
        };
        all_here(&earlier.headers, &self.headers)
            && all_here(&earlier.query, &self.query)
            && all_here(&earlier.cookies, &self.cookies)
            && (earlier.clients.is_empty()
                || (!self.clients.is_empty()
                    && self
                        .clients
                        .iter()
                        .all(|net| earlier.clients.iter().any(|outer| outer.contains(net)))))
    }
}

impl std::fmt::Display for Conditions {
    /// `header x-surum=beta, query surum=beta, cookie c=*, client 10.0.0.0/8|…`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        for (kind, list) in [
            ("header", &self.headers),
            ("query", &self.query),
            ("cookie", &self.cookies),
        ] {
            parts.extend(
                list.iter()
                    .map(|(name, want)| format!("{kind} {name}={want}")),
            );
        }
        if !self.clients.is_empty() {
            let nets: Vec<String> = self.clients.iter().map(IpNet::to_string).collect();
            parts.push(format!("client {}", nets.join("|")));
        }
        f.write_str(&parts.join(", "))
    }
}

/// The last line of a regex error: its cause, without the pattern drawn above it.
pub(crate) fn last_line(error: &regex::Error) -> String {
    let text = error.to_string();
    text.lines().last().unwrap_or("").trim().to_owned()
}

/// A network written as `10.0.0.0/8`, or one address (`127.0.0.1`, `::1`).
pub fn parse_net(text: &str) -> Result<IpNet, String> {
    text.parse::<IpNet>()
        .map(|net| net.trunc())
        .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| {
            format!(
                "expected a network such as \"10.0.0.0/8\" or \"2001:db8::/32\", or one address, found {text:?}"
            )
        })
}

/// Whether `client` is in one of `nets`; an IPv4 client that reached an IPv6 socket
/// (`::ffff:a.b.c.d`) counts as its IPv4 address.
pub fn within(nets: &[IpNet], client: IpAddr) -> bool {
    let client = client.to_canonical();
    nets.iter().any(|net| net.contains(&client))
}

/// A listener's or route's `allow` and `deny` lists: a client in `deny` is refused, and with
/// an `allow` list so is any client outside it (deny wins where both hold).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpRules {
    pub allow: Vec<IpNet>,
    pub deny: Vec<IpNet>,
}

impl IpRules {
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    pub fn admits(&self, client: IpAddr) -> bool {
        !within(&self.deny, client) && (self.allow.is_empty() || within(&self.allow, client))
    }
}

impl std::fmt::Display for IpRules {
    /// `allow 127.0.0.0/8, deny 10.0.0.0/8`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |nets: &[IpNet]| nets.iter().map(IpNet::to_string).collect::<Vec<_>>();
        let mut parts = Vec::new();
        if !self.allow.is_empty() {
            parts.push(format!("allow {}", list(&self.allow).join(" ")));
        }
        if !self.deny.is_empty() {
            parts.push(format!("deny {}", list(&self.deny).join(" ")));
        }
        f.write_str(&parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Request {
        headers: Vec<(&'static str, &'static [u8])>,
        query: Option<&'static str>,
        cookies: Vec<(&'static str, &'static str)>,
        client: IpAddr,
    }

    impl Asked for Request {
        fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> {
            self.headers
                .iter()
                .filter(move |(n, _)| *n == name)
                .map(|(_, v)| *v)
        }
        fn query(&self) -> Option<&str> {
            self.query
        }
        fn cookie(&self, name: &str) -> Option<&str> {
            self.cookies
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| *v)
        }
        fn client(&self) -> IpAddr {
            self.client
        }
    }

    fn request() -> Request {
        Request {
            headers: vec![("x-surum", b"beta-2"), ("accept", b"text/html")],
            query: Some("surum=yeni%20s%C3%BCr%C3%BCm&x=1"),
            cookies: vec![("grup", "deneme")],
            client: "::ffff:10.1.2.3".parse().unwrap(),
        }
    }

    fn header(name: &str, want: &str) -> Conditions {
        Conditions {
            headers: vec![(name.to_owned(), ValueMatch::parse(want).unwrap())],
            ..Conditions::default()
        }
    }

    #[test]
    fn each_value_form_matches_as_written() {
        let r = request();
        assert!(header("x-surum", "beta-2").matches(&r));
        assert!(!header("x-surum", "beta").matches(&r));
        assert!(header("x-surum", "beta*").matches(&r));
        assert!(header("x-surum", "~^beta-[0-9]$").matches(&r));
        assert!(!header("x-surum", "~^beta$").matches(&r));
        assert!(header("x-surum", "*").matches(&r));
        assert!(!header("x-yok", "*").matches(&r));
        assert!(header("x-yok", "!").matches(&r));
        assert!(!header("x-surum", "!").matches(&r));
        assert_eq!(
            ValueMatch::parse("=*").unwrap(),
            ValueMatch::Exact("*".into())
        );
        assert!(ValueMatch::parse("~(").is_err());
    }

    #[test]
    fn query_values_are_decoded_and_cookies_and_clients_match() {
        let r = request();
        let query = Conditions {
            query: vec![("surum".into(), ValueMatch::parse("yeni sürüm").unwrap())],
            ..Conditions::default()
        };
        assert!(query.matches(&r));
        let cookie = Conditions {
            cookies: vec![("grup".into(), ValueMatch::parse("deneme").unwrap())],
            ..Conditions::default()
        };
        assert!(cookie.matches(&r));
        let clients = |nets: &[&str]| Conditions {
            clients: nets.iter().map(|n| parse_net(n).unwrap()).collect(),
            ..Conditions::default()
        };
        // The IPv4-mapped address counts as its IPv4 one.
        assert!(clients(&["10.0.0.0/8"]).matches(&r));
        assert!(!clients(&["192.168.0.0/16", "::1"]).matches(&r));
    }

    #[test]
    fn deny_wins_and_an_allow_list_refuses_the_rest() {
        let rules = IpRules {
            allow: vec![parse_net("10.0.0.0/8").unwrap()],
            deny: vec![parse_net("10.9.0.0/16").unwrap()],
        };
        assert!(rules.admits("10.1.1.1".parse().unwrap()));
        assert!(!rules.admits("10.9.1.1".parse().unwrap()));
        assert!(!rules.admits("127.0.0.1".parse().unwrap()));
        assert!(IpRules::default().admits("127.0.0.1".parse().unwrap()));
        assert_eq!(parse_net("10.1.2.3/8").unwrap().to_string(), "10.0.0.0/8");
        assert!(parse_net("10.0.0.0/33").is_err());
    }

    #[test]
    fn a_route_without_conditions_covers_every_other() {
        let beta = header("x-surum", "beta");
        assert!(beta.covered_by(&Conditions::default()));
        assert!(beta.covered_by(&beta));
        assert!(!Conditions::default().covered_by(&beta));
        assert!(!header("x-surum", "~a").covered_by(&header("x-surum", "~b")));
        let narrow = Conditions {
            clients: vec![parse_net("10.1.0.0/16").unwrap()],
            ..Conditions::default()
        };
        let wide = Conditions {
            clients: vec![parse_net("10.0.0.0/8").unwrap()],
            ..Conditions::default()
        };
        assert!(narrow.covered_by(&wide));
        assert!(!wide.covered_by(&narrow));
    }
}
