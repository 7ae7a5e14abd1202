//! The authoritative data: zones with their static records and their policy names, built from a
//! [`DnsPlan`], and the lookup that answers one question from them. No I/O: the server in
//! [`crate::server`] turns a [`Lookup`] into a message.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hickory_proto::dnssec::rdata::{DNSSECRData, NSEC};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, SOA, SRV, TXT};
use hickory_proto::rr::{LowerName, Name, RData, Record, RecordType};

use crate::dnssec::{Denial, Signing, ZoneKeys};
use crate::policy::{Client, Decision, GeoGroups, Groups, Live, Policy, Prefix, Region};
use crate::rate::{RateLimitPlan, RateLimiter};
use crate::transfer::{self, Transfer, TransferPlan};

pub mod explain;

/// What trafik serves over DNS: regions, client groups and zones.
#[derive(Clone, Debug, Default)]
pub struct DnsPlan {
    pub regions: Vec<RegionPlan>,
    /// Client groups, by name, with their prefixes; a policy's group index is its place here.
    pub groups: Vec<(String, Vec<Prefix>)>,
    pub zones: Vec<ZonePlan>,
    /// Log one line per query.
    pub query_log: bool,
    /// Response rate limiting of UDP answers; off when absent.
    pub rate_limit: Option<RateLimitPlan>,
    /// A GeoIP database and each group's places in it (same order as `groups`).
    pub geoip: Option<GeoGroups>,
}

/// A region: where its names point.
#[derive(Clone, Debug)]
pub struct RegionPlan {
    pub name: String,
    pub addresses: Vec<IpAddr>,
}

#[derive(Clone, Debug)]
pub struct ZonePlan {
    /// The zone's apex, such as `kargo.test.`.
    pub origin: String,
    /// The TTL of records that set none.
    pub ttl: u32,
    pub soa: SoaPlan,
    /// The zone's name servers (the apex's NS records).
    pub name_servers: Vec<String>,
    pub records: Vec<RecordPlan>,
    pub names: Vec<NamePlan>,
    /// AXFR/IXFR and NOTIFY to secondaries; with it, trafik manages the serial.
    pub transfer: Option<TransferPlan>,
    /// The zone's DNSSEC keys, read or made when the config was checked.
    pub dnssec: Option<ZoneKeys>,
}

#[derive(Clone, Debug)]
pub struct SoaPlan {
    pub mname: String,
    pub rname: String,
    pub serial: u32,
    pub refresh: u32,
    pub retry: u32,
    pub expire: u32,
    /// The TTL of negative answers (RFC 2308).
    pub minimum: u32,
}

/// A static record; `name` is relative to the zone (`@` for the apex) or absolute (ends in `.`).
#[derive(Clone, Debug)]
pub struct RecordPlan {
    pub name: String,
    pub ttl: Option<u32>,
    pub data: RecordData,
}

#[derive(Clone, Debug, PartialEq)]
pub enum RecordData {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    Cname(String),
    Txt(Vec<String>),
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        target: String,
    },
    Ns(String),
    /// Data read by the master-file parser ([`crate::master`]): MX, CAA, PTR and every type of
    /// a zone file, its names already absolute.
    Parsed(RData),
}

/// A name answered by a policy: its A and AAAA records are the chosen regions' addresses.
#[derive(Clone, Debug)]
pub struct NamePlan {
    pub name: String,
    pub ttl: u32,
    pub policy: Policy,
}

/// Parses a domain name, relative names completed with `origin`.
pub fn parse_name(text: &str, origin: Option<&Name>) -> Result<Name, String> {
    let name = if text == "@" {
        return origin
            .cloned()
            .ok_or_else(|| "\"@\" needs a zone".to_string());
    } else {
        Name::from_ascii(text).map_err(|e| format!("{text:?} is not a domain name: {e}"))?
    };
    match origin {
        Some(origin) if !name.is_fqdn() => name
            .append_domain(origin)
            .map_err(|e| format!("{text:?} is too long in {origin}: {e}")),
        _ if !name.is_fqdn() => Name::from_ascii(format!("{text}."))
            .map_err(|e| format!("{text:?} is not a domain name: {e}")),
        _ => Ok(name),
    }
}

/// The counters of one policy name; kept across reloads while the name keeps its policy.
#[derive(Debug, Default)]
pub struct NameCounters {
    pub queries: AtomicU64,
    /// Answers naming each region, by region name.
    pub answers: HashMap<String, AtomicU64>,
    /// Answers health changed from the policy's first choice.
    pub failovers: AtomicU64,
    /// Queries for a type the name does not have, or answered with no address.
    pub nodata: AtomicU64,
}

/// The counters of one zone.
#[derive(Debug, Default)]
pub struct ZoneCounters {
    pub queries: AtomicU64,
    pub nxdomain: AtomicU64,
}

/// A zone ready to answer.
#[derive(Debug)]
pub struct Zone {
    pub origin: LowerName,
    soa: Record,
    name_servers: Vec<Record>,
    /// Static records by owner name.
    records: HashMap<LowerName, Vec<Record>>,
    names: HashMap<LowerName, Arc<PolicyName>>,
    /// Names that own nothing but have names below them (empty non-terminals): NODATA, not
    /// NXDOMAIN.
    interior: std::collections::HashSet<LowerName>,
    /// Delegations: the NS records of each name below the apex that has some (a zone cut).
    /// Questions at or below a cut get a referral to these servers, not an answer.
    cuts: HashMap<LowerName, Vec<Record>>,
    /// Whether some owner is a wildcard (`*.…`), so a missing name looks for one (RFC 4592).
    wildcards: bool,
    pub counters: Arc<ZoneCounters>,
    pub transfer: Option<Transfer>,
    /// What an AXFR carries between its two SOAs (transferring zones only).
    transferred: Vec<Record>,
    /// The serial written in the config or zone file, and the fingerprint of the transfer's
    /// content with it: the serial in force changes when the fingerprint does.
    written_serial: u32,
    fingerprint: u64,
    /// The last changes of an unsigned transferring zone, oldest first, for IXFR.
    journal: Vec<transfer::Delta>,
    /// The day (Unix days, in [`RESIGN_EVERY`]) whose signatures a signed zone transfers.
    signing_day: Option<u64>,
    /// Online signing, when the zone has DNSSEC keys.
    pub dnssec: Option<Signing>,
}

#[derive(Debug)]
pub struct PolicyName {
    pub name: Name,
    pub ttl: u32,
    pub policy: Policy,
    pub counters: Arc<NameCounters>,
}

/// Every zone, the regions and the groups: one configuration's DNS.
#[derive(Debug)]
pub struct Authority {
    pub zones: Vec<Zone>,
    pub regions: Vec<RegionPlan>,
    pub groups: Groups,
    pub group_names: Vec<String>,
    pub query_log: bool,
    pub rate_limiter: Option<RateLimiter>,
    /// The plan this was built from, to build it again when signed zones are re-signed.
    plan: DnsPlan,
}

/// The answer to one question.
#[derive(Debug, Default)]
pub struct Lookup {
    pub code: Code,
    pub answers: Vec<Record>,
    pub authority: Vec<Record>,
    /// Glue: the addresses of a referral's name servers.
    pub additional: Vec<Record>,
    /// The authority section is a referral to a delegated child zone: what follows the
    /// answers (if any) is not ours to answer, so without answers the reply is not
    /// authoritative.
    pub referral: bool,
    /// The ECS scope prefix of the answer.
    pub scope: u8,
    /// The regions a policy chose, for the query log.
    pub regions: Vec<Region>,
    /// The weighted policy name whose draw chose this answer, and the decision drawn: the
    /// answer changes from one query to the next (the pattern's next slot, a random draw, the
    /// client's subnet), so it may be reused only for the same decision, drawn again.
    pub drawn: Option<(Arc<PolicyName>, Decision)>,
    /// The counters this lookup moved.
    pub tally: Tally,
}

/// The counters one lookup moved, so that an answer served again from the packet cache moves
/// them again and `/status` counts every query.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    zone: Option<Arc<ZoneCounters>>,
    nxdomain: bool,
    name: Option<NameTally>,
}

#[derive(Clone, Debug)]
struct NameTally {
    counters: Arc<NameCounters>,
    /// The regions answered, by name.
    regions: Vec<String>,
    failover: bool,
    nodata: bool,
}

