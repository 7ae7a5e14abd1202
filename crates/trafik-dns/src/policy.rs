//! Routing policies: which regions a name answers with, for one client, given which regions are
//! live. Pure code: no sockets and no clock; randomness is passed in, so the server and
//! `trafik sim dns` run the same decisions.
//!
//! A region is an index into the zone's region list; client groups come from a prefix table
//! ([`Groups`]) matched against the source address or the EDNS Client Subnet (RFC 7871), then
//! from a GeoIP database's country, autonomous system or continent for the address, and the
//! length of the matched prefix (or of the database's network) is the scope the answer is
//! valid for.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::geoip::GeoDatabase;

use trafik_balance::hash::stable_hash;

/// A region: an index into the configured region list.
pub type Region = usize;

/// The set of live regions, one bit per region (up to 64 regions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Live(u64);

impl Live {
    /// The most regions a zone may have.
    pub const MAX_REGIONS: usize = 64;

    /// Every one of `count` regions live.
    pub fn all(count: usize) -> Self {
        if count >= Self::MAX_REGIONS {
            Live(u64::MAX)
        } else {
            Live((1u64 << count) - 1)
        }
    }

    pub fn none() -> Self {
        Live(0)
    }

    pub fn with(self, region: Region, live: bool) -> Self {
        if live {
            Live(self.0 | 1 << region)
        } else {
            Live(self.0 & !(1 << region))
        }
    }

    pub fn contains(self, region: Region) -> bool {
        region < Self::MAX_REGIONS && self.0 & (1 << region) != 0
    }

    pub fn bits(self) -> u64 {
        self.0
    }

    pub fn from_bits(bits: u64) -> Self {
        Live(bits)
    }
}

/// A client as a policy sees it: an address, of which the first `prefix` bits are known (the
/// ECS source prefix, or the address's full length for a source address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Client {
    pub address: IpAddr,
    pub prefix: u8,
}

impl Client {
    /// A client known by its full source address.
    pub fn from_source(address: IpAddr) -> Self {
        let prefix = if address.is_ipv4() { 32 } else { 128 };
        Client { address, prefix }
    }
}

/// An address prefix such as `10.1.0.0/16`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    pub network: IpAddr,
    pub length: u8,
}

impl Prefix {
    /// Parses `address/length`; `None` when it is not one.
    pub fn parse(text: &str) -> Option<Prefix> {
        let (address, length) = text.split_once('/')?;
        let network: IpAddr = address.parse().ok()?;
        let length: u8 = length.parse().ok()?;
        let bits = if network.is_ipv4() { 32 } else { 128 };
        (length <= bits).then(|| Prefix {
            network: mask(network, length),
            length,
        })
    }

    pub fn contains(&self, address: IpAddr) -> bool {
        address.is_ipv4() == self.network.is_ipv4() && mask(address, self.length) == self.network
    }
}

/// `address` with every bit after the first `length` cleared.
pub fn mask(address: IpAddr, length: u8) -> IpAddr {
    match address {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let kept = u32::MAX
                .checked_shl(32 - u32::from(length.min(32)))
                .unwrap_or(0);
            IpAddr::V4((bits & kept).into())
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let kept = u128::MAX
                .checked_shl(128 - u32::from(length.min(128)))
                .unwrap_or(0);
            IpAddr::V6((bits & kept).into())
        }
    }
}

/// Client groups by address prefix, longest prefix first, then by place.
#[derive(Clone, Debug, Default)]
pub struct Groups {
    entries: Vec<(Prefix, usize)>,
    geo: Option<GeoGroups>,
}

/// Groups by where the client is, from a GeoIP database.
#[derive(Clone, Debug)]
pub struct GeoGroups {
    pub database: Arc<GeoDatabase>,
    /// Each group's places, by group index.
    pub places: Vec<Places>,
}

/// The places of one group; a client is in it when its country, autonomous system or
/// continent is listed (checked in that order over all groups: the most specific wins).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Places {
    pub countries: Vec<String>,
    pub asns: Vec<u32>,
    pub continents: Vec<String>,
}

