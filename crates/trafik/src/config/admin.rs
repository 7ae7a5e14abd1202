//! `[admin]`: where the status, metrics and drain API listens, and the bearer token it requires
//! when it listens beyond loopback.

use std::net::SocketAddr;

use toml::Spanned;
use trafik_proxy::admin::AdminToken;

use super::report::Report;
use super::schema::Admin;

/// The admin address and its token, when `[admin]` is present.
pub fn check(
    report: &mut Report,
    admin: Option<Spanned<Admin>>,
) -> (Option<SocketAddr>, Option<AdminToken>) {
    let Some(admin) = admin else {
        return (None, None);
    };
    let span = admin.span();
    let admin = admin.into_inner();
    let token = token(report, &admin);
    let Some(listen) = report.required(
        admin.listen,
        span,
        "admin.listen",
        "listen = \"127.0.0.1:9090\", where the admin API accepts requests",
    ) else {
        return (None, token);
    };
    let address = listen.get_ref().0;
    if !address.ip().is_loopback() {
        if !admin.allow_remote {
            let allow = report.setting("admin.allow_remote", "true");
            report.error(
                listen.span(),
                "admin.listen",
                format!("{address} is not loopback, so it needs {allow}"),
            );
        }
        let unset =
            |value: &Option<Spanned<String>>| value.as_ref().is_none_or(|v| v.get_ref().is_empty());
        if unset(&admin.token) && unset(&admin.token_file) {
            let token = report.setting("admin.token_file", "\"PATH\"");
            report.error(
                listen.span(),
                "admin.listen",
                format!("{address} is not loopback, so it needs a bearer token every request must carry: {token} (or token = \"…\")"),
            );
        }
    }
    (Some(address), token)
}

/// The token written inline or read from `token_file` (its first line).
fn token(report: &mut Report, admin: &Admin) -> Option<AdminToken> {
    // An empty value is the same as none (the README's listing shows the defaults).
    let (written, field, span) = match (given_text(&admin.token), given_text(&admin.token_file)) {
        (Some(_), Some(file)) => {
            report.error(
                file.span(),
                "admin.token_file",
                "expected either token or token_file, not both",
            );
            return None;
        }
        (Some(token), None) => (token.get_ref().clone(), "admin.token", token.span()),
        (None, Some(file)) => {
            let path = report.path(file.get_ref());
            match std::fs::read_to_string(&path) {
                Ok(text) => (
                    text.lines().next().unwrap_or_default().to_owned(),
                    "admin.token_file",
                    file.span(),
                ),
                Err(error) => {
                    report.error(
                        file.span(),
                        "admin.token_file",
                        format!(
                            "expected a readable file holding the token, {}: {error}",
                            path.display()
                        ),
                    );
                    return None;
                }
            }
        }
        (None, None) => return None,
    };
    match AdminToken::new(written.trim()) {
        Ok(token) => Some(token),
        Err(weakness) => {
            report.error(span, field, weakness);
            None
        }
    }
}

/// A text setting that is present and not empty.
fn given_text(value: &Option<Spanned<String>>) -> Option<&Spanned<String>> {
    value.as_ref().filter(|v| !v.get_ref().is_empty())
}
