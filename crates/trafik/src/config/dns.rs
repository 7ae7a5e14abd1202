//! `[dns]`: the authoritative DNS server — its regions (addresses and how their liveness is
//! known), client groups, zones with static records, and names answered by a routing policy.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use toml::Spanned;
use trafik_dns::dnssec::{Denial, ZoneKeys};
use trafik_dns::geoip::GeoDatabase;
use trafik_dns::master::ZoneFile;
use trafik_dns::policy::{
    AllDown, LONGEST_PATTERN, Policy, Prefix, Weighted, WeightedChoice, pattern_from_weights,
    pattern_length,
};
use trafik_dns::policy::{GeoGroups, Places};
use trafik_dns::rate::RateLimitPlan;
use trafik_dns::transfer::{TransferPlan, TsigKey};
use trafik_dns::zone::{
    DnsPlan, NamePlan, RecordData, RecordPlan, RegionPlan, SoaPlan, ZonePlan, parse_name,
};
use trafik_dns::{DomainName, RecordType};
use trafik_proxy::dns::{DnsServicePlan, RegionHealth};

use super::health;
use super::report::Report;
use super::schema::{
    Dns, DnsDnssec, DnsGeoip, DnsGroup, DnsName, DnsRateLimit, DnsRecord, DnsRegion, DnsTransfer,
    DnsTsig, DnsZone, Health,
};
use crate::suggest::did_you_mean;

/// The ECS subnets a consistent weighted name keeps together (IPv4, IPv6).
const CONSISTENT_SUBNET: (u8, u8) = (24, 56);

/// `pools` every pool's name, for regions that follow a pool.
pub fn check(
    report: &mut Report,
    dns: Option<Spanned<Dns>>,
    pools: &[Option<String>],
) -> Option<DnsServicePlan> {
    let span = dns.as_ref()?.span();
    let dns = dns?.into_inner();
    let listen = report.required(
        dns.listen,
        span.clone(),
        "dns.listen",
        "listen = \"127.0.0.1:5300\", where the DNS server answers (UDP and TCP)",
    );
    let region_names = names(&dns.regions, |r| &r.name);
    let group_names = names(&dns.groups, |g| &g.name);
    let known = Known {
        regions: &region_names,
        groups: &group_names,
    };
    if dns.regions.len() > trafik_dns::policy::Live::MAX_REGIONS {
        report.error(
            span.clone(),
            "dns.region",
            format!(
                "expected at most {} regions, found {}",
                trafik_dns::policy::Live::MAX_REGIONS,
                dns.regions.len()
            ),
        );
    }
    let (regions, health): (Vec<_>, Vec<_>) = dns
        .regions
        .into_iter()
        .enumerate()
        .map(|(i, region)| check_region(report, i, region, &region_names, pools))
        .unzip();
    let database = dns
        .geoip
        .and_then(|geoip| check_geoip(report, geoip))
        .map(Arc::new);
    let (groups, places): (Vec<_>, Vec<_>) = dns
        .groups
        .into_iter()
        .enumerate()
        .map(|(i, group)| check_group(report, i, group, &group_names, database.is_some()))
        .unzip();
    let geoip = database.map(|database| GeoGroups { database, places });
    if dns.zones.is_empty() {
        report.error(
            span,
            "dns.zone",
            "expected at least one [[dns.zone]] with origin = \"example.test.\"",
        );
    }
    let zones: Vec<_> = dns
        .zones
        .into_iter()
        .enumerate()
        .map(|(i, zone)| check_zone(report, i, zone, &known))
        .collect();
    let rate_limit = dns.rate_limit.map(|limit| check_rate_limit(report, limit));
    Some(DnsServicePlan {
        listen: listen?.into_inner().0,
        zones: DnsPlan {
            regions,
            groups,
            zones: zones.into_iter().collect::<Option<Vec<_>>>()?,
            query_log: dns.query_log,
            rate_limit,
            geoip,
        },
        health,
    })
}

fn check_rate_limit(report: &mut Report, limit: Spanned<DnsRateLimit>) -> RateLimitPlan {
    let limit = limit.into_inner();
    let rate = &limit.responses_per_second;
    if *rate.get_ref() == 0 {
        report.error(
            rate.span(),
            "dns.rate_limit.responses_per_second",
            "expected at least 1 answer a second (remove [dns.rate_limit] to turn it off)",
        );
    }
    RateLimitPlan {
        responses_per_second: *rate.get_ref(),
        slip: limit.slip,
    }
}