impl Groups {
    /// `entries` maps prefixes to group indices.
    pub fn new(mut entries: Vec<(Prefix, usize)>) -> Self {
        entries.sort_by_key(|entry| std::cmp::Reverse(entry.0.length));
        Groups { entries, geo: None }
    }

    /// These groups, and the places in `geo` for clients no prefix matches.
    pub fn with_places(self, geo: GeoGroups) -> Self {
        Groups {
            geo: Some(geo),
            ..self
        }
    }

    /// The client's group and the prefix length that decided it.
    pub fn group_of(&self, client: Client) -> Option<(usize, u8)> {
        match self.by_prefix(client) {
            Some((prefix, group)) => Some((group, prefix.length)),
            None => self
                .group_by_place(client)
                .map(|(group, place, _)| (group, place.prefix)),
        }
    }

    /// [`Groups::group_of`] and what decided it, in words (`trafik explain dns`): the prefix
    /// the client's address is under, or the GeoIP place it was found at.
    pub fn explain_group(&self, client: Client) -> Option<(usize, u8, String)> {
        if let Some((prefix, group)) = self.by_prefix(client) {
            let how = format!(
                "{} is under the prefix {}/{}",
                client.address, prefix.network, prefix.length
            );
            return Some((group, prefix.length, how));
        }
        let (group, place, by) = self.group_by_place(client)?;
        let how = format!(
            "GeoIP places {} in {by} (network /{})",
            client.address, place.prefix
        );
        Some((group, place.prefix, how))
    }

    fn by_prefix(&self, client: Client) -> Option<(&Prefix, usize)> {
        self.entries
            .iter()
            .find(|(prefix, _)| prefix.contains(client.address))
            .map(|(prefix, group)| (prefix, *group))
    }

    /// The group of the client's place, the place, and which of its fields matched.
    fn group_by_place(&self, client: Client) -> Option<(usize, crate::geoip::Place, String)> {
        let geo = self.geo.as_ref()?;
        let place = geo.database.locate(client.address)?;
        let find = |listed: &dyn Fn(&Places) -> bool| geo.places.iter().position(listed);
        let (group, by) = place
            .country
            .as_ref()
            .and_then(|country| {
                find(&|p| p.countries.contains(country)).map(|g| (g, format!("country {country}")))
            })
            .or_else(|| {
                let asn = place.asn?;
                find(&|p| p.asns.contains(&asn)).map(|g| (g, format!("AS{asn}")))
            })
            .or_else(|| {
                let continent = place.continent.as_ref()?;
                find(&|p| p.continents.contains(continent))
                    .map(|g| (g, format!("continent {continent}")))
            })?;
        Some((group, place, by))
    }
}

/// What a failover name answers when both its regions are down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllDown {
    /// The primary, as if it were live (Route 53's behaviour: better a maybe than nothing).
    Primary,
    /// No address: the name answers NODATA.
    Empty,
}

/// How a weighted name picks among its regions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WeightedChoice {
    /// The next live region of a fixed pattern, one slot per query (the course's 10 slots).
    Pattern,
    /// At random, in proportion to the weights of the live regions.
    Random,
}

/// One name's routing policy.
#[derive(Clone, Debug)]
pub enum Policy {
    /// The client's group's region, or that region's fallbacks in turn when it is down.
    Geo {
        /// The region of each group.
        region_of_group: Vec<Region>,
        /// The region for clients in no group.
        default: Region,
        /// Each region's fallback, if any.
        fallback: Vec<Option<Region>>,
    },
    /// The live region closest to the client's group.
    Latency {
        /// `distance[group][region]`; ties go to the earlier region.
        distance: Vec<Vec<f64>>,
        /// The group of clients in no group.
        default_group: usize,
    },
    /// Shares by weight.
    Weighted(Weighted),
    /// The primary while it is live, else the secondary.
    Failover {
        primary: Region,
        secondary: Region,
        all_down: AllDown,
    },
    /// Up to `max` live regions of the list (all of them, up to `max`, when none is live).
    Multivalue { regions: Vec<Region>, max: usize },
}

