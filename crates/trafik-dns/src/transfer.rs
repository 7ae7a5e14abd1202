//! Zone transfers to secondaries: who may ask (address prefixes, a TSIG key), the serial trafik
//! keeps for a zone, the AXFR messages, the journal of changes IXFR answers from (RFC 1995),
//! their TSIG signatures (RFC 8945, hickory's HMAC), and NOTIFY
//! (RFC 1996) to the secondaries when the serial changes.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::{SocketAddr, UdpSocket};
use std::ops::Range;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::rdata::tsig::{TSIG, TsigAlgorithm, TsigError, make_tsig_record};
use hickory_proto::rr::{Name, RData, Record, RecordType, TSigResponseContext, TSigner};
use hickory_proto::serialize::binary::BinEncodable;

use crate::policy::Prefix;

/// How far a TSIG's time may be from ours (RFC 8945 §10 recommends 300 seconds).
const FUDGE: u16 = 300;

/// A transfer message is cut after this many bytes of records, well below TCP's 64 KiB.
const MESSAGE_BYTES: usize = 16 * 1024;

/// `[dns.zone.transfer]`, checked.
#[derive(Clone, Debug)]
pub struct TransferPlan {
    /// Who may ask for AXFR and IXFR.
    pub allow: Vec<Prefix>,
    /// The secondaries told of every new serial.
    pub notify: Vec<SocketAddr>,
    /// When set, transfers without a valid signature by this key are refused.
    pub tsig: Option<TsigKey>,
}

/// An HMAC-SHA256 key shared with the secondaries.
#[derive(Clone)]
pub struct TsigKey {
    pub name: String,
    pub secret: Vec<u8>,
}

/// The name only: a plan's debug form must not print the secret.
impl std::fmt::Debug for TsigKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TsigKey")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A zone's transfer settings, ready to use.
#[derive(Clone)]
pub struct Transfer {
    allow: Vec<Prefix>,
    pub notify: Vec<SocketAddr>,
    pub signer: Option<TSigner>,
}

impl std::fmt::Debug for Transfer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transfer")
            .field("allow", &self.allow)
            .field("notify", &self.notify)
            .field("tsig", &self.signer.as_ref().map(|s| s.signer_name()))
            .finish()
    }
}

/// Why a transfer request is not answered with the zone.
#[derive(Debug, PartialEq)]
pub enum Denied {
    /// REFUSED: the address is not allowed, or the zone wants a signature the request lacks.
    Refused,
    /// NOTAUTH with this TSIG error (RFC 8945 §5.2): an unknown key, a bad MAC, a bad time.
    NotAuth(TsigError),
}

impl Transfer {
    pub fn new(plan: &TransferPlan) -> Result<Transfer, String> {
        let signer = match &plan.tsig {
            Some(key) => Some(signer(key)?),
            None => None,
        };
        Ok(Transfer {
            allow: plan.allow.clone(),
            notify: plan.notify.clone(),
            signer,
        })
    }

    /// Whether the transfer asked by `source` may go on: its address, then its signature when
    /// the zone has a key (RFC 8945 §5.2: key, MAC, time). `raw` is the request as received;
    /// `tsig` its TSIG record. With a valid signature, what signs the answer.
    pub fn admit(
        &self,
        source: std::net::IpAddr,
        raw: &[u8],
        tsig: Option<&Record<TSIG>>,
        now: u64,
    ) -> Result<Option<TSigResponseContext>, (Denied, Option<TSigResponseContext>)> {
        if !self.allow.iter().any(|prefix| prefix.contains(source)) {
            return Err((Denied::Refused, None));
        }
        match (&self.signer, tsig) {
            (None, None) => Ok(None),
            (Some(_), None) => Err((Denied::Refused, None)),
            (signer, Some(tsig)) => verify(signer.as_ref(), raw, tsig, now).map(Some),
        }
    }
}