/// `[dns.zone.transfer]`: prefixes, secondaries' addresses and the TSIG key, each bad one
/// reported where it is written.
fn check_transfer(
    report: &mut Report,
    field: &str,
    transfer: Spanned<DnsTransfer>,
) -> TransferPlan {
    let span = transfer.span();
    let transfer = transfer.into_inner();
    if transfer.allow.is_empty() {
        report.error(
            span,
            &format!("{field}.allow"),
            "missing `allow`: add allow = [\"192.0.2.53/32\"], the addresses that may transfer the zone",
        );
    }
    let allow = transfer
        .allow
        .iter()
        .filter_map(|prefix| {
            let parsed = Prefix::parse(prefix.get_ref());
            if parsed.is_none() {
                report.error(
                    prefix.span(),
                    &format!("{field}.allow"),
                    format!(
                        "expected an address prefix such as \"127.0.0.1/32\" or \"2001:db8::/48\", found {:?}",
                        prefix.get_ref()
                    ),
                );
            }
            parsed
        })
        .collect();
    let notify = transfer
        .notify
        .iter()
        .filter_map(|target| {
            target
                .get_ref()
                .parse()
                .map_err(|_| {
                    report.error(
                        target.span(),
                        &format!("{field}.notify"),
                        format!(
                            "expected a secondary's address and port such as \"127.0.0.1:5301\", found {:?}",
                            target.get_ref()
                        ),
                    )
                })
                .ok()
        })
        .collect();
    let tsig = transfer
        .tsig
        .and_then(|tsig| check_tsig(report, &format!("{field}.tsig"), tsig));
    TransferPlan {
        allow,
        notify,
        tsig,
    }
}

/// Keys shorter than this are refused: RFC 8945 §6 asks for at least the MAC's length (32
/// bytes for HMAC-SHA256); half of it is the floor.
const MIN_TSIG_SECRET: usize = 16;

fn check_tsig(report: &mut Report, field: &str, tsig: Spanned<DnsTsig>) -> Option<TsigKey> {
    use base64::Engine as _;
    let span = tsig.span();
    let tsig = tsig.into_inner();
    let errors_before = report.error_count();
    if !tsig.algorithm.get_ref().eq_ignore_ascii_case("hmac-sha256") {
        report.error(
            tsig.algorithm.span(),
            &format!("{field}.algorithm"),
            format!(
                "expected \"hmac-sha256\", found {:?}",
                tsig.algorithm.get_ref()
            ),
        );
    }
    let name = report.required(
        tsig.name,
        span.clone(),
        &format!("{field}.name"),
        "name = \"aktarim\", the key's name as the secondaries know it",
    );
    let secret = report.required(
        tsig.secret,
        span,
        &format!("{field}.secret"),
        "secret = \"BASE64\", the key (`tsig-keygen -a hmac-sha256 NAME` makes one)",
    );
    let name = name?;
    if name.get_ref().is_empty() || DomainName::from_ascii(name.get_ref()).is_err() {
        report.error(
            name.span(),
            &format!("{field}.name"),
            format!(
                "expected a key name such as \"aktarim\", found {:?}",
                name.get_ref()
            ),
        );
    }
    let secret = secret?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(secret.get_ref().trim())
        .map_err(|error| error.to_string())
        .and_then(|decoded| {
            if decoded.len() < MIN_TSIG_SECRET {
                Err(format!(
                    "{} bytes is too short; make one with `tsig-keygen -a hmac-sha256 {}` or `openssl rand -base64 32`",
                    decoded.len(),
                    name.get_ref()
                ))
            } else {
                Ok(decoded)
            }
        });
    let decoded = decoded
        .map_err(|error| {
            report.error(
                secret.span(),
                &format!("{field}.secret"),
                format!("expected a base64 secret of at least {MIN_TSIG_SECRET} bytes: {error}"),
            )
        })
        .ok()?;
    (report.error_count() == errors_before).then(|| TsigKey {
        name: name.into_inner(),
        secret: decoded,
    })
}

/// The region and group names, by position, for references and duplicates.
struct Known<'a> {
    regions: &'a [Option<String>],
    groups: &'a [Option<String>],
}