/// The weighted policy's settings and its place in the pattern.
#[derive(Debug)]
pub struct Weighted {
    pub choice: WeightedChoice,
    /// The cycle of regions; each region appears in proportion to its weight.
    pub pattern: Vec<Region>,
    /// Consistent per client subnet: the subnet length (v4, v6) whose hash picks the slot.
    pub consistent: Option<(u8, u8)>,
    /// The next pattern slot.
    cursor: AtomicUsize,
}

/// A copy starts at the pattern's first slot, as a freshly configured name does.
impl Clone for Weighted {
    fn clone(&self) -> Self {
        Weighted::new(self.choice.clone(), self.pattern.clone(), self.consistent)
    }
}

impl Weighted {
    pub fn new(choice: WeightedChoice, pattern: Vec<Region>, consistent: Option<(u8, u8)>) -> Self {
        Weighted {
            choice,
            pattern,
            consistent,
            cursor: AtomicUsize::new(0),
        }
    }

    /// The first live region of the pattern from `slot` on, and the slot after it.
    fn live_from(&self, slot: usize, live: Live) -> Option<(Region, usize)> {
        let length = self.pattern.len();
        (0..length).find_map(|step| {
            let at = (slot + step) % length;
            let region = self.pattern[at];
            live.contains(region).then_some((region, (at + 1) % length))
        })
    }

    /// The region for `client`; `advance` moves the pattern on (a query), or leaves it where it
    /// is (an explanation, which tells the slot the next query takes).
    fn pick(&self, client: Client, live: Live, random: u64, advance: bool) -> Option<(Region, u8)> {
        if let Some((v4, v6)) = self.consistent {
            let length = if client.address.is_ipv4() { v4 } else { v6 };
            let length = length.min(client.prefix);
            let subnet = mask(client.address, length);
            let key = match subnet {
                IpAddr::V4(v4) => stable_hash(&v4.octets()),
                IpAddr::V6(v6) => stable_hash(&v6.octets()),
            };
            let slot = (key % self.pattern.len() as u64) as usize;
            return self.live_from(slot, live).map(|(r, _)| (r, length));
        }
        match self.choice {
            WeightedChoice::Pattern if !advance => {
                let slot = self.cursor.load(Ordering::Acquire);
                self.live_from(slot, live).map(|(region, _)| (region, 0))
            }
            WeightedChoice::Pattern => {
                let mut picked = None;
                let _ = self
                    .cursor
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |slot| {
                        picked = self.live_from(slot, live);
                        picked.map(|(_, next)| next)
                    });
                picked.map(|(region, _)| (region, 0))
            }
            WeightedChoice::Random => {
                let live_slots = self.pattern.iter().filter(|r| live.contains(**r)).count();
                if live_slots == 0 {
                    return None;
                }
                let nth = (random % live_slots as u64) as usize;
                let region = self.pattern.iter().filter(|r| live.contains(**r)).nth(nth);
                region.map(|r| (*r, 0))
            }
        }
    }
}

/// The longest cycle weights may make (their sum, a common factor divided out): a
/// configuration whose weights need more is refused, rather than filling memory with it.
pub const LONGEST_PATTERN: u64 = 10_000;

/// The cycle `weights` make: their sum once their common factor is divided out.
pub fn pattern_length(weights: &[u32]) -> u64 {
    reduced(weights).iter().map(|w| u64::from(*w)).sum()
}

/// Weights divided by their greatest common divisor: the same proportions in the shortest
/// cycle (the smooth round robin of `k·w` is that of `w`, k times over).
fn reduced(weights: &[u32]) -> Vec<u32> {
    let gcd = |mut a: u32, mut b: u32| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let common = weights.iter().fold(0, |common, w| gcd(common, *w)).max(1);
    weights.iter().map(|w| w / common).collect()
}

