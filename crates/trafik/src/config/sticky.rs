//! `[pool.sticky]`: keeping a client on one backend, by a signed cookie or by the pool's hash key.

use toml::Spanned;
use trafik_proxy::StickyPlan;

use super::report::Report;
use super::schema::Sticky;

/// `pool` is the pool's field path; `has_key` whether the pool sets `hash_key`; `virtual_nodes`
/// the pool's ring size, the default for a consistent ring.
pub fn check(
    report: &mut Report,
    pool: &str,
    sticky: Spanned<Sticky>,
    has_key: bool,
    virtual_nodes: u32,
) -> Option<StickyPlan> {
    let sticky = sticky.into_inner();
    let mode = sticky.mode.get_ref().as_str();
    if matches!(mode, "modulo" | "consistent") && !has_key {
        report.error(
            sticky.mode.span(),
            &format!("{pool}.hash_key"),
            super::pool::key_needed(&format!("sticky mode {mode}")),
        );
    }
    match mode {
        "cookie" => Some(StickyPlan::Cookie {
            name: sticky.cookie,
            secret: sticky.secret.map_or_else(random_secret, String::into_bytes),
        }),
        "modulo" => Some(StickyPlan::Modulo),
        "consistent" => {
            let virtual_nodes = match sticky.virtual_nodes {
                Some(nodes) => {
                    let field = format!("{pool}.sticky.virtual_nodes");
                    super::pool::virtual_nodes_in_range(report, &nodes, &field);
                    nodes.into_inner()
                }
                None => virtual_nodes,
            };
            Some(StickyPlan::Consistent { virtual_nodes })
        }
        other => {
            report.error(
                sticky.mode.span(),
                &format!("{pool}.sticky.mode"),
                format!("expected \"cookie\", \"modulo\" or \"consistent\", found {other:?}"),
            );
            None
        }
    }
}

/// A cookie-signing secret for this process, from the kernel's random source: made once, so a
/// reload keeps every cookie already issued valid.
fn random_secret() -> Vec<u8> {
    static SECRET: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    SECRET.get_or_init(fresh_secret).clone()
}

fn fresh_secret() -> Vec<u8> {
    use std::io::Read;
    let mut secret = vec![0u8; 32];
    if let Err(error) =
        std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut secret))
    {
        // Without randomness the cookies are still HMAC-signed, only with a guessable key.
        tracing::warn!(%error, "no /dev/urandom: sticky cookies use a time-based secret");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        secret = now.as_nanos().to_le_bytes().to_vec();
    }
    secret
}