fn names<T>(items: &[Spanned<T>], name: fn(&T) -> &Option<Spanned<String>>) -> Vec<Option<String>> {
    items
        .iter()
        .map(|item| name(item.get_ref()).as_ref().map(|n| n.get_ref().clone()))
        .collect()
}

/// A required, unique name.
fn unique_name(
    report: &mut Report,
    name: Option<Spanned<String>>,
    span: std::ops::Range<usize>,
    field: &str,
    all: &[Option<String>],
    example: &str,
) -> String {
    let Some(name) = report.required(name, span, &format!("{field}.name"), example) else {
        return String::new();
    };
    if all
        .iter()
        .flatten()
        .filter(|n| *n == name.get_ref())
        .count()
        > 1
    {
        report.error(
            name.span(),
            &format!("{field}.name"),
            format!(
                "{:?} is defined more than once; names must be unique",
                name.get_ref()
            ),
        );
    }
    name.into_inner()
}

fn check_region(
    report: &mut Report,
    i: usize,
    region: Spanned<DnsRegion>,
    all: &[Option<String>],
    pools: &[Option<String>],
) -> (RegionPlan, RegionHealth) {
    let field = format!("dns.region[{i}]");
    let span = region.span();
    let region = region.into_inner();
    let name = unique_name(
        report,
        region.name,
        span.clone(),
        &field,
        all,
        "name = \"b34\", the name policies use for this region",
    );
    if region.addresses.is_empty() {
        report.error(
            span.clone(),
            &format!("{field}.addresses"),
            "missing `addresses`: add addresses = [\"127.0.0.34\"], what the region's names answer",
        );
    }
    let addresses = region
        .addresses
        .iter()
        .filter_map(|address| {
            address
                .get_ref()
                .parse::<IpAddr>()
                .map_err(|_| {
                    report.error(
                        address.span(),
                        &format!("{field}.addresses"),
                        format!("expected an IP address, found {:?}", address.get_ref()),
                    )
                })
                .ok()
        })
        .collect();
    if let (Some(_), Some(pool)) = (&region.check, &region.pool) {
        report.error(
            pool.span(),
            &format!("{field}.pool"),
            "a region follows either its own `check` or a `pool`, not both",
        );
    }
    if let (None, Some(health)) = (&region.check, &region.health) {
        report.error(
            health.span(),
            &format!("{field}.health"),
            "`health` sets how `check` is probed: add check = \"127.0.0.1:8434\"",
        );
    }
    let health = match (region.check, region.pool) {
        (Some(check), _) => {
            let settings = region
                .health
                .unwrap_or_else(|| super::schema::unplaced(Health::default()));
            RegionHealth::Check {
                address: check.into_inner().0,
                plan: health::check(report, &field, settings, false),
            }
        }
        (None, Some(pool)) => {
            if !pools.iter().flatten().any(|p| p == pool.get_ref()) {
                let hint = did_you_mean(pool.get_ref(), pools.iter().flatten().map(String::as_str))
                    .map(|near| format!(" (did you mean {near:?}?)"))
                    .unwrap_or_default();
                report.error(
                    pool.span(),
                    &format!("{field}.pool"),
                    format!("no pool is named {:?}{hint}", pool.get_ref()),
                );
            }
            RegionHealth::Pool(pool.into_inner())
        }
        (None, None) => RegionHealth::Always,
    };
    (RegionPlan { name, addresses }, health)
}

/// The database `[dns.geoip]` names, read now: `trafik check`, `serve` and every reload read
/// the file as it is then.
fn check_geoip(report: &mut Report, geoip: Spanned<DnsGeoip>) -> Option<GeoDatabase> {
    let span = geoip.span();
    let database = report.required(
        geoip.into_inner().database,
        span,
        "dns.geoip.database",
        "database = \"GeoLite2-Country.mmdb\", a MaxMind DB file",
    )?;
    let path = report.path(database.get_ref());
    let read = std::fs::read(&path)
        .map_err(|error| error.to_string())
        .and_then(GeoDatabase::read);
    read.map_err(|error| {
        report.error(
            database.span(),
            "dns.geoip.database",
            format!(
                "cannot read the MaxMind database {}: {error}",
                path.display()
            ),
        )
    })
    .ok()
}

