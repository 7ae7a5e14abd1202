//! `trafik proxy`: quick mode. The flags become the same sections a file has, and go through
//! the same checks and defaults, so quick mode and `serve` cannot drift apart.

use std::process::ExitCode;

use trafik_balance::Algorithm;

use super::serve::serve;
use crate::cli::{ProxyArgs, ProxyMode, Switch};
use crate::config::schema::{
    Admin, Backend, File, Health, Listener, ListenerTls, Outlier, Pool, Protocol, Route, Server,
    UpstreamTimeouts, unplaced,
};
use crate::config::values::{BackendAddress, Dur};
use crate::config::{self, Source};

/// The name of quick mode's only listener and pool.
const NAME: &str = "default";

pub fn run(args: ProxyArgs) -> Result<ExitCode, String> {
    let loaded = config::check(args.into(), Source::Flags { flag })
        .map_err(|errors| config::render_errors(&errors))?;
    serve(loaded, None)?;
    Ok(ExitCode::SUCCESS)
}

impl From<ProxyArgs> for File {
    fn from(args: ProxyArgs) -> File {
        // Hash rules need a key; quick mode keys on the client's address unless told otherwise.
        let keyed = args.algorithm.parse().is_ok_and(Algorithm::uses_key);
        let hash_key = args
            .hash_key
            .or_else(|| keyed.then(|| "client-ip".to_owned()));
        let backends = args.to.into_iter().map(|address| {
            unplaced(Backend {
                address: Some(unplaced(BackendAddress::Ip(address.0))),
                ..Backend::default()
            })
        });
        // As in the course's lesson: one failed probe takes a backend out, one passed brings it
        // back, and a probe never outlasts its interval.
        let health = args.health_path.map(|path| {
            let interval = args.health_interval;
            let timeout = Dur(interval.0.min(Health::DEFAULT_TIMEOUT));
            unplaced(Health {
                path: unplaced(path),
                interval: unplaced(interval),
                timeout: unplaced(timeout),
                fall: unplaced(1),
                rise: unplaced(1),
                ..Health::default()
            })
        });
        let pool = Pool {
            name: Some(unplaced(NAME.to_owned())),
            algorithm: unplaced(args.algorithm),
            backends: Some(unplaced(backends.collect())),
            health,
            retries: args.retries,
            timeouts: UpstreamTimeouts {
                connect: unplaced(args.connect_timeout),
                response: unplaced(args.response_timeout),
            },
            hash_key: hash_key.map(unplaced),
            proxy_protocol: args.proxy_protocol.map(unplaced),
            outlier: Outlier {
                enabled: args.outlier == Switch::On,
                ..Outlier::default()
            },
            ..Pool::default()
        };
        // An http listener reaches the pool through one route for every path; a tcp listener
        // names it.
        let listener = match args.mode {
            ProxyMode::Http => Listener {
                routes: vec![unplaced(Route {
                    pool: Some(unplaced(NAME.to_owned())),
                    ..Route::default()
                })],
                ..Listener::default()
            },
            ProxyMode::Tcp => Listener {
                protocol: unplaced(Protocol::Tcp),
                pool: Some(unplaced(NAME.to_owned())),
                ..Listener::default()
            },
        };
        let listener = Listener {
            name: Some(unplaced(NAME.to_owned())),
            listen: Some(unplaced(args.listen)),
            ..listener
        };
        let listener = with_tls(listener, args.tls_cert, args.tls_key);
        let admin = args.admin.map(|listen| {
            unplaced(Admin {
                listen: Some(unplaced(listen)),
                allow_remote: args.admin_allow_remote,
                token: None,
                token_file: args.admin_token_file.map(unplaced),
            })
        });
        File {
            server: Server {
                name: args.name,
                trace_header: args.trace_header.map(unplaced),
                workers: args.workers.map(unplaced),
                access_log: args.access_log,
                engine: args.engine.unwrap_or_default(),
                ..Server::default()
            },
            admin,
            upstreams: Vec::new(),
            listeners: vec![unplaced(listener)],
            pools: vec![unplaced(pool)],
            caches: Vec::new(),
            dns: None,
            tracing: Default::default(),
        }
    }
}

/// Certificates make the listener https. `--tls-cert` and `--tls-key` pair up in order; one
/// without the other leaves an entry that the checker reports as missing its file.
fn with_tls(mut listener: Listener, certs: Vec<String>, keys: Vec<String>) -> Listener {
    let pairs = certs.len().max(keys.len());
    let (mut certs, mut keys) = (certs.into_iter(), keys.into_iter());
    listener.tls = (0..pairs)
        .map(|_| {
            unplaced(ListenerTls {
                cert: certs.next().map(unplaced),
                key: keys.next().map(unplaced),
                acme: None,
            })
        })
        .collect();
    if pairs > 0 {
        listener.protocol = unplaced(Protocol::Https);
    }
    listener
}

/// The flag that sets a config field, so that errors name what the user typed.
fn flag(field: &str) -> Option<&'static str> {
    Some(match field {
        "server.name" => "--name",
        "server.workers" => "--workers",
        "server.trace_header" => "--trace-header",
        "admin.listen" => "--admin",
        "admin.allow_remote" => "--admin-allow-remote",
        "admin.token_file" => "--admin-token-file",
        "listener[0].listen" => "--listen",
        "pool[0].algorithm" => "--algorithm",
        "pool[0].hash_key" => "--hash-key",
        "pool[0].retries" => "--retries",
        "pool[0].timeouts.connect" => "--connect-timeout",
        "pool[0].timeouts.response" => "--response-timeout",
        "pool[0].proxy_protocol" => "--proxy-protocol",
        "pool[0].health.path" => "--health-path",
        "pool[0].health.interval" => "--health-interval",
        backend if backend.starts_with("pool[0].backends") => "--to",
        cert if cert.starts_with("listener[0].tls") && cert.ends_with(".cert") => "--tls-cert",
        key if key.starts_with("listener[0].tls") && key.ends_with(".key") => "--tls-key",
        _ => return None,
    })
}