impl Tally {
    /// Moves the counters again, as the lookup did.
    pub fn replay(&self) {
        if let Some(zone) = &self.zone {
            zone.queries.fetch_add(1, Ordering::Relaxed);
            if self.nxdomain {
                zone.nxdomain.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(name) = &self.name {
            let counters = &name.counters;
            counters.queries.fetch_add(1, Ordering::Relaxed);
            for region in &name.regions {
                if let Some(count) = counters.answers.get(region) {
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
            if name.failover {
                counters.failovers.fetch_add(1, Ordering::Relaxed);
            }
            if name.nodata {
                counters.nodata.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The outcome of a lookup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Code {
    #[default]
    NoError,
    NxDomain,
    /// No zone here holds the name.
    Refused,
}

/// How often a signed zone that transfers gets a new serial, so secondaries take signatures
/// made that day (they last a week): a day, as the signature cache.
const RESIGN_EVERY: u64 = crate::dnssec::REFRESH;

/// How deep a CNAME chain inside the zone is followed.
const MAX_CHAIN: usize = 8;

impl Authority {
    /// Builds the zones of `plan`, keeping the counters of `previous` for what stays the same.
    pub fn build(plan: &DnsPlan, previous: Option<&Authority>) -> Result<Authority, Vec<String>> {
        Authority::build_at(plan, previous, transfer::unix_now())
    }

    /// [`Authority::build`] at `now` (Unix seconds), which sets the serials.
    fn build_at(
        plan: &DnsPlan,
        previous: Option<&Authority>,
        now: u64,
    ) -> Result<Authority, Vec<String>> {
        let mut errors = Vec::new();
        let mut zones = Vec::new();
        for zone in &plan.zones {
            match build_zone(zone, plan, previous) {
                Ok(built) => zones.push(built),
                Err(mut more) => errors.append(&mut more),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        // Most specific zone first, so a delegated child zone wins over its parent.
        zones.sort_by_key(|z: &Zone| std::cmp::Reverse(z.origin.num_labels()));
        let mut entries = Vec::new();
        for (group, (_, prefixes)) in plan.groups.iter().enumerate() {
            entries.extend(prefixes.iter().map(|p| (*p, group)));
        }
        let mut authority = Authority {
            zones: Vec::new(),
            regions: plan.regions.clone(),
            groups: match &plan.geoip {
                Some(geo) => Groups::new(entries).with_places(geo.clone()),
                None => Groups::new(entries),
            },
            group_names: plan.groups.iter().map(|(name, _)| name.clone()).collect(),
            query_log: plan.query_log,
            rate_limiter: plan.rate_limit.clone().map(RateLimiter::new),
            plan: plan.clone(),
        };
        for zone in &mut zones {
            if zone.transfer.is_none() {
                continue;
            }
            zone.transferred = zone.transfer_content(&authority);
            // A signed zone's transfer carries signatures made that day: a new day is new
            // content, so secondaries take fresh signatures long before theirs expire.
            zone.signing_day = zone.dnssec.is_some().then_some(now / RESIGN_EVERY);
            zone.fingerprint = transfer::fingerprint(
                &zone.transferred,
                zone.written_serial,
                zone.signing_day.unwrap_or(0),
            );
            let old = previous
                .and_then(|p| p.zones.iter().find(|z| z.origin == zone.origin))
                .filter(|old| old.transfer.is_some());
            let before = old.map(|old| (old.serial(), old.fingerprint));
            let serial = transfer::serial(before, zone.fingerprint, zone.written_serial, now);
            if let RData::SOA(soa) = &mut zone.soa.data {
                soa.serial = serial;
            }
            // The changes an IXFR can send; a signed zone's secondaries hold signatures made
            // at their transfer, which no difference of ours could name, so it has none.
            if let Some(old) = old.filter(|_| zone.dnssec.is_none()) {
                zone.journal = old.journal.clone();
                if old.serial() != serial {
                    zone.journal.push(transfer::Delta::between(
                        (&old.soa, &old.transferred),
                        (&zone.soa, &zone.transferred),
                    ));
                    transfer::trim(&mut zone.journal, zone.transferred.len());
                }
            }
        }
        authority.zones = zones;
        Ok(authority)
    }

    /// Answers `name`/`kind` for `client` with the regions in `live`; `random` feeds weighted
    /// random choice. `forced` is a weighted policy's decision already drawn for this query
    /// (by the packet cache), used instead of drawing again.
    pub fn lookup(
        &self,
        name: &LowerName,
        kind: RecordType,
        client: Client,
        live: Live,
        random: u64,
        forced: Option<&Decision>,
    ) -> Lookup {
        let Some(zone) = self.zone_for(name, kind) else {
            return Lookup {
                code: Code::Refused,
                ..Lookup::default()
            };
        };
        zone.counters.queries.fetch_add(1, Ordering::Relaxed);
        let mut lookup = Lookup::default();
        lookup.tally.zone = Some(zone.counters.clone());
        let mut owner = name.clone();
        for _ in 0..MAX_CHAIN {
            let asked = Asked {
                kind,
                client,
                live,
                random,
                forced,
            };
            let found = zone.answer(self, &owner, &asked, &mut lookup);
            match found {
                Found::Done => return lookup,
                Found::Referral => {
                    lookup.referral = true;
                    return lookup;
                }
                Found::Cname(target) if zone.origin.zone_of(&target) => owner = target,
                Found::Cname(_) => return lookup,
                // NXDOMAIN also when a CNAME chain ends at a name that does not exist: the
                // code speaks of the chain's last name (RFC 6604 §2).
                Found::Nothing => {
                    lookup.code = Code::NxDomain;
                    zone.counters.nxdomain.fetch_add(1, Ordering::Relaxed);
                    lookup.tally.nxdomain = true;
                    lookup.authority.push(zone.negative_soa());
                    return lookup;
                }
                Found::NoData => {
                    lookup.authority.push(zone.negative_soa());
                    return lookup;
                }
            }
        }
        lookup
    }

    /// The same zones built again at `now` when a signed zone that transfers has entered a
    /// new signing day: its serial rises, so its secondaries are notified and transfer it
    /// with fresh signatures. `None` when nothing is due.
    pub fn resigned(&self, now: u64) -> Option<Authority> {
        let due = self.zones.iter().any(|zone| {
            zone.signing_day
                .is_some_and(|day| day != now / RESIGN_EVERY)
        });
        if !due {
            return None;
        }
        Authority::build_at(&self.plan, Some(self), now)
            .map_err(|errors| tracing::warn!(?errors, "dns zones not re-signed"))
            .ok()
    }

    /// Signs `lookup`, the answer to `name`/`kind`, when its zone has keys (for a query with
    /// the DO bit); `now` in Unix seconds.
    pub fn sign(&self, lookup: &mut Lookup, name: &LowerName, kind: RecordType, now: u64) {
        let Some(zone) = self.zone_for(name, kind) else {
            return;
        };
        if let Some(signing) = &zone.dnssec {
            signing.complete(lookup, name, kind, zone, now);
        }
    }

    /// The zone that answers `name`/`kind`: the most specific one holding the name, except
    /// that DS at a zone's apex is its parent's when trafik serves the parent too (RFC 4035
    /// §3.1.4.1), so a validator finds the child's DS where it looks for it.
    fn zone_for(&self, name: &LowerName, kind: RecordType) -> Option<&Zone> {
        let mut holding = self.zones.iter().filter(|z| z.origin.zone_of(name));
        let first = holding.next()?;
        if kind == RecordType::DS && first.origin == *name {
            return holding.next().or(Some(first));
        }
        Some(first)
    }
}

/// The key after each of `sorted`'s, the last one's the first: a denial chain's next names.
fn successors<K: Clone, V>(sorted: &[(K, V)]) -> Vec<K> {
    let mut keys: Vec<K> = sorted.iter().map(|(key, _)| key.clone()).collect();
    if !keys.is_empty() {
        keys.rotate_left(1);
    }
    keys
}

/// The NSEC chain (RFC 4034 §4) over `names` (each with its types), in canonical order.
fn nsec_chain(names: Vec<(Name, Vec<RecordType>)>, ttl: u32) -> Vec<Record> {
    let nexts = successors(&names);
    names
        .into_iter()
        .zip(nexts)
        .map(|((name, mut kinds), next)| {
            kinds.extend([RecordType::RRSIG, RecordType::NSEC]);
            let nsec = DNSSECRData::NSEC(NSEC::new(next, kinds));
            Record::from_rdata(name, ttl, RData::DNSSEC(nsec))
        })
        .collect()
}

/// Where an owner name stands in its zone, for signing a transfer.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    /// Ours: every RRset signed, in the NSEC chain.
    Authoritative,
    /// A delegation: its DS and NSEC are ours and signed, its NS the child's.
    Cut,
    /// Below a cut: glue, the child's.
    Glue,
}

/// One question's conditions, as a lookup passes them down.
struct Asked<'a> {
    kind: RecordType,
    client: Client,
    live: Live,
    random: u64,
    forced: Option<&'a Decision>,
}

enum Found {
    Done,
    Cname(LowerName),
    /// The name is at or below a zone cut: the lookup holds the referral.
    Referral,
    NoData,
    Nothing,
}

impl Zone {
    /// The types `name` owns, for the NSEC of a NODATA answer: a name a wildcard answers for
    /// owns the wildcard's types (its answers are signed as its own), a zone cut its NS.
    pub fn types_at(&self, name: &LowerName) -> Vec<RecordType> {
        let node = match self.exists(name) {
            true => Some(name.clone()),
            false => self.wildcard_for(name),
        };
        let mut types: Vec<RecordType> = node
            .as_ref()
            .and_then(|node| self.records.get(node))
            .map(|records| records.iter().map(Record::record_type).collect())
            .unwrap_or_default();
        if node.is_some_and(|node| self.names.contains_key(&node)) {
            types.extend([RecordType::A, RecordType::AAAA]);
        }
        if self.cuts.contains_key(name) {
            types.push(RecordType::NS);
        }
        if *name == self.origin {
            types.extend([RecordType::SOA, RecordType::NS]);
            if let Some(signing) = &self.dnssec {
                types.push(RecordType::DNSKEY);
                if signing.denial() == Denial::Nsec3 {
                    types.push(RecordType::NSEC3PARAM);
                }
            }
        }
        types
    }

    /// The zone's SOA record, with the serial in force.
    pub fn soa(&self) -> &Record {
        &self.soa
    }

    pub fn serial(&self) -> u32 {
        match &self.soa.data {
            RData::SOA(soa) => soa.serial,
            _ => 0,
        }
    }

    /// The changes since a secondary's `serial`, as an IXFR answer carries them (RFC 1995
    /// §4), when the zone still knows them.
    pub fn changes_since(&self, serial: u32) -> Option<Vec<Record>> {
        transfer::incremental(&self.journal, serial, &self.soa)
    }

    /// What an AXFR carries between its two SOAs, unsigned.
    pub fn transferred(&self) -> &[Record] {
        &self.transferred
    }

    /// What an AXFR carries between its two SOAs at `now` (Unix seconds). A signed zone goes
    /// signed, so a secondary can serve it as it is and `ldns-verify-zone` accepts it: every
    /// authoritative RRset followed by its RRSIG (the SOA's too), the DNSKEYs, and an NSEC
    /// chain over the zone's names in canonical order (RFC 4034 §4, §6.1) — online answers
    /// deny by black lies, but a copy of the zone needs the real chain. The NS at a cut and
    /// glue below it stay unsigned and out of the chain (RFC 4035 §2.2, §2.3).
    pub fn transfer_records(&self, now: u64) -> std::borrow::Cow<'_, [Record]> {
        let Some(signing) = &self.dnssec else {
            return std::borrow::Cow::Borrowed(&self.transferred);
        };
        let mut owners: std::collections::BTreeMap<Name, Vec<Record>> = Default::default();
        for record in std::iter::once(&self.soa).chain(&self.transferred) {
            owners
                .entry(record.name.clone())
                .or_default()
                .push(record.clone());
        }
        let place = |owner: &Name| match self.cut_above(&LowerName::from(owner)) {
            None => Place::Authoritative,
            Some((cut, _)) if *cut == LowerName::from(owner) => Place::Cut,
            Some(_) => Place::Glue,
        };
        let chain: Vec<Name> = owners
            .keys()
            .filter(|owner| place(owner) != Place::Glue)
            .cloned()
            .collect();
        // Each name's types as its denial record lists them: at a cut only NS and DS are
        // the parent's.
        let types: Vec<(Name, Vec<RecordType>)> = chain
            .iter()
            .map(|owner| {
                let at_cut = place(owner) == Place::Cut;
                let kinds = owners[owner]
                    .iter()
                    .map(Record::record_type)
                    .filter(|kind| !at_cut || matches!(kind, RecordType::NS | RecordType::DS))
                    .collect();
                (owner.clone(), kinds)
            })
            .collect();
        let ttl = self.negative_soa().ttl;
        let denials = match signing.denial() {
            Denial::Nsec => nsec_chain(types, ttl),
            Denial::Nsec3 => self.nsec3_chain(types, ttl),
        };
        for record in denials {
            owners.entry(record.name.clone()).or_default().push(record);
        }
        let mut out = Vec::with_capacity(self.transferred.len() * 3);
        for (owner, records) in owners {
            let (signed, unsigned): (Vec<Record>, Vec<Record>) =
                records.into_iter().partition(|record| match place(&owner) {
                    Place::Authoritative => true,
                    Place::Cut => matches!(record.record_type(), RecordType::DS | RecordType::NSEC),
                    Place::Glue => false,
                });
            out.extend(unsigned);
            // The SOA itself opens and closes the transfer; its RRSIG goes here.
            out.extend(
                signing
                    .signed(signed, now)
                    .into_iter()
                    .filter(|record| record.record_type() != RecordType::SOA),
            );
        }
        std::borrow::Cow::Owned(out)
    }

    /// The NSEC3 chain (RFC 5155 §7.1) over `names` (each with its types) and the empty
    /// non-terminals above them, in hash order; the RRSIG bit where something is signed (all
    /// but an unsigned cut), none at an empty non-terminal.
    fn nsec3_chain(&self, names: Vec<(Name, Vec<RecordType>)>, ttl: u32) -> Vec<Record> {
        let apex = Name::from(&self.origin);
        let mut nodes: std::collections::BTreeMap<Name, Vec<RecordType>> = Default::default();
        for (name, mut kinds) in names {
            if kinds.iter().any(|kind| *kind != RecordType::NS) {
                kinds.push(RecordType::RRSIG);
            }
            let mut parent = name.base_name();
            while parent.num_labels() > apex.num_labels() {
                nodes.entry(parent.clone()).or_default();
                parent = parent.base_name();
            }
            nodes.insert(name, kinds);
        }
        let mut hashed: Vec<(Vec<u8>, Vec<RecordType>)> = nodes
            .into_iter()
            .filter_map(|(name, kinds)| Some((crate::dnssec::nsec3_hash(&name)?, kinds)))
            .collect();
        hashed.sort();
        let nexts = successors(&hashed);
        hashed
            .into_iter()
            .zip(nexts)
            .filter_map(|((hash, kinds), next)| {
                crate::dnssec::nsec3(&apex, &hash, next, kinds, ttl)
            })
            .collect()
    }

    /// The apex's NS records, the static records, the delegations and each policy name's
    /// addresses as answered to a client in no group with every region live, in name order.
    /// Health is left out on purpose: a secondary cannot follow it, and a serial that moved
    /// with every health change would send it a transfer each time a region flaps.
    fn transfer_content(&self, authority: &Authority) -> Vec<Record> {
        let mut records: Vec<Record> = self.name_servers.clone();
        // A signed zone's keys: a new key is a new serial, so secondaries take it.
        if let Some(signing) = &self.dnssec {
            records.extend(signing.dnskeys().iter().cloned());
            records.extend(signing.nsec3param());
        }
        let mut statics: Vec<&Record> = self
            .records
            .values()
            .chain(self.cuts.values())
            .flatten()
            .collect();
        statics.sort_by(|a, b| {
            a.name
                .cmp(&b.name)
                .then(u16::from(a.record_type()).cmp(&u16::from(b.record_type())))
        });
        records.extend(statics.into_iter().cloned());
        let nobody = Client::from_source(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let live = Live::all(authority.regions.len());
        for name in self.policy_names() {
            // On a copy: a weighted name's copy starts at its pattern's first slot, and the
            // served cursor does not move.
            let decision = name
                .policy
                .clone()
                .decide(nobody, &authority.groups, live, 0);
            for region in decision
                .regions
                .iter()
                .filter_map(|r| authority.regions.get(*r))
            {
                records.extend(region.addresses.iter().map(|address| {
                    let data = match address {
                        IpAddr::V4(v4) => RData::A(A(*v4)),
                        IpAddr::V6(v6) => RData::AAAA(AAAA(*v6)),
                    };
                    Record::from_rdata(name.name.clone(), name.ttl, data)
                }));
            }
        }
        records
    }

    /// The names answered by a policy, in name order.
    pub fn policy_names(&self) -> impl Iterator<Item = &PolicyName> {
        let mut names: Vec<&PolicyName> = self.names.values().map(Arc::as_ref).collect();
        names.sort_by(|a, b| a.name.cmp(&b.name));
        names.into_iter()
    }

    fn answer(
        &self,
        authority: &Authority,
        owner: &LowerName,
        asked: &Asked,
        lookup: &mut Lookup,
    ) -> Found {
        let kind = asked.kind;
        if let Some((cut, servers)) = self.cut_above(owner) {
            // DS lives on the parent side of the cut (RFC 4035 §3.1.4.1).
            if !(kind == RecordType::DS && *cut == *owner) {
                lookup.authority.extend(servers.iter().cloned());
                lookup.additional.extend(self.glue(servers));
                return Found::Referral;
            }
        }
        // The node that answers: the name itself, or the wildcard covering it (RFC 4592 §3.3).
        let source = if self.exists(owner) {
            owner.clone()
        } else {
            match self.wildcard_for(owner) {
                Some(wildcard) => wildcard,
                None => return Found::Nothing,
            }
        };
        // ANY gets one RRset, not all of them (RFC 8482 §4.1): no amplifier for reflection.
        let kind = if kind == RecordType::ANY {
            self.one_type_of(&source)
        } else {
            kind
        };
        let before = lookup.answers.len();
        if source == self.origin {
            match kind {
                RecordType::SOA => lookup.answers.push(self.soa.clone()),
                RecordType::NS => lookup.answers.extend(self.name_servers.iter().cloned()),
                // Asked with or without DO: they are the zone's records like any other.
                _ => lookup.answers.extend(
                    self.dnssec
                        .iter()
                        .flat_map(|signing| signing.apex_records(kind)),
                ),
            }
        }
        // A wildcard's records answer with the question's name as their owner.
        let synthesized = (source != *owner).then(|| Name::from(owner.clone()));
        if let Some(name) = self.names.get(&source) {
            let answered = synthesized.as_ref().unwrap_or(&name.name);
            return name.answer(authority, answered, kind, asked, lookup);
        }
        let as_owner = |record: &Record| {
            let mut record = record.clone();
            if let Some(name) = &synthesized {
                record.name = name.clone();
            }
            record
        };
        if let Some(records) = self.records.get(&source) {
            let matching = records.iter().filter(|r| r.record_type() == kind);
            lookup.answers.extend(matching.map(as_owner));
            if lookup.answers.len() > before {
                return Found::Done;
            }
            if let Some(cname) = records
                .iter()
                .find(|r| r.record_type() == RecordType::CNAME)
            {
                lookup.answers.push(as_owner(cname));
                if let RData::CNAME(CNAME(target)) = &cname.data {
                    return Found::Cname(LowerName::from(target));
                }
            }
        }
        if lookup.answers.len() > before {
            Found::Done
        } else {
            Found::NoData
        }
    }

    /// Whether `name` is a node of the zone: the apex, an owner, or an empty non-terminal.
    fn exists(&self, name: &LowerName) -> bool {
        *name == self.origin
            || self.records.contains_key(name)
            || self.names.contains_key(name)
            || self.interior.contains(name)
    }

    /// The wildcard that answers for `name`, which does not exist: `*.` and the closest
    /// existing ancestor (the closest encloser), when the zone has that wildcard.
    fn wildcard_for(&self, name: &LowerName) -> Option<LowerName> {
        if !self.wildcards {
            return None;
        }
        let mut ancestor = name.base_name();
        while ancestor.num_labels() > self.origin.num_labels() && !self.exists(&ancestor) {
            ancestor = ancestor.base_name();
        }
        let wildcard = LowerName::from(Name::from(ancestor).prepend_label("*").ok()?);
        (self.records.contains_key(&wildcard) || self.names.contains_key(&wildcard))
            .then_some(wildcard)
    }

    /// The topmost zone cut at or above `name`, with its NS records.
    fn cut_above(&self, name: &LowerName) -> Option<(&LowerName, &Vec<Record>)> {
        if self.cuts.is_empty() || *name == self.origin {
            return None;
        }
        let mut found = None;
        let mut node = name.clone();
        while node.num_labels() > self.origin.num_labels() {
            if let Some(cut) = self.cuts.get_key_value(&node) {
                found = Some(cut);
            }
            node = node.base_name();
        }
        found
    }

    /// The DS records at the zone cut `cut` (none for an unsigned delegation).
    pub fn ds_at(&self, cut: &LowerName) -> Vec<Record> {
        self.records
            .get(cut)
            .into_iter()
            .flatten()
            .filter(|r| r.record_type() == RecordType::DS)
            .cloned()
            .collect()
    }

    /// The addresses this zone holds for the targets of `servers` (glue).
    fn glue<'a>(&'a self, servers: &'a [Record]) -> impl Iterator<Item = Record> + 'a {
        servers
            .iter()
            .filter_map(|ns| match &ns.data {
                RData::NS(NS(target)) => self.records.get(&LowerName::from(target)),
                _ => None,
            })
            .flatten()
            .filter(|r| matches!(r.record_type(), RecordType::A | RecordType::AAAA))
            .cloned()
    }

    /// The one type an ANY question at `node` is answered with: the apex's SOA, a policy
    /// name's addresses, or a static name's first RRset.
    fn one_type_of(&self, node: &LowerName) -> RecordType {
        if *node == self.origin {
            RecordType::SOA
        } else if let Some(first) = self.records.get(node).and_then(|r| r.first()) {
            first.record_type()
        } else {
            RecordType::A
        }
    }

    /// The TTL of negative answers and of NSEC records (RFC 2308, RFC 4034 §4).
    pub fn negative_ttl(&self) -> u32 {
        self.negative_soa().ttl
    }

    /// The SOA in the authority section of a negative answer, with the negative TTL (RFC 2308).
    fn negative_soa(&self) -> Record {
        let mut soa = self.soa.clone();
        if let RData::SOA(data) = &soa.data {
            soa.ttl = soa.ttl.min(data.minimum);
        }
        soa
    }
}

impl PolicyName {
    /// Answers `kind` for this name; the records' owner is `owner` (this name, or a name its
    /// wildcard covers).
    fn answer(
        self: &Arc<Self>,
        authority: &Authority,
        owner: &Name,
        kind: RecordType,
        asked: &Asked,
        lookup: &mut Lookup,
    ) -> Found {
        self.counters.queries.fetch_add(1, Ordering::Relaxed);
        let mut tally = NameTally {
            counters: self.counters.clone(),
            regions: Vec::new(),
            failover: false,
            nodata: false,
        };
        let found = self.decide(authority, owner, kind, asked, lookup, &mut tally);
        if tally.nodata {
            self.counters.nodata.fetch_add(1, Ordering::Relaxed);
        }
        lookup.tally.name = Some(tally);
        found
    }

    fn decide(
        self: &Arc<Self>,
        authority: &Authority,
        owner: &Name,
        kind: RecordType,
        asked: &Asked,
        lookup: &mut Lookup,
        tally: &mut NameTally,
    ) -> Found {
        if !matches!(kind, RecordType::A | RecordType::AAAA) {
            tally.nodata = true;
            return Found::NoData;
        }
        let decision = match asked.forced {
            Some(decision) => decision.clone(),
            None => self
                .policy
                .decide(asked.client, &authority.groups, asked.live, asked.random),
        };
        if matches!(self.policy, Policy::Weighted(_)) {
            lookup.drawn = Some((self.clone(), decision.clone()));
        }
        if decision.failover {
            self.counters.failovers.fetch_add(1, Ordering::Relaxed);
            tally.failover = true;
        }
        lookup.scope = decision.scope;
        let before = lookup.answers.len();
        for region in &decision.regions {
            let Some(plan) = authority.regions.get(*region) else {
                continue;
            };
            if let Some(count) = self.counters.answers.get(&plan.name) {
                count.fetch_add(1, Ordering::Relaxed);
                tally.regions.push(plan.name.clone());
            }
            for address in &plan.addresses {
                let data = match (address, kind) {
                    (IpAddr::V4(v4), RecordType::A) => RData::A(A(*v4)),
                    (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(*v6)),
                    _ => continue,
                };
                lookup
                    .answers
                    .push(Record::from_rdata(owner.clone(), self.ttl, data));
            }
        }
        lookup.regions = decision.regions;
        if lookup.answers.len() == before {
            tally.nodata = true;
            return Found::NoData;
        }
        Found::Done
    }
}

fn build_zone(
    plan: &ZonePlan,
    dns: &DnsPlan,
    previous: Option<&Authority>,
) -> Result<Zone, Vec<String>> {
    let mut errors = Vec::new();
    let mut name = |text: &str, origin: Option<&Name>| {
        parse_name(text, origin).unwrap_or_else(|error| {
            errors.push(format!("zone {}: {error}", plan.origin));
            Name::root()
        })
    };
    let origin = name(&plan.origin, None);
    let soa = Record::from_rdata(
        origin.clone(),
        plan.ttl,
        RData::SOA(SOA::new(
            name(&plan.soa.mname, Some(&origin)),
            name(&plan.soa.rname, Some(&origin)),
            plan.soa.serial,
            clamp(plan.soa.refresh),
            clamp(plan.soa.retry),
            clamp(plan.soa.expire),
            plan.soa.minimum,
        )),
    );
    let name_servers = plan
        .name_servers
        .iter()
        .map(|ns| {
            let target = name(ns, Some(&origin));
            Record::from_rdata(origin.clone(), plan.ttl, RData::NS(NS(target)))
        })
        .collect();
    let mut records: HashMap<LowerName, Vec<Record>> = HashMap::new();
    for record in &plan.records {
        let owner = name(&record.name, Some(&origin));
        let data = match &record.data {
            RecordData::A(v4) => RData::A(A(*v4)),
            RecordData::Aaaa(v6) => RData::AAAA(AAAA(*v6)),
            RecordData::Cname(target) => RData::CNAME(CNAME(name(target, Some(&origin)))),
            RecordData::Txt(strings) => RData::TXT(TXT::new(strings.clone())),
            RecordData::Srv {
                priority,
                weight,
                port,
                target,
            } => RData::SRV(SRV::new(
                *priority,
                *weight,
                *port,
                name(target, Some(&origin)),
            )),
            RecordData::Ns(target) => RData::NS(NS(name(target, Some(&origin)))),
            RecordData::Parsed(data) => data.clone(),
        };
        records
            .entry(LowerName::from(&owner))
            .or_default()
            .push(Record::from_rdata(
                owner,
                record.ttl.unwrap_or(plan.ttl),
                data,
            ));
    }
    let old_zone = previous.and_then(|p| {
        p.zones
            .iter()
            .find(|z| z.origin == LowerName::from(&origin))
    });
    let mut names = HashMap::new();
    for policy_name in &plan.names {
        let owner = name(&policy_name.name, Some(&origin));
        let key = LowerName::from(&owner);
        let kept = old_zone
            .and_then(|z| z.names.get(&key))
            .filter(|old| old.policy.kind() == policy_name.policy.kind())
            .map(|old| old.counters.clone());
        let counters = kept.unwrap_or_else(|| {
            Arc::new(NameCounters {
                answers: dns
                    .regions
                    .iter()
                    .map(|r| (r.name.clone(), AtomicU64::new(0)))
                    .collect(),
                ..NameCounters::default()
            })
        });
        names.insert(
            key,
            Arc::new(PolicyName {
                name: owner,
                ttl: policy_name.ttl,
                policy: policy_name.policy.clone(),
                counters,
            }),
        );
    }
    let origin_lower = LowerName::from(&origin);
    let cuts = delegations(&mut records, &origin_lower);
    errors.extend(
        conflicts(&records, &names, &cuts, &origin_lower)
            .into_iter()
            .map(|problem| format!("zone {}: {problem}", plan.origin)),
    );
    let transfer = plan.transfer.as_ref().and_then(|t| {
        Transfer::new(t)
            .map_err(|error| errors.push(format!("zone {}: transfer: {error}", plan.origin)))
            .ok()
    });
    let wildcards = records.keys().chain(names.keys()).any(|n| n.is_wildcard());
    let mut interior = std::collections::HashSet::new();
    for owner in records.keys().chain(names.keys()).chain(cuts.keys()) {
        let mut parent = owner.base_name();
        while parent.num_labels() > origin_lower.num_labels() {
            interior.insert(parent.clone());
            parent = parent.base_name();
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Zone {
        counters: old_zone.map_or_else(Arc::default, |z| z.counters.clone()),
        origin: origin_lower,
        soa,
        name_servers,
        records,
        names,
        interior,
        cuts,
        wildcards,
        transfer,
        transferred: Vec::new(),
        written_serial: plan.soa.serial,
        fingerprint: 0,
        signing_day: None,
        journal: Vec::new(),
        dnssec: plan
            .dnssec
            .as_ref()
            .map(|keys| Signing::new(keys, origin.clone(), plan.ttl)),
    })
}

/// Takes the NS records below the apex out of `records`: each owner is a zone cut.
fn delegations(
    records: &mut HashMap<LowerName, Vec<Record>>,
    origin: &LowerName,
) -> HashMap<LowerName, Vec<Record>> {
    let mut cuts = HashMap::new();
    for (owner, owned) in records.iter_mut() {
        if owner == origin || !owned.iter().any(|r| r.record_type() == RecordType::NS) {
            continue;
        }
        let (servers, rest) = owned
            .drain(..)
            .partition(|r| r.record_type() == RecordType::NS);
        *owned = rest;
        cuts.insert(owner.clone(), servers);
    }
    records.retain(|_, owned| !owned.is_empty());
    cuts
}

/// What a zone may not hold: names outside it, a CNAME beside other data (RFC 1034 §3.6.2) or
/// at the apex, a policy name that also has records, or one at or below a delegation.
fn conflicts(
    records: &HashMap<LowerName, Vec<Record>>,
    names: &HashMap<LowerName, Arc<PolicyName>>,
    cuts: &HashMap<LowerName, Vec<Record>>,
    origin: &LowerName,
) -> Vec<String> {
    let mut problems = Vec::new();
    for owner in records.keys().chain(names.keys()).chain(cuts.keys()) {
        if !origin.zone_of(owner) {
            problems.push(format!("{owner} is not inside the zone"));
        }
    }
    for (owner, owned) in records {
        let cnames = owned
            .iter()
            .filter(|r| r.record_type() == RecordType::CNAME)
            .count();
        if cnames > 0 && (owned.len() > 1 || cuts.contains_key(owner)) {
            problems.push(format!(
                "{owner} has a CNAME and other records; a CNAME must be alone at its name"
            ));
        }
        if cnames > 0 && owner == origin {
            problems.push(format!(
                "{owner} is the apex, which has SOA and NS records; it cannot have a CNAME"
            ));
        }
        if owned.iter().any(|r| r.record_type() == RecordType::DS) && !cuts.contains_key(owner) {
            problems.push(format!(
                "{owner} has a DS record but no NS records; DS belongs at a delegation"
            ));
        }
        if names.contains_key(owner) {
            problems.push(format!(
                "{owner} has static records and a policy; a name answers either by its policy or by its records"
            ));
        }
    }
    for owner in names.keys() {
        if let Some(cut) = cuts.keys().find(|cut| cut.zone_of(owner)) {
            problems.push(format!(
                "policy name {owner} is at or below the delegation {cut}; the child zone answers it"
            ));
        }
    }
    problems.sort();
    problems
}

impl ZonePlan {
    /// What keeps this zone from being served (conflicting records, names outside it), for
    /// `trafik check`; empty when it builds.
    pub fn problems(&self) -> Vec<String> {
        let prefix = format!("zone {}: ", self.origin);
        let problems = build_zone(self, &DnsPlan::default(), None).err();
        problems
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                p.strip_prefix(&prefix)
                    .map_or_else(|| p.clone(), str::to_owned)
            })
            .collect()
    }
}

/// SOA timers are signed 32-bit on the wire.
fn clamp(seconds: u32) -> i32 {
    i32::try_from(seconds).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::AllDown;

    fn plan() -> DnsPlan {
        DnsPlan {
            regions: vec![
                RegionPlan {
                    name: "b34".into(),
                    addresses: vec!["127.0.0.34".parse().unwrap()],
                },
                RegionPlan {
                    name: "b35".into(),
                    addresses: vec!["127.0.0.35".parse().unwrap(), "::35".parse().unwrap()],
                },
            ],
            groups: vec![("g1".into(), vec![Prefix::parse("10.1.0.0/16").unwrap()])],
            zones: vec![ZonePlan {
                origin: "kargo.test.".into(),
                ttl: 30,
                soa: SoaPlan {
                    mname: "ns1".into(),
                    rname: "hostmaster".into(),
                    serial: 1,
                    refresh: 3600,
                    retry: 600,
                    expire: 86400,
                    minimum: 5,
                },
                name_servers: vec!["ns1".into()],
                records: vec![
                    RecordPlan {
                        name: "ns1".into(),
                        ttl: None,
                        data: RecordData::A("127.0.0.1".parse().unwrap()),
                    },
                    RecordPlan {
                        name: "www.api".into(),
                        ttl: Some(60),
                        data: RecordData::Cname("devralma".into()),
                    },
                ],
                names: vec![NamePlan {
                    name: "devralma".into(),
                    ttl: 30,
                    policy: Policy::Failover {
                        primary: 0,
                        secondary: 1,
                        all_down: AllDown::Empty,
                    },
                }],
                transfer: None,
                dnssec: None,
            }],
            query_log: false,
            rate_limit: None,
            geoip: None,
        }
    }

    fn ask(authority: &Authority, name: &str, kind: RecordType, live: Live) -> Lookup {
        let name = LowerName::from(Name::from_ascii(name).unwrap());
        let client = Client::from_source("10.1.2.3".parse().unwrap());
        authority.lookup(&name, kind, client, live, 0, None)
    }

    #[test]
    fn answers_policy_names_static_records_and_negatives() {
        let authority = Authority::build(&plan(), None).unwrap();
        let all = Live::all(2);
        let a = ask(&authority, "devralma.kargo.test.", RecordType::A, all);
        assert_eq!(a.code, Code::NoError);
        assert_eq!(
            a.answers[0].data,
            RData::A(A("127.0.0.34".parse().unwrap()))
        );
        let failed = ask(
            &authority,
            "DEVRALMA.kargo.test.",
            RecordType::AAAA,
            all.with(0, false),
        );
        assert_eq!(
            failed.answers[0].data,
            RData::AAAA(AAAA("::35".parse().unwrap()))
        );
        let chain = ask(&authority, "www.api.kargo.test.", RecordType::A, all);
        assert_eq!(chain.answers.len(), 2);
        assert_eq!(chain.answers[0].record_type(), RecordType::CNAME);
        let nodata = ask(&authority, "ns1.kargo.test.", RecordType::TXT, all);
        assert_eq!((nodata.code, nodata.answers.len()), (Code::NoError, 0));
        assert_eq!(nodata.authority[0].ttl, 5);
        let interior = ask(&authority, "api.kargo.test.", RecordType::A, all);
        assert_eq!((interior.code, interior.answers.len()), (Code::NoError, 0));
        let missing = ask(&authority, "yok.kargo.test.", RecordType::A, all);
        assert_eq!(missing.code, Code::NxDomain);
        assert_eq!(missing.authority[0].record_type(), RecordType::SOA);
        let elsewhere = ask(&authority, "example.com.", RecordType::A, all);
        assert_eq!(elsewhere.code, Code::Refused);
        let apex = ask(&authority, "kargo.test.", RecordType::NS, all);
        assert_eq!(apex.answers[0].record_type(), RecordType::NS);
        let none = ask(
            &authority,
            "devralma.kargo.test.",
            RecordType::A,
            Live::none(),
        );
        assert!(none.answers.is_empty());
        assert_eq!(
            authority.zones[0].counters.nxdomain.load(Ordering::Relaxed),
            1
        );
    }

    #[test]
    fn a_reload_keeps_the_counters_of_names_that_stay() {
        let first = Authority::build(&plan(), None).unwrap();
        ask(&first, "devralma.kargo.test.", RecordType::A, Live::all(2));
        let second = Authority::build(&plan(), Some(&first)).unwrap();
        let key = LowerName::from(Name::from_ascii("devralma.kargo.test.").unwrap());
        let counters = &second.zones[0].names[&key].counters;
        assert_eq!(counters.queries.load(Ordering::Relaxed), 1);
        assert_eq!(counters.answers["b34"].load(Ordering::Relaxed), 1);
    }

    /// Lets 127.0.0.1 transfer the plan's zone, without a key.
    fn transferring(plan: &mut DnsPlan) {
        plan.zones[0].transfer = Some(TransferPlan {
            allow: vec![Prefix::parse("127.0.0.1/32").unwrap()],
            notify: Vec::new(),
            tsig: None,
        });
    }

    #[test]
    fn a_transferred_zone_keeps_its_serial_until_its_content_changes() {
        let mut plan = plan();
        transferring(&mut plan);
        let first = Authority::build(&plan, None).unwrap();
        let zone = &first.zones[0];
        assert!(zone.serial() > 1, "managed, not the written 1");
        let owners: Vec<String> = zone
            .transferred()
            .iter()
            .map(|r| format!("{} {}", r.name, r.record_type()))
            .collect();
        // The policy name as its first choice with every region live.
        assert!(
            owners.contains(&"devralma.kargo.test. A".to_owned()),
            "{owners:?}"
        );
        let same = Authority::build(&plan, Some(&first)).unwrap();
        assert_eq!(same.zones[0].serial(), zone.serial());
        plan.zones[0].records[0].data = RecordData::A("127.0.0.2".parse().unwrap());
        let changed = Authority::build(&plan, Some(&same)).unwrap();
        assert!(changed.zones[0].serial() > zone.serial());
        // Without transfers the written serial stands.
        plan.zones[0].transfer = None;
        assert_eq!(Authority::build(&plan, None).unwrap().zones[0].serial(), 1);
    }

    /// Adds the records of the master-file `text` to the plan's zone.
    fn add_file_records(plan: &mut DnsPlan, text: &str) {
        let origin = Name::from_ascii("kargo.test.").unwrap();
        let records = crate::master::read(text, &origin, 60).unwrap();
        plan.zones[0]
            .records
            .extend(records.into_iter().map(|record| RecordPlan {
                name: record.name.to_string(),
                ttl: Some(record.ttl),
                data: RecordData::Parsed(record.data),
            }));
    }

    /// A zone read from a master file: mail, CAA, a wildcard, and a delegation with glue.
    fn file_plan() -> DnsPlan {
        let text = "\
@        MX    10 posta
@        CAA   0 issue \"letsencrypt.org\"
posta    A     127.0.0.25
*.musteri      TXT \"joker\"
*.musteri      MX  20 posta
ozel.musteri   TXT \"kendi\"
*.cdn          CNAME devralma
bolge    NS    ns1.bolge
bolge    NS    ns.disari.test.
ns1.bolge      A   127.0.0.53
";
        let mut plan = plan();
        add_file_records(&mut plan, text);
        plan
    }

    #[test]
    fn mail_and_caa_records_answer_at_the_apex() {
        let authority = Authority::build(&file_plan(), None).unwrap();
        let mx = ask(&authority, "kargo.test.", RecordType::MX, Live::all(2));
        assert_eq!(mx.answers[0].data.to_string(), "10 posta.kargo.test.");
        let caa = ask(&authority, "kargo.test.", RecordType::CAA, Live::all(2));
        assert_eq!(caa.answers[0].record_type(), RecordType::CAA);
    }

    #[test]
    fn a_wildcard_answers_for_missing_names_below_its_closest_encloser_only() {
        let authority = Authority::build(&file_plan(), None).unwrap();
        let all = Live::all(2);
        let any = ask(&authority, "a.b.musteri.kargo.test.", RecordType::TXT, all);
        assert_eq!(any.code, Code::NoError);
        assert_eq!(any.answers[0].name.to_ascii(), "a.b.musteri.kargo.test.");
        assert_eq!(any.answers[0].data.to_string(), "joker");
        // An existing name is not covered (RFC 4592 §2.2.1), nor the wildcard's parent.
        let own = ask(&authority, "ozel.musteri.kargo.test.", RecordType::TXT, all);
        assert_eq!(own.answers[0].data.to_string(), "kendi");
        let own_mx = ask(&authority, "ozel.musteri.kargo.test.", RecordType::MX, all);
        assert_eq!((own_mx.code, own_mx.answers.len()), (Code::NoError, 0));
        let parent = ask(&authority, "musteri.kargo.test.", RecordType::TXT, all);
        assert_eq!((parent.code, parent.answers.len()), (Code::NoError, 0));
        // Below an existing name that is not the wildcard's parent: no match.
        let below = ask(
            &authority,
            "x.ozel.musteri.kargo.test.",
            RecordType::TXT,
            all,
        );
        assert_eq!(below.code, Code::NxDomain);
        let nodata = ask(&authority, "y.musteri.kargo.test.", RecordType::AAAA, all);
        assert_eq!((nodata.code, nodata.answers.len()), (Code::NoError, 0));
        // A wildcard CNAME is followed to a policy name.
        let chain = ask(&authority, "resim.cdn.kargo.test.", RecordType::A, all);
        assert_eq!(chain.answers[0].name.to_ascii(), "resim.cdn.kargo.test.");
        assert_eq!(
            chain.answers[1].data,
            RData::A(A("127.0.0.34".parse().unwrap()))
        );
    }

    #[test]
    fn a_delegated_name_gets_a_referral_with_glue() {
        let authority = Authority::build(&file_plan(), None).unwrap();
        for name in [
            "bolge.kargo.test.",
            "www.bolge.kargo.test.",
            "ns1.bolge.kargo.test.",
        ] {
            let referral = ask(&authority, name, RecordType::A, Live::all(2));
            assert!(referral.referral, "{name}");
            assert_eq!((referral.code, referral.answers.len()), (Code::NoError, 0));
            assert_eq!(referral.authority.len(), 2);
            assert!(
                referral
                    .authority
                    .iter()
                    .all(|r| r.record_type() == RecordType::NS)
            );
            assert_eq!(referral.additional.len(), 1, "in-zone glue only");
            assert_eq!(
                referral.additional[0].name.to_ascii(),
                "ns1.bolge.kargo.test."
            );
        }
        let ds = ask(
            &authority,
            "bolge.kargo.test.",
            RecordType::DS,
            Live::all(2),
        );
        assert!(!ds.referral);
        assert_eq!(ds.authority[0].record_type(), RecordType::SOA);
    }

    #[test]
    fn any_is_answered_with_one_rrset() {
        let authority = Authority::build(&file_plan(), None).unwrap();
        let all = Live::all(2);
        let apex = ask(&authority, "kargo.test.", RecordType::ANY, all);
        assert_eq!(apex.answers.len(), 1);
        assert_eq!(apex.answers[0].record_type(), RecordType::SOA);
        let policy = ask(&authority, "devralma.kargo.test.", RecordType::ANY, all);
        assert_eq!(policy.answers.len(), 1);
        assert_eq!(policy.answers[0].record_type(), RecordType::A);
        let wildcard = ask(&authority, "z.musteri.kargo.test.", RecordType::ANY, all);
        assert_eq!(wildcard.answers.len(), 1);
    }

    #[test]
    fn conflicting_records_are_refused_with_their_name() {
        let mut plan = file_plan();
        let record = |name: &str, data| RecordPlan {
            name: name.into(),
            ttl: None,
            data,
        };
        plan.zones[0].records.extend([
            record("posta", RecordData::Cname("ns1".into())),
            record("devralma", RecordData::Txt(vec!["x".into()])),
            record("disari.test.", RecordData::A("127.0.0.1".parse().unwrap())),
        ]);
        let policy = plan.zones[0].names[0].policy.clone();
        plan.zones[0].names.push(NamePlan {
            name: "a.bolge".into(),
            ttl: 30,
            policy,
        });
        let problems = plan.zones[0].problems();
        assert_eq!(problems.len(), 4, "{problems:#?}");
        assert!(
            problems
                .iter()
                .any(|p| p.contains("posta.kargo.test. has a CNAME"))
        );
        assert!(
            problems
                .iter()
                .any(|p| p.contains("disari.test. is not inside"))
        );
        assert!(problems.iter().any(|p| p.contains("below the delegation")));
        assert!(
            problems
                .iter()
                .any(|p| p.contains("devralma.kargo.test. has static"))
        );
        assert!(Authority::build(&plan, None).is_err());
    }

    /// The file zone signed, with keys made in a folder of the test's own, an unsigned
    /// delegation (`bolge`), a signed one (`uzak`, with its DS) and a CNAME to nothing.
    fn signed_plan(test: &str) -> DnsPlan {
        let folder =
            std::env::temp_dir().join(format!("trafik-zone-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&folder);
        let origin = Name::from_ascii("kargo.test.").unwrap();
        let mut plan = file_plan();
        let text = format!(
            "uzak NS ns.disari.test.\nuzak DS 12345 13 2 {}\nkopuk CNAME yok\n",
            "ab".repeat(32)
        );
        add_file_records(&mut plan, &text);
        plan.zones[0].dnssec = Some(ZoneKeys::load(&folder, &origin).unwrap());
        plan
    }

    /// `name`/`kind` asked with the DO bit at `now`.
    fn ask_signed(authority: &Authority, name: &str, kind: RecordType, now: u64) -> Lookup {
        let mut lookup = ask(authority, name, kind, Live::all(2));
        let name = LowerName::from(Name::from_ascii(name).unwrap());
        authority.sign(&mut lookup, &name, kind, now);
        lookup
    }

    fn kinds(records: &[Record]) -> Vec<RecordType> {
        records.iter().map(Record::record_type).collect()
    }

    fn nsec_of(record: &Record) -> &NSEC {
        match &record.data {
            RData::DNSSEC(DNSSECRData::NSEC(nsec)) => nsec,
            other => panic!("not an NSEC: {other:?}"),
        }
    }

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn a_missing_name_gets_a_black_lie_and_signatures_come_from_the_cache() {
        let authority = Authority::build(&signed_plan("lies"), None).unwrap();
        let lookup = ask_signed(&authority, "yok.kargo.test.", RecordType::A, NOW);
        assert_eq!(lookup.code, Code::NoError);
        use RecordType::{NSEC as Nsec, RRSIG as Sig, SOA as Soa};
        assert_eq!(kinds(&lookup.authority), [Soa, Sig, Nsec, Sig]);
        let nsec = nsec_of(&lookup.authority[2]);
        assert_eq!(nsec.next_domain_name().to_ascii(), "\\000.yok.kargo.test.");
        assert_eq!(nsec.type_bit_maps().collect::<Vec<_>>(), [Sig, Nsec]);
        // The same RRsets an hour later: the same signatures, from the cache.
        let again = ask_signed(&authority, "yok.kargo.test.", RecordType::A, NOW + 3600);
        assert_eq!(again.authority, lookup.authority);
        // A name of 254 octets, too long for `\000.` before it: no NSEC, and no panic.
        let long = format!(
            "{}.kargo.test.",
            [
                "a".repeat(61),
                "a".repeat(61),
                "a".repeat(61),
                "a".repeat(55)
            ]
            .join(".")
        );
        let lookup = ask_signed(&authority, &long, RecordType::A, NOW);
        assert_eq!(lookup.code, Code::NxDomain);
    }

    #[test]
    fn a_cname_to_nothing_is_nxdomain_and_signed_with_a_proof_for_its_target() {
        let authority = Authority::build(&signed_plan("cname"), None).unwrap();
        let plain = ask(&authority, "kopuk.kargo.test.", RecordType::A, Live::all(2));
        assert_eq!(plain.code, Code::NxDomain);
        assert_eq!(kinds(&plain.answers), [RecordType::CNAME]);
        assert_eq!(kinds(&plain.authority), [RecordType::SOA]);
        let signed = ask_signed(&authority, "kopuk.kargo.test.", RecordType::A, NOW);
        assert_eq!(signed.code, Code::NoError);
        assert_eq!(
            kinds(&signed.answers),
            [RecordType::CNAME, RecordType::RRSIG]
        );
        assert_eq!(signed.authority[2].name.to_ascii(), "yok.kargo.test.");
        let nsec = nsec_of(&signed.authority[2]);
        assert!(!nsec.type_bit_maps().any(|t| t == RecordType::A));
        // A chain to a name that exists without the type: NODATA, proved at the target.
        let nodata = ask_signed(&authority, "www.api.kargo.test.", RecordType::TXT, NOW);
        assert_eq!(signed.code, Code::NoError);
        let nsec = nodata
            .authority
            .iter()
            .find(|r| r.record_type() == RecordType::NSEC)
            .expect("an NSEC for the CNAME's target");
        assert_eq!(nsec.name.to_ascii(), "devralma.kargo.test.");
        let types: Vec<_> = nsec_of(nsec).type_bit_maps().collect();
        assert!(types.contains(&RecordType::A) && types.contains(&RecordType::AAAA));
    }

    #[test]
    fn a_wildcard_s_nodata_lists_the_wildcard_s_types() {
        let authority = Authority::build(&signed_plan("wildcard"), None).unwrap();
        let lookup = ask_signed(&authority, "y.musteri.kargo.test.", RecordType::AAAA, NOW);
        let nsec = &lookup.authority[2];
        assert_eq!(nsec.name.to_ascii(), "y.musteri.kargo.test.");
        let types: Vec<_> = nsec_of(nsec).type_bit_maps().collect();
        use RecordType::{MX, NSEC as Nsec, RRSIG as Sig, TXT};
        assert_eq!(types, [MX, TXT, Sig, Nsec]);
    }

    #[test]
    fn referrals_carry_the_ds_or_an_nsec_proving_there_is_none() {
        let authority = Authority::build(&signed_plan("referral"), None).unwrap();
        use RecordType::{DS, NS, NSEC as Nsec, RRSIG as Sig};
        let unsigned = ask_signed(&authority, "www.bolge.kargo.test.", RecordType::A, NOW);
        assert!(unsigned.referral);
        assert_eq!(kinds(&unsigned.authority), [NS, NS, Nsec, Sig]);
        let nsec = nsec_of(&unsigned.authority[2]);
        assert_eq!(unsigned.authority[2].name.to_ascii(), "bolge.kargo.test.");
        assert_eq!(nsec.type_bit_maps().collect::<Vec<_>>(), [NS, Sig, Nsec]);
        // Glue stays unsigned: it is the child's.
        assert_eq!(kinds(&unsigned.additional), [RecordType::A]);
        let signed = ask_signed(&authority, "uzak.kargo.test.", RecordType::A, NOW);
        assert_eq!(kinds(&signed.authority), [NS, DS, Sig]);
        // DS is answered by the parent, signed; an unsigned cut's DS is denied there.
        let ds = ask_signed(&authority, "uzak.kargo.test.", DS, NOW);
        assert!(!ds.referral);
        assert_eq!(kinds(&ds.answers), [DS, Sig]);
        let no_ds = ask_signed(&authority, "bolge.kargo.test.", DS, NOW);
        let nsec = nsec_of(&no_ds.authority[2]);
        assert_eq!(nsec.type_bit_maps().collect::<Vec<_>>(), [NS, Sig, Nsec]);
    }

    #[test]
    fn a_ds_outside_a_delegation_is_refused() {
        let mut plan = plan();
        let origin = Name::from_ascii("kargo.test.").unwrap();
        let ds = crate::master::parse_value(DS, &format!("1 13 2 {}", "ab".repeat(32)), &origin);
        use RecordType::DS;
        plan.zones[0].records.push(RecordPlan {
            name: "ns1".into(),
            ttl: None,
            data: RecordData::Parsed(ds.unwrap()),
        });
        let problems = plan.zones[0].problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("DS belongs at a delegation"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_signed_zone_transfers_with_its_nsec_chain_and_signatures() {
        let mut plan = signed_plan("transfer");
        transferring(&mut plan);
        let authority = Authority::build(&plan, None).unwrap();
        let zone = &authority.zones[0];
        let records = zone.transfer_records(NOW);
        let nsecs: Vec<&Record> = records
            .iter()
            .filter(|r| r.record_type() == RecordType::NSEC)
            .collect();
        let chain: Vec<String> = nsecs.iter().map(|r| r.name.to_ascii()).collect();
        // Canonical order (RFC 4034 §6.1); no empty non-terminal (musteri, api), no glue.
        assert_eq!(
            chain,
            [
                "kargo.test.",
                "www.api.kargo.test.",
                "bolge.kargo.test.",
                "*.cdn.kargo.test.",
                "devralma.kargo.test.",
                "kopuk.kargo.test.",
                "*.musteri.kargo.test.",
                "ozel.musteri.kargo.test.",
                "ns1.kargo.test.",
                "posta.kargo.test.",
                "uzak.kargo.test.",
            ]
            .map(str::to_owned)
        );
        for (index, nsec) in nsecs.iter().enumerate() {
            let next = nsecs[(index + 1) % nsecs.len()];
            assert_eq!(nsec_of(nsec).next_domain_name(), &next.name);
        }
        let signed = |owner: &str, kind: RecordType| {
            records.iter().any(|r| match &r.data {
                RData::DNSSEC(DNSSECRData::RRSIG(sig)) => {
                    r.name.to_ascii() == owner && sig.input().type_covered == kind
                }
                _ => false,
            })
        };
        assert!(signed("kargo.test.", RecordType::SOA));
        assert!(signed("kargo.test.", RecordType::DNSKEY));
        assert!(signed("kargo.test.", RecordType::NS));
        assert!(signed("uzak.kargo.test.", RecordType::DS));
        assert!(signed("bolge.kargo.test.", RecordType::NSEC));
        assert!(!signed("bolge.kargo.test.", RecordType::NS));
        assert!(!signed("ns1.bolge.kargo.test.", RecordType::A));
        assert!(records.iter().all(|r| r.record_type() != RecordType::SOA));
        // An unsigned zone transfers as before.
        plan.zones[0].dnssec = None;
        let unsigned = Authority::build(&plan, None).unwrap();
        assert_eq!(
            &*unsigned.zones[0].transfer_records(NOW),
            unsigned.zones[0].transferred()
        );
    }

    #[test]
    fn a_signed_zone_that_transfers_gets_a_new_serial_each_signing_day() {
        let mut plan = signed_plan("resign");
        transferring(&mut plan);
        let day = 20_000 * RESIGN_EVERY;
        let first = Authority::build_at(&plan, None, day + 10).unwrap();
        let serial = first.zones[0].serial();
        assert!(first.resigned(day + RESIGN_EVERY - 1).is_none());
        let later = first.resigned(day + RESIGN_EVERY).expect("a new day");
        assert!(later.zones[0].serial() > serial);
        assert!(later.resigned(day + RESIGN_EVERY + 5).is_none());
        // An unsigned zone keeps its serial from day to day.
        plan.zones[0].dnssec = None;
        let unsigned = Authority::build_at(&plan, None, day).unwrap();
        assert!(unsigned.resigned(day + 3 * RESIGN_EVERY).is_none());
        let rebuilt = Authority::build_at(&plan, Some(&unsigned), day + 3 * RESIGN_EVERY).unwrap();
        assert_eq!(rebuilt.zones[0].serial(), unsigned.zones[0].serial());
    }

    #[test]
    fn ixfr_sends_the_changes_since_a_serial_the_journal_holds() {
        let mut plan = plan();
        transferring(&mut plan);
        let first = Authority::build_at(&plan, None, NOW).unwrap();
        plan.zones[0].records[0].data = RecordData::A("127.0.0.2".parse().unwrap());
        let second = Authority::build_at(&plan, Some(&first), NOW + 1).unwrap();
        let (one, two) = (first.zones[0].serial(), second.zones[0].serial());
        let shown = |records: Vec<Record>| -> Vec<String> {
            records
                .iter()
                .map(|r| match &r.data {
                    RData::SOA(soa) => format!("SOA {}", soa.serial),
                    data => format!("{} {data}", r.name),
                })
                .collect()
        };
        let changes = second.zones[0].changes_since(one).unwrap();
        assert_eq!(
            shown(changes),
            [
                format!("SOA {two}"),
                format!("SOA {one}"),
                "ns1.kargo.test. 127.0.0.1".to_owned(),
                format!("SOA {two}"),
                "ns1.kargo.test. 127.0.0.2".to_owned(),
                format!("SOA {two}"),
            ]
        );
        // A reload that changes nothing adds nothing; another change adds a second step.
        let same = Authority::build_at(&plan, Some(&second), NOW + 2).unwrap();
        plan.zones[0].records[0].data = RecordData::A("127.0.0.3".parse().unwrap());
        let third = Authority::build_at(&plan, Some(&same), NOW + 3).unwrap();
        let since_one = third.zones[0].changes_since(one).unwrap();
        assert_eq!(since_one.len(), 10, "{:?}", shown(since_one));
        assert_eq!(third.zones[0].changes_since(two).unwrap().len(), 6);
        assert!(third.zones[0].changes_since(12345).is_none());
        // A signed zone keeps no journal: its secondaries get the whole zone.
        let mut signed = signed_plan("journal");
        transferring(&mut signed);
        let first = Authority::build_at(&signed, None, NOW).unwrap();
        signed.zones[0].records[0].data = RecordData::A("127.0.0.2".parse().unwrap());
        let second = Authority::build_at(&signed, Some(&first), NOW + 1).unwrap();
        assert!(
            second.zones[0]
                .changes_since(first.zones[0].serial())
                .is_none()
        );
    }

    #[test]
    fn an_nsec3_zone_denies_by_hashes_and_transfers_a_chain_with_its_empty_non_terminals() {
        let mut plan = signed_plan("nsec3");
        if let Some(keys) = &mut plan.zones[0].dnssec {
            keys.denial = Denial::Nsec3;
        }
        transferring(&mut plan);
        let authority = Authority::build(&plan, None).unwrap();
        let lie = ask_signed(&authority, "yok.kargo.test.", RecordType::A, NOW);
        let hash = crate::dnssec::nsec3_hash(&Name::from_ascii("yok.kargo.test.").unwrap());
        let label = data_encoding::BASE32HEX_NOPAD
            .encode(&hash.unwrap())
            .to_ascii_lowercase();
        assert_eq!(
            lie.authority[2].name.to_ascii(),
            format!("{label}.kargo.test.")
        );
        assert_eq!(lie.authority[2].record_type(), RecordType::NSEC3);
        let param = ask(
            &authority,
            "kargo.test.",
            RecordType::NSEC3PARAM,
            Live::all(2),
        );
        assert_eq!(kinds(&param.answers), [RecordType::NSEC3PARAM]);
        let records = authority.zones[0].transfer_records(NOW);
        let chain: Vec<(Vec<u8>, Vec<u8>)> = records
            .iter()
            .filter_map(|r| match &r.data {
                RData::DNSSEC(DNSSECRData::NSEC3(nsec3)) => {
                    let first = r.name.iter().next().unwrap().to_ascii_uppercase();
                    let owner = data_encoding::BASE32HEX_NOPAD.decode(&first).unwrap();
                    Some((owner, nsec3.next_hashed_owner_name().to_vec()))
                }
                _ => None,
            })
            .collect();
        // 11 names with records (as in the NSEC chain) and 3 empty non-terminals (api,
        // musteri, cdn); no glue, no NSEC.
        assert_eq!(chain.len(), 14);
        assert!(records.iter().all(|r| r.record_type() != RecordType::NSEC));
        let mut owners: Vec<&Vec<u8>> = chain.iter().map(|(owner, _)| owner).collect();
        owners.sort();
        for (index, owner) in owners.iter().enumerate() {
            let next = &chain.iter().find(|(o, _)| o == *owner).unwrap().1;
            assert_eq!(next, owners[(index + 1) % owners.len()]);
        }
    }
}