fn check_group(
    report: &mut Report,
    i: usize,
    group: Spanned<DnsGroup>,
    all: &[Option<String>],
    geoip: bool,
) -> ((String, Vec<Prefix>), Places) {
    let field = format!("dns.group[{i}]");
    let span = group.span();
    let group = group.into_inner();
    let name = unique_name(
        report,
        group.name,
        span.clone(),
        &field,
        all,
        "name = \"g1\", the name policies use for this client group",
    );
    let places_listed =
        !(group.countries.is_empty() && group.asns.is_empty() && group.continents.is_empty());
    if group.prefixes.is_empty() && !places_listed {
        report.error(
            span.clone(),
            &format!("{field}.prefixes"),
            "missing `prefixes`: add prefixes = [\"10.1.0.0/16\"] (or, with [dns.geoip], countries, continents or asns), the clients in this group",
        );
    }
    let first_place = (group.countries.first().map(Spanned::span))
        .or_else(|| group.asns.first().map(Spanned::span))
        .or_else(|| group.continents.first().map(Spanned::span));
    if let (Some(place), false) = (first_place, geoip) {
        report.error(
            place,
            &field,
            "countries, continents and asns are looked up in a GeoIP database: add [dns.geoip] database = \"….mmdb\"",
        );
    }
    let code = |report: &mut Report, text: &Spanned<String>, key: &str, known: &[&str]| {
        let upper = text.get_ref().to_ascii_uppercase();
        let fits = upper.len() == 2 && upper.bytes().all(|b| b.is_ascii_uppercase());
        if !fits || !(known.is_empty() || known.contains(&upper.as_str())) {
            let expected = if known.is_empty() {
                "a two-letter ISO 3166 country code such as \"TR\"".to_owned()
            } else {
                format!("one of {}", known.join(", "))
            };
            report.error(
                text.span(),
                &format!("{field}.{key}"),
                format!("expected {expected}, found {:?}", text.get_ref()),
            );
        }
        upper
    };
    let places = Places {
        countries: group
            .countries
            .iter()
            .map(|c| code(report, c, "countries", &[]))
            .collect(),
        asns: group.asns.iter().map(|a| *a.get_ref()).collect(),
        continents: group
            .continents
            .iter()
            .map(|c| code(report, c, "continents", &CONTINENTS))
            .collect(),
    };
    let prefixes = group
        .prefixes
        .iter()
        .filter_map(|prefix| {
            let parsed = Prefix::parse(prefix.get_ref());
            if parsed.is_none() {
                report.error(
                    prefix.span(),
                    &format!("{field}.prefixes"),
                    format!(
                        "expected an address prefix such as \"10.1.0.0/16\", found {:?}",
                        prefix.get_ref()
                    ),
                );
            }
            parsed
        })
        .collect();
    ((name, prefixes), places)
}

/// MaxMind's continent codes.
const CONTINENTS: [&str; 7] = ["AF", "AN", "AS", "EU", "NA", "OC", "SA"];

/// A domain name, or an error at its place.
fn domain(
    report: &mut Report,
    text: &Spanned<String>,
    field: &str,
    origin: Option<&trafik_dns::DomainName>,
) -> Option<trafik_dns::DomainName> {
    parse_name(text.get_ref(), origin)
        .map_err(|error| {
            report.error(
                text.span(),
                field,
                format!("expected a domain name: {error}"),
            )
        })
        .ok()
}