/// Checks the TSIG of the request `raw` against the zone's key (RFC 8945 §5.2: key, MAC,
/// time); on success, what signs the answer. Failures are NOTAUTH, with what signs that answer
/// as the RFC wants (unsigned for a bad key or MAC, signed for a bad time).
pub fn verify(
    signer: Option<&TSigner>,
    raw: &[u8],
    tsig: &Record<TSIG>,
    now: u64,
) -> Result<TSigResponseContext, (Denied, Option<TSigResponseContext>)> {
    let id = tsig.data.oid;
    let Some(signer) = signer.filter(|signer| signer.signer_name() == &tsig.name) else {
        let unsigned = TSigResponseContext::unknown_key(id, now, tsig.name.clone());
        return Err((Denied::NotAuth(TsigError::BadKey), Some(unsigned)));
    };
    let Ok((_, _, window)) = signer.verify_message_byte(raw, None, true) else {
        let unsigned = TSigResponseContext::bad_signature(id, now, signer.clone());
        return Err((Denied::NotAuth(TsigError::BadSig), Some(unsigned)));
    };
    let mac = tsig.data.mac.clone();
    if !within(&window, now) {
        // A BADTIME answer is signed with the request's key (RFC 8945 §5.2.3).
        let signed =
            TSigResponseContext::new(id, now, signer.clone(), mac, Some(TsigError::BadTime));
        return Err((Denied::NotAuth(TsigError::BadTime), Some(signed)));
    }
    Ok(TSigResponseContext::new(id, now, signer.clone(), mac, None))
}

fn within(window: &Range<u64>, now: u64) -> bool {
    window.start <= now && now <= window.end
}

/// hickory's signer for `key` (HMAC-SHA256, the fudge above).
pub fn signer(key: &TsigKey) -> Result<TSigner, String> {
    let name = Name::from_ascii(&key.name)
        .map_err(|error| format!("{:?} is not a key name: {error}", key.name))?;
    TSigner::new(key.secret.clone(), TsigAlgorithm::HmacSha256, name, FUDGE)
        .map_err(|error| error.to_string())
}

/// Signs the messages after the first of a multi-message answer (RFC 8945 §5.3.1): each MAC
/// covers the previous one, the message and the timers.
pub struct Chain {
    signer: TSigner,
    previous: Vec<u8>,
    id: u16,
    time: u64,
}

impl Chain {
    /// After a first message signed with MAC `first`.
    pub fn new(signer: TSigner, first: Vec<u8>, id: u16, time: u64) -> Chain {
        Chain {
            signer,
            previous: first,
            id,
            time,
        }
    }

    /// The TSIG record for the next message, whose unsigned encoding is `message`.
    pub fn sign(&mut self, message: &[u8]) -> Result<Box<Record<TSIG>>, String> {
        let mut covered = Vec::with_capacity(message.len() + self.previous.len() + 10);
        let length = u16::try_from(self.previous.len()).map_err(|e| e.to_string())?;
        covered.extend_from_slice(&length.to_be_bytes());
        covered.extend_from_slice(&self.previous);
        covered.extend_from_slice(message);
        covered.extend_from_slice(&((self.time >> 32) as u16).to_be_bytes());
        covered.extend_from_slice(&(self.time as u32).to_be_bytes());
        covered.extend_from_slice(&FUDGE.to_be_bytes());
        let mac = self.signer.sign(&covered).map_err(|e| e.to_string())?;
        self.previous = mac.clone();
        let tsig = TSIG::new(
            TsigAlgorithm::HmacSha256,
            self.time,
            FUDGE,
            mac,
            self.id,
            None,
            Vec::new(),
        );
        Ok(Box::new(make_tsig_record(
            self.signer.signer_name().clone(),
            tsig,
        )))
    }
}

/// The zone's records between the two SOAs of an AXFR, cut into messages of at most
/// [`MESSAGE_BYTES`] (a record larger than that goes alone).
pub fn messages(records: &[Record]) -> Vec<&[Record]> {
    let mut cuts = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (index, record) in records.iter().enumerate() {
        let size = record.to_bytes().map_or(MESSAGE_BYTES, |b| b.len());
        if bytes + size > MESSAGE_BYTES && index > start {
            cuts.push(&records[start..index]);
            (start, bytes) = (index, 0);
        }
        bytes += size;
    }
    cuts.push(&records[start..]);
    cuts
}

/// At most this many changes are kept for IXFR.
const JOURNAL: usize = 16;

/// One change of a transferring zone: the SOAs before and after, the records it removed and
/// those it added (RFC 1995 §4's difference sequence).
#[derive(Clone, Debug)]
pub struct Delta {
    from: Record,
    to: Record,
    deleted: Vec<Record>,
    added: Vec<Record>,
}

