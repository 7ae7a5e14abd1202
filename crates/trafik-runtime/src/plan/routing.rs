//! A route's richer matching, its address rules, its mirror, and the split and redirect
//! targets (`[[listener.route]]` headers, query, cookies, clients, priority, allow, deny,
//! mirror, split, redirect).

use http::HeaderName;
use trafik_policy::rewrite::RedirectTemplate;
use trafik_policy::route_match::{Conditions, IpRules};

/// What a route asks of a request besides host, path and method, and what it does beside its
/// target.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoutingPlan {
    pub conditions: Conditions,
    /// Routes of a higher priority are tried first, whatever their specificity; 0 by default.
    pub priority: i32,
    /// The listener's address rules, then the route's: a client any of them refuses gets 403.
    pub access: Vec<IpRules>,
    pub mirror: Option<MirrorPlan>,
}

/// A copy of a share of the route's requests to another pool, whose answers are dropped.
#[derive(Clone, Debug, PartialEq)]
pub struct MirrorPlan {
    pub pool: String,
    /// The share of requests copied, 0 to 100.
    pub percent: f64,
    /// A request whose body is longer is not copied (counted as dropped).
    pub max_body: u64,
    /// Copies on their way at once, per worker; past it a copy is dropped.
    pub max_in_flight: u32,
}

/// How a split keeps a client on the pool it got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SplitSticky {
    /// trafik sets this cookie to the pool's name; a client that sends it back stays there.
    Cookie(String),
    /// The header's value, hashed, chooses the pool: the same value, the same pool.
    Header(HeaderName),
}

impl SplitSticky {
    /// The cookie of `split_sticky = "cookie"`.
    pub const COOKIE: &str = "trafik_split";
}

impl std::fmt::Display for SplitSticky {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SplitSticky::Cookie(name) => write!(f, "cookie {name}"),
            SplitSticky::Header(name) => write!(f, "header {name}"),
        }
    }
}

impl super::RoutePlan {
    /// What the route takes, in words: `host a.test /api [GET] (header x-surum=beta)`. The
    /// line `trafik check` prints, and the name the route's counters go by in `/status` and
    /// `/metrics` (after its listener's), so two routes of one path told apart by their
    /// methods or conditions never share a series.
    pub fn matched_text(&self) -> String {
        let host = self
            .host
            .as_deref()
            .map(|h| format!("host {h} "))
            .unwrap_or_default();
        let methods = if self.methods.is_empty() {
            String::new()
        } else {
            let names: Vec<_> = self.methods.iter().map(|m| m.as_str()).collect();
            format!(" [{}]", names.join(","))
        };
        let path = self
            .path_template
            .as_ref()
            .map_or(self.path_prefix.as_str(), |t| t.text());
        let conditions = &self.routing.conditions;
        let asking = match conditions.is_empty() {
            true => String::new(),
            false => format!(" ({conditions})"),
        };
        format!("{host}{path}{methods}{asking}")
    }

    /// The one route of a `redirect_https` listener: every request to the same URL over https
    /// with 308 (method and body kept), the host's port dropped (https's own is 443).
    pub fn redirect_https() -> Self {
        let to = RedirectTemplate::parse("https://{hostname}{path}", &[])
            .unwrap_or_else(|_| unreachable!("a fixed template"));
        super::RoutePlan {
            host: None,
            path_prefix: "/".into(),
            methods: Vec::new(),
            filters: Vec::new(),
            target: super::TargetPlan::Redirect(RedirectPlan {
                to,
                status: 308,
                keep_query: true,
            }),
            path_template: None,
            routing: RoutingPlan::default(),
        }
    }
}

/// A redirect target: the route answers every request it takes with this.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedirectPlan {
    pub to: RedirectTemplate,
    /// 301, 302, 307 or 308.
    pub status: u16,
    /// Whether the request's query goes on to the `Location`.
    pub keep_query: bool,
}