fn check_zone(
    report: &mut Report,
    i: usize,
    zone: Spanned<DnsZone>,
    known: &Known,
) -> Option<ZonePlan> {
    let field = format!("dns.zone[{i}]");
    let span = zone.span();
    let zone = zone.into_inner();
    let origin = report.required(
        zone.origin,
        span.clone(),
        &format!("{field}.origin"),
        "origin = \"kargo.test.\", the zone's apex",
    )?;
    let apex = domain(report, &origin, &format!("{field}.origin"), None)?;
    let relative = |report: &mut Report, text: &Spanned<String>, key: &str| {
        domain(report, text, &format!("{field}.{key}"), Some(&apex)).map(|_| text.get_ref().clone())
    };
    let errors_before = report.error_count();
    let imported = zone
        .file
        .as_ref()
        .map(|file| import(report, file, &format!("{field}.file"), &apex, zone.ttl));
    // A file that did not read has told its error; what it would have held is not missing.
    let unread = matches!(imported, Some(None));
    let imported = imported.flatten().unwrap_or_default();
    if zone.name_servers.is_empty() && imported.name_servers.is_empty() && !unread {
        report.error(
            span.clone(),
            &format!("{field}.name_servers"),
            "missing `name_servers`: add name_servers = [\"ns1\"] (or NS records at the apex of `file`), the zone's NS records",
        );
    }
    let mut name_servers: Vec<String> = zone
        .name_servers
        .iter()
        .filter_map(|ns| relative(report, ns, "name_servers"))
        .collect();
    name_servers.extend(imported.name_servers);
    let mname = match &zone.soa.mname {
        Some(mname) => relative(report, mname, "soa.mname"),
        None => name_servers.first().cloned(),
    };
    let rname = relative(report, &zone.soa.rname, "soa.rname");
    let mut records: Vec<RecordPlan> = zone
        .records
        .into_iter()
        .enumerate()
        .filter_map(|(r, record)| {
            check_record(report, &format!("{field}.record[{r}]"), record, &apex)
        })
        .collect();
    let file_owners = imported.records.len();
    records.extend(imported.records);
    let written = names(&zone.names, |n| &n.name);
    // The config's own records; the file's are checked with the whole zone below.
    let owners: Vec<_> = records[..records.len() - file_owners]
        .iter()
        .filter_map(|r| parse_name(&r.name, Some(&apex)).ok())
        .collect();
    for (n, name) in zone.names.iter().enumerate() {
        let Some(written) = &name.get_ref().name else {
            continue;
        };
        let owner = parse_name(written.get_ref(), Some(&apex));
        if owner.is_ok_and(|owner| owners.contains(&owner)) {
            report.error(
                written.span(),
                &format!("{field}.name[{n}].name"),
                format!(
                    "{:?} also has static records; a name answers either by its policy or by its records",
                    written.get_ref()
                ),
            );
        }
    }
    let names: Vec<NamePlan> = zone
        .names
        .into_iter()
        .enumerate()
        .filter_map(|(n, name)| {
            let field = format!("{field}.name[{n}]");
            check_name(report, &field, name, &apex, zone.ttl, known, &written)
        })
        .collect();
    let transfer = zone
        .transfer
        .map(|transfer| check_transfer(report, &format!("{field}.transfer"), transfer));
    let dnssec = zone
        .dnssec
        .and_then(|dnssec| check_dnssec(report, &format!("{field}.dnssec"), dnssec, &apex));
    let soa = match imported.soa {
        Some(soa) => soa,
        None => SoaPlan {
            mname: mname?,
            rname: rname?,
            serial: zone.soa.serial,
            refresh: zone.soa.refresh,
            retry: zone.soa.retry,
            expire: zone.soa.expire,
            minimum: zone.soa.minimum,
        },
    };
    let plan = ZonePlan {
        origin: apex.to_string(),
        ttl: zone.ttl,
        soa,
        name_servers,
        records,
        names,
        transfer,
        dnssec,
    };
    // What only the whole zone shows (a CNAME beside a file's record, a policy name below a
    // delegation), once each part read clean.
    if report.error_count() == errors_before {
        for problem in plan.problems() {
            report.error(span.clone(), &field, problem);
        }
    }
    Some(plan)
}

/// `[dns.zone.dnssec]`: reads the zone's keys from `keys` (relative to the config file),
/// making those absent, so start and reload both see the files as they are now.
fn check_dnssec(
    report: &mut Report,
    field: &str,
    dnssec: Spanned<DnsDnssec>,
    apex: &DomainName,
) -> Option<ZoneKeys> {
    let span = dnssec.span();
    let dnssec = dnssec.into_inner();
    let denial = match &dnssec.denial {
        None => Denial::Nsec,
        Some(denial) => match denial.get_ref().to_ascii_lowercase().as_str() {
            "nsec" => Denial::Nsec,
            "nsec3" => Denial::Nsec3,
            other => {
                report.error(
                    denial.span(),
                    &format!("{field}.denial"),
                    format!("expected \"nsec\" or \"nsec3\", found {other:?}"),
                );
                Denial::Nsec
            }
        },
    };
    let keys = report.required(
        dnssec.keys,
        span,
        &format!("{field}.keys"),
        "keys = \"dns-keys/\", the folder with the zone's KSK and ZSK (made when absent)",
    )?;
    let folder = report.path(keys.get_ref());
    ZoneKeys::load(&folder, apex)
        .map(|keys| ZoneKeys { denial, ..keys })
        .map_err(|error| report.error(keys.span(), &format!("{field}.keys"), error))
        .ok()
}