impl Delta {
    /// The change from `old` to `new`, each a SOA and the records between a transfer's SOAs;
    /// records compare by their wire bytes, TTL included.
    pub fn between(old: (&Record, &[Record]), new: (&Record, &[Record])) -> Delta {
        let bytes = |records: &[Record]| -> std::collections::HashSet<Vec<u8>> {
            records.iter().filter_map(|r| r.to_bytes().ok()).collect()
        };
        let (before, after) = (bytes(old.1), bytes(new.1));
        let missing_from = |records: &[Record], other: &std::collections::HashSet<Vec<u8>>| {
            records
                .iter()
                .filter(|r| r.to_bytes().is_ok_and(|b| !other.contains(&b)))
                .cloned()
                .collect()
        };
        Delta {
            from: old.0.clone(),
            to: new.0.clone(),
            deleted: missing_from(old.1, &after),
            added: missing_from(new.1, &before),
        }
    }

    fn size(&self) -> usize {
        self.deleted.len() + self.added.len()
    }

    fn serial_before(&self) -> Option<u32> {
        match &self.from.data {
            RData::SOA(soa) => Some(soa.serial),
            _ => None,
        }
    }
}

/// Keeps the journal's last [`JOURNAL`] changes, and drops the oldest while all of them carry
/// more records than the zone (`zone_records`) itself: then the whole zone is the smaller answer.
pub fn trim(journal: &mut Vec<Delta>, zone_records: usize) {
    let excess = journal.len().saturating_sub(JOURNAL);
    journal.drain(..excess);
    while journal.iter().map(Delta::size).sum::<usize>() > zone_records.max(1)
        && !journal.is_empty()
    {
        journal.remove(0);
    }
}

/// An IXFR answer for a secondary at `serial` from `journal`: the SOA, each change since that
/// serial (its old SOA, what it removed, its new SOA, what it added), the SOA again (RFC 1995
/// §4). `None` when the journal does not reach back to that serial.
pub fn incremental(journal: &[Delta], serial: u32, soa: &Record) -> Option<Vec<Record>> {
    let first = journal
        .iter()
        .position(|delta| delta.serial_before() == Some(serial))?;
    let mut records = vec![soa.clone()];
    for delta in &journal[first..] {
        records.push(delta.from.clone());
        records.extend(delta.deleted.iter().cloned());
        records.push(delta.to.clone());
        records.extend(delta.added.iter().cloned());
    }
    records.push(soa.clone());
    Some(records)
}

/// What a zone's transfer carries, as a number: the serial changes when it does. `signing_day`
/// stands for a signed zone's signatures (0 for an unsigned zone).
pub fn fingerprint(records: &[Record], written_serial: u32, signing_day: u64) -> u64 {
    let mut hasher = DefaultHasher::new();
    written_serial.hash(&mut hasher);
    signing_day.hash(&mut hasher);
    for record in records {
        record.to_bytes().unwrap_or_default().hash(&mut hasher);
    }
    hasher.finish()
}

/// The serial of a zone whose transfer content is `fingerprint`: the previous one while the
/// content stays, else the latest (RFC 1982 arithmetic) of the previous plus one, the Unix time
/// and the serial written in the config or zone file. Unix time keeps serials rising across
/// restarts without a state file; the written serial is a floor for zones moved from elsewhere.
pub fn serial(previous: Option<(u32, u64)>, fingerprint: u64, written: u32, now: u64) -> u32 {
    let now = now as u32;
    match previous {
        Some((serial, kept)) if kept == fingerprint => serial,
        Some((serial, _)) => latest(latest(serial.wrapping_add(1), now), written),
        None => latest(now, written),
    }
}