/// A pattern with each region in proportion to its weight, interleaved (smooth weighted round
/// robin): weights 5, 3, 2 (or 50, 30, 20) give a cycle of 10.
pub fn pattern_from_weights(weights: &[u32]) -> Vec<Region> {
    let weights = &reduced(weights)[..];
    let total: i64 = weights.iter().map(|w| i64::from(*w)).sum();
    let mut current = vec![0i64; weights.len()];
    let mut pattern = Vec::with_capacity(total as usize);
    for _ in 0..total {
        for (c, w) in current.iter_mut().zip(weights) {
            *c += i64::from(*w);
        }
        let Some(best) = (0..weights.len()).max_by_key(|i| (current[*i], -(*i as i64))) else {
            break;
        };
        current[best] -= total;
        pattern.push(best);
    }
    pattern
}

/// A policy's answer for one query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The regions whose records answer, in order.
    pub regions: Vec<Region>,
    /// The ECS scope prefix: how many bits of the client's address the answer depended on.
    pub scope: u8,
    /// Whether health changed the answer from the policy's first choice.
    pub failover: bool,
}

impl Policy {
    /// The policy's decision for `client` when the regions in `live` are up; `random` is used by
    /// weighted random choice only.
    pub fn decide(&self, client: Client, groups: &Groups, live: Live, random: u64) -> Decision {
        self.decide_moving(client, groups, live, random, true)
    }

    /// The decision the next query for `client` gets, told without moving the weighted
    /// pattern on (`trafik explain dns`); a weighted random choice is drawn with `random`.
    pub fn explain(&self, client: Client, groups: &Groups, live: Live, random: u64) -> Decision {
        self.decide_moving(client, groups, live, random, false)
    }

    fn decide_moving(
        &self,
        client: Client,
        groups: &Groups,
        live: Live,
        random: u64,
        advance: bool,
    ) -> Decision {
        match self {
            Policy::Geo {
                region_of_group,
                default,
                fallback,
            } => {
                let (first, scope) = match groups.group_of(client) {
                    Some((group, scope)) => (region_of_group[group], scope),
                    None => (*default, client.prefix),
                };
                let mut region = first;
                // Follow fallbacks while down, at most once round the regions.
                for _ in 0..fallback.len() {
                    if live.contains(region) {
                        break;
                    }
                    match fallback.get(region).copied().flatten() {
                        Some(next) => region = next,
                        None => break,
                    }
                }
                let region = if live.contains(region) { region } else { first };
                one(region, scope, region != first)
            }
            Policy::Latency {
                distance,
                default_group,
            } => {
                let (group, scope) = groups
                    .group_of(client)
                    .unwrap_or((*default_group, client.prefix));
                let row = &distance[group];
                let closest = |only_live: bool| {
                    (0..row.len())
                        .filter(|r| !only_live || live.contains(*r))
                        .reduce(|a, b| if row[b] < row[a] { b } else { a })
                };
                let first = closest(false).unwrap_or(0);
                let region = closest(true).unwrap_or(first);
                one(region, scope, region != first)
            }
            Policy::Weighted(weighted) => match weighted.pick(client, live, random, advance) {
                Some((region, scope)) => Decision {
                    regions: vec![region],
                    scope,
                    failover: false,
                },
                None => {
                    let every = Live::all(Live::MAX_REGIONS);
                    let (region, scope) = weighted
                        .pick(client, every, random, advance)
                        .unwrap_or((0, 0));
                    one(region, scope, false)
                }
            },
            Policy::Failover {
                primary,
                secondary,
                all_down,
            } => {
                if live.contains(*primary) {
                    one(*primary, 0, false)
                } else if live.contains(*secondary) {
                    one(*secondary, 0, true)
                } else {
                    match all_down {
                        AllDown::Primary => one(*primary, 0, false),
                        AllDown::Empty => Decision {
                            regions: Vec::new(),
                            scope: 0,
                            failover: true,
                        },
                    }
                }
            }
            Policy::Multivalue { regions, max } => {
                let live_ones: Vec<Region> = regions
                    .iter()
                    .copied()
                    .filter(|r| live.contains(*r))
                    .take(*max)
                    .collect();
                let failover = live_ones.len() < regions.len().min(*max);
                let regions = if live_ones.is_empty() {
                    regions.iter().copied().take(*max).collect()
                } else {
                    live_ones
                };
                Decision {
                    regions,
                    scope: 0,
                    failover,
                }
            }
        }
    }