/// Reads the master file `file` names for the zone `apex`; an error names the file's line.
fn import(
    report: &mut Report,
    file: &Spanned<String>,
    field: &str,
    apex: &DomainName,
    ttl: u32,
) -> Option<ZoneFile> {
    let path = report.path(file.get_ref());
    let text = std::fs::read_to_string(&path)
        .map_err(|error| {
            report.error(
                file.span(),
                field,
                format!("cannot read the zone file {}: {error}", path.display()),
            )
        })
        .ok()?;
    ZoneFile::read(&text, apex, ttl)
        .map_err(|error| {
            let place = format!("{}:{}", path.display(), error.line);
            report.error_in_file(place, field, error.message);
        })
        .ok()
}

fn check_record(
    report: &mut Report,
    field: &str,
    record: Spanned<DnsRecord>,
    apex: &trafik_dns::DomainName,
) -> Option<RecordPlan> {
    let span = record.span();
    let record = record.into_inner();
    domain(report, &record.name, &format!("{field}.name"), Some(apex))?;
    let kind = report.required(
        record.kind,
        span.clone(),
        &format!("{field}.type"),
        "type = \"A\" (or AAAA, CNAME, TXT, SRV, NS, MX, CAA, PTR, DS)",
    );
    let value = report.required(
        record.value,
        span,
        &format!("{field}.value"),
        "value = \"127.0.0.1\", the record's data as a zone file writes it",
    );
    let (kind, value) = (kind?, value?);
    let text = value.get_ref().as_str();
    let bad = |report: &mut Report, expected: &str| {
        report.error(
            value.span(),
            &format!("{field}.value"),
            format!("expected {expected}, found {text:?}"),
        );
        None
    };
    let target = |report: &mut Report, text: &str| {
        let written = Spanned::new(value.span(), text.to_owned());
        domain(report, &written, &format!("{field}.value"), Some(apex)).map(|_| text.to_owned())
    };
    let data = match kind.get_ref().to_ascii_uppercase().as_str() {
        "A" => match text.parse() {
            Ok(v4) => RecordData::A(v4),
            Err(_) => return bad(report, "an IPv4 address"),
        },
        "AAAA" => match text.parse() {
            Ok(v6) => RecordData::Aaaa(v6),
            Err(_) => return bad(report, "an IPv6 address"),
        },
        "CNAME" => RecordData::Cname(target(report, text)?),
        "NS" => RecordData::Ns(target(report, text)?),
        "TXT" => {
            if text.len() > 255 {
                return bad(report, "text of at most 255 bytes");
            }
            RecordData::Txt(vec![text.to_owned()])
        }
        "SRV" => {
            let parts: Vec<&str> = text.split_whitespace().collect();
            let numbers: Option<Vec<u16>> = parts
                .get(..3)
                .map(|n| n.iter().filter_map(|p| p.parse().ok()).collect());
            match (numbers, parts.get(3), parts.len()) {
                (Some(numbers), Some(host), 4) if numbers.len() == 3 => RecordData::Srv {
                    priority: numbers[0],
                    weight: numbers[1],
                    port: numbers[2],
                    target: target(report, host)?,
                },
                _ => {
                    return bad(
                        report,
                        "\"priority weight port target\", such as \"10 5 8080 api\"",
                    );
                }
            }
        }
        "MX" | "CAA" | "PTR" | "DS" => {
            let (kind, example) = match kind.get_ref().to_ascii_uppercase().as_str() {
                "MX" => (RecordType::MX, "\"10 posta\""),
                "CAA" => (RecordType::CAA, "\"0 issue \\\"letsencrypt.org\\\"\""),
                "DS" => (RecordType::DS, "\"12345 13 2 <digest in hex>\""),
                _ => (RecordType::PTR, "\"posta.kargo.test.\""),
            };
            match trafik_dns::master::parse_value(kind, text, apex) {
                Ok(data) => RecordData::Parsed(data),
                Err(error) => {
                    return bad(
                        report,
                        &format!(
                            "{kind} data as a zone file writes it, such as {example} ({error})"
                        ),
                    );
                }
            }
        }
        other => {
            report.error(
                kind.span(),
                &format!("{field}.type"),
                format!(
                    "expected A, AAAA, CNAME, TXT, SRV, NS, MX, CAA, PTR or DS, found {other:?}"
                ),
            );
            return None;
        }
    };
    Some(RecordPlan {
        name: record.name.into_inner(),
        ttl: record.ttl,
        data,
    })
}

