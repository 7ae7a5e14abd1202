//! `trafik explain dns`: what the server answers one question, and why — the policy, the
//! client's group, the live regions and the answer — told by the code that answers queries
//! ([`Policy::explain`], [`Authority::lookup`]) without moving a counter or the weighted
//! pattern.

use std::net::{IpAddr, Ipv4Addr};

use hickory_proto::rr::{LowerName, RecordType};
use serde_json::{Value, json};

use super::{Authority, Code};
use crate::policy::{Client, Live, Prefix, mask};

/// The question to explain, as `POST /explain/dns` takes it: `{"name", "type", "client_subnet",
/// "client"}`.
pub struct Question {
    pub name: LowerName,
    pub kind: RecordType,
    pub client: Client,
}

impl Question {
    /// Reads a question; `type` defaults to A.
    pub fn from_json(value: &Value) -> Result<Question, String> {
        let text = |name: &str| value.get(name).and_then(Value::as_str);
        let name = text("name").ok_or("the question needs a \"name\"")?;
        Question::new(
            name,
            text("type").unwrap_or("A"),
            text("client_subnet"),
            text("client"),
        )
    }

    /// A question from its parts as the command line gives them: the client is the ECS
    /// subnet (`10.1.0.0/16`) when one is given, else the source address (127.0.0.1 by
    /// default), as the server reads a query.
    pub fn new(
        name: &str,
        kind: &str,
        client_subnet: Option<&str>,
        client: Option<&str>,
    ) -> Result<Question, String> {
        let name = super::parse_name(name, None).map_err(|error| format!("{name:?}: {error}"))?;
        let kind: RecordType = kind
            .to_ascii_uppercase()
            .parse()
            .map_err(|_| format!("{kind:?} is not a record type"))?;
        let client = match (client_subnet, client) {
            (Some(subnet), _) => {
                let prefix = Prefix::parse(subnet)
                    .ok_or_else(|| format!("{subnet:?} is not a subnet such as 10.1.0.0/16"))?;
                Client {
                    address: mask(prefix.network, prefix.length),
                    prefix: prefix.length,
                }
            }
            (None, Some(address)) => Client::from_source(
                address
                    .parse::<IpAddr>()
                    .map_err(|_| format!("{address:?} is not an IP address"))?,
            ),
            (None, None) => Client::from_source(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        };
        Ok(Question {
            name: LowerName::from(name),
            kind,
            client,
        })
    }
}

impl Authority {
    /// What [`Authority::lookup`] answers `question` with the regions in `live`: the zone, the
    /// name's policy with the client's group and its decision ([`Policy::explain`], which
    /// leaves the weighted pattern where it is), and the answer — the lookup itself, forced to
    /// that decision, on a copy of these zones whose counters are its own. `random` is the
    /// draw of a weighted random choice.
    pub fn explain(&self, question: &Question, live: Live, random: u64) -> Value {
        let Question { name, kind, client } = question;
        let regions: Vec<Value> = self
            .regions
            .iter()
            .enumerate()
            .map(|(index, region)| json!({ "name": region.name, "live": live.contains(index) }))
            .collect();
        let mut document = json!({
            "name": name.to_string(),
            "type": kind.to_string(),
            "client": format!("{}/{}", client.address, client.prefix),
            "regions": regions,
        });
        let Some(zone) = self.zone_for(name, *kind) else {
            document["answer"] = json!({ "code": "REFUSED", "records": [], "why": "no zone of this server holds the name" });
            return document;
        };
        document["zone"] = json!(zone.origin.to_string());
        let copy = match Authority::build(&self.plan, None) {
            Ok(copy) => copy,
            Err(errors) => {
                document["answer"] =
                    json!({ "code": null, "records": [], "why": errors.join("; ") });
                return document;
            }
        };
        // The policy name that answers: the name asked, or the end of its CNAME chain (found
        // by a first lookup on the copy; the decision is then told and forced below).
        let owner = match zone.names.contains_key(name) {
            true => Some(name.clone()),
            false => copy
                .lookup(name, *kind, *client, live, random, None)
                .answers
                .last()
                .map(|record| LowerName::from(&record.name)),
        };
        let named = owner.as_ref().and_then(|owner| zone.names.get(owner));
        let decision = named.map(|named| {
            document["policy_name"] = json!(named.name.to_string());
            document["policy"] = json!(named.policy.kind());
            document["group"] = match self.groups.explain_group(*client) {
                Some((group, scope, how)) => json!({
                    "group": self.group_names.get(group),
                    "scope": scope,
                    "how": how,
                }),
                None => json!({ "group": null, "how": format!("{} is in no group: the policy's default", client.address) }),
            };
            let decision = named.policy.explain(*client, &self.groups, live, random);
            let chosen: Vec<&str> = decision
                .regions
                .iter()
                .filter_map(|region| self.regions.get(*region).map(|r| r.name.as_str()))
                .collect();
            let mut why = format!("{} → {}", named.policy.kind(), chosen.join(", "));
            if decision.failover {
                why.push_str(" (a region the policy would choose first is down)");
            }
            for region in &decision.regions {
                if !live.contains(*region) {
                    why.push_str(&format!(
                        "; {} is down, with no live alternative: it answers all the same",
                        self.regions[*region].name
                    ));
                }
            }
            if matches!(
                &named.policy,
                crate::policy::Policy::Weighted(w)
                    if w.consistent.is_none() && w.choice == crate::policy::WeightedChoice::Random
            ) {
                why.push_str("; a random draw by weight, one of many");
            }
            document["decision"] = json!({
                "regions": chosen,
                "scope": decision.scope,
                "failover": decision.failover,
                "why": why,
            });
            decision
        });
        let lookup = copy.lookup(name, *kind, *client, live, random, decision.as_ref());
        document["answer"] = json!({
            "code": match lookup.code {
                Code::NoError => "NOERROR",
                Code::NxDomain => "NXDOMAIN",
                Code::Refused => "REFUSED",
            },
            "records": lookup.answers.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "scope": lookup.scope,
            "referral": lookup.referral,
        });
        document
    }
}

/// The explanation for people, from its JSON.
pub fn render(document: &Value) -> String {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    let mut out = format!(
        "{} {} from {}\n",
        text(&document["name"]),
        text(&document["type"]),
        text(&document["client"])
    );
    if let Some(zone) = document["zone"].as_str() {
        out.push_str(&format!("zone {zone}\n"));
    }
    let regions: Vec<String> = document["regions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|region| {
            let state = if region["live"] == true {
                "live"
            } else {
                "down"
            };
            format!("{} {state}", text(&region["name"]))
        })
        .collect();
    out.push_str(&format!("regions: {}\n", regions.join(", ")));
    if let Some(policy) = document["policy"].as_str() {
        out.push_str(&format!(
            "\n{} answers by policy {policy}\n",
            text(&document["policy_name"])
        ));
        let group = &document["group"];
        match group["group"].as_str() {
            Some(name) => out.push_str(&format!(
                "  group {name} (scope /{}): {}\n",
                group["scope"],
                text(&group["how"])
            )),
            None => out.push_str(&format!("  {}\n", text(&group["how"]))),
        }
        out.push_str(&format!("  {}\n", text(&document["decision"]["why"])));
    }
    let answer = &document["answer"];
    out.push_str(&format!("\n→ {}", text(&answer["code"])));
    if let Some(why) = answer["why"].as_str() {
        out.push_str(&format!(": {why}"));
    }
    out.push('\n');
    for record in answer["records"].as_array().into_iter().flatten() {
        out.push_str(&format!("  {}\n", text(record)));
    }
    out
}
