//! Which pool a TLS passthrough connection goes to, by the server name its client asked for.

pub use trafik_runtime::plan::ServerNamePattern;

/// A passthrough listener's routes, most specific first: an exact name, then the longest
/// `*.domain`, then the route without a name, which also takes hellos that name nothing.
pub struct SniRoutes {
    /// (pattern, pool index), ordered most specific first.
    named: Vec<(ServerNamePattern, usize)>,
    fallback: Option<usize>,
}

impl SniRoutes {
    /// `routes` pairs each route's pattern (`None`: the fallback) with its pool's index.
    pub fn new(routes: impl IntoIterator<Item = (Option<ServerNamePattern>, usize)>) -> Self {
        let mut named = Vec::new();
        let mut fallback = None;
        for (pattern, pool) in routes {
            match pattern {
                Some(pattern) => named.push((pattern, pool)),
                None => fallback = fallback.or(Some(pool)),
            }
        }
        named.sort_by_key(|(pattern, _)| match pattern {
            ServerNamePattern::Exact(_) => (0, 0),
            ServerNamePattern::Subdomains(domain) => (1, usize::MAX - domain.len()),
        });
        SniRoutes { named, fallback }
    }

    /// The pool for a client that asked for `name`, or `None`: the connection is closed.
    pub fn pool_for(&self, name: Option<&str>) -> Option<usize> {
        name.and_then(|name| {
            self.named
                .iter()
                .find(|(pattern, _)| pattern.matches(name))
                .map(|&(_, pool)| pool)
        })
        .or(self.fallback)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> ServerNamePattern {
        text.parse().unwrap()
    }

    #[test]
    fn patterns_are_names_or_whole_domains() {
        assert_eq!(
            pattern("A.Kargo.Test"),
            ServerNamePattern::Exact("a.kargo.test".into())
        );
        assert_eq!(pattern("*.kargo.test").to_string(), "*.kargo.test");
        let any = pattern("*.kargo.test");
        assert!(any.matches("a.kargo.test"));
        assert!(any.matches("a.b.kargo.test"));
        assert!(!any.matches("kargo.test"));
        assert!(!any.matches("akargo.test"));
        assert!(!any.matches(".kargo.test"));
        for bad in [
            "",
            "*",
            "*.",
            "a.*.test",
            "a..test",
            "a b.test",
            "a.test.",
            "*kargo.test",
        ] {
            assert!(bad.parse::<ServerNamePattern>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_most_specific_route_wins_and_the_unnamed_one_takes_the_rest() {
        let routes = SniRoutes::new([
            (Some(pattern("*.test")), 0),
            (None, 1),
            (Some(pattern("*.kargo.test")), 2),
            (Some(pattern("a.kargo.test")), 3),
        ]);
        assert_eq!(routes.pool_for(Some("a.kargo.test")), Some(3));
        assert_eq!(routes.pool_for(Some("b.kargo.test")), Some(2));
        assert_eq!(routes.pool_for(Some("x.test")), Some(0));
        assert_eq!(routes.pool_for(Some("kargo.example")), Some(1));
        assert_eq!(routes.pool_for(None), Some(1));
        let strict = SniRoutes::new([(Some(pattern("a.kargo.test")), 0)]);
        assert_eq!(strict.pool_for(None), None);
        assert_eq!(strict.pool_for(Some("b.kargo.test")), None);
    }
}
