//! `[[upstream]]`: built-in replicas of the course's tracking service, run in this process so
//! that one file is a whole runnable topology.

use std::net::SocketAddr;

use toml::Spanned;
use trafik_upstream::ReplicaConfig;

use super::report::Report;
use super::schema::Upstream;

pub fn check(
    report: &mut Report,
    upstreams: Vec<Spanned<Upstream>>,
) -> Vec<(SocketAddr, ReplicaConfig)> {
    let mut replicas: Vec<(SocketAddr, ReplicaConfig)> = Vec::new();
    for (i, upstream) in upstreams.into_iter().enumerate() {
        let field = format!("upstream[{i}]");
        let span = upstream.span();
        let upstream = upstream.into_inner();
        let name = report.required(
            upstream.name,
            span.clone(),
            &format!("{field}.name"),
            "name = \"k1\", the name the replica answers with (x-kopya)",
        );
        let listen = report.required(
            upstream.listen,
            span,
            &format!("{field}.listen"),
            "listen = \"127.0.0.1:8081\", where the replica accepts requests",
        );
        let (Some(name), Some(listen)) = (name, listen) else {
            continue;
        };
        let address = listen.get_ref().0;
        // Port 0 asks for any free port, so only fixed ports can clash.
        if address.port() != 0 && replicas.iter().any(|(a, _)| *a == address) {
            report.error(
                listen.span(),
                &format!("{field}.listen"),
                format!("another [[upstream]] already listens on {address}"),
            );
        }
        replicas.push((
            address,
            ReplicaConfig {
                name: name.into_inner(),
                delay: upstream.delay.0,
                ..ReplicaConfig::default()
            },
        ));
    }
    replicas
}