    /// Every region the policy may answer with, each once, in first-mention order.
    pub fn regions(&self) -> Vec<Region> {
        let mentioned: Vec<Region> = match self {
            Policy::Geo {
                region_of_group,
                default,
                fallback,
            } => region_of_group
                .iter()
                .chain([default])
                .chain(fallback.iter().flatten())
                .copied()
                .collect(),
            Policy::Latency { distance, .. } => (0..distance.first().map_or(0, Vec::len)).collect(),
            Policy::Weighted(weighted) => weighted.pattern.clone(),
            Policy::Failover {
                primary, secondary, ..
            } => vec![*primary, *secondary],
            Policy::Multivalue { regions, .. } => regions.clone(),
        };
        let mut regions = Vec::new();
        for region in mentioned {
            if !regions.contains(&region) {
                regions.push(region);
            }
        }
        regions
    }

    /// The policy's name in configuration and counters.
    pub fn kind(&self) -> &'static str {
        match self {
            Policy::Geo { .. } => "geo",
            Policy::Latency { .. } => "latency",
            Policy::Weighted(_) => "weighted",
            Policy::Failover { .. } => "failover",
            Policy::Multivalue { .. } => "multivalue",
        }
    }
}

fn one(region: Region, scope: u8, failover: bool) -> Decision {
    Decision {
        regions: vec![region],
        scope,
        failover,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B34: Region = 0;
    const B35: Region = 1;
    const B06: Region = 2;

    fn course_groups() -> Groups {
        Groups::new(
            (0..4)
                .map(|g| {
                    let prefix = Prefix::parse(&format!("10.{}.0.0/16", g + 1)).unwrap();
                    (prefix, g)
                })
                .collect(),
        )
    }

    fn client(text: &str) -> Client {
        Client::from_source(text.parse().unwrap())
    }

    fn geo() -> Policy {
        Policy::Geo {
            region_of_group: vec![B34, B35, B34, B06],
            default: B34,
            fallback: vec![Some(B06), Some(B34), Some(B35)],
        }
    }

    #[test]
    fn geo_answers_the_groups_region_with_the_prefix_as_scope() {
        let groups = course_groups();
        let live = Live::all(3);
        let decision = geo().decide(client("10.2.7.9"), &groups, live, 0);
        assert_eq!(decision.regions, vec![B35]);
        assert_eq!(decision.scope, 16);
        assert!(!decision.failover);
        let unknown = geo().decide(client("192.0.2.1"), &groups, live, 0);
        assert_eq!(unknown.regions, vec![B34]);
        assert_eq!(unknown.scope, 32);
    }

    #[test]
    fn geo_follows_fallbacks_while_down_and_keeps_the_first_when_all_are() {
        let groups = course_groups();
        let policy = geo();
        let b34_down = Live::all(3).with(B34, false);
        let decision = policy.decide(client("10.1.0.1"), &groups, b34_down, 0);
        assert_eq!((decision.regions, decision.failover), (vec![B06], true));
        let two_down = b34_down.with(B06, false);
        let decision = policy.decide(client("10.1.0.1"), &groups, two_down, 0);
        assert_eq!(decision.regions, vec![B35]);
        let decision = policy.decide(client("10.1.0.1"), &groups, Live::none(), 0);
        assert_eq!(decision.regions, vec![B34]);
    }

    #[test]
    fn latency_picks_the_closest_live_region() {
        let policy = Policy::Latency {
            distance: vec![
                vec![1.0, 3.0, 2.0],
                vec![3.0, 1.0, 2.0],
                vec![2.0, 4.0, 1.0],
                vec![2.0, 3.0, 4.0],
            ],
            default_group: 0,
        };
        let groups = course_groups();
        let live = Live::all(3);
        let pick = |address, live| policy.decide(client(address), &groups, live, 0).regions[0];
        assert_eq!(pick("10.1.1.1", live), B34);
        assert_eq!(pick("10.3.1.1", live), B06);
        assert_eq!(pick("10.4.1.1", live), B34);
        assert_eq!(pick("10.1.1.1", live.with(B34, false)), B06);
        assert_eq!(pick("10.4.1.1", live.with(B34, false)), B35);
    }

    #[test]
    fn the_course_pattern_walks_one_slot_per_query_and_skips_dead_regions() {
        let pattern = vec![B34, B35, B06, B34, B35, B34, B35, B06, B34, B34];
        let policy = Policy::Weighted(Weighted::new(WeightedChoice::Pattern, pattern, None));
        let groups = Groups::default();
        let live = Live::all(3);
        let picks: Vec<Region> = (0..10)
            .map(|_| policy.decide(client("10.1.0.1"), &groups, live, 0).regions[0])
            .collect();
        assert_eq!(picks.iter().filter(|r| **r == B34).count(), 5);
        assert_eq!(picks.iter().filter(|r| **r == B35).count(), 3);
        assert_eq!(picks.iter().filter(|r| **r == B06).count(), 2);
        let without_b34 = live.with(B34, false);
        for _ in 0..20 {
            let region = policy
                .decide(client("10.1.0.1"), &groups, without_b34, 0)
                .regions[0];
            assert_ne!(region, B34);
        }
    }

    #[test]
    fn weights_make_an_interleaved_pattern_of_their_sum() {
        let pattern = pattern_from_weights(&[5, 3, 2]);
        assert_eq!(pattern.len(), 10);
        assert_eq!(pattern.iter().filter(|r| **r == 0).count(), 5);
        assert_eq!(pattern.iter().filter(|r| **r == 2).count(), 2);
        assert_ne!(pattern[0], pattern[1]);
    }

    #[test]
    fn weights_with_a_common_factor_make_the_same_shortest_pattern() {
        assert_eq!(
            pattern_from_weights(&[4_000_000_000, 2_400_000_000, 1_600_000_000]),
            pattern_from_weights(&[5, 3, 2])
        );
        assert_eq!(pattern_length(&[50, 30, 20, 0]), 10);
        assert_eq!(
            pattern_length(&[4_000_000_000, 3_999_999_999]),
            7_999_999_999
        );
    }

    #[test]
    fn consistent_weighting_keeps_a_subnet_on_one_region() {
        let pattern = pattern_from_weights(&[5, 3, 2]);
        let policy = Policy::Weighted(Weighted::new(
            WeightedChoice::Pattern,
            pattern,
            Some((24, 56)),
        ));
        let groups = Groups::default();
        let live = Live::all(3);
        let first = policy.decide(client("10.9.8.1"), &groups, live, 0);
        for host in 2..50 {
            let again = policy.decide(client(&format!("10.9.8.{host}")), &groups, live, host);
            assert_eq!(again.regions, first.regions);
            assert_eq!(again.scope, 24);
        }
        let spread: std::collections::HashSet<Region> = (0..64)
            .map(|net| {
                policy
                    .decide(client(&format!("10.9.{net}.1")), &groups, live, 0)
                    .regions[0]
            })
            .collect();
        assert_eq!(spread.len(), 3);
    }

    #[test]
    fn weighted_random_follows_the_draw_among_live_regions() {
        let policy = Policy::Weighted(Weighted::new(
            WeightedChoice::Random,
            pattern_from_weights(&[5, 3, 2]),
            None,
        ));
        let groups = Groups::default();
        let live = Live::all(3).with(B35, false);
        let mut counts = [0usize; 3];
        for draw in 0..700u64 {
            counts[policy
                .decide(client("10.1.0.1"), &groups, live, draw)
                .regions[0]] += 1;
        }
        assert_eq!(counts, [500, 0, 200]);
    }

    #[test]
    fn failover_is_explicit_when_both_are_down() {
        let groups = Groups::default();
        let policy = |all_down| Policy::Failover {
            primary: B34,
            secondary: B35,
            all_down,
        };
        let live = Live::all(3);
        let c = client("10.1.0.1");
        assert_eq!(
            policy(AllDown::Empty).decide(c, &groups, live, 0).regions,
            vec![B34]
        );
        let b34_down = live.with(B34, false);
        let decision = policy(AllDown::Empty).decide(c, &groups, b34_down, 0);
        assert_eq!((decision.regions, decision.failover), (vec![B35], true));
        let none = Live::none();
        assert!(
            policy(AllDown::Empty)
                .decide(c, &groups, none, 0)
                .regions
                .is_empty()
        );
        assert_eq!(
            policy(AllDown::Primary).decide(c, &groups, none, 0).regions,
            vec![B34]
        );
    }

    #[test]
    fn multivalue_answers_up_to_n_live_regions() {
        let groups = Groups::default();
        let policy = Policy::Multivalue {
            regions: vec![B34, B35, B06],
            max: 2,
        };
        let c = client("10.1.0.1");
        assert_eq!(
            policy.decide(c, &groups, Live::all(3), 0).regions,
            vec![B34, B35]
        );
        let b34_down = Live::all(3).with(B34, false);
        assert_eq!(
            policy.decide(c, &groups, b34_down, 0).regions,
            vec![B35, B06]
        );
        assert_eq!(
            policy.decide(c, &groups, Live::none(), 0).regions,
            vec![B34, B35]
        );
    }

    #[test]
    fn prefixes_match_by_their_length_only() {
        let prefix = Prefix::parse("10.1.255.255/16").unwrap();
        assert_eq!(prefix.network, "10.1.0.0".parse::<IpAddr>().unwrap());
        assert!(prefix.contains("10.1.3.4".parse().unwrap()));
        assert!(!prefix.contains("10.2.3.4".parse().unwrap()));
        assert!(!prefix.contains("::1".parse().unwrap()));
        assert!(Prefix::parse("10.0.0.0/33").is_none());
        assert!(
            Prefix::parse("2001:db8::/32")
                .unwrap()
                .contains("2001:db8::1".parse().unwrap())
        );
        assert!(
            Prefix::parse("0.0.0.0/0")
                .unwrap()
                .contains("1.2.3.4".parse().unwrap())
        );
    }

    #[test]
    fn a_client_no_prefix_holds_is_grouped_by_country_then_asn_then_continent() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/dns-zone/kargo-geo.mmdb"
        );
        let database = Arc::new(GeoDatabase::read(std::fs::read(path).unwrap()).unwrap());
        let places = vec![
            Places {
                continents: vec!["EU".into()],
                ..Places::default()
            },
            Places {
                countries: vec!["DE".into()],
                ..Places::default()
            },
            Places {
                asns: vec![64501],
                ..Places::default()
            },
        ];
        let prefix = Prefix::parse("10.1.2.0/24").unwrap();
        let groups = Groups::new(vec![(prefix, 0)]).with_places(GeoGroups { database, places });
        assert_eq!(groups.group_of(client("10.1.2.3")), Some((0, 24)), "prefix");
        assert_eq!(groups.group_of(client("10.2.0.1")), Some((1, 16)), "DE");
        assert_eq!(
            groups.group_of(client("10.1.9.9")),
            Some((2, 16)),
            "AS64501"
        );
        assert_eq!(groups.group_of(client("10.3.0.1")), None, "US, NA");
        assert_eq!(groups.group_of(client("192.0.2.1")), None, "nowhere");
    }
}
