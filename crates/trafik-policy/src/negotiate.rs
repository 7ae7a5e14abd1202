//! Which content coding an answer goes out in (RFC 9110 §12.5.3): the client's
//! `Accept-Encoding` weighs the codings by q-value, and among those it weighs highest the
//! server's own order decides. Also which media types a compression setting covers.

/// A content coding trafik can compress with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Coding {
    Zstd,
    Brotli,
    Gzip,
}

impl Coding {
    pub const ALL: [Coding; 3] = [Coding::Zstd, Coding::Brotli, Coding::Gzip];

    /// The token in `Accept-Encoding` and `Content-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Zstd => "zstd",
            Coding::Brotli => "br",
            Coding::Gzip => "gzip",
        }
    }

    /// The coding a token names; `x-gzip` is gzip (RFC 9110 §8.4.1.3).
    pub fn from_token(token: &str) -> Option<Coding> {
        Coding::ALL
            .into_iter()
            .find(|c| token.eq_ignore_ascii_case(c.token()))
            .or_else(|| token.eq_ignore_ascii_case("x-gzip").then_some(Coding::Gzip))
    }
}

/// The coding to answer with: of the server's `preference` (first = best), one the client
/// accepts with the highest q-value, ties going to the server's order; `None` when the client
/// accepts none of them (no header, only `identity`, or all at `q=0`). `accept_encoding` is the
/// header's values joined by commas; a member with a malformed weight is ignored.
pub fn choose(accept_encoding: &str, preference: &[Coding]) -> Option<Coding> {
    let mut wildcard = None;
    let mut weights = [None; Coding::ALL.len()];
    for member in accept_encoding.split(',') {
        let mut parts = member.split(';');
        let token = parts.next().unwrap_or("").trim();
        if token.is_empty() {
            continue;
        }
        let Some(weight) = weight(parts) else {
            continue;
        };
        if token == "*" {
            wildcard = Some(weight);
        } else if let Some(coding) = Coding::from_token(token) {
            let slot = &mut weights[index(coding)];
            // Listed twice: the higher weight counts.
            *slot = Some(slot.map_or(weight, |w: u16| w.max(weight)));
        }
    }
    let mut best: Option<(Coding, u16)> = None;
    for &coding in preference {
        let weight = weights[index(coding)].or(wildcard).unwrap_or(0);
        if weight > 0 && best.is_none_or(|(_, w)| weight > w) {
            best = Some((coding, weight));
        }
    }
    best.map(|(coding, _)| coding)
}

fn index(coding: Coding) -> usize {
    match coding {
        Coding::Zstd => 0,
        Coding::Brotli => 1,
        Coding::Gzip => 2,
    }
}

/// A member's weight in thousandths (`q=0.5` → 500; none → 1000); `None` when malformed.
fn weight<'a>(parameters: impl Iterator<Item = &'a str>) -> Option<u16> {
    let mut weight = 1000;
    for parameter in parameters {
        let (name, value) = parameter.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("q") {
            continue;
        }
        weight = qvalue(value.trim())?;
    }
    Some(weight)
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )` (RFC 9110 §12.4.2).
fn qvalue(text: &str) -> Option<u16> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths: u16 = format!("{fraction:0<3}").parse().ok()?;
    match whole {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Whether a `Content-Type` is one of `types`: media types such as `application/json`, or a
/// whole top-level type as `text/*`; case and parameters (`; charset=utf-8`) do not matter.
pub fn type_listed(content_type: &str, types: &[String]) -> bool {
    let media = content_type.split(';').next().unwrap_or("").trim();
    types.iter().any(|listed| match listed.strip_suffix("/*") {
        Some(top) => media
            .split_once('/')
            .is_some_and(|(t, sub)| !sub.is_empty() && t.eq_ignore_ascii_case(top)),
        None => media.eq_ignore_ascii_case(listed),
    })
}

/// Whether `pattern` is a media type a compression setting may list: `type/subtype` or
/// `type/*`, tokens only.
pub fn valid_type_pattern(pattern: &str) -> bool {
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    match pattern.split_once('/') {
        Some((top, "*")) => token(top),
        Some((top, sub)) => token(top) && token(sub),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: [Coding; 3] = [Coding::Zstd, Coding::Brotli, Coding::Gzip];

    #[test]
    fn equal_weights_go_to_the_server_order_and_higher_weights_win() {
        assert_eq!(choose("gzip, br, zstd", &SERVER), Some(Coding::Zstd));
        assert_eq!(
            choose("deflate, gzip, br, zstd", &SERVER),
            Some(Coding::Zstd)
        );
        assert_eq!(choose("gzip;q=1, br;q=0.8", &SERVER), Some(Coding::Gzip));
        assert_eq!(
            choose("gzip, br", &[Coding::Gzip, Coding::Brotli]),
            Some(Coding::Gzip)
        );
        assert_eq!(
            choose("BR ; Q=0.5, x-gzip;q=0.4", &SERVER),
            Some(Coding::Brotli)
        );
        assert_eq!(choose("x-gzip;q=0.4", &SERVER), Some(Coding::Gzip));
    }

    #[test]
    fn nothing_is_chosen_the_client_does_not_accept() {
        assert_eq!(choose("", &SERVER), None);
        assert_eq!(choose("identity", &SERVER), None);
        assert_eq!(choose("deflate", &SERVER), None);
        assert_eq!(choose("gzip;q=0, br;q=0.000", &SERVER), None);
        assert_eq!(choose("br", &[Coding::Gzip]), None);
        // A wildcard covers what is not named; a named q=0 stays refused.
        assert_eq!(choose("*;q=0.5, zstd;q=0", &SERVER), Some(Coding::Brotli));
        assert_eq!(choose("*;q=0", &SERVER), None);
    }

    #[test]
    fn malformed_weights_are_ignored() {
        assert_eq!(choose("zstd;q=2, gzip", &SERVER), Some(Coding::Gzip));
        assert_eq!(choose("zstd;q=0.5555, gzip;q=abc", &SERVER), None);
        assert_eq!(choose("zstd;q, br;q=1.0", &SERVER), Some(Coding::Brotli));
        assert_eq!(choose(",,;q=1, gzip;foo=bar", &SERVER), Some(Coding::Gzip));
    }

    #[test]
    fn listed_types_match_by_media_type_or_top_level() {
        let types = ["application/json".to_owned(), "text/*".to_owned()];
        assert!(type_listed("application/json", &types));
        assert!(type_listed("Application/JSON; charset=utf-8", &types));
        assert!(type_listed("text/html;charset=utf-8", &types));
        assert!(!type_listed("text/", &types));
        assert!(!type_listed("image/png", &types));
        assert!(!type_listed("application/json-seq", &types));
        assert!(valid_type_pattern("image/svg+xml") && valid_type_pattern("text/*"));
        assert!(
            !valid_type_pattern("*/*")
                && !valid_type_pattern("text")
                && !valid_type_pattern("a /b")
        );
    }
}