/// The position of `name` among `all`, or an error naming what exists.
fn find(
    report: &mut Report,
    name: &Spanned<String>,
    field: &str,
    what: &str,
    all: &[Option<String>],
) -> Option<usize> {
    let found = all.iter().position(|n| n.as_ref() == Some(name.get_ref()));
    if found.is_none() {
        let hint = did_you_mean(name.get_ref(), all.iter().flatten().map(String::as_str))
            .map(|near| format!(" (did you mean {near:?}?)"))
            .unwrap_or_default();
        report.error(
            name.span(),
            field,
            format!("no {what} is named {:?}{hint}", name.get_ref()),
        );
    }
    found
}

/// A map keyed by names of `what`, checked against `all`; an error at the map for an unknown
/// key.
fn keyed<V>(
    report: &mut Report,
    map: &Spanned<BTreeMap<String, V>>,
    field: &str,
    what: &str,
    all: &[Option<String>],
) -> Vec<(usize, V)>
where
    V: Clone,
{
    map.get_ref()
        .iter()
        .filter_map(|(key, value)| {
            let key = Spanned::new(map.span(), key.clone());
            find(report, &key, field, what, all).map(|index| (index, value.clone()))
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn check_name(
    report: &mut Report,
    field: &str,
    name: Spanned<DnsName>,
    apex: &trafik_dns::DomainName,
    zone_ttl: u32,
    known: &Known,
    written: &[Option<String>],
) -> Option<NamePlan> {
    let span = name.span();
    let name = name.into_inner();
    let owner = unique_name(
        report,
        name.name.clone(),
        span.clone(),
        field,
        written,
        "name = \"cografi\", relative to the zone",
    );
    let written_name = name.name.as_ref()?;
    domain(report, written_name, &format!("{field}.name"), Some(apex))?;
    let policy_key = report.required(
        name.policy.clone(),
        span.clone(),
        &format!("{field}.policy"),
        "policy = \"geo\" (or latency, weighted, failover, multivalue)",
    )?;
    let regions = known.regions;
    let groups = known.groups;
    let region = |report: &mut Report, text: &Spanned<String>, key: &str| {
        find(report, text, &format!("{field}.{key}"), "region", regions)
    };
    let missing = |report: &mut Report, key: &str, example: &str| {
        report.error(
            span.clone(),
            &format!("{field}.{key}"),
            format!(
                "missing `{key}`: the {} policy needs {example}",
                policy_key.get_ref()
            ),
        );
    };
    let policy = match policy_key.get_ref().as_str() {
        "geo" => {
            let Some(table) = &name.groups else {
                missing(
                    report,
                    "groups",
                    "groups = { g1 = \"b34\" }, each group's region",
                );
                return None;
            };
            let mut region_of_group = vec![None; groups.len()];
            for (group, target) in keyed(report, table, &format!("{field}.groups"), "group", groups)
            {
                region_of_group[group] = region(report, &target, "groups");
            }
            let default = match &name.default_region {
                Some(text) => region(report, text, "default_region")?,
                None => 0,
            };
            let mut fallback = vec![None; regions.len()];
            if let Some(table) = &name.fallback {
                for (from, to) in keyed(
                    report,
                    table,
                    &format!("{field}.fallback"),
                    "region",
                    regions,
                ) {
                    fallback[from] = region(report, &to, "fallback");
                }
            }
            Policy::Geo {
                region_of_group: region_of_group
                    .into_iter()
                    .map(|r| r.unwrap_or(default))
                    .collect(),
                default,
                fallback,
            }
        }
        "latency" => {
            let Some(table) = &name.distance else {
                missing(
                    report,
                    "distance",
                    "distance = { g1 = { b34 = 1, b35 = 3 } }, each group's distance to each region",
                );
                return None;
            };
            let mut distance = vec![vec![f64::INFINITY; regions.len()]; groups.len()];
            for (group, row) in keyed(report, table, &format!("{field}.distance"), "group", groups)
            {
                for (target, value) in keyed(
                    report,
                    &row,
                    &format!("{field}.distance"),
                    "region",
                    regions,
                ) {
                    if !(value.get_ref().is_finite() && *value.get_ref() >= 0.0) {
                        report.error(
                            value.span(),
                            &format!("{field}.distance"),
                            "expected a distance of 0 or more",
                        );
                    }
                    distance[group][target] = *value.get_ref();
                }
            }
            let default_group = match &name.default_group {
                Some(text) => find(
                    report,
                    text,
                    &format!("{field}.default_group"),
                    "group",
                    groups,
                )?,
                None => 0,
            };
            if groups.is_empty() {
                report.error(
                    span.clone(),
                    &format!("{field}.policy"),
                    "the latency policy needs client groups: add [[dns.group]]",
                );
            }
            Policy::Latency {
                distance,
                default_group,
            }
        }
        "weighted" => {
            let pattern: Vec<usize> = if name.pattern.is_empty() {
                let Some(table) = &name.weights else {
                    missing(
                        report,
                        "weights",
                        "weights = { b34 = 5, b35 = 3, b06 = 2 }, or a pattern",
                    );
                    return None;
                };
                let mut weights = vec![0u32; regions.len()];
                for (target, weight) in keyed(
                    report,
                    table,
                    &format!("{field}.weights"),
                    "region",
                    regions,
                ) {
                    weights[target] = *weight.get_ref();
                }
                let cycle = pattern_length(&weights);
                if cycle == 0 {
                    report.error(
                        table.span(),
                        &format!("{field}.weights"),
                        "expected at least one weight above zero",
                    );
                } else if cycle > LONGEST_PATTERN {
                    report.error(
                        table.span(),
                        &format!("{field}.weights"),
                        format!(
                            "expected weights whose proportions repeat within {LONGEST_PATTERN} \
                             answers (these take {cycle}): smaller numbers in the same proportions"
                        ),
                    );
                    return None;
                }
                pattern_from_weights(&weights)
            } else {
                name.pattern
                    .iter()
                    .filter_map(|text| region(report, text, "pattern"))
                    .collect()
            };
            let choice = match name.choice.get_ref().as_str() {
                "pattern" => WeightedChoice::Pattern,
                "random" => WeightedChoice::Random,
                other => {
                    report.error(
                        name.choice.span(),
                        &format!("{field}.choice"),
                        format!("expected \"pattern\" or \"random\", found {other:?}"),
                    );
                    return None;
                }
            };
            if pattern.is_empty() {
                return None;
            }
            let consistent = name.consistent.then_some(CONSISTENT_SUBNET);
            Policy::Weighted(Weighted::new(choice, pattern, consistent))
        }
        "failover" => {
            let (Some(primary), Some(secondary)) = (&name.primary, &name.secondary) else {
                missing(
                    report,
                    if name.primary.is_none() {
                        "primary"
                    } else {
                        "secondary"
                    },
                    "primary = \"b34\" and secondary = \"b35\"",
                );
                return None;
            };
            let primary = region(report, primary, "primary");
            let secondary = region(report, secondary, "secondary");
            let all_down = match name.all_down.get_ref().as_str() {
                "primary" => AllDown::Primary,
                "empty" => AllDown::Empty,
                other => {
                    report.error(
                        name.all_down.span(),
                        &format!("{field}.all_down"),
                        format!("expected \"primary\" or \"empty\", found {other:?}"),
                    );
                    return None;
                }
            };
            Policy::Failover {
                primary: primary?,
                secondary: secondary?,
                all_down,
            }
        }
        "multivalue" => {
            let chosen: Vec<usize> = if name.regions.is_empty() {
                (0..regions.len()).collect()
            } else {
                name.regions
                    .iter()
                    .filter_map(|text| region(report, text, "regions"))
                    .collect()
            };
            if *name.max.get_ref() == 0 {
                report.error(
                    name.max.span(),
                    &format!("{field}.max"),
                    "expected at least 1 record per answer",
                );
            }
            Policy::Multivalue {
                regions: chosen,
                max: *name.max.get_ref(),
            }
        }
        other => {
            report.error(
                policy_key.span(),
                &format!("{field}.policy"),
                format!("expected geo, latency, weighted, failover or multivalue, found {other:?}"),
            );
            return None;
        }
    };
    if regions.is_empty() {
        report.error(
            span,
            &format!("{field}.policy"),
            "a policy chooses among regions: add [[dns.region]]",
        );
        return None;
    }
    Some(NamePlan {
        name: owner,
        ttl: name.ttl.unwrap_or(zone_ttl),
        policy,
    })
}