/// The later of two serials in RFC 1982 arithmetic.
fn latest(a: u32, b: u32) -> u32 {
    if (b.wrapping_sub(a) as i32) > 0 { b } else { a }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Tells each of `targets` that `soa`'s zone has a new serial (RFC 1996), signed with `signer`
/// when the zone has a key, from a thread of its own: each target is asked up to five times,
/// one, two, four, eight and sixteen seconds apart, until it answers.
pub fn notify(soa: Record, targets: Vec<SocketAddr>, signer: Option<TSigner>) {
    if targets.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("trafik-dns-notify".into())
        .spawn(move || {
            for target in targets {
                match notify_one(&soa, target, signer.as_ref()) {
                    Ok(()) => tracing::info!(zone = %soa.name, %target, "dns notify answered"),
                    Err(error) => {
                        tracing::warn!(zone = %soa.name, %target, %error, "dns notify not answered")
                    }
                }
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "dns notify not sent");
    }
}

/// Sends one NOTIFY to `target` until it answers.
fn notify_one(soa: &Record, target: SocketAddr, signer: Option<&TSigner>) -> Result<(), String> {
    // An id not guessed from the time alone, so a forged answer does not end the retries.
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut hasher = DefaultHasher::new();
    (nanos, std::process::id(), target).hash(&mut hasher);
    let id = hasher.finish() as u16;
    let mut message = Message::new(id, MessageType::Query, OpCode::Notify);
    message.metadata.authoritative = true;
    message.add_query(Query::query(soa.name.clone(), RecordType::SOA));
    message.add_answer(soa.clone());
    if let Some(signer) = signer {
        let (tsig, _) = signer
            .sign_message(&message, unix_now())
            .map_err(|e| e.to_string())?;
        message.set_signature(tsig);
    }
    let bytes = message.to_vec().map_err(|e| e.to_string())?;
    let bind = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let socket = UdpSocket::bind(bind).map_err(|e| e.to_string())?;
    let mut wait = Duration::from_secs(1);
    let mut buffer = [0u8; 4096];
    for _ in 0..5 {
        socket.send_to(&bytes, target).map_err(|e| e.to_string())?;
        socket
            .set_read_timeout(Some(wait))
            .map_err(|e| e.to_string())?;
        let deadline = std::time::Instant::now() + wait;
        while std::time::Instant::now() < deadline {
            match socket.recv_from(&mut buffer) {
                Ok((length, from)) if from == target && length >= 4 => {
                    // The answer: our id, the QR bit, the NOTIFY opcode.
                    let answered =
                        u16::from_be_bytes([buffer[0], buffer[1]]) == id && buffer[2] & 0x80 != 0;
                    if answered {
                        let code = buffer[3] & 0x0f;
                        return if code == 0 {
                            Ok(())
                        } else {
                            Err(format!("answered with rcode {code}"))
                        };
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        wait *= 2;
    }
    Err("no answer".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_serial_stays_while_the_content_does_and_rises_when_it_changes() {
        let now = 1_800_000_000;
        assert_eq!(serial(None, 1, 1, now), 1_800_000_000);
        assert_eq!(serial(None, 1, 2026120201, now), 2026120201);
        assert_eq!(
            serial(Some((1_800_000_000, 1)), 1, 1, now + 5),
            1_800_000_000
        );
        assert_eq!(
            serial(Some((1_800_000_000, 1)), 2, 1, now + 5),
            1_800_000_005
        );
        // Two changes within a second still rise.
        assert_eq!(
            serial(Some((1_800_000_005, 2)), 3, 1, now + 5),
            1_800_000_006
        );
        // Across the wrap of serial arithmetic.
        assert_eq!(serial(Some((u32::MAX, 1)), 2, 1, 5), 5);
    }

    #[test]
    fn the_records_are_cut_into_messages_in_order() {
        let records: Vec<Record> = (0..2000)
            .map(|i| {
                let name = Name::from_ascii(format!("host{i}.kargo.test.")).unwrap();
                Record::from_rdata(
                    name,
                    60,
                    hickory_proto::rr::RData::A(hickory_proto::rr::rdata::A::new(10, 0, 0, 1)),
                )
            })
            .collect();
        let cut = messages(&records);
        assert!(cut.len() > 2, "{}", cut.len());
        assert_eq!(cut.iter().map(|m| m.len()).sum::<usize>(), 2000);
        assert_eq!(messages(&[]).len(), 1);
    }

    #[test]
    fn the_journal_keeps_the_last_changes_smaller_than_the_zone() {
        let soa = |serial: u32| {
            let data =
                hickory_proto::rr::rdata::SOA::new(Name::root(), Name::root(), serial, 1, 1, 1, 1);
            Record::from_rdata(Name::root(), 60, RData::SOA(data))
        };
        let host = |i: u8| {
            let data = RData::A(hickory_proto::rr::rdata::A::new(10, 0, 0, i));
            Record::from_rdata(Name::from_ascii("h.kargo.test.").unwrap(), 60, data)
        };
        let mut journal: Vec<Delta> = (0..20u8)
            .map(|i| {
                Delta::between(
                    (&soa(i.into()), &[host(i)]),
                    (&soa(u32::from(i) + 1), &[host(i + 1)]),
                )
            })
            .collect();
        trim(&mut journal, 100);
        assert_eq!(journal.len(), JOURNAL);
        assert!(incremental(&journal, 3, &soa(20)).is_none());
        assert_eq!(
            incremental(&journal, 4, &soa(20)).unwrap().len(),
            2 + 4 * JOURNAL
        );
        // Changes carrying more records than the zone: the oldest go.
        trim(&mut journal, 5);
        assert_eq!(journal.len(), 2);
    }
}
