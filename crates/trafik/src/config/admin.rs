//! `[admin]`: where the status, metrics and drain API listens.

use std::net::SocketAddr;

use toml::Spanned;

use super::report::Report;
use super::schema::Admin;

pub fn check(report: &mut Report, admin: Option<Spanned<Admin>>) -> Option<SocketAddr> {
    let span = admin.as_ref()?.span();
    let admin = admin?.into_inner();
    let listen = report.required(
        admin.listen,
        span,
        "admin.listen",
        "listen = \"127.0.0.1:9090\", where the admin API accepts requests",
    )?;
    let address = listen.get_ref().0;
    if !address.ip().is_loopback() && !admin.allow_remote {
        let allow = report.setting("admin.allow_remote", "true");
        report.error(
            listen.span(),
            "admin.listen",
            format!(
                "the admin API has no authentication, so {address} (not loopback) needs {allow}"
            ),
        );
    }
    Some(address)
}
